"""What differs between serving engines, behind one interface (:class:`EngineDialect`).

:class:`~gate.engines.http.HTTPBackend` speaks to every server the same way —
token ids in, token ids and log-probs out, text encoded locally — and asks
the server's dialect for everything an engine does its own way:

* **recognition**: whether a command line starts this engine
  (:meth:`EngineDialect.runs_command`), whether a server that answers is
  this engine (:meth:`EngineDialect.recognize`, at connect) and what it says
  of itself (:meth:`EngineDialect.describe`: model, version, tokenizer check);
* **requests**: the greedy, streamed and scoring requests (:class:`Post`: a
  path, a body, whether the path hangs off the server's root or its ``/v1``);
* **answers**: new token ids and the engine's own count of them
  (:class:`Generated`), the tokens a streamed event carries and the usage
  of the last one (:class:`StreamCount`), the log-probs of every generated
  position, and teacher-forced positions (:data:`~gate.engines.scores.Position`);
* **speculation**: how a command speculates and the same command without it
  (:meth:`EngineDialect.read_speculation`, :meth:`EngineDialect.plain_command`),
  the engine's acceptance counters around one request;
* **start-up**: its secret options (masked wherever gate records a command),
  the failures its log shows and the hint gate names for each.

The base class is the generic OpenAI-compatible server
(:class:`gate.engines.openai.OpenAIDialect` fills it in); an engine overrides
what it does otherwise. The registry (:mod:`gate.engines.registry`) finds a
dialect by name, by command line or by the server's answers.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

if TYPE_CHECKING:
    from gate.engines.client import EndpointClient, EndpointSettings
    from gate.engines.scores import Position
    from gate.metrics.served_speculation import EngineDrafts


@dataclass(frozen=True)
class Post:
    """One request: its path, its JSON body and whether the path is under the server's root
    (``/completion``) rather than its OpenAI base (``/v1/completions``)."""

    path: str
    body: dict[str, Any]
    root: bool = False


@dataclass(frozen=True)
class Generated:
    """A greedy answer: the new ids (ending with the EOS when the server stopped on one) and
    the engine's own count of generated tokens (the ids' length when it reports none)."""

    ids: list[int]
    count: int


@dataclass(frozen=True)
class StreamCount:
    """One streamed event read: the tokens it carries, and the usage when it reports one
    (``completion``: generated tokens; ``prompt``: prompt tokens; ``None``: not said)."""

    tokens: int
    completion: int | None = None
    prompt: int | None = None
    #: Whether ``tokens`` was guessed from the event's text (no ids, no log-probs).
    by_text: bool = False


@dataclass(frozen=True)
class ServerFacts:
    """What the server says about itself (read once by :meth:`EngineDialect.describe`)."""

    model: str
    model_root: str | None
    owned_by: str | None
    max_model_len: int | None
    version: str | None
    tokenizer_check: str
    cache_config: Mapping[str, str]
    #: The engine as provenance names it (the dialect's, else ``owned_by``).
    engine: str | None = None
    #: Requests the server decodes at once, when it says (``None``: unknown).
    slots: int | None = None
    #: Served settings the server reports itself (a build, slots, a file type).
    reported: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ServedSpeculation:
    """How a server command speculates (:func:`gate.engines.served_speculation.read_speculation`)."""

    engine: str
    #: vLLM's ``method`` (``ngram``, ``draft_model``, ``eagle``...); llama-server's
    #: ``--spec-type`` (``draft-simple`` when only a draft model is given).
    method: str
    #: Tokens proposed per step, when the command says (vLLM's ``num_speculative_tokens``,
    #: llama-server's ``--spec-draft-n-max``); ``None``: the engine's default.
    draft_tokens: int | None = None
    #: The draft model, when one is named.
    draft_model: str | None = None
    #: Every speculative setting read (vLLM's config; llama-server's options), for provenance.
    settings: Mapping[str, Any] = field(default_factory=dict)
    #: The tokens of the command that set them (removed in the plain command).
    tokens: tuple[str, ...] = ()

    def facts(self) -> dict[str, Any]:
        """The JSON facts a measurement's details carry."""
        return {
            "engine": self.engine,
            "method": self.method,
            "draft_tokens": self.draft_tokens,
            "draft_model": self.draft_model,
            "settings": dict(self.settings),
            "options": list(self.tokens),
        }


@dataclass(frozen=True)
class StartupFailure:
    """A failure an engine's log shows at start, and the fix gate names for it."""

    pattern: re.Pattern[str]
    hint: str


class LocalTokenizer(Protocol):
    """What a dialect reads of the backend that asks it: the local tokenizer and the facts."""

    settings: EndpointSettings
    eos_ids: list[int]
    vocab_size: int
    tokenizer: Any

    def encode_text(self, text: str) -> list[int]: ...

    def encode_prompt(self, text: str, *, chat: bool = True) -> list[int]: ...

    @property
    def model(self) -> str: ...

    def connect(self) -> ServerFacts: ...

    @property
    def vocabulary(self) -> Mapping[str, int]: ...


class EngineDialect(ABC):
    """One serving engine's way of saying things (module docstring)."""

    #: The registry's name of the engine (``gate run --engine``'s spelling where it has one).
    name: ClassVar[str]
    #: How messages call its server (``name`` unless the server has a name of its own).
    server_name: ClassVar[str] = ""
    #: The ``scoring_api`` values only this engine answers (refused on any other).
    own_scoring_apis: ClassVar[tuple[str, ...]] = ()
    #: Option names (bare, lower case, dashes) whose value is a credential.
    secret_options: ClassVar[frozenset[str]] = frozenset()
    #: Secret options whose value may be left out (a next token starting with ``-``).
    optional_secret_values: ClassVar[frozenset[str]] = frozenset()
    #: Failures its log shows at start, each with the fix gate names.
    startup_failures: ClassVar[tuple[StartupFailure, ...]] = ()

    # -- recognition -------------------------------------------------------------------

    @abstractmethod
    def runs_command(self, argv: Sequence[str]) -> bool:
        """Whether the command line ``argv`` starts this engine."""

    @abstractmethod
    async def recognize(self, client: EndpointClient, card: Mapping[str, Any]) -> object | None:
        """What shows that the server behind ``client`` is this engine (``card``: its
        ``/v1/models`` entry of the served model), else ``None``."""

    @abstractmethod
    async def describe(
        self,
        client: EndpointClient,
        backend: LocalTokenizer,
        card: Mapping[str, Any],
        found: object,
    ) -> ServerFacts:
        """The facts of the server :meth:`recognize` found (``found``), its tokenizer checked
        against the local one (BaselineError naming the first difference)."""

    def scoring_api(self, asked: str) -> str | None:
        """The ``scoring_api`` this engine scores with for the setting ``asked`` (``None``:
        found from the first answer); ConfigError when it cannot answer it."""
        return None if asked == "auto" else asked

    # -- greedy generation ------------------------------------------------------------

    @abstractmethod
    def generate_post(
        self, model: str, prompt: Sequence[int], max_new_tokens: int, logprobs: int | None = None
    ) -> Post:
        """The greedy request of at most ``max_new_tokens`` ids after ``prompt`` (with
        ``logprobs`` top log-probs per generated position when given)."""

    @abstractmethod
    def generated(self, answer: Any, backend: LocalTokenizer) -> Generated:
        """The new ids of a greedy answer and the engine's count of them."""

    @abstractmethod
    def generated_logprobs(self, answer: Mapping[str, Any]) -> list[tuple[float, list[float]]]:
        """Per generated position of an answer made with ``logprobs``: the chosen token's
        log-prob and the returned top log-probs, descending."""

    # -- streams ------------------------------------------------------------------------

    @abstractmethod
    def stream_post(self, model: str, prompt: Sequence[int], new_tokens: int) -> Post:
        """The streamed request of exactly ``new_tokens`` ids (EOS ignored)."""

    @abstractmethod
    def stream_count(self, event: Mapping[str, Any], counted: int) -> StreamCount:
        """The tokens one streamed event carries (``counted`` already counted) and its usage."""

    # -- teacher-forced scoring -----------------------------------------------------------

    @abstractmethod
    async def positions(
        self,
        client: EndpointClient,
        backend: LocalTokenizer,
        scoring_api: str | None,
        prompt: list[int],
        start: int,
        k: int,
    ) -> tuple[list[Position], str]:
        """Positions ``start..`` of ``prompt`` with ``k`` log-probs each, and the
        ``scoring_api`` that answered."""

    # -- served speculation --------------------------------------------------------------

    def read_speculation(self, argv: Sequence[str]) -> ServedSpeculation | None:
        """How the command ``argv`` speculates; ``None`` when it does not (or the engine has no
        speculative options gate knows)."""
        return None

    def speculative_tokens(self, argv: Sequence[str]) -> list[int]:
        """The indices of ``argv``'s speculative options and their values."""
        return []

    def speculation_hint(self) -> str | None:
        """The options that make this engine speculate, for a refusal (``None``: none known)."""
        return None

    async def speculate(
        self,
        client: EndpointClient,
        backend: LocalTokenizer,
        prompt: Sequence[int],
        max_new_tokens: int,
    ) -> tuple[Generated, EngineDrafts]:
        """One greedy request to a speculating server: its new ids and the engine's acceptance
        counts for this request alone."""
        from gate.errors import ConfigError

        raise ConfigError(
            f"gate reads no acceptance counters of {self.name}",
            "serve the speculative build with an engine whose counters gate reads",
        )


__all__ = [
    "EngineDialect",
    "Generated",
    "LocalTokenizer",
    "Post",
    "ServedSpeculation",
    "ServerFacts",
    "StartupFailure",
    "StreamCount",
]

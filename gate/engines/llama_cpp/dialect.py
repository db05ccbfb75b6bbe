"""llama.cpp's llama-server (:class:`LlamaServerDialect`): its own endpoints, scoring by forcing.

The protocol itself (payloads, answers, forced and per-position scoring) is
:mod:`gate.engines.llama_cpp.server`; this class is what
:class:`~gate.engines.http.HTTPBackend` asks:

* **recognition**: a command whose program is ``llama-server``; a server whose
  ``/props`` answers with a ``build_info`` (or whose model card says
  ``owned_by: llamacpp``, which then must have one);
* **identity**: the engine ``llama.cpp`` (declared once, in
  :mod:`gate.engines.llama_cpp.install`), its build as the version, the
  tokenizer checked through ``/tokenize`` (the EOS token's text too);
* **scoring**: ``forced`` (the default) or ``positions``, never the OpenAI
  fields it lacks;
* **speculation**: a draft model (``-md``/``--model-draft``/``--spec-draft-model
  FILE``, ``-hfd``/``--hf-repo-draft REPO``), a speculative type (``--spec-type
  T``, ``none`` speculates not), ``--spec-default``; every other ``--spec-*``
  option and the draft-model options (``-td``, ``-ngld``, ``-devd``...) belong to
  it and are removed with it (b11434 option names, with their aliases); the
  counts come from the answer's ``timings``;
* **secrets**: ``--api-key``, ``--hf-token`` and its short ``-hft``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from gate.engines.argv import as_int, first_of, split_option
from gate.engines.client import EndpointClient
from gate.engines.dialect import (
    EngineDialect,
    Generated,
    LocalTokenizer,
    Post,
    ServedSpeculation,
    ServerFacts,
    StreamCount,
)
from gate.engines.llama_cpp import server
from gate.engines.llama_cpp.counters import llama_counters
from gate.engines.llama_cpp.install import ENGINE
from gate.engines.scores import Position
from gate.errors import ConfigError
from gate.metrics.served_speculation import EngineDrafts

#: The program's name.
PROGRAM = "llama-server"
#: llama-server's speculative options that take no value (b11434 ``--help``).
_FLAGS = frozenset(
    {
        "--spec-default",
        "--spec-draft-cpu-moe",
        "-cmoed",
        "--cpu-moe-draft",
        "--spec-draft-backend-sampling",
        "--no-spec-draft-backend-sampling",
    }
)
#: llama-server's speculative options with a value that are not ``--spec-*`` names.
_VALUED = frozenset(
    {
        "-md",
        "--model-draft",
        "-hfd",
        "-hfrd",
        "--hf-repo-draft",
        "-td",
        "--threads-draft",
        "-tbd",
        "--threads-batch-draft",
        "-Cd",
        "--cpu-mask-draft",
        "-Crd",
        "--cpu-range-draft",
        "--cpu-strict-draft",
        "--prio-draft",
        "--poll-draft",
        "-Cbd",
        "--cpu-mask-batch-draft",
        "--cpu-strict-batch-draft",
        "--prio-batch-draft",
        "--poll-batch-draft",
        "-otd",
        "--override-tensor-draft",
        "-ncmoed",
        "--n-cpu-moe-draft",
        "--draft-p-split",
        "--draft-p-min",
        "-devd",
        "--device-draft",
        "-ngld",
        "--gpu-layers-draft",
        "--n-gpu-layers-draft",
        "-ctkd",
        "--cache-type-k-draft",
        "-ctvd",
        "--cache-type-v-draft",
        "--draft",
        "--draft-n",
        "--draft-max",
        "--draft-min",
        "--draft-n-min",
    }
)
#: The options that make it speculate, for a refusal.
SPECULATION_HINT = "--spec-type ngram-simple or -md DRAFT.gguf"
_DRAFT_MODEL = ("-md", "--model-draft", "--spec-draft-model")
_DRAFT_REPO = ("-hfd", "-hfrd", "--hf-repo-draft", "--spec-draft-hf")
_DRAFT_MAX = ("--spec-draft-n-max", "--draft", "--draft-n", "--draft-max")


def speculative_options(argv: Sequence[str]) -> tuple[dict[str, Any], list[int]]:
    """llama-server's speculative options (name -> value; ``True`` for a flag), and the indices
    of their tokens."""
    found: dict[str, Any] = {}
    used: list[int] = []
    i = 1  # argv[0] is the program
    while i < len(argv):
        name, inline = split_option(argv[i])
        if name in _FLAGS:
            found[name] = True
            used.append(i)
            i += 1
            continue
        if name.startswith("--spec-") or name in _VALUED:
            if inline is None and i + 1 >= len(argv):
                raise ConfigError(
                    f"the server command ends with {name} and no value",
                    "give the option its value",
                )
            found[name] = inline if inline is not None else argv[i + 1]
            used += [i] if inline is not None else [i, i + 1]
            i += 1 if inline is not None else 2
            continue
        i += 1
    return found, used


class LlamaServerDialect(EngineDialect):
    """llama.cpp's llama-server (module docstring)."""

    name: ClassVar[str] = ENGINE
    server_name: ClassVar[str] = PROGRAM
    own_scoring_apis: ClassVar[tuple[str, ...]] = server.SCORING_APIS
    secret_options: ClassVar[frozenset[str]] = frozenset({"api-key", "hf-token", "hft"})

    def __init__(self) -> None:
        self._forcing: server.Forcing | None = None

    # -- recognition -----------------------------------------------------------------

    def runs_command(self, argv: Sequence[str]) -> bool:
        """A program whose name starts with ``llama-server``."""
        return any(os.path.basename(arg).startswith(PROGRAM) for arg in argv)

    async def recognize(self, client: EndpointClient, card: Mapping[str, Any]) -> object | None:
        """``/props`` with a ``build_info`` (:func:`~gate.engines.llama_cpp.server.server_props`)."""
        owned_by = str(card["owned_by"]) if card.get("owned_by") else None
        return await server.server_props(client, owned_by)

    async def describe(
        self,
        client: EndpointClient,
        backend: LocalTokenizer,
        card: Mapping[str, Any],
        found: object,
    ) -> ServerFacts:
        """The facts of ``/props``, the tokenizer checked through ``/tokenize``."""
        assert isinstance(found, server.ServerProps)
        await self._check_tokenizer(client, backend)
        return ServerFacts(
            model=str(card.get("id")),
            model_root=found.model_path,
            owned_by=str(card["owned_by"]) if card.get("owned_by") else None,
            max_model_len=found.context,
            version=found.version,
            tokenizer_check="tokenize endpoint",
            cache_config={},
            engine=ENGINE,
            slots=found.slots,
            reported=server.reported_settings(found, card),
        )

    async def _check_tokenizer(self, client: EndpointClient, backend: LocalTokenizer) -> None:
        """The tokenizer probes and the EOS token's text through ``/tokenize`` (BaselineError
        naming the first token that differs)."""
        from gate.engines.openai import TOKENIZER_PROBES

        probes = [(text, text, backend.encode_text(text)) for text in TOKENIZER_PROBES]
        eos_text = getattr(backend.tokenizer, "eos_token", None)
        if isinstance(eos_text, str) and eos_text and backend.eos_ids:
            ids = backend.encode_text(eos_text)
            probes.append((f"the EOS token {eos_text}", eos_text, ids))
        for label, text, local in probes:
            answer = await client.post("/tokenize", server.tokenize_payload(text), root=True)
            error = server.tokenizer_mismatch(
                label, server.tokenized(answer), local, lambda i: backend.tokenizer.decode([i])
            )
            if error is not None:
                raise error

    def scoring_api(self, asked: str) -> str | None:
        """``forced`` under ``auto``; the OpenAI fields are refused (it has none)."""
        if asked == "auto":
            return "forced"
        if asked not in self.own_scoring_apis:
            raise ConfigError(
                f"scoring_api {asked!r}: {PROGRAM} returns no log-probs of prompt tokens",
                f"use scoring_api forced or positions (or auto) with {PROGRAM}",
            )
        return asked

    # -- generation and streams ----------------------------------------------------------

    def generate_post(
        self, model: str, prompt: Sequence[int], max_new_tokens: int, logprobs: int | None = None
    ) -> Post:
        """Greedy ``/completion`` (``n_probs`` top log-probs per step when asked)."""
        body = server.generate_payload(prompt, max_new_tokens)
        if logprobs is not None:
            body["n_probs"] = logprobs
        return Post("/completion", body, root=True)

    def generated(self, answer: Any, backend: LocalTokenizer) -> Generated:
        """``tokens`` (the EOS put back when the server stopped on it) and ``tokens_predicted``."""
        ids = server.generated_ids(answer, backend.eos_ids)
        count = answer.get("tokens_predicted") if isinstance(answer, Mapping) else None
        return Generated(ids, int(count) if isinstance(count, int) else len(answer["tokens"]))

    def generated_logprobs(self, answer: Mapping[str, Any]) -> list[tuple[float, list[float]]]:
        """Each step's ``completion_probabilities``: the decoded token's log-prob and the top."""
        out = []
        for token, position in server.positions_from_steps(answer):
            values = sorted((lp for _, lp in position), reverse=True)
            chosen = next((lp for t, lp in position if t == token), -math.inf)
            out.append((chosen, values))
        return out

    def stream_post(self, model: str, prompt: Sequence[int], new_tokens: int) -> Post:
        """A streamed ``/completion`` of exactly ``new_tokens`` ids."""
        return Post("/completion", server.stream_payload(prompt, new_tokens), root=True)

    def stream_count(self, event: Mapping[str, Any], counted: int) -> StreamCount:
        """Tokens from the running ``tokens_predicted``; usage from the final event."""
        done, evaluated = server.stream_usage(event)
        return StreamCount(server.chunk_tokens(event, counted), done, evaluated)

    # -- teacher-forced scoring ------------------------------------------------------------

    def _forcing_of(self, backend: LocalTokenizer) -> server.Forcing:
        """What forced scoring needs of the local vocabulary (computed once)."""
        if self._forcing is None:
            tokenizer = backend.tokenizer
            special = {int(i) for i in getattr(tokenizer, "all_special_ids", ())}
            plain = [i for i in backend.encode_text("a") if i not in special]
            # A piece that is not whole UTF-8 text decodes with the replacement character.
            pieces = tokenizer.batch_decode([[i] for i in range(len(tokenizer))])
            partial = {i for i, piece in enumerate(pieces) if "\ufffd" in piece}
            self._forcing = server.Forcing(
                unforceable=frozenset(special | set(backend.eos_ids) | partial),
                substitute=plain[0] if plain else 0,
                vocab_size=backend.vocab_size,
            )
        return self._forcing

    async def positions(
        self,
        client: EndpointClient,
        backend: LocalTokenizer,
        scoring_api: str | None,
        prompt: list[int],
        start: int,
        k: int,
    ) -> tuple[list[Position], str]:
        """``forced`` or ``positions`` (:mod:`gate.engines.llama_cpp.server`)."""
        api = scoring_api or "forced"
        context = backend.connect().max_model_len
        score = server.forced_positions if api == "forced" else server.cached_positions
        found = await score(client, prompt, start, k, context, self._forcing_of(backend))
        return found, api

    # -- served speculation --------------------------------------------------------------

    def read_speculation(self, argv: Sequence[str]) -> ServedSpeculation | None:
        """A draft model, a speculative type or ``--spec-default`` (module docstring)."""
        found, used = speculative_options(argv)
        model = first_of(found, _DRAFT_MODEL) or first_of(found, _DRAFT_REPO)
        kind = found.get("--spec-type")
        if kind is not None and str(kind).strip() in ("", "none"):
            kind = None
        if kind is None and model is not None:
            kind = "draft-simple"
        if kind is None and found.get("--spec-default"):
            kind = "default"
        if kind is None:
            return None
        return ServedSpeculation(
            engine=self.name,
            method=str(kind),
            draft_tokens=as_int(first_of(found, _DRAFT_MAX)),
            draft_model=None if model is None else str(model),
            settings=found,
            tokens=tuple(argv[i] for i in used),
        )

    def speculative_tokens(self, argv: Sequence[str]) -> list[int]:
        """The indices of the speculative options and their values."""
        return speculative_options(argv)[1]

    def speculation_hint(self) -> str | None:
        """n-gram speculation, or a draft model (:data:`SPECULATION_HINT`)."""
        return SPECULATION_HINT

    async def speculate(
        self,
        client: EndpointClient,
        backend: LocalTokenizer,
        prompt: Sequence[int],
        max_new_tokens: int,
    ) -> tuple[Generated, EngineDrafts]:
        """The answer's ``timings`` (its ``predicted_n`` set to the engine's count when they
        disagree)."""
        post = self.generate_post(backend.model, prompt, max_new_tokens)
        post.body["response_fields"] = [*post.body["response_fields"], "timings"]
        answer = await client.post(post.path, post.body, root=post.root)
        if not isinstance(answer, Mapping):
            from gate.errors import ModelLoadError

            raise ModelLoadError("the server's completion is not a JSON object", "see its log")
        generated = self.generated(answer, backend)
        timings = answer.get("timings")
        counts = llama_counters(timings if isinstance(timings, Mapping) else {})
        if counts.tokens != generated.count:
            counts = llama_counters({**(timings or {}), "predicted_n": generated.count})
        return generated, counts


__all__ = ["PROGRAM", "SPECULATION_HINT", "LlamaServerDialect", "speculative_options"]

"""The generic OpenAI-compatible server (:class:`OpenAIDialect`): the fallback dialect.

Any server that no registered dialect recognizes is spoken to as the OpenAI
completions API describes it, with the extensions that servers which have them
honour and others ignore:

* ``score`` — ``/v1/completions`` of ``context + continuation`` as ids,
  ``max_tokens: 1`` and ``prompt_logprobs: k`` (vLLM, SGLang), or the legacy
  ``echo: true, logprobs: k`` (``scoring_api = "auto"`` tries the first and
  falls back once, the first answer telling which fields the server has);
  parsed by :mod:`gate.engines.scores`.
* ``generate`` — greedy (:data:`GREEDY`), new ids from ``token_ids``
  (``return_token_ids``), else the text re-encoded locally.
* streams — ``min_tokens = max_tokens``, ``ignore_eos``, tokens counted per
  chunk from its ``token_ids`` or log-probs, else one per non-empty chunk
  (flagged, so a usage count that disagrees is a clear error).
* identity — the engine is the model card's ``owned_by``, the version
  ``/version``'s, the tokenizer checked through ``/tokenize`` where the server
  has it, else by prompt-token counts.

It speculates not, as far as gate reads a command (no speculative options of
its own), and names no secret options of its own (the generic credential
names of :mod:`gate.engines.secrets` still apply).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from gate.engines.client import EndpointClient, LogprobsLimitError
from gate.engines.dialect import (
    EngineDialect,
    Generated,
    LocalTokenizer,
    Post,
    ServerFacts,
    StreamCount,
)
from gate.engines.scores import Position, positions_from_echo, positions_from_prompt_logprobs
from gate.errors import BaselineError, ConfigError, ModelLoadError

#: Texts whose server-side and local encodings must agree (ASCII, digits, spacing, unicode).
TOKENIZER_PROBES: tuple[str, ...] = (
    "The quick brown fox jumps over the lazy dog.",
    "What is 12345 + 678? Answer: 13023",
    "  leading spaces,\ttabs\nand new lines  ",
    'def f(x):\n    return {"a": [1, 2.5, None]}',
    "Grüße, 東京, emoji \U0001f642 and accents: éàü",
)

#: Greedy decoding with every sampling knob neutral (a checkpoint's generation_config
#: can otherwise set penalties or a default length on the server).
GREEDY: Mapping[str, Any] = {
    "temperature": 0.0,
    "top_p": 1.0,
    "seed": 0,
    "frequency_penalty": 0.0,
    "presence_penalty": 0.0,
    "repetition_penalty": 1.0,
}


def first_choice(answer: Any) -> Mapping[str, Any] | None:
    """``choices[0]`` of a completion answer, else ``None``."""
    choices = answer.get("choices") if isinstance(answer, Mapping) else None
    if isinstance(choices, list) and choices and isinstance(choices[0], Mapping):
        return choices[0]
    return None


def no_prompt_logprobs(why: str) -> ConfigError:
    """The refusal of a server that returns no log-probs of prompt tokens."""
    return ConfigError(
        f"the endpoint returns no log-probs of prompt tokens ({why}); "
        "teacher-forced scoring (fidelity, perplexity, MCQ) needs them",
        "serve with an engine that has prompt_logprobs or echo+logprobs (vLLM, SGLang): "
        "see docs/serving.md",
    )


def tokenizer_differs(label: str, server: list[int], local: list[int]) -> BaselineError:
    """The one-line error naming where the server's and the local encodings first differ."""
    at = next(
        (i for i, (a, b) in enumerate(zip(server, local, strict=False)) if a != b),
        min(len(server), len(local)),
    )
    return BaselineError(
        f"the server's tokenizer differs from the local one: {label[:40]!r} encodes to "
        f"{len(server)} ids on the server, {len(local)} locally (first difference at {at})",
        "serve the model whose tokenizer recorded the baseline (the reference pack's)",
    )


def choice_tokens(choice: Mapping[str, Any]) -> int | None:
    """Tokens carried by one streamed choice: its ``token_ids`` or log-probs, else unknown."""
    ids = choice.get("token_ids")
    if isinstance(ids, list):
        return len(ids)
    logprobs = choice.get("logprobs")
    if isinstance(logprobs, Mapping) and isinstance(logprobs.get("tokens"), list):
        return len(logprobs["tokens"])
    return None


def _among(value: float, values: Sequence[float]) -> bool:
    """Whether ``value`` (a finite log-prob or ``-inf``) is one of ``values``."""
    return not math.isfinite(value) or any(abs(v - value) <= 1e-9 for v in values)


class OpenAIDialect(EngineDialect):
    """An OpenAI-compatible completions server (module docstring)."""

    name: ClassVar[str] = "openai"

    # -- recognition -----------------------------------------------------------------

    def runs_command(self, argv: Sequence[str]) -> bool:
        """Every command: the fallback when no registered engine claims it."""
        return True

    async def recognize(self, client: EndpointClient, card: Mapping[str, Any]) -> object | None:
        """Any server that answers."""
        return card

    async def describe(
        self,
        client: EndpointClient,
        backend: LocalTokenizer,
        card: Mapping[str, Any],
        found: object,
    ) -> ServerFacts:
        """Its card, ``/version``, the cache settings it exports and the tokenizer check."""
        version_doc = None
        try:
            version_doc = await client.get("/version", root=True)
        except (ConfigError, ModelLoadError):
            version_doc = None
        model = str(card.get("id"))
        cache_config = await self.cache_config(client)
        check = await self.check_tokenizer(client, backend, model)
        max_len = card.get("max_model_len")
        owned_by = str(card["owned_by"]) if card.get("owned_by") else None
        return ServerFacts(
            model=model,
            model_root=str(card["root"]) if card.get("root") else None,
            owned_by=owned_by,
            max_model_len=int(max_len) if isinstance(max_len, int) else None,
            version=str(version_doc["version"])
            if isinstance(version_doc, Mapping) and version_doc.get("version")
            else None,
            tokenizer_check=check,
            cache_config=cache_config,
            engine=owned_by,
        )

    async def cache_config(self, client: EndpointClient) -> Mapping[str, str]:
        """The KV-cache settings the server exports (none known of a generic server)."""
        return {}

    async def check_tokenizer(
        self, client: EndpointClient, backend: LocalTokenizer, model: str
    ) -> str:
        """Compare local and server encodings of :data:`TOKENIZER_PROBES` (BaselineError on a
        mismatch); returns how the check was made."""
        probes: list[tuple[str, dict[str, Any], list[int]]] = [
            (
                text,
                {"model": model, "prompt": text, "add_special_tokens": False},
                backend.encode_text(text),
            )
            for text in TOKENIZER_PROBES
        ]
        if getattr(backend.tokenizer, "chat_template", None):
            text = TOKENIZER_PROBES[1]
            probes.append(
                (
                    f"chat: {text}",
                    {
                        "model": model,
                        "messages": [{"role": "user", "content": text}],
                        "add_generation_prompt": True,
                    },
                    backend.encode_prompt(text),
                )
            )
        try:
            first = await client.post("/tokenize", probes[0][1], root=True)
        except ConfigError:
            first = None
        if isinstance(first, Mapping) and isinstance(first.get("tokens"), list):
            answers = [first] + [
                await client.post("/tokenize", p[1], root=True) for p in probes[1:]
            ]
            for (label, _, local), answer in zip(probes, answers, strict=True):
                server = (
                    [int(t) for t in answer.get("tokens", [])]
                    if isinstance(answer, Mapping)
                    else []
                )
                if server != local:
                    raise tokenizer_differs(label, server, local)
            return "tokenize endpoint"
        # no /tokenize: the server's prompt-token count of each text must match the local one
        for text, _, _ in probes[: len(TOKENIZER_PROBES)]:
            local = [int(i) for i in backend.tokenizer(text, add_special_tokens=True)["input_ids"]]
            answer = await client.post(
                "/completions",
                {"model": model, "prompt": text, "max_tokens": 1, **GREEDY},
            )
            usage = answer.get("usage") if isinstance(answer, Mapping) else None
            count = usage.get("prompt_tokens") if isinstance(usage, Mapping) else None
            if not isinstance(count, int):
                return "not checked (no /tokenize and no usage counts)"
            if count != len(local):
                raise BaselineError(
                    f"the server's tokenizer differs from the local one: {text[:40]!r} is "
                    f"{count} tokens on the server, {len(local)} locally",
                    "serve the model whose tokenizer recorded the baseline (the reference pack's)",
                )
        return "prompt token counts"

    # -- greedy generation --------------------------------------------------------------

    def generate_post(
        self, model: str, prompt: Sequence[int], max_new_tokens: int, logprobs: int | None = None
    ) -> Post:
        """``/v1/completions``, greedy, with ``return_token_ids``."""
        body: dict[str, Any] = {
            "model": model,
            "prompt": [int(t) for t in prompt],
            "max_tokens": max_new_tokens,
            "return_token_ids": True,
            **GREEDY,
        }
        if logprobs is not None:
            body["logprobs"] = logprobs
        return Post("/completions", body)

    def generated(self, answer: Any, backend: LocalTokenizer) -> Generated:
        """``choices[0].token_ids`` (a server without them: the text re-encoded locally), and
        the usage's ``completion_tokens``."""
        choice = first_choice(answer)
        if choice is None:
            raise ModelLoadError("the server's completion has no choices", "see the server log")
        ids = choice.get("token_ids")
        if not isinstance(ids, list):  # servers without return_token_ids: re-encode the text
            ids = backend.encode_text(str(choice.get("text", "")))
        new = [int(t) for t in ids]
        usage = answer.get("usage") if isinstance(answer, Mapping) else None
        count = usage.get("completion_tokens") if isinstance(usage, Mapping) else None
        return Generated(new, int(count) if isinstance(count, int) else len(new))

    def generated_logprobs(self, answer: Mapping[str, Any]) -> list[tuple[float, list[float]]]:
        """The legacy ``logprobs`` of ``choices[0]``: ``token_logprobs`` and ``top_logprobs``
        (two ids that decode to one text share a key, so the chosen log-prob is added when its
        key hid it)."""
        choice = first_choice(answer) or {}
        logprobs = choice.get("logprobs")
        if not isinstance(logprobs, Mapping) or not isinstance(logprobs.get("top_logprobs"), list):
            raise ModelLoadError(
                "the plain server's completion carries no log-probs",
                "serve with --max-logprobs 2 or more",
            )
        picked = [float(x) if x is not None else -math.inf for x in logprobs["token_logprobs"]]
        tops = [
            sorted((float(v) for v in (row or {}).values()), reverse=True)
            for row in logprobs["top_logprobs"]
        ]
        return [
            (c, top if _among(c, top) else sorted([*top, c], reverse=True))
            for c, top in zip(picked, tops, strict=False)
        ]

    # -- streams --------------------------------------------------------------------------

    def stream_post(self, model: str, prompt: Sequence[int], new_tokens: int) -> Post:
        """A streamed ``/v1/completions`` with ``min_tokens = max_tokens`` and the usage."""
        return Post(
            "/completions",
            {
                "model": model,
                "prompt": [int(t) for t in prompt],
                "max_tokens": new_tokens,
                "min_tokens": new_tokens,
                "ignore_eos": True,
                "stream": True,
                "stream_options": {"include_usage": True},
                "return_token_ids": True,
                **GREEDY,
            },
        )

    def stream_count(self, event: Mapping[str, Any], counted: int) -> StreamCount:
        """The first choice's ids or log-probs (else one token per non-empty text) and the
        event's usage."""
        usage = event.get("usage")
        completion = prompt = None
        if isinstance(usage, Mapping):
            done, given = usage.get("completion_tokens"), usage.get("prompt_tokens")
            completion = done if isinstance(done, int) else None
            prompt = given if isinstance(given, int) else None
        choices = event.get("choices")
        if not isinstance(choices, list) or not choices:
            return StreamCount(0, completion, prompt)
        choice = choices[0]
        count = choice_tokens(choice)
        if count is None:  # no ids, no log-probs: one token per non-empty chunk
            return StreamCount(1 if choice.get("text") else 0, completion, prompt, by_text=True)
        return StreamCount(count, completion, prompt)

    # -- teacher-forced scoring ------------------------------------------------------------

    async def positions(
        self,
        client: EndpointClient,
        backend: LocalTokenizer,
        scoring_api: str | None,
        prompt: list[int],
        start: int,
        k: int,
    ) -> tuple[list[Position], str]:
        """``prompt_logprobs`` (tried first under ``auto``), else ``echo`` with log-probs."""
        count = len(prompt) - start
        base = {"model": backend.model, "prompt": prompt, "max_tokens": 1, **GREEDY}
        if scoring_api in (None, "prompt_logprobs"):
            try:
                answer = await client.post("/completions", {**base, "prompt_logprobs": k})
            except LogprobsLimitError:
                raise
            except ConfigError as exc:
                if scoring_api is not None or "prompt_logprobs" not in exc.message:
                    raise
                answer = None  # the server rejects the field itself: try the legacy fields
            choice = first_choice(answer) if answer is not None else None
            if choice is not None and isinstance(choice.get("prompt_logprobs"), list):
                found = positions_from_prompt_logprobs(choice, len(prompt), start, count)
                return found, "prompt_logprobs"
            if scoring_api == "prompt_logprobs":
                raise no_prompt_logprobs("its answer has no prompt_logprobs")
        answer = await client.post(
            "/completions",
            {**base, "echo": True, "logprobs": k, "return_tokens_as_token_ids": True},
        )
        choice = first_choice(answer)
        if choice is None or not isinstance(choice.get("logprobs"), Mapping):
            raise no_prompt_logprobs("neither prompt_logprobs nor echo with logprobs")
        return positions_from_echo(choice, prompt, start, count, backend.vocabulary), "echo"


__all__ = [
    "GREEDY",
    "TOKENIZER_PROBES",
    "OpenAIDialect",
    "choice_tokens",
    "first_choice",
    "no_prompt_logprobs",
    "tokenizer_differs",
]

"""A served speculative build and the same server without speculation: :class:`ServedPair`.

The speculative tier on a served build (``gate run --serve "CMD" --tiers
speculative``, CMD with the engine's speculative options) needs two servers
of one build: the command as given, and the plain command gate writes from it
(:func:`gate.engines.served_speculation.plain_command`), started by gate in the
same session. Every request goes to one server at a time, so the engine's
counters around it are that request's:

* :meth:`ServedPair.speculate`: greedy tokens from the speculative server and
  its drafter's counts (vLLM: ``/metrics`` read before and after the request;
  llama-server: the answer's ``timings``), as :class:`EngineDrafts`;
* :meth:`ServedPair.plain_reference`: greedy tokens from the plain server with
  the top-2 log-probabilities at each generated position (completion
  log-probs), the margins, and the noise: the largest difference between the
  log-prob of each generated token on the decode path (the generation's own
  log-probs) and on the prefill path (the same tokens scored as one prompt
  with :meth:`~gate.engines.http.HTTPBackend.score`: vLLM's
  ``prompt_logprobs``; llama-server scores by forced generation, so there the
  figure is the repeatability of its decode path, not a batched-pass noise);
* :meth:`ServedPair.timed_pair`: tokens/s of one request on each server, back
  to back, wall clock around the request (the engine's own count of tokens).
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from gate.engines.client import EndpointClient, run_sync
from gate.engines.http import GREEDY, HTTPBackend
from gate.engines.llama_cpp import server as llama_server
from gate.engines.served_speculation import ServedSpeculation, read_speculation
from gate.errors import ConfigError, ModelLoadError
from gate.metrics.served_speculation import (
    EngineDrafts,
    delta,
    exports_counters,
    llama_counters,
    vllm_counters,
)
from gate.metrics.speculative import PlainReference
from gate.models.backends.base import ScoreRequest, require_prompts

T = TypeVar("T")

#: Log-probs asked per generated position of the plain server (the top-2 margin).
MARGIN_TOP_K = 2


def _among(value: float, values: Sequence[float]) -> bool:
    """Whether ``value`` (a finite log-prob or ``-inf``) is one of ``values``."""
    return not math.isfinite(value) or any(abs(v - value) <= 1e-9 for v in values)


class ServedPair:
    """The speculative server (``speculative``) and the plain one (``plain``) of one build."""

    def __init__(self, speculative: HTTPBackend, plain: HTTPBackend) -> None:
        command = speculative.serve_command
        found = read_speculation(command) if command is not None else None
        if found is None:
            raise ConfigError(
                "the speculative tier needs a served build whose command speculates",
                "give --serve the engine's speculative options",
            )
        self.speculative = speculative
        self.plain = plain
        self.speculation: ServedSpeculation = found
        self.llama = speculative.connect().llama is not None
        plain.connect()
        self.eos_ids = list(speculative.eos_ids)
        self.name = speculative.name

    # -- plumbing -----------------------------------------------------------------------

    @staticmethod
    def _call(backend: HTTPBackend, make: Callable[[EndpointClient], Awaitable[T]]) -> T:
        async def main() -> T:
            async with backend.open_client() as client:
                return await make(client)

        return run_sync(main())

    def encode_prompt(self, text: str, *, chat: bool = True) -> list[int]:
        """Token ids of a user prompt through the chat template (the served model's tokenizer)."""
        return self.speculative.encode_prompt(text, chat=chat)

    def _cut(self, ids: Sequence[int]) -> tuple[int, ...]:
        for i, token in enumerate(ids):
            if token in self.eos_ids:
                return tuple(ids[: i + 1])
        return tuple(ids)

    async def _complete(
        self,
        client: EndpointClient,
        backend: HTTPBackend,
        prompt: Sequence[int],
        max_new_tokens: int,
        logprobs: int | None = None,
    ) -> Mapping[str, Any]:
        """One greedy completion's answer (llama-server's ``/completion`` or ``/v1/completions``)."""
        if self.llama:
            payload = llama_server.generate_payload(prompt, max_new_tokens)
            payload["response_fields"] = [*payload["response_fields"], "timings"]
            if logprobs is not None:
                payload["n_probs"] = logprobs
            answer = await client.post("/completion", payload, root=True)
        else:
            body: dict[str, Any] = {
                "model": backend.model,
                "prompt": [int(t) for t in prompt],
                "max_tokens": max_new_tokens,
                "return_token_ids": True,
                **GREEDY,
            }
            if logprobs is not None:
                body["logprobs"] = logprobs
            answer = await client.post("/completions", body)
        if not isinstance(answer, Mapping):
            raise ModelLoadError("the server's completion is not a JSON object", "see its log")
        return answer

    def _ids(self, answer: Mapping[str, Any]) -> tuple[list[int], int]:
        """``(new ids, the engine's count of generated tokens)`` of an answer."""
        if self.llama:
            ids = llama_server.generated_ids(answer, self.eos_ids)
            count = answer.get("tokens_predicted")
            return ids, int(count) if isinstance(count, int) else len(answer.get("tokens", []))
        choices = answer.get("choices")
        choice = choices[0] if isinstance(choices, list) and choices else None
        if not isinstance(choice, Mapping) or not isinstance(choice.get("token_ids"), list):
            raise ModelLoadError(
                "the server's completion carries no token_ids",
                "serve with vLLM >= 0.10 (return_token_ids)",
            )
        ids = [int(t) for t in choice["token_ids"]]
        usage = answer.get("usage")
        count = usage.get("completion_tokens") if isinstance(usage, Mapping) else None
        return ids, int(count) if isinstance(count, int) else len(ids)

    # -- with speculation -----------------------------------------------------------------

    def speculate(
        self, prompt: Sequence[int], *, max_new_tokens: int
    ) -> tuple[tuple[int, ...], EngineDrafts]:
        """Greedy tokens of the speculative server and its counts for this request alone."""
        require_prompts([prompt])

        async def run(client: EndpointClient) -> tuple[tuple[int, ...], EngineDrafts]:
            if self.llama:
                answer = await self._complete(client, self.speculative, prompt, max_new_tokens)
                ids, count = self._ids(answer)
                timings = answer.get("timings")
                counts = llama_counters(timings if isinstance(timings, Mapping) else {})
                if counts.tokens != count:
                    counts = llama_counters({**(timings or {}), "predicted_n": count})
                return self._cut(ids[:max_new_tokens]), counts
            before = await self._metrics(client)
            answer = await self._complete(client, self.speculative, prompt, max_new_tokens)
            after = await self._metrics(client)
            ids, count = self._ids(answer)
            return self._cut(ids[:max_new_tokens]), delta(
                vllm_counters(before), vllm_counters(after), count
            )

        return self._call(self.speculative, run)

    async def _metrics(self, client: EndpointClient) -> str:
        text = await client.get_text("/metrics", root=True)
        if not text or not exports_counters(text):
            raise ModelLoadError(
                "the speculative server's /metrics has no vllm:spec_decode_* counters",
                "serve with vLLM >= 0.10 and its metrics endpoint on (the default)",
            )
        return text

    # -- without ----------------------------------------------------------------------------

    def plain_reference(self, prompt: Sequence[int], *, max_new_tokens: int) -> PlainReference:
        """The plain server's greedy tokens, its top-2 margins and the decode/prefill noise."""
        require_prompts([prompt])

        async def run(client: EndpointClient) -> Mapping[str, Any]:
            return await self._complete(client, self.plain, prompt, max_new_tokens, MARGIN_TOP_K)

        answer = self._call(self.plain, run)
        ids, _ = self._ids(answer)
        tokens = self._cut(ids[:max_new_tokens])
        if not tokens:
            return PlainReference((), (), 0.0)
        decoded = self._decode_logprobs(answer)[: len(tokens)]
        margins = tuple(top[0] - top[1] if len(top) > 1 else math.inf for _, top in decoded)
        scored = self.plain.score([ScoreRequest(list(prompt), list(tokens))], top_k=1)[0]
        noise = max(
            (
                abs(float(chosen) - float(again))
                for (chosen, _), again in zip(decoded, scored.target_logprobs, strict=False)
                if math.isfinite(chosen)
            ),
            default=0.0,
        )
        return PlainReference(tokens, margins, noise)

    def _decode_logprobs(self, answer: Mapping[str, Any]) -> list[tuple[float, list[float]]]:
        """Per generated position: the chosen token's log-prob and the top log-probs, descending."""
        if self.llama:
            out = []
            for token, position in llama_server.positions_from_steps(answer):
                values = sorted((lp for _, lp in position), reverse=True)
                chosen = next((lp for t, lp in position if t == token), -math.inf)
                out.append((chosen, values))
            return out
        choice = answer["choices"][0]
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
        # two ids that decode to one text share a key: the chosen token's log-prob is exact
        return [
            (c, top if _among(c, top) else sorted([*top, c], reverse=True))
            for c, top in zip(picked, tops, strict=False)
        ]

    # -- timing -------------------------------------------------------------------------------

    def _rate(self, backend: HTTPBackend, prompt: Sequence[int], max_new_tokens: int) -> float:
        async def run(client: EndpointClient) -> float:
            started = time.perf_counter()
            answer = await self._complete(client, backend, prompt, max_new_tokens)
            seconds = time.perf_counter() - started
            return self._ids(answer)[1] / max(seconds, 1e-9)

        return self._call(backend, run)

    def timed_pair(
        self, prompt: Sequence[int], *, max_new_tokens: int, speculative_first: bool
    ) -> tuple[float, float]:
        """Tokens/s ``(speculative server, plain server)`` for ``prompt``, back to back."""
        runs = [(True, self.speculative), (False, self.plain)]
        if not speculative_first:
            runs.reverse()
        rates = {fast: self._rate(backend, prompt, max_new_tokens) for fast, backend in runs}
        return rates[True], rates[False]


__all__ = ["MARGIN_TOP_K", "ServedPair"]

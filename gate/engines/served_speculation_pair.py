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
from gate.engines.http import HTTPBackend
from gate.engines.served_speculation import ServedSpeculation, read_speculation
from gate.errors import ConfigError, ModelLoadError
from gate.metrics.served_speculation import EngineDrafts
from gate.metrics.speculative import PlainReference
from gate.models.backends.base import ScoreRequest, require_prompts

T = TypeVar("T")

#: Log-probs asked per generated position of the plain server (the top-2 margin).
MARGIN_TOP_K = 2


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
        speculative.connect()
        plain.connect()
        #: The engine's dialect (both servers run the same engine).
        self.dialect = speculative.spoken
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
        """One greedy completion's answer, as the server's dialect asks for it."""
        post = self.dialect.generate_post(backend.model, prompt, max_new_tokens, logprobs)
        answer = await client.post(post.path, post.body, root=post.root)
        if not isinstance(answer, Mapping):
            raise ModelLoadError("the server's completion is not a JSON object", "see its log")
        return answer

    def _ids(self, answer: Mapping[str, Any]) -> tuple[list[int], int]:
        """``(new ids, the engine's count of generated tokens)`` of an answer."""
        generated = self.dialect.generated(answer, self.speculative)
        return generated.ids, generated.count

    # -- with speculation -----------------------------------------------------------------

    def speculate(
        self, prompt: Sequence[int], *, max_new_tokens: int
    ) -> tuple[tuple[int, ...], EngineDrafts]:
        """Greedy tokens of the speculative server and its counts for this request alone."""
        require_prompts([prompt])

        async def run(client: EndpointClient) -> tuple[tuple[int, ...], EngineDrafts]:
            generated, counts = await self.dialect.speculate(
                client, self.speculative, prompt, max_new_tokens
            )
            return self._cut(generated.ids[:max_new_tokens]), counts

        return self._call(self.speculative, run)

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
        return self.dialect.generated_logprobs(answer)

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

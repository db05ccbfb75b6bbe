"""The backend protocol: the three operations every inference engine offers.

1. greedy generation (batched);
2. teacher-forced scoring: given a context and a continuation, the
   log-probabilities the model assigns at every continuation position, as the
   target token's log-prob plus the top-k tokens (and, for in-process backends,
   optionally the full vocabulary distribution);
3. timed streaming generation: one timestamp per decoding step.

An in-process transformers backend implements all three now; an
OpenAI-compatible serving backend (vLLM, TGI, SGLang) can implement them later
through ``/v1/completions`` with ``logprobs``/``echo`` and streaming. Code above
this seam only sees token ids, numpy arrays and torch tensors on the CPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from gate.errors import DataError
from gate.measurement import TimedGeneration
from gate.provenance import ModelProvenance


@dataclass(frozen=True)
class ScoreRequest:
    """Score ``continuation`` given ``context`` (both token ids, no padding)."""

    context: Sequence[int]
    continuation: Sequence[int]


def require_contexts(requests: Sequence[ScoreRequest]) -> None:
    """Every backend's rule: a request needs >= 1 context token (row 0 is conditioned on it)."""
    if any(len(r.context) == 0 for r in requests):
        raise DataError("a score request has an empty context", "give >= 1 context token")


def require_prompts(prompts: Sequence[Sequence[int]]) -> None:
    """Every backend's rule for greedy generation: each prompt has >= 1 token."""
    if any(len(p) == 0 for p in prompts):
        raise DataError("cannot generate from an empty prompt", "every prompt needs >= 1 token")


def nothing_to_score(requests: Sequence[ScoreRequest]) -> bool:
    """Every backend's start of teacher-forced scoring: the requests checked
    (:func:`require_contexts`), and whether there are none (the answer is then ``[]``)."""
    require_contexts(requests)
    return not requests


def nothing_to_generate(prompts: Sequence[Sequence[int]], max_new_tokens: int) -> bool:
    """Every backend's start of greedy generation: the prompts checked
    (:func:`require_prompts`), and whether nothing is to be generated (no prompt, or
    ``max_new_tokens < 1``: the answer is then one empty continuation per prompt)."""
    require_prompts(prompts)
    return max_new_tokens < 1 or not prompts


def require_timed(prompt: Sequence[int], batch_size: int, new_tokens: int) -> None:
    """Every backend's rule for timed generation: a non-empty prompt, ``batch_size >= 1``
    and ``new_tokens >= 1``."""
    if len(prompt) == 0 or batch_size < 1 or new_tokens < 1:
        raise DataError(
            "timed generation needs a non-empty prompt, batch_size >= 1 and new_tokens >= 1"
        )


@dataclass(frozen=True)
class TokenScores:
    """Teacher-forced scores of one continuation of length ``T``.

    Row ``i`` is the model's distribution for continuation token ``i`` given
    ``context + continuation[:i]``.
    """

    #: ``[T]`` log p(continuation[i] | context, continuation[:i]) (natural log).
    target_logprobs: np.ndarray
    #: ``[T, k]`` token ids of the k most likely tokens, most likely first.
    topk_ids: np.ndarray
    #: ``[T, k]`` their log-probabilities (natural log), descending.
    topk_logprobs: np.ndarray
    #: ``[T, V]`` full log-softmax rows (float32, CPU), only when asked for.
    full_logprobs: Any | None = None
    #: ``[T, V]`` True where ``full_logprobs`` holds the engine's own log-prob (rows rebuilt
    #: from a served top-K answer); ``None`` when every entry is exact (in process).
    returned: np.ndarray | None = None
    #: ``[T]`` the largest log-prob an unreturned token can have (the K-th returned one;
    #: ``-inf`` when every token was returned); set with ``returned``.
    unreturned_bound: np.ndarray | None = None

    @property
    def argmax_ids(self) -> np.ndarray:
        """``[T]`` the greedy choice at each position."""
        return self.topk_ids[:, 0]


class StepClock(Protocol):
    """A clock that marks decoding steps; CUDA implementations synchronize."""

    def start(self) -> None: ...

    def mark(self) -> None: ...

    def elapsed(self) -> list[float]:
        """Seconds since :meth:`start` of every :meth:`mark`, in order."""
        ...


@runtime_checkable
class Backend(Protocol):
    """What the tiers need from a model."""

    #: Human-readable identity used in reports and provenance.
    name: str

    def encode_prompt(self, text: str, *, chat: bool = True) -> list[int]:
        """Token ids for a user prompt, through the chat template when there is one."""
        ...

    def encode_text(self, text: str) -> list[int]:
        """Plain token ids, no template and no special tokens (for corpora)."""
        ...

    def decode(self, ids: Sequence[int]) -> str:
        """Text of generated ids, special tokens skipped."""
        ...

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        *,
        max_new_tokens: int,
        batch_size: int = 8,
    ) -> list[list[int]]:
        """Greedy continuations (new ids only, stopped at EOS) for each prompt."""
        ...

    def score(
        self,
        requests: Sequence[ScoreRequest],
        *,
        top_k: int = 32,
        full: bool = False,
        batch_size: int = 8,
    ) -> list[TokenScores]:
        """Teacher-forced scores for each request, in order."""
        ...

    def generate_timed(
        self,
        prompt: Sequence[int],
        *,
        batch_size: int,
        new_tokens: int,
        clock: StepClock,
    ) -> TimedGeneration:
        """Generate exactly ``new_tokens`` (min == max) for ``batch_size`` copies of ``prompt``."""
        ...

    def provenance(self) -> ModelProvenance:
        """Model identity: id/path, revision, file hashes, recipe, linear-layer classes, bytes."""
        ...

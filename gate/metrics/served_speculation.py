"""Speculative decoding on a server, from the engine's own counters (pure maths).

A served build reports how its drafter did in its own terms, per request when
requests go one at a time:

* **vLLM** (``/metrics``, Prometheus text): ``vllm:spec_decode_num_drafts_total``
  (verification steps that carried a draft), ``..._num_draft_tokens_total``,
  ``..._num_accepted_tokens_total`` and
  ``..._num_accepted_tokens_per_pos_total{position="j"}`` (steps whose draft
  token ``j``, from 0, was accepted: every earlier one was too). The difference
  of two readings around one request (:func:`delta`; read by :mod:`gate.engines.vllm.counters`) is
  that request's.
* **llama-server** (the ``timings`` of a ``/completion`` answer):
  ``draft_n`` (draft tokens proposed), ``draft_n_accepted`` and
  ``predicted_n`` (tokens generated); no step count, no positions
  (read by :mod:`gate.engines.llama_cpp.counters`).

From them, with ``T`` the tokens the engine generated and ``A`` the draft
tokens it accepted: every target forward pass (the prefill, then each decode
step with or without a draft) yields the accepted draft tokens plus one of its
own, so the passes number ``T - A`` and the **acceptance length** is
``L = T / (T - A)`` (:func:`acceptance_length`): tokens per target pass, the
in-process definition (:mod:`gate.metrics.speculative`), where a step that
proposed nothing counts ``a_i + 1 = 1``. vLLM's own figure, ``1 + A / D``
over the ``D`` steps that carried a draft (:func:`engine_acceptance_length`),
leaves those steps out; both are reported. The **acceptance rate** is
``A / (draft tokens)``. The **per-position rate** is vLLM's:
``accepted_j / D`` (:func:`position_rates`), the in-process ``r_j`` when every
draft proposed the full ``K`` tokens (vLLM exports only the total of the
proposed tokens, not their count per position); llama-server reports none.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class EngineDrafts:
    """What the engine counted for one request (or a difference of two readings)."""

    #: Draft tokens proposed.
    draft_tokens: int
    #: Draft tokens accepted.
    accepted: int
    #: Verification steps that carried a draft (``None``: not reported, llama-server).
    drafts: int | None = None
    #: Steps whose draft token ``j`` (from 0) was accepted (empty: not reported).
    accepted_per_position: tuple[int, ...] = ()
    #: Tokens generated (the engine's count; set per request, ``None`` in a counter reading).
    tokens: int | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.accepted <= self.draft_tokens:
            raise ValueError(f"{self.accepted} of {self.draft_tokens} draft tokens accepted")
        if self.tokens is not None and self.tokens <= self.accepted and self.tokens:
            raise ValueError(f"{self.accepted} accepted draft tokens in {self.tokens} generated")


def delta(before: EngineDrafts, after: EngineDrafts, tokens: int) -> EngineDrafts:
    """One request's counts: ``after - before``, with the ``tokens`` it generated."""
    width = max(len(before.accepted_per_position), len(after.accepted_per_position))
    old = list(before.accepted_per_position) + [0] * (width - len(before.accepted_per_position))
    new = list(after.accepted_per_position) + [0] * (width - len(after.accepted_per_position))
    drafts = None
    if before.drafts is not None and after.drafts is not None:
        drafts = after.drafts - before.drafts
    return EngineDrafts(
        draft_tokens=after.draft_tokens - before.draft_tokens,
        accepted=after.accepted - before.accepted,
        drafts=drafts,
        accepted_per_position=tuple(b - a for a, b in zip(old, new, strict=True)),
        tokens=tokens,
    )


def counted_acceptance_length(counts: EngineDrafts) -> float:
    """``T / (T - A)``: tokens per target forward pass (module doc); a request that generated
    nothing is a ValueError."""
    if not counts.tokens:
        raise ValueError("a request without generated tokens has no acceptance length")
    return counts.tokens / (counts.tokens - counts.accepted)


def engine_acceptance_length(counts: EngineDrafts) -> float | None:
    """vLLM's ``1 + A / D`` over the steps that carried a draft; ``None`` when unknown or none."""
    if not counts.drafts:
        return None
    return 1.0 + counts.accepted / counts.drafts


def counted_acceptance_rate(counts: EngineDrafts) -> float | None:
    """``A / draft tokens``; ``None`` when nothing was proposed."""
    return counts.accepted / counts.draft_tokens if counts.draft_tokens else None


def counted_position_rates(counts: Sequence[EngineDrafts]) -> list[float]:
    """``sum accepted_j / sum D`` per draft position (vLLM's); empty when any request lacks
    the per-position counts or the step count (llama-server), or nothing was drafted."""
    if not counts or any(c.drafts is None for c in counts):
        return []
    drafts = sum(c.drafts or 0 for c in counts)
    width = max(len(c.accepted_per_position) for c in counts)
    if not drafts or not width:
        return []
    return [
        sum(c.accepted_per_position[j] for c in counts if j < len(c.accepted_per_position)) / drafts
        for j in range(width)
    ]


__all__ = [
    "EngineDrafts",
    "counted_acceptance_length",
    "counted_acceptance_rate",
    "counted_position_rates",
    "delta",
    "engine_acceptance_length",
]

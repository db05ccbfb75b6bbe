"""Speculative decoding, measured: lossless tokens, acceptance length, speed-up (pure maths).

A speculative build generates with a *drafter* (an n-gram lookup, a small or
compressed draft model) that proposes ``k_i`` tokens at step ``i``; the build's
target model verifies them in one forward pass and keeps the longest prefix
that equals its own greedy choice, ``a_i <= k_i`` tokens, plus one token of its
own (the token after the last accepted one). Definitions, per prompt with
``n`` verification steps (docs/speculative.md):

* **acceptance length** ``L = (1/n) sum_i (a_i + 1)``: tokens per target
  verification step, as EAGLE, SGLang and vLLM define it (1 when the drafter
  never helps; ``k + 1`` when it is always right);
* **acceptance rate** ``sum_i a_i / sum_i k_i`` and, per draft position
  ``j = 1..K``, ``r_j = #{i: a_i >= j} / #{i: k_i >= j}``: the share of the
  steps that proposed a ``j``-th token in which it was accepted;
* **lossless**: under greedy decoding speculation changes the speed, never the
  tokens, so the tokens of a prompt equal those of the same build generated
  without speculation. A prompt that diverges does so first at position ``t``;
  the target's own top-2 margin there ``m_t = log p_(1) - log p_(2)`` (its
  log-probabilities, one-token path) says whether the divergence is a near-tie
  that rounding decides: when ``m_t <= noise``, with ``noise`` the largest
  log-probability difference measured between the one-token and the batched
  forward passes of the plain build on the same prompts (verification runs
  ``k + 1`` tokens in one pass, which rounds differently), the divergence is
  *within the noise*; otherwise it is *confident*: the build is not lossless.
* **speed-up** ``q_p = (tokens/s with speculation) / (tokens/s without)`` per
  prompt, the two timed back to back in alternating order; the ratio is their
  geometric mean with the t-interval of :func:`gate.metrics.load.ratio_interval`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class VerificationStep:
    """One target verification step: ``proposed`` draft tokens, ``accepted`` of them."""

    proposed: int
    accepted: int

    def __post_init__(self) -> None:
        if not 0 <= self.accepted <= self.proposed:
            raise ValueError(f"a step accepted {self.accepted} of {self.proposed} draft tokens")


@dataclass(frozen=True)
class SpeculativeTrace:
    """One prompt generated with speculation: its new tokens and its verification steps."""

    tokens: tuple[int, ...]
    steps: tuple[VerificationStep, ...]

    @property
    def proposed(self) -> int:
        """Draft tokens proposed over the generation."""
        return sum(s.proposed for s in self.steps)

    @property
    def accepted(self) -> int:
        """Draft tokens accepted over the generation."""
        return sum(s.accepted for s in self.steps)


@dataclass(frozen=True)
class PlainReference:
    """One prompt generated without speculation, with what the lossless check needs."""

    tokens: tuple[int, ...]
    #: The target's top-2 log-probability margin at each generated position (one-token path).
    margins: tuple[float, ...]
    #: The largest |log p| difference between the one-token and the batched forward pass
    #: over every position and vocabulary entry of this prompt.
    noise: float


def acceptance_length(trace: SpeculativeTrace) -> float:
    """``L = (1/n) sum_i (a_i + 1)`` (module doc); a trace without steps is a ValueError."""
    if not trace.steps:
        raise ValueError("a generation without verification steps has no acceptance length")
    return sum(s.accepted + 1 for s in trace.steps) / len(trace.steps)


def acceptance_rate(trace: SpeculativeTrace) -> float | None:
    """``sum a_i / sum k_i``; ``None`` when nothing was proposed."""
    return trace.accepted / trace.proposed if trace.proposed else None


def position_rates(traces: Sequence[SpeculativeTrace]) -> list[float]:
    """``r_j`` for ``j = 1..K`` over every step of ``traces`` (K: the most proposed in a step)."""
    steps = [s for t in traces for s in t.steps]
    deepest = max((s.proposed for s in steps), default=0)
    rates = []
    for j in range(1, deepest + 1):
        reached = [s for s in steps if s.proposed >= j]
        rates.append(sum(s.accepted >= j for s in reached) / len(reached))
    return rates


def first_difference(plain: Sequence[int], speculative: Sequence[int]) -> int | None:
    """The first position where the two generations differ (a length difference counts at the
    shorter one's end); ``None`` when they are equal."""
    for t, (a, b) in enumerate(zip(plain, speculative, strict=False)):
        if a != b:
            return t
    return None if len(plain) == len(speculative) else min(len(plain), len(speculative))


@dataclass(frozen=True)
class Divergence:
    """Where a prompt's speculative tokens first left the plain ones, and how sure the target was."""

    prompt_id: str
    position: int
    #: The target's own top-2 log-probability margin at ``position`` (one-token path).
    margin: float
    plain_token: int | None
    speculative_token: int | None
    #: ``margin <= noise``: a near-tie that rounding decides (module doc).
    within_noise: bool

    def to_dict(self) -> dict[str, object]:
        """The JSON form (the lossless metric's details)."""
        return {
            "prompt": self.prompt_id,
            "position": self.position,
            "margin": self.margin,
            "plain_token": self.plain_token,
            "speculative_token": self.speculative_token,
            "within_noise": self.within_noise,
        }


def divergence(
    prompt_id: str,
    plain: Sequence[int],
    speculative: Sequence[int],
    margins: Sequence[float],
    noise: float,
) -> Divergence | None:
    """The prompt's :class:`Divergence` (``None``: lossless). ``margins[t]``: the target's
    top-2 margin at plain position ``t``."""
    t = first_difference(plain, speculative)
    if t is None:
        return None
    margin = float(margins[t]) if t < len(margins) else float("inf")
    return Divergence(
        prompt_id=prompt_id,
        position=t,
        margin=margin,
        plain_token=int(plain[t]) if t < len(plain) else None,
        speculative_token=int(speculative[t]) if t < len(speculative) else None,
        within_noise=margin <= noise,
    )


__all__ = [
    "Divergence",
    "PlainReference",
    "SpeculativeTrace",
    "VerificationStep",
    "acceptance_length",
    "acceptance_rate",
    "divergence",
    "first_difference",
    "position_rates",
]

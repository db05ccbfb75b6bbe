"""Free-running answers compared with the baseline's, prompt by prompt (pure maths).

Both builds answer the same prompt greedily up to the same cap ``C`` new
tokens (the reference pack's ``max_new_tokens``). ``b`` is the baseline's
answer as the pack stores it (its first ``n'_b`` tokens: the recorder may cut
an answer where the baseline's own scorer disagreed with its generation,
``n'_b <= n_b``), ``n_b`` the length the baseline generated, ``c`` the
candidate's answer of ``n_c`` tokens. Answers include their end-of-sequence
token when they have one (the backends' ``generate``). Definitions
(docs/metrics.md "Generation"):

* **divergence position** ``d = min{i < m: c_i != b_i}``, else ``m``, with
  ``m = min(n_c, n'_b, H)``: tokens until the first difference, censored at the
  baseline's comparable length ``n'_b <= C`` and at the horizon ``H`` (the
  baseline against itself: ``d = min(n'_b, H)``). Greedy divergence compounds:
  a build that leaves the baseline's path with probability ``h`` per token
  keeps it for ``T`` tokens with ``P(T >= k) = (1 - h)^k``, so
  ``E[min(T, H)] = sum_{k=1..H} (1 - h)^k = (1 - h)(1 - (1 - h)^H) / h``:
  relative to the baseline's ``H`` (answers of at least ``H`` tokens) the
  change depends on ``h`` and ``H``, not on the cap, and one bound means the
  same at every cap ``C >= H``;
* **exact match** ``1[c_{0..n'_b-1} = b and n_c = n_b]``;
* **length ratio** ``n_c / n_b``; over prompts the geometric mean
  ``exp(mean log(n_c / n_b))`` (a halved and a doubled answer average to 1);
* **stopped** ``1[n < C]``: the answer ended by itself (EOS or the chat
  template's end) before the cap (``generate`` stops only there);
* **loop** (the degenerate-loop detector): with ``r_p`` the number of trailing
  positions ``i = n-1, n-2, ...`` (contiguous from the end) where
  ``y_i = y_{i-p}``, the tail covered by a span of period ``p`` has length
  ``L_p = r_p + p`` (when ``r_p > 0``); the answer loops when
  ``max over 1 <= p <= P of [L_p >= max(R p, M)]``: its last ``M`` tokens or
  more are at least ``R`` copies of one span of at most ``P`` tokens;
* **distinct-2** ``|{(y_i, y_{i+1})}| / (n - 1)``: distinct token bigrams over
  bigrams of one answer (Li et al. 2016, "A Diversity-Promoting Objective
  Function for Neural Conversation Models", NAACL, section 4.3); 1 for an
  answer under two tokens (no repeated bigram).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class LoopRule:
    """The degenerate-loop detector's parameters: ``R``, ``M`` and ``P`` of the module docstring."""

    #: ``R``: copies of the span the tail must hold.
    repeats: int = 3
    #: ``M``: the fewest tail tokens a loop covers.
    min_tokens: int = 16
    #: ``P``: the longest span (period) looked for.
    max_period: int = 32

    def __post_init__(self) -> None:
        if self.repeats < 2:
            raise ValueError(f"repeats must be >= 2, got {self.repeats}")
        if self.min_tokens < 2:
            raise ValueError(f"min_tokens must be >= 2, got {self.min_tokens}")
        if self.max_period < 1:
            raise ValueError(f"max_period must be >= 1, got {self.max_period}")


def periodic_tail(tokens: Sequence[int], period: int) -> int:
    """``L_p``: the length of the longest suffix of ``tokens`` with ``y_i = y_{i-p}``
    throughout (``r_p + p``), 0 when the last token differs from the one ``p`` before."""
    n = len(tokens)
    run = 0
    i = n - 1
    while i - period >= 0 and tokens[i] == tokens[i - period]:
        run += 1
        i -= 1
    return run + period if run else 0


def loop_span(tokens: Sequence[int], rule: LoopRule) -> tuple[int, int] | None:
    """``(p, L_p)`` of the shortest period whose tail satisfies the rule, else None."""
    for period in range(1, min(rule.max_period, len(tokens) // rule.repeats) + 1):
        covered = periodic_tail(tokens, period)
        if covered >= max(rule.repeats * period, rule.min_tokens):
            return period, covered
    return None


def is_loop(tokens: Sequence[int], rule: LoopRule) -> bool:
    """Whether the answer ends in a degenerate loop (the module docstring's rule)."""
    return loop_span(tokens, rule) is not None


def distinct_2(tokens: Sequence[int]) -> float:
    """Distinct bigrams over bigrams of one answer; 1.0 under two tokens."""
    if len(tokens) < 2:
        return 1.0
    bigrams = list(itertools.pairwise(tokens))
    return len(set(bigrams)) / len(bigrams)


def divergence_position(
    candidate: Sequence[int], reference: Sequence[int], horizon: int | None = None
) -> int:
    """``d``: the first index where the answers differ, else the shorter length, both
    censored at ``horizon`` tokens (``H``; None: no horizon)."""
    common = min(len(candidate), len(reference))
    if horizon is not None:
        if horizon < 1:
            raise ValueError(f"a divergence horizon of {horizon} tokens")
        common = min(common, horizon)
    for i in range(common):
        if candidate[i] != reference[i]:
            return i
    return common


def exact_match(candidate: Sequence[int], reference: Sequence[int], reference_length: int) -> bool:
    """The candidate reproduces the stored answer and has the length the baseline generated."""
    n = len(reference)
    return len(candidate) == reference_length and list(candidate[:n]) == list(reference)


def stopped(length: int, cap: int) -> bool:
    """The answer ended by itself: fewer tokens than the cap."""
    if not 0 <= length <= cap:
        raise ValueError(f"an answer of {length} tokens under a cap of {cap}")
    return length < cap


def log_length_ratio(candidate_length: int, reference_length: int) -> float:
    """``log(n_c / n_b)``; both lengths at least 1 (an answer holds at least its EOS)."""
    if candidate_length < 1 or reference_length < 1:
        raise ValueError(
            f"length ratio of empty answers ({candidate_length} / {reference_length} tokens)"
        )
    return math.log(candidate_length / reference_length)


def geometric_mean_ratio(log_ratios: Sequence[float]) -> float:
    """``exp(mean log ratio)``."""
    if not log_ratios:
        raise ValueError("no length ratios")
    return math.exp(math.fsum(log_ratios) / len(log_ratios))


__all__ = [
    "LoopRule",
    "distinct_2",
    "divergence_position",
    "exact_match",
    "geometric_mean_ratio",
    "is_loop",
    "log_length_ratio",
    "loop_span",
    "periodic_tail",
    "stopped",
]

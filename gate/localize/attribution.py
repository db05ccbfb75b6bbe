"""The maths of ``gate localize``: losses, recovered shares, the ranking, the prompt subset.

Pure functions over numbers (numpy, and the power maths of
:mod:`gate.gating.power`); the forward passes that produce the numbers are
:mod:`gate.localize.probe`.

**Losses.** For one build and one prompt ``j`` the gate's fidelity signals
(docs/metrics.md "Fidelity") give three per-prompt losses against the
baseline, each 0 for the baseline itself:

* ``cga``: ``1 - CGA_j``, the share of output positions whose greedy token
  flips away from the baseline's;
* ``top5``: ``1 - CGA@5_j``, positions where the baseline's token leaves the
  candidate's top 5;
* ``kl``: the mean per-token ``KL(p_base || p_cand)`` in nats.

A build's loss ``L`` is the mean over the prompts of a set (each prompt
weighs the same, as the fidelity tier's per-prompt samples do).

**Recovered share.** Restoring a unit ``u`` (a decoder layer or a block of
layers) to the baseline gives the *swapped* build; for each signal the share
of the candidate's loss it brings back is::

    share_s(u) = (L_s(cand) - L_s(swapped u)) / L_s(cand)

1 means the unit carries the whole loss, 0 nothing, a negative share that
restoring it made things worse (compression errors of other layers that the
unit's own error happened to cancel). A signal whose candidate loss is 0
has no share (``None``).

**Score.** Layers are ranked by ``score(u) = mean_s share_s(u)`` over the
signals that have a share, with every share clipped to ``[-1, 1]``, so that
the flip signals (CGA, top-5) weigh as much as the KL: a layer that
restores half the KL but no flipped token ranks below one that restores
both. Ties are broken by the layerwise divergence jump (the relative hidden-
state error the layer adds, :func:`divergence_jumps`).

**The subset.** Each swap costs one forward per prompt, so swaps run on the
first ``n`` prompts. ``n`` is the paired-bootstrap sample size
(:func:`gate.gating.power.required_n_paired_mean`) that detects a recovered
share ``resolve`` of the candidate's mean KL loss, with the sd of the
per-prompt differences estimated by the sd of the candidate's per-prompt
KL loss (a unit that restores all of the loss has exactly those
differences). :func:`resolvable_share` states the share the chosen ``n``
resolves.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from gate.gating.power import DEFAULT_POWER, mde_paired_mean, required_n_paired_mean

#: The per-prompt loss signals, in report order.
SIGNALS: tuple[str, ...] = ("cga", "top5", "kl")

#: Least number of prompts the swaps run on (fewer give no spread to test with).
MIN_SUBSET = 8


@dataclass(frozen=True)
class Losses:
    """Per-prompt losses of one build against the baseline, one array per signal."""

    cga: np.ndarray
    top5: np.ndarray
    kl: np.ndarray

    def of(self, signal: str) -> np.ndarray:
        """The per-prompt losses of ``signal`` (one of :data:`SIGNALS`)."""
        return np.asarray(getattr(self, signal), dtype=np.float64)

    def mean(self, signal: str, n: int | None = None) -> float:
        """The mean loss of ``signal`` over the first ``n`` prompts (all when ``None``)."""
        values = self.of(signal)[:n]
        return float(values.mean()) if values.size else 0.0

    def first(self, n: int) -> Losses:
        """The losses of the first ``n`` prompts."""
        return Losses(self.cga[:n], self.top5[:n], self.kl[:n])


#: Bounds on the losses: per signal, the bound of the whole set (key ``None``) and of the
#: slices that have their own (``"category:math"``); other slices take the whole set's.
Bounds = Mapping[str, Mapping[str | None, float]]


def slice_means(values: np.ndarray, slices: Sequence[Sequence[str]]) -> dict[str | None, float]:
    """The mean of per-prompt ``values`` over all prompts (key ``None``) and per slice label."""
    values = np.asarray(values, dtype=np.float64)
    out: dict[str | None, float] = {None: float(values.mean()) if values.size else 0.0}
    members: dict[str, list[float]] = {}
    for value, labels in zip(values, slices, strict=False):
        for label in labels:
            members.setdefault(label, []).append(float(value))
    out.update({label: float(np.mean(v)) for label, v in members.items()})
    return out


def passes(losses: Losses, slices: Sequence[Sequence[str]], bounds: Bounds) -> bool:
    """Whether every bounded signal's loss is within its bound, on the whole set and on
    every slice (a point check: stricter than the gate's tests, which need significance)."""
    for signal, by_slice in bounds.items():
        default = by_slice.get(None)
        for label, mean in slice_means(losses.of(signal), slices).items():
            bound = by_slice.get(label, default)
            if bound is not None and mean > bound:
                return False
    return True


def share(loss_cand: float, loss_swapped: float) -> float | None:
    """``(loss_cand - loss_swapped) / loss_cand``; ``None`` when the candidate lost nothing."""
    if loss_cand <= 0.0:
        return None
    return (loss_cand - loss_swapped) / loss_cand


def shares(cand: Losses, swapped: Losses) -> dict[str, float | None]:
    """The recovered share of every signal, on the prompts ``swapped`` covers."""
    n = len(swapped.kl)
    return {s: share(cand.mean(s, n), swapped.mean(s)) for s in SIGNALS}


def combined_score(by_signal: Mapping[str, float | None]) -> float:
    """Mean of the signals' shares, each clipped to [-1, 1] (0 when no signal has one)."""
    values = [min(1.0, max(-1.0, v)) for v in by_signal.values() if v is not None]
    return float(np.mean(values)) if values else 0.0


def relative_errors(diff_sq: np.ndarray, base_sq: np.ndarray) -> np.ndarray:
    """Per-layer relative error ``||h_cand - h_base|| / ||h_base||`` from the squared norms
    of one prompt's hidden states (``[L]`` each); a zero baseline norm gives 0."""
    base = np.sqrt(np.asarray(base_sq, dtype=np.float64))
    diff = np.sqrt(np.asarray(diff_sq, dtype=np.float64))
    return np.divide(diff, base, out=np.zeros_like(diff), where=base > 0)


def divergence_jumps(errors: Sequence[float]) -> list[float]:
    """What each layer adds to the relative error: ``e_l - e_{l-1}`` (``e_{-1} = 0``)."""
    out: list[float] = []
    previous = 0.0
    for value in errors:
        out.append(float(value) - previous)
        previous = float(value)
    return out


def rank(scores: Mapping[int, float], jumps: Mapping[int, float]) -> list[int]:
    """Layer indices by score, highest first; ties by divergence jump, then index."""
    return sorted(scores, key=lambda i: (-round(scores[i], 12), -jumps.get(i, 0.0), i))


def subset_size(
    kl_losses: np.ndarray, resolve: float, *, alpha: float, power: float = DEFAULT_POWER
) -> int:
    """Prompts the swaps need to resolve a recovered share ``resolve`` of the mean KL loss
    (module doc), within ``[MIN_SUBSET, len(kl_losses)]``."""
    total = len(kl_losses)
    mean = float(np.mean(kl_losses)) if total else 0.0
    sd = float(np.std(kl_losses, ddof=1)) if total > 1 else 0.0
    if total <= MIN_SUBSET or mean <= 0.0:
        return total
    needed = required_n_paired_mean(resolve * mean, sd, alpha=alpha, power=power)
    return total if needed is None else max(MIN_SUBSET, min(total, needed))


def resolvable_share(
    kl_losses: np.ndarray, n: int, *, alpha: float, power: float = DEFAULT_POWER
) -> float:
    """The recovered share of the mean KL loss the first ``n`` prompts detect with ``power``
    (``inf`` when they cannot)."""
    values = np.asarray(kl_losses, dtype=np.float64)[:n]
    mean = float(values.mean()) if values.size else 0.0
    if mean <= 0.0 or values.size < 2:
        return math.inf
    sd = float(values.std(ddof=1))
    return mde_paired_mean(int(values.size), sd, alpha=alpha, power=power) / mean


def blocks(total: int, size: int) -> list[tuple[int, ...]]:
    """``total`` layer indices cut into consecutive blocks of ``size`` (the last may be short)."""
    return [tuple(range(start, min(total, start + size))) for start in range(0, total, size)]


def block_size(total: int, direct_up_to: int) -> int:
    """1 (every layer swapped alone) up to ``direct_up_to`` layers, else ``ceil(sqrt(total))``."""
    return 1 if total <= direct_up_to else math.ceil(math.sqrt(total))


def blocks_to_refine(block_scores: Sequence[float], keep_ratio: float = 0.5) -> list[int]:
    """The blocks refined layer by layer: the best one, and every block scoring at least
    ``keep_ratio`` of it (at most 3)."""
    if not block_scores:
        return []
    order = sorted(range(len(block_scores)), key=lambda b: -block_scores[b])
    best = block_scores[order[0]]
    chosen = [order[0]]
    for b in order[1:3]:
        if best > 0 and block_scores[b] >= keep_ratio * best:
            chosen.append(b)
    return chosen


def byte_cost(kept_bytes_base: int, kept_bytes_cand: int, total_cand: int) -> float:
    """Extra parameter bytes of keeping layers uncompressed, in % of the compressed build."""
    if total_cand <= 0:
        return 0.0
    return 100.0 * (kept_bytes_base - kept_bytes_cand) / total_cand


__all__ = [
    "MIN_SUBSET",
    "SIGNALS",
    "Bounds",
    "Losses",
    "block_size",
    "blocks",
    "blocks_to_refine",
    "byte_cost",
    "combined_score",
    "divergence_jumps",
    "passes",
    "rank",
    "relative_errors",
    "resolvable_share",
    "share",
    "shares",
    "slice_means",
    "subset_size",
]

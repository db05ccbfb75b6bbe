"""Latency drift audit over the history of one build on one machine.

For each latency metric in a history (:mod:`gate.store.history`), in time order:

1. **Window test.** The recent ``w`` runs against the ``w`` before them, with
   :func:`gate.gating.stats.repeated_runs_test` (one-sided Mann-Whitney U for
   "worse", relative change of the median).
2. **Change point.** A single mean shift located by the CUSUM statistic
   ``T_k = |S_k| / sqrt(k (n - k) / n)`` with ``S_k = sum_{i<=k} (x_i - mean x)``
   (Page 1954, "Continuous inspection schemes", Biometrika 41), whose maximum
   over ``k`` is the likelihood-ratio statistic of one shift in the mean. Its
   p-value is a permutation test: the fraction of ``B`` shuffles of the series
   whose maximum ``T`` is at least the observed one, ``(1 + #) / (1 + B)``
   (Antoch and Hušková 2001, "Permutation tests in change point analysis",
   Stat. Probab. Letters 53). Further shifts are searched in the two segments
   by binary segmentation (Vostrikova 1981) while they stay significant.

A metric *drifts* when a test is significant at ``alpha`` and the degradation
(the level after the last change against the level before the first, or the
recent window against the trailing one; ``d > 0`` is worse,
relative or absolute as the metric's bound in ``thresholds.toml`` says) is past
a bound: past ``critical`` -> exit 1, past ``warn`` -> a warning. Metrics with
no bound in the thresholds use ``default_bound`` (10 % / 20 % relative).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from gate.gating import stats
from gate.gating.thresholds import Thresholds
from gate.gating.verdict import Bound, Severity
from gate.metrics.spec import MetricSpec
from gate.store.history import HistoryRecord

DEFAULT_BOUND = Bound(warn=0.10, critical=0.20, mode="relative")


@dataclass(frozen=True)
class ChangePoint:
    """A shift between ``values[:index]`` and ``values[index:]``."""

    index: int
    statistic: float
    p_value: float
    before: float
    after: float


def _cusum_stat(x: np.ndarray, min_size: int) -> tuple[int, float]:
    n = x.size
    s = np.cumsum(x - x.mean())[:-1]
    k = np.arange(1, n)
    t = np.abs(s) / np.sqrt(k * (n - k) / n)
    valid = (k >= min_size) & (n - k >= min_size)
    t = np.where(valid, t, -np.inf)
    best = int(np.argmax(t))
    return best + 1, float(t[best])


def change_point(
    values: Sequence[float], *, permutations: int = 999, seed: int = 0, min_size: int = 2
) -> ChangePoint | None:
    """The most likely single mean shift and its permutation p-value (None if too short)."""
    x = np.asarray(values, dtype=np.float64)
    if x.size < 2 * min_size or float(np.ptp(x)) == 0.0:
        return None
    index, observed = _cusum_stat(x, min_size)
    rng = np.random.default_rng(seed)
    exceed = sum(
        _cusum_stat(rng.permutation(x), min_size)[1] >= observed - 1e-12
        for _ in range(permutations)
    )
    return ChangePoint(
        index=index,
        statistic=observed,
        p_value=(1 + exceed) / (1 + permutations),
        before=float(np.median(x[:index])),
        after=float(np.median(x[index:])),
    )


def change_points(
    values: Sequence[float],
    *,
    alpha: float,
    permutations: int = 999,
    seed: int = 0,
    min_size: int = 2,
    offset: int = 0,
) -> list[ChangePoint]:
    """Every significant shift by binary segmentation, in order of position."""
    found = change_point(values, permutations=permutations, seed=seed, min_size=min_size)
    if found is None or found.p_value >= alpha:
        return []
    k = found.index
    here = ChangePoint(k + offset, found.statistic, found.p_value, found.before, found.after)
    kw = {"alpha": alpha, "permutations": permutations, "seed": seed, "min_size": min_size}
    left = change_points(values[:k], offset=offset, **kw)  # type: ignore[arg-type]
    right = change_points(values[k:], offset=offset + k, **kw)  # type: ignore[arg-type]
    return [*left, here, *right]


@dataclass(frozen=True)
class MetricDrift:
    """The audit of one metric."""

    metric: str
    n: int
    severity: Severity
    reason: str
    bound: Bound
    times: tuple[str, ...]
    values: tuple[float, ...]
    change_points: tuple[ChangePoint, ...] = ()
    window_p: float | None = None
    window_change: float | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)


def audit_metric(
    metric: MetricSpec,
    records: Sequence[HistoryRecord],
    *,
    window: int,
    alpha: float,
    bound: Bound = DEFAULT_BOUND,
    permutations: int = 999,
    seed: int = 0,
) -> MetricDrift:
    """Window test and change points of one metric over ``records`` (time order)."""
    rows = [(r, r.metrics[metric.name]) for r in records if metric.name in r.metrics]
    values = [v for _, v in rows]
    times = tuple(r.time.isoformat() for r, _ in rows)
    worst, reasons, notes = Severity.PASS, [], []
    window_p = window_change = None
    if len(values) >= 2 * window:
        recent, trailing = values[-window:], values[-2 * window : -window]
        res = stats.repeated_runs_test(
            recent, trailing, higher_is_better=metric.higher_is_better, seed=seed
        )
        window_p, window_change = res.p_worse, res.rel_change_median
        d = bound.degradation(
            float(np.median(trailing)),
            float(np.median(recent)),
            higher_is_better=metric.higher_is_better,
        )
        sev = bound.severity(d) if res.p_worse < alpha else Severity.PASS
        if sev > Severity.PASS:
            worst = max(worst, sev)
            reasons.append(f"last {window} runs {res.rel_change_median:+.1%} (p={res.p_worse:.3f})")
    else:
        notes.append(f"window test needs {2 * window} runs, have {len(values)}")
    found = change_points(values, alpha=alpha, permutations=permutations, seed=seed)
    if found:
        # judge the current level (after the last shift) against the first one,
        # so a regression that was later fixed no longer fails the audit
        first = float(np.median(values[: found[0].index]))
        current = float(np.median(values[found[-1].index :]))
        d = bound.degradation(first, current, higher_is_better=metric.higher_is_better)
        sev = bound.severity(d)
        if sev > Severity.PASS:
            worst = max(worst, sev)
            shifts = ", ".join(
                f"run {cp.index + 1} ({rows[cp.index][0].label or times[cp.index]}, "
                f"p={cp.p_value:.3f})"
                for cp in found
            )
            change = current / first - 1 if first else float("inf")
            reasons.append(f"shift at {shifts}: {change:+.1%} since the first level")
    if len(values) < 4:
        notes.append(f"change-point test needs 4 runs, have {len(values)}")
    return MetricDrift(
        metric=metric.name,
        n=len(values),
        severity=worst,
        reason="; ".join(reasons) or "no drift",
        bound=bound,
        times=times,
        values=tuple(values),
        change_points=tuple(found),
        window_p=window_p,
        window_change=window_change,
        notes=tuple(notes),
    )


def bound_for(name: str, thresholds: Thresholds | None) -> Bound:
    """The metric's bound from ``thresholds.toml``, else :data:`DEFAULT_BOUND`."""
    found = thresholds.for_metric(name) if thresholds is not None else None
    return found.bound if found is not None else DEFAULT_BOUND


def audit(
    records: Sequence[HistoryRecord],
    specs: Mapping[str, MetricSpec],
    *,
    window: int = 4,
    alpha: float = 0.05,
    thresholds: Thresholds | None = None,
    permutations: int = 999,
    seed: int = 0,
) -> list[MetricDrift]:
    """Audit every latency metric present in ``records`` and known to ``specs``."""
    names = sorted({n for r in records for n in r.metrics if n.startswith("latency.")})
    return [
        audit_metric(
            specs[name],
            records,
            window=window,
            alpha=alpha,
            bound=bound_for(name, thresholds),
            permutations=permutations,
            seed=seed,
        )
        for name in names
        if name in specs
    ]


PLOT_SUFFIXES = (".png", ".svg")


def plot(drifts: Sequence[MetricDrift], path: str, *, title: str = "") -> None:
    """One panel per metric over time, change points marked by dashed red lines.

    ``path`` ends in ``.png`` or ``.svg``. Uses the non-interactive Agg backend.
    """
    import matplotlib

    matplotlib.use("Agg")
    from datetime import datetime

    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(
        len(drifts), 1, figsize=(8, 2.2 * max(1, len(drifts))), sharex=True, squeeze=False
    )
    for ax, drift in zip(axes[:, 0], drifts, strict=True):
        when = [datetime.fromisoformat(t) for t in drift.times]
        colour = {Severity.PASS: "tab:blue", Severity.WARN: "tab:orange"}.get(
            drift.severity, "tab:red"
        )
        ax.plot(when, drift.values, marker="o", color=colour, linewidth=1)
        for cp in drift.change_points:
            ax.axvline(when[cp.index], color="red", linestyle="--", linewidth=1)
            ax.annotate(
                f"run {cp.index + 1}",
                (when[cp.index], max(drift.values)),
                fontsize=7,
                color="red",
            )
        ax.set_title(f"{drift.metric} — {drift.severity.label}", fontsize=9)
        ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)

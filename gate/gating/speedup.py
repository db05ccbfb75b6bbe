"""The decision on a candidate/baseline ratio (``SampleKind.RATIO``): does compression pay?

A ratio metric carries its interval in ``details["ratio_ci"]`` (``[low,
high]`` at ``details["ratio_level"]``; ``None`` when too few paired
observations gave none, :data:`gate.metrics.load.MIN_PAIRS`) and, when it is
gated, the tier's ``details["min_speedup"]`` (``s``); the keys are
:class:`gate.measurement.MeasurementDetail`'s. The reference is the ideal ratio 1 (the
baseline build measured in the same session). For a higher-is-better ratio
``q`` (goodput):

* **CRITICAL** (blocks) when the interval's upper end is below ``min(1, s)``:
  the candidate is shown slower than its baseline (or, with ``s < 1``, shown
  below the tolerated loss);
* **WARN** when the upper end is below ``s`` (``s > 1``): shown not to be
  faster at the SLO by the required factor, though not shown slower;
* **PASS** otherwise: nothing shown against the candidate. The verdict's
  ``point`` still says WARN when the ratio itself is below ``s``, so a report
  shows a build that may not pay; an identical build (ratio near 1, interval
  around it) passes, as every other metric of the gate passes when the
  evidence does not show a regression.

Like every bound of the gate, ``s`` is judged on the evidence (the interval),
not on the point estimate: with three pairs the ratio of a build against itself
lands anywhere in a wide interval around 1. The default ``s = 1`` blocks a
build shown slower; ``s > 1`` (say 1.2) also warns on a build shown not to buy
that speed-up.

For a lower-is-better ratio (a latency) the same rule holds for ``1 / q``.
Without ``min_speedup`` the ratio is reported, not gated; a gated ratio
without an interval is a data error (the load tier never records one). As degradations
from the ideal (``d = 1 - q``) the bounds are ``warn = 1 - s`` and
``critical = max(0, 1 - s)``, which is how the verdict's threshold records
them; ``alpha`` is one minus the interval's level.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from gate.errors import DataError
from gate.gating.decision import Basis, Decision, Reference, Subject, fmt
from gate.gating.verdict import Bound, Severity, VerdictThreshold
from gate.measurement import Measurement, MeasurementDetail
from gate.metrics.metric_spec import MetricSpec


def _interval(details: Mapping[str, Any], name: str) -> tuple[float, float, float] | None:
    try:
        raw = details[MeasurementDetail.RATIO_CI]
        level = float(details.get(MeasurementDetail.RATIO_LEVEL, 0.95))
        if raw is None:
            return None
        low, high = (float(x) for x in raw)
    except (KeyError, TypeError, ValueError):
        raise DataError(
            f"{name}: a ratio metric needs details['ratio_ci'] = [low, high]",
            "ratio metrics come from the load tier's paired sweeps",
        ) from None
    return low, high, level


def judge_ratio(cand: Measurement, spec: MetricSpec, *, slice: str | None = None) -> Decision:
    """The :class:`Decision` of one ratio metric (module docstring)."""
    found = _interval(cand.details, spec.name)
    value = cand.value
    n = len(cand.samples) if cand.samples else 1
    reference = Reference(1.0, None, "ideal")
    raw = cand.details.get(MeasurementDetail.MIN_SPEEDUP)
    if found is None:
        shown = f"{spec.name} {fmt(value)} (no interval: {n} paired observations)"
    else:
        shown = (
            f"{spec.name} {fmt(value)} [{fmt(found[0])}, {fmt(found[1])}]"
            f" ({found[2]:.0%} CI, {n} paired observations)"
        )
    base = Decision.passed_ungated(  # a gated ratio replaces the verdict's fields
        Subject(spec.name, slice, value, spec.higher_is_better), reference,
        basis=Basis.NOT_GATED, n=n, text=f"{shown}: not gated",
    )  # fmt: skip
    if raw is None:
        return base
    if found is None:
        raise DataError(
            f"{spec.name}: a gated ratio needs an interval (details['ratio_ci'])",
            "the load tier's paired observations give one from 3 pairs",
        )
    low, high, level = found
    speedup = float(raw)
    # speedups (> 1 = the candidate is faster), whatever the metric's direction
    if spec.higher_is_better:
        point, upper = value, high
    else:
        point, upper = 1.0 / value, 1.0 / low if low > 0 else float("inf")
    threshold = VerdictThreshold(
        bound=Bound(warn=1.0 - speedup, critical=max(0.0, 1.0 - speedup), mode="absolute"),
        alpha=1.0 - level,
        min_samples=n,
    )
    floor = min(1.0, speedup)
    if upper < floor:
        severity = Severity.CRITICAL
        why = f"slower: the CI's upper end {fmt(upper)} is below {fmt(floor)}"
    elif upper < speedup:
        severity = Severity.WARN
        why = (
            f"not faster by min_speedup {fmt(speedup)}: the CI's upper end {fmt(upper)}"
            f" is below it (speedup {fmt(point)})"
        )
    elif point < speedup:
        severity = Severity.PASS
        why = (
            f"speedup {fmt(point)} below min_speedup {fmt(speedup)}, not shown"
            f" (the CI's upper end {fmt(upper)} reaches it)"
        )
    else:
        severity = Severity.PASS
        why = f"speedup {fmt(point)} >= min_speedup {fmt(speedup)}"
    return replace(
        base,
        threshold=threshold,
        point=Severity.WARN if point < speedup else Severity.PASS,
        severity=severity,
        basis=Basis.SUPPORTED,
        text=f"{shown}: {why}",
    )


__all__ = ["judge_ratio"]

"""How many items each tier needs for its bounds at the calibrated spreads, and how
long that takes on the calibrating machine (``gate run --dry-run``, ``gate calibrate``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gate.gating.calibration.bounds import power_figures
from gate.gating.calibration.reader import Calibration
from gate.gating.thresholds import Thresholds
from gate.metrics.metric_spec import MetricSpec


@dataclass(frozen=True)
class TierPlan:
    """How many items one tier needs for its bounds, and how long that takes here."""

    tier: str
    #: ``(metric, configured n, needed n or None)`` of the tier's tested metrics.
    metrics: tuple[tuple[str, int, int | None], ...]
    #: Largest ``needed / configured`` over the metrics (``inf``: one cannot get there).
    factor: float
    #: Estimated seconds at the needed counts (``None``: no timing recorded).
    seconds: float | None


def plan_sample_sizes(
    thresholds: Thresholds,
    calibration: Calibration,
    specs: Mapping[str, MetricSpec],
    tiers: Sequence[str],
    *,
    items: Mapping[str, int] | None = None,
) -> list[TierPlan]:
    """Per tier: the items each calibrated, bounded metric needs to detect its critical bound
    with the recorded power, at the calibrated spread; the time scaled from the recorded
    timing by the largest factor. ``items`` overrides the configured count per metric."""
    plans: list[TierPlan] = []
    for tier in tiers:
        rows: list[tuple[str, int, int | None]] = []
        factor = 0.0
        for name, cm in calibration.metrics.items():
            spec = specs.get(name)
            threshold = thresholds.for_metric(name)
            if spec is None or spec.tier != tier or threshold is None or cm.spread is None:
                continue
            n = (items or {}).get(name, cm.n)
            _, needed = power_figures(
                spec,
                mode=threshold.bound.mode,
                spread=cm.spread,
                n=max(n, 1),
                target=threshold.bound.critical,
                reference=spec.ideal if spec.ideal is not None else 1.0,
                alpha=thresholds.alpha,
                power=calibration.power,
            )
            if needed is not None:
                needed = max(needed, threshold.min_samples)  # below it: the point value alone
            rows.append((name, n, needed))
            factor = max(factor, math.inf if needed is None else needed / max(n, 1))
        if not rows:
            continue
        timing = calibration.timings.get(tier)
        seconds = None
        if timing is not None and math.isfinite(factor):
            seconds = timing.seconds * max(factor, 0.0)
        plans.append(TierPlan(tier, tuple(rows), factor, seconds))
    return plans


def describe_plans(plans: Sequence[TierPlan], calibration: Calibration) -> list[str]:
    """Lines of the sample-size plan (``gate run --dry-run``, ``gate calibrate``)."""
    lines = [
        f"sample sizes for {calibration.power:.0%} power at the critical bounds "
        f"(spreads calibrated on {calibration.model}, {calibration.created}, {calibration.hardware}):"
    ]
    for plan in plans:
        worst = max(plan.metrics, key=lambda r: math.inf if r[2] is None else r[2] / max(r[1], 1))
        name, n, needed = worst
        need = "more than 1,000,000" if needed is None else f"{needed}"
        timing = calibration.timings.get(plan.tier)
        when = ""
        if plan.seconds is not None and timing is not None:
            when = (
                f"; about {plan.seconds:.0f} s here ({timing.items} items took"
                f" {timing.seconds:.0f} s)"
            )
        enough = "enough" if needed is not None and needed <= n else "too few"
        lines.append(
            f"  {plan.tier}: {need} items needed (by {name}; configured {n}: {enough}){when}"
        )
        if calibration.metrics[name].spread == 0.0:
            lines.append(
                f"    {name}: the calibration runs showed no per-item spread, so the count is"
                " the metric's min_samples; a control (--dtype-control, an engine) measures a"
                " spread a real change has"
            )
    return lines

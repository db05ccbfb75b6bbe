"""Thresholds from a measured noise floor: the pure part of ``gate calibrate``.

``gate calibrate`` (:mod:`gate.session.calibrate`) gates a model's baseline
build against itself under changes that leave the model as it is (repeats,
batch sizes, prompt order, the reference pack's tail-sample seed) and, when
asked, against named controls (another dtype, the same weights behind a
serving engine). Each of those runs gives, per metric, one :class:`NoiseRun`:
the degradation ``d`` it showed (``d > 0`` is worse, on the bound's scale:
:meth:`gate.gating.verdict.Bound.degradation`) and the spread of its paired
per-item differences. This module turns them into bounds.

The rule (docs/adopting.md "How the bounds are derived"), per metric:

* ``Q`` = the ``quantile``-th empirical quantile of ``max(d, 0)`` over the runs,
  taken with the *higher* order statistic (with at most ``1 / (1 - quantile)``
  runs that is the largest one: a handful of runs cannot locate a tail, so
  the largest seen stands for it);
* ``warn = max(declared warn, margin x Q)``;
* ``critical = max(declared critical, warn x declared critical / declared warn)``
  (the declared ratio, 2 by default, is kept when noise pushes ``warn`` up).

Why: a bound below the noise floor blocks builds that did not change (false
alarms), so the bound is raised to a ``margin`` (default 2) above the largest
noise seen, room for the tail the few runs did not sample; a bound above the
team's declared tolerance (the current ``thresholds.toml``) is never chosen
unless the noise forces it, since then a smaller regression could not be told
from noise anyway. A metric the declared file does not bound is left
unbounded (reported, not gated), as before.

Power (:mod:`gate.gating.power`): the spread ``s`` of a metric is the largest
per-item spread any run showed (the sd of paired differences for per-item
scores, the discordant-pair rate for per-item correctness); the MDE is that
of the gate's own test at the configured item count, and the item count
needed is the one at which the test detects the *critical* bound with the
requested power, and never fewer than the metric's ``min_samples`` (below it
the verdict is the point value alone). Point-valued metrics (KL percentiles) have neither: they are
judged on the value alone.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gate.errors import ConfigError
from gate.gating import power as pw
from gate.gating.thresholds import MetricThreshold, Thresholds
from gate.gating.verdict import Bound, Mode
from gate.metrics.spec import MetricSpec, SampleKind

#: Default margin over the noise quantile.
DEFAULT_MARGIN = 2.0
#: Default quantile of the noise degradations.
DEFAULT_QUANTILE = 0.95
#: Key of the calibration record in a calibrated ``thresholds.toml``.
CALIBRATION_KEY = "calibration"


@dataclass(frozen=True)
class NoiseRun:
    """What one run of an unchanged (or control) build showed for one metric."""

    #: The perturbation: ``repeat 1``, ``batch_size 8``, ``order seed 1``, ``dtype bfloat16`` ...
    source: str
    #: The degradation ``d`` (``> 0`` worse) on the bound's scale.
    degradation: float
    #: Per-item spread: sd of the paired differences (scores), the discordant rate
    #: (correctness); ``None`` for point-valued metrics.
    spread: float | None
    #: Items behind the value (0 for a point value).
    n: int
    #: Whether the run is a named control (dtype, engine), not a repeat of the build itself.
    control: bool = False


@dataclass(frozen=True)
class MetricCalibration:
    """The calibrated bounds of one metric and where each number came from."""

    metric: str
    mode: Mode
    declared: Bound | None
    runs: tuple[NoiseRun, ...]
    #: ``Q``: the noise quantile (on the bound's scale).
    noise: float
    warn: float | None
    critical: float | None
    #: ``"declared"`` (the declared bound held), ``"noise"`` (the noise raised it),
    #: ``"unbounded"`` (the declared file does not gate the metric).
    rule: str
    #: Test behind the verdict (``paired_bootstrap``, ``mcnemar``, ``point``).
    test: str
    #: Largest per-item spread over the runs (``None``: point value).
    spread: float | None
    #: Items at the configured settings.
    n: int
    #: MDE at ``n`` on the bound's scale (``None``: no test; ``inf``: none detectable).
    mde: float | None
    #: Items the test needs to detect the critical bound (``None``: no test or > MAX_N).
    needed_n: int | None

    @property
    def noise_sources(self) -> dict[str, float]:
        """Degradation per source (the largest when a source ran several times)."""
        out: dict[str, float] = {}
        for run in self.runs:
            out[run.source] = max(out.get(run.source, -math.inf), run.degradation)
        return out

    def summary(self) -> dict[str, float]:
        """The noise distribution in numbers: count, min, median, max, ``Q``."""
        values = np.asarray([r.degradation for r in self.runs], dtype=np.float64)
        if values.size == 0:
            return {"runs": 0.0}
        return {
            "runs": float(values.size),
            "min": float(values.min()),
            "median": float(np.median(values)),
            "max": float(values.max()),
            "quantile": self.noise,
        }


def noise_quantile(degradations: Sequence[float], quantile: float) -> float:
    """``Q``: the ``quantile`` of ``max(d, 0)`` by the higher order statistic (0 for none).

    ``numpy.quantile(..., method="higher")``: the smallest observed value at or above
    the quantile's position, so with few runs it is the largest one.
    """
    if not 0.0 < quantile < 1.0:
        raise ValueError(f"quantile {quantile!r} must be in (0, 1)")
    clipped = [max(d, 0.0) for d in degradations if math.isfinite(d)]
    if not clipped:
        return 0.0
    return float(np.quantile(np.asarray(clipped), quantile, method="higher"))


def derive_bound(
    declared: Bound | None, noise: float, *, margin: float = DEFAULT_MARGIN
) -> tuple[Bound | None, str]:
    """The calibrated bound and its rule (``declared``/``noise``/``unbounded``).

    ``warn = max(declared.warn, margin Q)``; ``critical = max(declared.critical,
    warn x declared.critical / declared.warn)`` (module docstring). Without a
    declared bound the metric stays unbounded.
    """
    if margin < 1.0:
        raise ValueError(f"margin {margin!r} must be >= 1")
    if declared is None:
        return None, "unbounded"
    floor = margin * max(noise, 0.0)
    if floor <= declared.warn:
        return declared, "declared"
    ratio = declared.critical / declared.warn if declared.warn > 0 else 2.0
    warn = floor
    critical = max(declared.critical, warn * ratio)
    return Bound(warn=warn, critical=critical, mode=declared.mode), "noise"


def test_of(spec: MetricSpec) -> str:
    """The test the gate judges ``spec`` with (the name power statements use)."""
    if spec.sample_kind is SampleKind.PAIRED_SCORE:
        return "paired_bootstrap"
    if spec.sample_kind is SampleKind.PAIRED_BINARY:
        return "mcnemar"
    if spec.sample_kind is SampleKind.REPEATED:
        return "mann_whitney"
    return "point"


def _to_sample_scale(delta: float, mode: Mode, spec: MetricSpec, reference: float) -> float:
    """A degradation on the bound's scale as a shift of the per-item mean."""
    if mode == "absolute":
        return delta
    if spec.log_samples:
        return math.log1p(delta)
    return delta * abs(reference)


def _to_bound_scale(shift: float, mode: Mode, spec: MetricSpec, reference: float) -> float:
    """Inverse of :func:`_to_sample_scale`."""
    if mode == "absolute" or math.isinf(shift):
        return shift
    if spec.log_samples:
        return math.expm1(shift)
    return shift / abs(reference) if reference else math.inf


def power_figures(
    spec: MetricSpec,
    *,
    mode: Mode,
    spread: float | None,
    n: int,
    target: float | None,
    reference: float,
    alpha: float,
    power: float = pw.DEFAULT_POWER,
) -> tuple[float | None, int | None]:
    """``(MDE at n, items needed to detect target)`` of the gate's test for ``spec``.

    Per-item scores: the paired bootstrap with per-item sd ``spread``; correctness:
    McNemar with discordant rate ``spread``; anything else: ``(None, None)``. Both
    figures are on the bound's scale (``mode``; relative ones through ``reference``,
    or through the log for log-valued samples).
    """
    if spread is None or n < 1:
        return None, None
    test = test_of(spec)
    mde: float | None
    needed: int | None = None
    if test == "paired_bootstrap":
        mde = _to_bound_scale(
            pw.mde_paired_mean(n, spread, alpha=alpha, power=power), mode, spec, reference
        )
        if target is not None and target > 0:
            shift = _to_sample_scale(target, mode, spec, reference)
            needed = pw.required_n_paired_mean(shift, spread, alpha=alpha, power=power)
    elif test == "mcnemar":
        mde = _to_bound_scale(
            pw.mde_mcnemar(n, spread, alpha=alpha, power=power), mode, spec, reference
        )
        if target is not None and target > 0:
            shift = _to_sample_scale(target, mode, spec, reference)
            if 0 < shift <= 1:
                needed = pw.required_n_mcnemar(shift, spread, alpha=alpha, power=power)
    else:
        return None, None
    return mde, needed


def calibrate_metric(
    spec: MetricSpec,
    declared: MetricThreshold | None,
    runs: Sequence[NoiseRun],
    *,
    n: int,
    reference: float,
    alpha: float,
    margin: float = DEFAULT_MARGIN,
    quantile: float = DEFAULT_QUANTILE,
    power: float = pw.DEFAULT_POWER,
) -> MetricCalibration:
    """One metric's calibration from its noise runs (module docstring for the rule)."""
    declared_bound = declared.bound if declared is not None else None
    mode: Mode = declared_bound.mode if declared_bound is not None else "absolute"
    q = noise_quantile([r.degradation for r in runs], quantile)
    bound, rule = derive_bound(declared_bound, q, margin=margin)
    spreads = [r.spread for r in runs if r.spread is not None and math.isfinite(r.spread)]
    spread = max(spreads) if spreads else None
    mde, needed = power_figures(
        spec,
        mode=mode,
        spread=spread,
        n=n,
        target=bound.critical if bound is not None else None,
        reference=reference,
        alpha=alpha,
        power=power,
    )
    if needed is not None and declared is not None:
        needed = max(needed, declared.min_samples)  # below it the verdict is the point value
    return MetricCalibration(
        metric=spec.name,
        mode=mode,
        declared=declared_bound,
        runs=tuple(runs),
        noise=q,
        warn=bound.warn if bound is not None else None,
        critical=bound.critical if bound is not None else None,
        rule=rule,
        test=test_of(spec) if spread is not None else "point",
        spread=spread,
        n=n,
        mde=mde,
        needed_n=needed,
    )


# ------------------------------------------------------------------ the calibration record


@dataclass(frozen=True)
class TierTiming:
    """How long a tier took at its configured item counts on the calibrating machine."""

    tier: str
    seconds: float
    #: Items of the tier's largest per-item metric at the configured settings.
    items: int


@dataclass(frozen=True)
class CalibrationRecord:
    """The ``[calibration]`` table of a calibrated ``thresholds.toml``: what the run
    planner needs (spreads, item counts, timings) and where the numbers came from."""

    model: str
    created: str
    hardware: str
    alpha: float
    power: float
    margin: float
    quantile: float
    sources: tuple[str, ...]
    metrics: Mapping[str, MetricCalibration]
    timings: Mapping[str, TierTiming] = field(default_factory=dict)


def _fmt(value: Any) -> str:
    """A TOML value: numbers (``inf``/``nan`` as TOML spells them), strings, lists, tables."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        import json

        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{_key(k)} = {_fmt(v)}" for k, v in value.items()) + " }"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_fmt(v) for v in value) + "]"
    raise TypeError(f"cannot write {type(value).__name__} as TOML")


def _key(key: str) -> str:
    bare = key.replace("_", "").replace("-", "").isalnum() and key.isascii()
    return key if bare else _fmt(key)


def _g(value: float | None) -> str:
    if value is None:
        return "-"
    if math.isinf(value):
        return "none detectable"
    return f"{value:.3g}"


def _metric_comment(cal: MetricCalibration, declared_source: str) -> list[str]:
    where = ", ".join(f"{s} {_g(d)}" for s, d in cal.noise_sources.items()) or "no runs"
    lines = [f"# noise (degradation per source): {where}"]
    if cal.rule == "noise":
        lines.append(
            f"# warn = margin x noise quantile {_g(cal.noise)} (above the declared "
            f"{_g(cal.declared.warn if cal.declared else None)} of {declared_source}); "
            "critical keeps the declared warn:critical ratio"
        )
    else:
        lines.append(
            f"# bounds as declared in {declared_source}: margin x noise quantile "
            f"{_g(cal.noise)} is below the declared warn"
        )
    if cal.mde is not None:
        need = "more than the search limit" if cal.needed_n is None else str(cal.needed_n)
        lines.append(
            f"# {cal.test}: per-item spread {_g(cal.spread)}; n = {cal.n} detects "
            f"{_g(cal.mde)}; {need} items detect the critical bound"
        )
    else:
        lines.append("# a point value: judged on the value alone (no test, no MDE)")
    return lines


def render_thresholds(
    declared: Thresholds, record: CalibrationRecord, specs: Mapping[str, MetricSpec]
) -> str:
    """The calibrated ``thresholds.toml``: ``declared`` with the calibrated bounds in place,
    every other section kept, a comment per metric and the ``[calibration]`` record.

    Loadable by :func:`gate.gating.thresholds.load_thresholds` (the record included).
    """
    lines = [
        f"# thresholds.toml calibrated by `gate calibrate` for {record.model} on {record.created}",
        f"# hardware: {record.hardware}",
        f"# declared tolerances: {declared.source}; noise sources: {', '.join(record.sources)}",
        f"# rule: warn = max(declared warn, {record.margin:g} x the {record.quantile:g} quantile"
        " of the noise degradations); critical = max(declared critical, warn x declared ratio)",
        "",
        "[gate]",
        f"alpha = {_fmt(declared.alpha)}",
        f"min_samples = {declared.min_samples}",
        f"exercised_only = {_fmt(declared.exercised_only)}",
        f"power = {_fmt(declared.power)}",
        f"require_power = {_fmt(declared.require_power)}",
    ]
    for name, threshold in declared.metrics.items():
        spec = specs[name]
        cal = record.metrics.get(name)
        lines += ["", f'[metrics."{name}"]']
        if cal is not None:
            lines += _metric_comment(cal, declared.source)
        else:
            lines.append(f"# not calibrated: as declared in {declared.source}")
        bound = threshold.bound
        if cal is not None and cal.warn is not None and cal.critical is not None:
            bound = Bound(warn=cal.warn, critical=cal.critical, mode=bound.mode)
        lines.append(f"higher_is_better = {_fmt(spec.higher_is_better)}")
        lines.append(f"mode = {_fmt(bound.mode)}")
        lines.append(f"warn = {_fmt(bound.warn)}")
        lines.append(f"critical = {_fmt(bound.critical)}")
        if threshold.min_samples != declared.min_samples:
            lines.append(f"min_samples = {threshold.min_samples}")
        if threshold.categories:
            cats = {
                k: {"warn": b.warn, "critical": b.critical, "mode": b.mode}
                for k, b in threshold.categories.items()
            }
            lines.append(f"categories = {_fmt(cats)}")
    for tier, table in declared.tiers.items():
        lines += ["", f"[tiers.{tier}]"]
        lines += [f"{_key(k)} = {_fmt(v)}" for k, v in table.items()]
    lines += ["", *_record_lines(record)]
    return "\n".join(lines) + "\n"


def _record_lines(record: CalibrationRecord) -> list[str]:
    lines = [
        "# What `gate calibrate` measured: read back by `gate run --dry-run` to plan sample sizes.",
        f"[{CALIBRATION_KEY}]",
        f"model = {_fmt(record.model)}",
        f"created = {_fmt(record.created)}",
        f"hardware = {_fmt(record.hardware)}",
        f"alpha = {_fmt(record.alpha)}",
        f"power = {_fmt(record.power)}",
        f"margin = {_fmt(record.margin)}",
        f"quantile = {_fmt(record.quantile)}",
        f"sources = {_fmt(list(record.sources))}",
    ]
    for tier, timing in record.timings.items():
        lines += [
            "",
            f"[{CALIBRATION_KEY}.timings.{tier}]",
            f"seconds = {_fmt(timing.seconds)}",
            f"items = {timing.items}",
        ]
    for name, cal in record.metrics.items():
        lines += ["", f'[{CALIBRATION_KEY}.metrics."{name}"]', f"test = {_fmt(cal.test)}"]
        lines.append(f"n = {cal.n}")
        if cal.spread is not None:
            lines.append(f"spread = {_fmt(cal.spread)}")
        lines.append(f"noise = {_fmt(cal.noise)}")
        lines.append(f"rule = {_fmt(cal.rule)}")
        if cal.mde is not None:
            lines.append(f"mde = {_fmt(cal.mde)}")
        if cal.needed_n is not None:
            lines.append(f"needed_n = {cal.needed_n}")
        sources = {s: d for s, d in cal.noise_sources.items()}
        lines.append(f"sources = {_fmt(sources)}")
    return lines


# ------------------------------------------------------------------ reading it back


@dataclass(frozen=True)
class CalibratedMetric:
    """One metric of a ``[calibration]`` table as the run planner reads it."""

    metric: str
    test: str
    n: int
    spread: float | None


@dataclass(frozen=True)
class Calibration:
    """The parts of a ``[calibration]`` table the run planner uses."""

    model: str
    created: str
    hardware: str
    power: float
    metrics: Mapping[str, CalibratedMetric]
    timings: Mapping[str, TierTiming]


def _num(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{where}: expected a number, got {value!r}", "re-run gate calibrate")
    return float(value)


def read_calibration(table: Mapping[str, Any], source: str) -> Calibration:
    """The ``[calibration]`` table of ``source`` (a calibrated ``thresholds.toml``), checked."""
    where = f"{source} [{CALIBRATION_KEY}]"
    try:
        metrics: dict[str, CalibratedMetric] = {}
        for name, raw in dict(table.get("metrics", {})).items():
            spread = raw.get("spread")
            metrics[name] = CalibratedMetric(
                metric=name,
                test=str(raw["test"]),
                n=int(raw["n"]),
                spread=_num(spread, f"{where}.metrics.{name}.spread")
                if spread is not None
                else None,
            )
        timings = {
            tier: TierTiming(
                tier, _num(raw["seconds"], f"{where}.timings.{tier}"), int(raw["items"])
            )
            for tier, raw in dict(table.get("timings", {})).items()
        }
        power = _num(table.get("power", pw.DEFAULT_POWER), f"{where}.power")
        return Calibration(
            model=str(table.get("model", "?")),
            created=str(table.get("created", "?")),
            hardware=str(table.get("hardware", "?")),
            power=power,
            metrics=metrics,
            timings=timings,
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ConfigError(
            f"{where}: malformed calibration record ({exc})", "re-run gate calibrate"
        ) from None


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


__all__ = [
    "CALIBRATION_KEY",
    "DEFAULT_MARGIN",
    "DEFAULT_QUANTILE",
    "CalibratedMetric",
    "Calibration",
    "CalibrationRecord",
    "MetricCalibration",
    "NoiseRun",
    "TierPlan",
    "TierTiming",
    "calibrate_metric",
    "derive_bound",
    "describe_plans",
    "noise_quantile",
    "plan_sample_sizes",
    "power_figures",
    "read_calibration",
    "render_thresholds",
    "test_of",
]

"""Bounds from a measured noise floor: the pure maths of ``gate calibrate``.

``gate calibrate`` (:mod:`gate.workflows.calibrate`) gates a model's baseline
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
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gate.gating import power as pw
from gate.gating.thresholds import MetricThreshold
from gate.gating.verdict import Bound, BoundMode
from gate.metrics.metric_spec import MetricSpec, SampleKind

#: Default margin over the noise quantile.
DEFAULT_MARGIN = 2.0
#: Default quantile of the noise degradations.
DEFAULT_QUANTILE = 0.95


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
    mode: BoundMode
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


def _to_sample_scale(delta: float, mode: BoundMode, spec: MetricSpec, reference: float) -> float:
    """A degradation on the bound's scale as a shift of the per-item mean."""
    if mode == "absolute":
        return delta
    if spec.log_samples:
        return math.log1p(delta)
    return delta * abs(reference)


def _to_bound_scale(shift: float, mode: BoundMode, spec: MetricSpec, reference: float) -> float:
    """Inverse of :func:`_to_sample_scale`."""
    if mode == "absolute" or math.isinf(shift):
        return shift
    if spec.log_samples:
        return math.expm1(shift)
    return shift / abs(reference) if reference else math.inf


def power_figures(
    spec: MetricSpec,
    *,
    mode: BoundMode,
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


@dataclass(frozen=True)
class NoiseRule:
    """How the noise floor raises a bound: the noise is the ``quantile`` of the noise runs'
    degradations (:func:`noise_quantile`), and a declared warn bound below ``margin`` times
    it is raised to that (:func:`derive_bound`)."""

    margin: float = DEFAULT_MARGIN
    quantile: float = DEFAULT_QUANTILE


#: The rule calibration applies unless told otherwise.
DEFAULT_NOISE_RULE = NoiseRule()


def calibrate_metric(
    spec: MetricSpec,
    declared: MetricThreshold | None,
    runs: Sequence[NoiseRun],
    *,
    n: int,
    reference: float,
    alpha: float,
    noise_rule: NoiseRule = DEFAULT_NOISE_RULE,
    power: float = pw.DEFAULT_POWER,
) -> MetricCalibration:
    """One metric's calibration from its noise runs (module docstring for the rule)."""
    declared_bound = declared.bound if declared is not None else None
    mode: BoundMode = declared_bound.mode if declared_bound is not None else "absolute"
    q = noise_quantile([r.degradation for r in runs], noise_rule.quantile)
    bound, rule = derive_bound(declared_bound, q, margin=noise_rule.margin)
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

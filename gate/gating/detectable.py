"""What the test behind one verdict could detect: its :class:`~gate.gating.power.PowerStatement`.

docs/metrics.md "Power". :mod:`gate.gating.compare` calls :func:`statement`
with the samples it tested; the spread is the observed one and the test the
one that decided the metric's critical level:

* per-item scores (paired bootstrap): ``sd`` of the paired differences
  ``c_i - r_i`` (against an ideal, ``r_i`` is the ideal). For log samples
  (perplexity) the MDE ``δ`` of the mean log is ``r (e^δ - 1)`` in the value's
  unit (``r (1 - e^-δ)`` when higher is better);
* per-item correctness (McNemar): the noise's discordant rate ``2 c / n``
  (``c``: pairs where only the candidate is better; the degradation adds to
  ``b``, not to ``c``);
* timings: the per-pair log ratios' sd (Wilcoxon, in-session pairs) or the
  pooled sd of each side's log timings (Mann-Whitney). With relative bounds
  the CRITICAL test asks for "worse than the warn bound" (margin = warn), so
  the MDE is ``(1 + warn) e^θ - 1`` for the log shift ``θ`` the test detects.

The MDE is put on the bound's scale (a fraction of ``|r|`` in relative mode)
and set beside the critical bound. No statement for a metric that is not
gated, untested (point value), compared with a reference of 0 in relative
mode, or judged by the Elo sign test (pairwise judge scores: the test counts
prompts, while the value is an Elo difference; their relation depends on the
score distribution, which the sign test does not model).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from gate.gating import power as pw
from gate.gating.decision import Evidence, Method
from gate.gating.verdict import Bound
from gate.metrics.metric_spec import MetricSpec


def _sd(x: NDArray[np.float64]) -> float:
    return float(np.std(x, ddof=1)) if x.size >= 2 else 0.0


def _log_sd(x: NDArray[np.float64]) -> float | None:
    return _sd(np.log(x)) if np.all(x > 0.0) else None


@dataclass(frozen=True)
class Tested:
    """One tested, gated comparison: the samples ``c`` (candidate) and ``b`` (reference)
    the test saw, the metric, the test's evidence, the bound and the reference value."""

    c: NDArray[np.float64]
    b: NDArray[np.float64]
    spec: MetricSpec
    evidence: Evidence
    bound: Bound
    reference: float


def mde_in_unit(tested: Tested, *, alpha: float, power: float) -> float | None:
    """The MDE of ``evidence.method`` on samples ``c`` (candidate) and ``b`` (reference).

    In the value's unit for paired tests; for timings, the relative degradation
    (a fraction). ``None`` when the samples admit no statement (module docstring).
    """
    c, b, spec, evidence, bound = tested.c, tested.b, tested.spec, tested.evidence, tested.bound
    if evidence.method is Method.MCNEMAR:
        if spec.elo_samples or evidence.discordant is None or evidence.n < 1:
            return None
        noise = min(2.0 * evidence.discordant[1] / evidence.n, 1.0)
        return pw.mde_mcnemar(evidence.n, noise, alpha=alpha, power=power)
    if evidence.method is Method.PAIRED_BOOTSTRAP:
        delta = pw.mde_paired_mean(c.size, _sd(c - b), alpha=alpha, power=power)
        if not spec.log_samples or math.isinf(delta):
            return delta
        scale = abs(tested.reference)
        return scale * (-math.expm1(-delta) if spec.higher_is_better else math.expm1(delta))
    margin = bound.warn if bound.mode == "relative" else 0.0
    if spec.higher_is_better and margin >= 1.0:
        return None
    if evidence.method is Method.WILCOXON_PAIRS:
        if np.any(c <= 0.0) or np.any(b <= 0.0):
            return None
        sd = _sd(np.log(c) - np.log(b))
        shift = pw.mde_signed_rank(c.size, sd, alpha=alpha, power=power)
    else:
        sd_c, sd_b = _log_sd(c), _log_sd(b)
        if sd_c is None or sd_b is None:
            return None
        sd = math.sqrt((sd_c**2 + sd_b**2) / 2.0)
        shift = pw.mde_rank_sum(c.size, b.size, sd, alpha=alpha, power=power)
    return pw.relative_degradation(shift, margin, higher_is_better=spec.higher_is_better)


def statement(
    tested: Tested, *, slice: str | None, against: str, alpha: float, power: float
) -> pw.PowerStatement | None:
    """The power statement of one tested, gated comparison (``None``: see the module docstring)."""
    mde = mde_in_unit(tested, alpha=alpha, power=power)
    if mde is None:
        return None
    spec, evidence, bound, reference = tested.spec, tested.evidence, tested.bound, tested.reference
    timing = evidence.method in (Method.MANN_WHITNEY, Method.WILCOXON_PAIRS)
    scale = abs(reference)
    if bound.mode == "relative":
        if timing:
            on_bound = mde
        elif scale == 0.0:
            return None
        else:
            on_bound = mde / scale
    elif timing:
        on_bound = mde * scale
    else:
        on_bound = mde
    return pw.PowerStatement(
        metric=spec.name,
        slice=slice,
        n=evidence.n,
        mde=on_bound,
        critical=bound.critical,
        mode=bound.mode,
        power=power,
        alpha=alpha,
        test=evidence.method.value,
        higher_is_better=spec.higher_is_better,
        against=against,
        reference=scale,
    )

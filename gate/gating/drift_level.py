"""The drift audit's level test: recent runs against the level of the earlier ones.

Pure maths for :mod:`gate.gating.drift`. Each audited run ``j`` has a *level*
``y_j = log(value_j)`` (the metric's run-level value on the log scale, where a
slowdown by a factor is a shift) and, when the history kept its within-run
samples' summary (:class:`gate.store.history.SampleSummary`), a within-run
variance ``v_j = (log_sd_j)^2 / n_j``, the squared standard error of the
run's mean log sample.

**Model.** ``y_j = mu + b_j + e_j`` with ``b_j ~ N(0, tau^2)`` the run-to-run
variation (the machine, the day, the process) and ``e_j ~ N(0, v_j)`` the
within-run measurement error. A steady history has one ``mu``.

**Test.** The ``m`` earlier runs ``E`` against the ``k`` recent runs ``R``
(``k = 1``: the latest run; ``k = w``: the recent window). With ``ȳ_E``,
``S^2`` (``ddof = 1``) the earlier levels' mean and variance, ``v̄_E`` the mean
within-run variance of the earlier runs that have one (0 when none has) and
``v̄_R`` that of the recent runs (a recent run without one counts as ``v̄_E``):

    tau_hat^2 = max(0, S^2 - v̄_E)            (method of moments: E S^2 = tau^2 + v̄_E)
    Var(ȳ_R - ȳ_E) = (tau_hat^2 + v̄_R) / k + S^2 / m

the variance of the mean of ``k`` new runs around the earlier mean: a
prediction interval for a new run's level (``k = 1``) whose run-to-run part
comes from the earlier runs' spread and whose within-run part is the new
run's own. When the new runs are as noisy inside as the earlier ones and
``S^2 >= v̄_E`` it is the textbook ``S^2 (1/k + 1/m)``; without any summaries
(histories written before they existed) it is exactly that; a run much
noisier inside than the earlier ones widens it, and earlier runs that agree
more closely than their own samples allow cannot narrow it below the
within-run error.

With ``D = s (ȳ_R - ȳ_E)`` the shift in the worse direction (``s = +1`` when
lower is better, ``-1`` when higher is better) and ``mu_0`` the log margin
(``log(1 + margin)``, or ``-log(1 - margin)`` when higher is better; 0 for no
margin), the statistic is ``T = (D - mu_0) / sqrt(Var)`` and its one-sided
p-value ``P[t_{m-1} >= T]``, Student's t with the earlier runs' ``m - 1``
degrees of freedom. That is exact when the within-run variances are equal
(``Var`` is then proportional to ``S^2``); otherwise the within-run part is
known far better than ``S^2`` (from ``n_j - 1`` degrees of freedom per run)
and ``m - 1`` is the conservative choice. ``Var = 0`` (a constant history, a
point metric that never moved) decides on ``D > mu_0`` alone.

**Power.** Under a true worse shift ``mu_0 + theta`` the statistic is
noncentral t, ``t'_{m-1}(theta / sigma)`` with ``sigma = sqrt(Var)``, so the
test rejects with probability ``1 - F_{t'_{m-1}(theta/sigma)}(t_{m-1, 1-alpha})``
(:func:`rejection_probability`). The minimum detectable log shift is ``theta* = lambda* sigma``
with ``lambda*`` the noncentrality at which that probability is ``power``
(:func:`mde_log_shift`), and the relative degradation it stands for is
:func:`gate.gating.power.relative_degradation` of ``theta*`` beyond the margin,
as for the gate's own timing verdicts (:mod:`gate.gating.detectable`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from gate.gating import power as pw

#: Earlier runs a level test needs (``m - 1 = 2`` degrees of freedom).
MIN_EARLIER = 3


@dataclass(frozen=True)
class Run:
    """One run's level ``log(value)`` and within-run variance (``None``: not recorded)."""

    level: float
    within_var: float | None = None


@dataclass(frozen=True)
class LevelTest:
    """The level test of ``k`` recent runs against ``m`` earlier ones.

    ``shift`` is ``D`` (log scale, positive = worse), ``se`` is ``sqrt(Var)``,
    ``p_value`` the one-sided p-value of ``D > mu_0``; ``tau2`` and
    ``within_var`` the run-to-run and (recent) within-run variance estimates.
    """

    m: int
    k: int
    shift: float
    se: float
    statistic: float
    p_value: float
    tau2: float
    within_var: float
    margin_log: float
    #: ``s``: +1 when lower is better, -1 when higher is better.
    sign: int = 1

    @property
    def df(self) -> int:
        """Degrees of freedom of the reference distribution, ``m - 1``."""
        return self.m - 1

    @property
    def change(self) -> float:
        """The recent level against the earlier one as a relative change, ``e^(ȳ_R - ȳ_E) - 1``
        in the metric's own direction (negative for a drop in a higher-is-better metric)."""
        return math.expm1(self.shift * self.sign)


def _mean(xs: Sequence[float]) -> float:
    return math.fsum(xs) / len(xs)


def level_test(
    earlier: Sequence[Run],
    recent: Sequence[Run],
    *,
    higher_is_better: bool,
    margin_log: float = 0.0,
) -> LevelTest | None:
    """The test of the module docstring; ``None`` with fewer than :data:`MIN_EARLIER`
    earlier runs or no recent run."""
    from scipy import special

    m, k = len(earlier), len(recent)
    if m < MIN_EARLIER or k < 1:
        return None
    y_e = [r.level for r in earlier]
    mean_e = _mean(y_e)
    s2 = math.fsum((y - mean_e) ** 2 for y in y_e) / (m - 1)
    known = [r.within_var for r in earlier if r.within_var is not None]
    v_e = _mean(known) if known else 0.0
    v_r = _mean([r.within_var if r.within_var is not None else v_e for r in recent])
    tau2 = max(0.0, s2 - v_e)
    var = (tau2 + v_r) / k + s2 / m
    sign = -1 if higher_is_better else 1
    shift = sign * (_mean([r.level for r in recent]) - mean_e)
    excess = shift - margin_log
    if var <= 0.0:
        statistic = math.copysign(math.inf, excess) if excess != 0.0 else 0.0
        p = 0.0 if excess > 0.0 else 1.0
    else:
        statistic = excess / math.sqrt(var)
        p = float(special.stdtr(m - 1, -statistic))
    return LevelTest(
        m=m,
        k=k,
        shift=shift,
        se=math.sqrt(max(var, 0.0)),
        statistic=statistic,
        p_value=p,
        tau2=tau2,
        within_var=v_r,
        margin_log=margin_log,
        sign=sign,
    )


def critical_t(df: int, alpha: float) -> float:
    """``t_{df, 1 - alpha}``, the one-sided critical value."""
    from scipy import special

    return float(special.stdtrit(df, 1.0 - alpha))


def rejection_probability(df: int, noncentrality: float, *, alpha: float) -> float:
    """Rejection probability at noncentrality ``theta / sigma``:
    ``1 - F_{t'_df(noncentrality)}(t_{df, 1 - alpha})``."""
    from scipy import special

    crit = critical_t(df, alpha)
    below = float(special.nctdtr(df, noncentrality, crit))
    if not math.isfinite(below):  # the ufunc gives NaN at some large noncentralities
        from scipy import stats as sps

        return float(sps.nct.sf(crit, df, noncentrality))
    return 1.0 - below


@lru_cache(maxsize=4096)
def noncentrality(df: int, *, alpha: float, power: float = pw.DEFAULT_POWER) -> float:
    """``lambda*``: the noncentrality at which the test rejects with probability ``power``
    (cached: an audit asks for the same few ``(df, alpha)`` for every metric)."""
    from scipy import optimize, special

    if not 0.0 < alpha < 0.5 or not alpha < power < 1.0:
        raise ValueError(f"need 0 < alpha ({alpha!r}) < 0.5 and alpha < power ({power!r}) < 1")
    hi = 2.0 * (critical_t(df, alpha) + float(special.ndtri(power))) + 10.0
    return float(
        optimize.brentq(
            lambda nc: rejection_probability(df, nc, alpha=alpha) - power, 0.0, hi, xtol=1e-10
        )
    )


def mde_log_shift(test: LevelTest, *, alpha: float, power: float = pw.DEFAULT_POWER) -> float:
    """``theta*``: the log shift beyond the margin the test detects with probability ``power``."""
    return noncentrality(test.df, alpha=alpha, power=power) * test.se


def mde_relative(
    test: LevelTest,
    *,
    margin: float,
    higher_is_better: bool,
    alpha: float,
    power: float = pw.DEFAULT_POWER,
) -> float:
    """The relative degradation the test detects with probability ``power`` (margin ``margin``)."""
    theta = mde_log_shift(test, alpha=alpha, power=power)
    return pw.relative_degradation(theta, margin, higher_is_better=higher_is_better)

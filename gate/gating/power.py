"""Power of the gate's tests: the smallest degradation each one detects, and the samples it needs.

docs/metrics.md "Power". Every verdict rests on a one-sided test of "the
candidate is worse" at level ``alpha`` (:mod:`gate.gating.stats`). The
*minimum detectable effect* (MDE) of that test is the true degradation ``δ``
(``> 0`` means worse) that it rejects with probability ``power`` (default
0.8), given the sample count and the spread of the paired differences. A
critical bound below the MDE is a bound the test cannot enforce: a regression
of exactly the critical size would probably pass. Each test has three
functions: ``power_*`` (rejection probability at a given ``δ``), ``mde_*`` (its
inverse in ``δ``) and ``required_n_*`` (its inverse in the sample count).

* Paired bootstrap of the mean difference (:func:`gate.gating.stats.paired_bootstrap`,
  per-item scores). Its percentile distribution of resampled means is close to
  ``N(d̄, s²(n-1)/n²)`` (``s`` the sample sd of the differences), so it rejects
  when the t statistic ``T = d̄ √n / s`` exceeds ``c = z_{1-α} √((n-1)/n)``.
  For normal differences with mean ``δ`` and sd ``σ``, ``T`` is noncentral t
  with ``n - 1`` degrees of freedom and noncentrality ``δ √n / σ``:
  ``power = P[t'_{n-1}(δ√n/σ) > c]``. For large ``n`` the MDE tends to
  ``(z_{1-α} + z_{power}) σ / √n``.
* McNemar's exact test (:func:`gate.gating.stats.mcnemar`, per-item 0/1
  correctness). An unchanged build disagrees with its baseline on a rate
  ``ψ0`` of the items (the discordant-pair rate of the noise), half each way.
  A degradation ``δ`` adds pairs where only the candidate is worse: ``p_c =
  ψ0 / 2``, ``p_b = ψ0 / 2 + δ``, so ``δ = p_b - p_c`` is the drop of the
  mean correctness (Connor 1987's parameters) and the discordant rate is
  ``ψ = ψ0 + δ``. The discordant count is ``D ~ Binom(n, ψ)`` and, given
  ``D``, ``b ~ Binom(D, p_b / ψ)``. The test rejects when ``P[Binom(D, 1/2) >=
  b] < α``, i.e. ``b >= k_α(D)``; ``power = Σ_D P[D] P[b >= k_α(D) | D]``,
  summed exactly. In a comparison ``ψ0`` is estimated as ``2 c / n`` (``c``
  the pairs where only the candidate is better), which the degradation itself
  does not inflate.
* Wilcoxon's signed-rank test on per-pair log ratios
  (:func:`gate.gating.stats.paired_runs_test`, timings alternated with an
  in-session baseline). For log ratios ``X ~ N(θ, σ²)`` (``θ`` the log shift
  beyond the test's margin) the statistic ``T+ = #{i <= j: X_i + X_j > 0}`` has
  mean ``n p1 + C(n,2) p2`` and variance ``n p1(1-p1) + C(n,2) p2(1-p2) +
  2n(n-1)(p4 - p1 p2) + n(n-1)(n-2)(p3 - p2²)`` with ``p1 = Φ(θ/σ)``,
  ``p2 = Φ(√2 θ/σ)``, ``p3 = P[X1+X2 > 0, X1+X3 > 0]``, ``p4 = P[X1 > 0, X1+X2 > 0]``
  (Lehmann 1975, ch. 4). The critical value is the exact null quantile (scipy's
  choice up to 50 pairs) or the normal one; the power is the normal
  approximation of ``P[T+ >= t_α]`` with a continuity correction.
* Mann-Whitney U (:func:`gate.gating.stats.repeated_runs_test`, timings
  against stored baseline runs). For log timings ``N(μ, σ²)`` on each side and
  a candidate shifted by ``θ``, ``U = #{(i, j): Y_i > X_j}`` has mean ``m k p1``
  and variance ``m k [p1(1-p1) + (k-1)(p2 - p1²) + (m-1)(p2 - p1²)]`` with
  ``p1 = Φ(θ / σ√2)`` and ``p2 = P[Y > X1, Y > X2]`` (Lehmann 1975, ch. 2). The
  critical value is exact when a side has at most 8 runs (as scipy's test),
  else normal with a continuity correction.

For timings the tests shift the baseline by a relative ``margin`` (the warn
bound for CRITICAL); :func:`relative_degradation` turns a log shift beyond the
margin into the relative degradation it corresponds to.

The bivariate normal orthant probabilities are Owen's T function (Owen 1956)
and scipy's ``multivariate_normal``. docs/metrics.md "Power" and
tests/test_power.py check each MDE against a simulation of the gate's own test.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from numpy.typing import NDArray

from gate.gating.against import DEFAULT_AGAINST

# scipy.stats is imported inside the functions (see gate.gating.stats): input
# checks must answer without paying for it.

#: Default probability with which a degradation of the MDE is detected.
DEFAULT_POWER = 0.8
#: Largest sample count the ``required_n_*`` searches consider.
MAX_N = 1_000_000
#: Largest log shift the timing MDE search considers (a factor of e^5 ~ 148).
_MAX_LOG_SHIFT = 5.0
#: Largest pair count for which scipy's signed-rank test is exact (``method="auto"``).
_WILCOXON_EXACT_MAX = 50
#: scipy's Mann-Whitney U is exact when one side has at most this many runs (no ties).
_MWU_EXACT_MAX = 8


def _check(alpha: float, power: float) -> None:
    if not 0.0 < alpha < 0.5:
        raise ValueError(f"alpha {alpha!r} must be in (0, 0.5)")
    if not alpha < power < 1.0:
        raise ValueError(f"power {power!r} must be in (alpha, 1)")


def _z(q: float) -> float:
    """The standard normal quantile (scipy's ufunc, far cheaper than ``norm.ppf``)."""
    from scipy import special

    return float(special.ndtri(q))


def _solve(f: Callable[[float], float], hi: float) -> float:
    """The root of increasing ``f`` on ``(0, hi]``; ``inf`` when ``f(hi) < 0``."""
    from scipy import optimize

    if f(hi) < 0.0:
        return math.inf
    lo = hi * 1e-9
    if f(lo) >= 0.0:
        return lo
    return float(optimize.brentq(f, lo, hi, xtol=hi * 1e-7, rtol=1e-9))


def _smallest_n(meets: Callable[[int], bool], start: int, least: int) -> int | None:
    """The smallest ``n >= least`` with ``meets(n)``, assuming it stays true above (bisection)."""
    lo, hi = least - 1, max(start, least)
    while not meets(hi):
        lo, hi = hi, hi * 2
        if hi > MAX_N:
            return None if not meets(MAX_N) else _bisect(meets, lo, MAX_N)
    return _bisect(meets, lo, hi)


def _bisect(meets: Callable[[int], bool], lo: int, hi: int) -> int:
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if meets(mid):
            hi = mid
        else:
            lo = mid
    return hi


# ------------------------------------------------------------------ paired bootstrap


def power_paired_mean(n: int, sd: float, delta: float, *, alpha: float) -> float:
    """Rejection probability of the paired bootstrap at a true mean degradation ``delta``.

    ``P[t'_{n-1}(δ√n/σ) > z_{1-α} √((n-1)/n)]`` (module docstring); with ``sd = 0``
    every worse difference is detected (1 for ``delta > 0``); ``n < 2`` gives 0.
    """
    from scipy import special

    if n < 2:
        return 0.0
    if sd <= 0.0:
        return 1.0 if delta > 0.0 else 0.0
    crit = _z(1.0 - alpha) * math.sqrt((n - 1) / n)
    nc = delta * math.sqrt(n) / sd
    below = float(special.nctdtr(n - 1, nc, crit))
    if not math.isfinite(below):  # the ufunc gives NaN at some large nc; scipy.stats does not
        from scipy import stats as sps

        return float(sps.nct.sf(crit, n - 1, nc))
    return 1.0 - below


def mde_paired_mean(n: int, sd: float, *, alpha: float, power: float = DEFAULT_POWER) -> float:
    """MDE of the paired bootstrap of per-item scores, in the scores' unit.

    ``sd``: the sample sd of the per-item differences ``cand_i - ref_i``. ``n < 2``:
    ``inf`` (no spread, no test); ``sd = 0``: 0.
    """
    _check(alpha, power)
    if n < 2:
        return math.inf
    if sd <= 0.0:
        return 0.0
    guess = (_z(1.0 - alpha) + _z(power)) * sd / math.sqrt(n)
    return _solve(lambda d: power_paired_mean(n, sd, d, alpha=alpha) - power, 20.0 * guess)


def required_n_paired_mean(
    delta: float, sd: float, *, alpha: float, power: float = DEFAULT_POWER
) -> int | None:
    """Items the paired bootstrap needs to detect ``delta`` with ``power`` (``None``: > MAX_N)."""
    _check(alpha, power)
    if delta <= 0.0:
        raise ValueError(f"degradation {delta!r} must be > 0")
    if sd <= 0.0:
        return 2
    start = math.ceil(((_z(1.0 - alpha) + _z(power)) * sd / delta) ** 2)
    return _smallest_n(
        lambda n: power_paired_mean(n, sd, delta, alpha=alpha) >= power, max(start, 2), 2
    )


# ------------------------------------------------------------------ McNemar


@lru_cache(maxsize=64)
def _critical_b(n: int, alpha: float) -> NDArray[np.int64]:
    """``k_α(D)`` for ``D = 0 .. n``: the least ``b`` with ``P[Binom(D, 1/2) >= b] < α``
    (``D + 1``: none). Cached: the MDE search asks for the same ``n`` many times."""
    from scipy import stats as sps

    d = np.arange(n + 1, dtype=np.int64)
    k = np.asarray(sps.binom.isf(alpha, d, 0.5), dtype=np.int64) + 1
    k = np.where(sps.binom.sf(k - 1, d, 0.5) < alpha, k, k + 1)
    k = np.where((k > 0) & (sps.binom.sf(k - 2, d, 0.5) < alpha), k - 1, k)
    out = np.minimum(k, d + 1)
    out.flags.writeable = False
    return out


def _noise_rate(discordant: float) -> float:
    if not 0.0 <= discordant <= 1.0:
        raise ValueError(f"discordant rate {discordant!r} must be in [0, 1]")
    return discordant


def power_mcnemar(n: int, discordant: float, delta: float, *, alpha: float) -> float:
    """Rejection probability of McNemar's exact test (module docstring), summed exactly.

    ``discordant``: ``ψ0``, the discordant-pair rate of an unchanged build (noise);
    ``delta``: the degradation ``p_b - p_c`` of the mean correctness, at most ``1 - ψ0``.
    """
    from scipy import stats as sps

    psi0 = _noise_rate(discordant)
    if not 0.0 <= delta <= 1.0 - psi0 + 1e-12:
        raise ValueError(f"degradation {delta!r} must be in [0, 1 - {psi0!r}]")
    psi = min(psi0 + delta, 1.0)
    if n < 1 or psi <= 0.0:
        return 0.0
    d = np.arange(n + 1, dtype=np.int64)
    k = _critical_b(n, alpha)
    q = min((psi0 / 2.0 + delta) / psi, 1.0)
    hit = sps.binom.sf(k - 1, d, q)
    return float(np.clip(np.sum(sps.binom.pmf(d, n, psi) * hit), 0.0, 1.0))


def mde_mcnemar(n: int, discordant: float, *, alpha: float, power: float = DEFAULT_POWER) -> float:
    """MDE of McNemar's exact test, in correctness (a rate); ``inf`` when none is detectable.

    ``discordant``: ``ψ0``, the discordant-pair rate of an unchanged build; from a
    comparison, ``2 c / n`` (module docstring).
    """
    _check(alpha, power)
    hi = 1.0 - _noise_rate(discordant)
    if hi <= 0.0:
        return math.inf
    return _solve(lambda d: power_mcnemar(n, discordant, d, alpha=alpha) - power, hi)


def required_n_mcnemar(
    delta: float, discordant: float, *, alpha: float, power: float = DEFAULT_POWER
) -> int | None:
    """Items McNemar's test needs to detect ``delta`` with ``power`` (``None``: > MAX_N).

    The exact test's power is saw-toothed in ``n``; the count returned is the
    bisection's, a count at which the power is reached (Connor 1987's normal
    formula gives the starting point).
    """
    _check(alpha, power)
    psi0 = _noise_rate(discordant)
    if not 0.0 < delta <= 1.0 - psi0:
        raise ValueError(f"degradation {delta!r} must be in (0, 1 - {psi0!r}]")
    psi = psi0 + delta
    za, zb = _z(1.0 - alpha), _z(power)
    start = math.ceil(
        (za * math.sqrt(psi) + zb * math.sqrt(max(psi - delta**2, 0.0))) ** 2 / delta**2
    )
    return _smallest_n(
        lambda n: power_mcnemar(n, discordant, delta, alpha=alpha) >= power, max(start, 1), 1
    )


# ------------------------------------------------------------------ rank tests (timings)


def _owen_equal(h: float) -> float:
    """``P[Z1 < h, Z2 < h]`` for standard normals with correlation 1/2 (Owen's T)."""
    from scipy import special
    from scipy import stats as sps

    return float(sps.norm.cdf(h) - 2.0 * special.owens_t(h, 1.0 / math.sqrt(3.0)))


def _bvn(h: float, k: float, rho: float) -> float:
    """``P[Z1 < h, Z2 < k]`` for standard normals with correlation ``rho``."""
    from scipy import stats as sps

    cov = np.array([[1.0, rho], [rho, 1.0]])
    return float(sps.multivariate_normal(mean=[0.0, 0.0], cov=cov).cdf([h, k]))


@lru_cache(maxsize=256)
def _signed_rank_null(n: int) -> NDArray[np.float64]:
    """Exact null pmf of ``T+`` over ``0 .. n(n+1)/2``: the coefficients of ``Π (1 + x^i) / 2^n``."""
    counts = np.zeros(n * (n + 1) // 2 + 1, dtype=np.float64)
    counts[0] = 1.0
    for i in range(1, n + 1):
        counts[i:] = counts[i:] + counts[:-i].copy()
    return counts / 2.0**n


@lru_cache(maxsize=256)
def _rank_sum_null(m: int, k: int) -> NDArray[np.float64]:
    """Exact null pmf of Mann-Whitney's ``U`` over ``0 .. m k`` (Gaussian binomial coefficients).

    ``f(j, l)[u]``: the orderings of ``j`` candidate and ``l`` baseline values with
    ``U = u``. The largest value is a baseline one (``f(j, l - 1)``) or a candidate
    one, above all ``l`` baseline values (``f(j - 1, l)`` shifted by ``l``). Only
    the current ``l`` is kept: memory ``(m + 1)(m k + 1)``, whatever ``k``.
    """
    size = m * k + 1
    rows = np.zeros((m + 1, size), dtype=np.float64)
    rows[:, 0] = 1.0  # l = 0: U = 0 whatever j
    for ell in range(1, k + 1):
        for j in range(1, m + 1):  # rows[j - 1] already holds f(j - 1, l)
            rows[j, ell:] += rows[j - 1, : size - ell]
    counts = rows[m]
    return counts / counts.sum()


def _exact_critical(pmf: NDArray[np.float64], alpha: float) -> float:
    """The least ``t`` with ``P[T >= t] < α`` under ``pmf`` (``len(pmf)``: none)."""
    tail = np.cumsum(pmf[::-1])[::-1]  # tail[t] = P[T >= t]
    ok = np.nonzero(tail < alpha)[0]
    return float(ok[0]) if ok.size else float(pmf.size)


def _normal_tail(crit: float, mean: float, var: float) -> float:
    """``P[T >= crit]`` for an integer statistic, normal with a continuity correction."""
    from scipy import stats as sps

    if var <= 0.0:
        return 1.0 if mean >= crit else 0.0
    return float(sps.norm.sf((crit - 0.5 - mean) / math.sqrt(var)))


def power_signed_rank(n: int, sd: float, shift: float, *, alpha: float) -> float:
    """Rejection probability of the one-sided signed-rank test (module docstring).

    ``sd``: the sd ``σ`` of the per-pair log ratios; ``shift``: their true mean
    beyond the margin, ``θ``, in the worse direction.
    """
    from scipy import stats as sps

    if n < 2:
        return 0.0
    total = n * (n + 1) / 2.0
    if n <= _WILCOXON_EXACT_MAX:
        crit = _exact_critical(_signed_rank_null(n), alpha)
        if crit > total:
            return 0.0
    else:  # scipy: asymptotic, no continuity correction; reject when T+ > mean + z σ
        crit = (
            math.floor(total / 2.0 + _z(1.0 - alpha) * math.sqrt(n * (n + 1) * (2 * n + 1) / 24.0))
            + 1
        )
    if sd <= 0.0:
        return 1.0 if shift > 0.0 else 0.0
    a = shift / sd
    p1 = float(sps.norm.cdf(a))
    p2 = float(sps.norm.cdf(math.sqrt(2.0) * a))
    p3 = _owen_equal(math.sqrt(2.0) * a)
    p4 = _bvn(a, math.sqrt(2.0) * a, 1.0 / math.sqrt(2.0))
    pairs = n * (n - 1) / 2.0
    mean = n * p1 + pairs * p2
    var = (
        n * p1 * (1.0 - p1)
        + pairs * p2 * (1.0 - p2)
        + 2.0 * n * (n - 1) * (p4 - p1 * p2)
        + n * (n - 1) * (n - 2) * (p3 - p2 * p2)
    )
    return _normal_tail(crit, mean, var)


def power_rank_sum(m: int, k: int, sd: float, shift: float, *, alpha: float) -> float:
    """Rejection probability of the one-sided Mann-Whitney U test (module docstring).

    ``m`` candidate and ``k`` baseline runs; ``sd``: the sd ``σ`` of a side's log
    timings; ``shift``: the candidate's true log shift beyond the margin, ``θ``.
    """
    from scipy import stats as sps

    if m < 2 or k < 2:
        return 0.0  # the gate's test returns p = 1 below two runs a side
    mk = float(m * k)
    if min(m, k) <= _MWU_EXACT_MAX:
        crit = _exact_critical(_rank_sum_null(m, k), alpha)
        if crit > mk:
            return 0.0
    else:  # scipy: z = (U - mk/2 - 1/2) / σ0, reject when z > z_{1-α}
        sd0 = math.sqrt(mk * (m + k + 1) / 12.0)
        crit = math.floor(mk / 2.0 + 0.5 + _z(1.0 - alpha) * sd0) + 1
    if sd <= 0.0:
        return 1.0 if shift > 0.0 else 0.0
    a = shift / (sd * math.sqrt(2.0))
    p1 = float(sps.norm.cdf(a))
    p2 = _owen_equal(a)
    mean = mk * p1
    var = mk * (p1 * (1.0 - p1) + (k - 1 + m - 1) * (p2 - p1 * p1))
    return _normal_tail(crit, mean, var)


def mde_signed_rank(n: int, sd: float, *, alpha: float, power: float = DEFAULT_POWER) -> float:
    """MDE of the signed-rank test as a log shift ``θ`` beyond the margin (``inf``: none).

    ``sd``: the sample sd of the per-pair log ratios ``log(c_i / b_i)``.
    """
    _check(alpha, power)
    if n < 2:
        return math.inf
    if sd <= 0.0:
        return 0.0 if power_signed_rank(n, 1.0, 1e6, alpha=alpha) > 0.0 else math.inf
    return _solve(lambda t: power_signed_rank(n, sd, t, alpha=alpha) - power, _MAX_LOG_SHIFT)


def mde_rank_sum(m: int, k: int, sd: float, *, alpha: float, power: float = DEFAULT_POWER) -> float:
    """MDE of the Mann-Whitney U test as a log shift ``θ`` beyond the margin (``inf``: none).

    ``sd``: the pooled sample sd of the log timings of the two sides.
    """
    _check(alpha, power)
    if m < 2 or k < 2:
        return math.inf
    if sd <= 0.0:
        return 0.0 if power_rank_sum(m, k, 1.0, 1e6, alpha=alpha) > 0.0 else math.inf
    return _solve(lambda t: power_rank_sum(m, k, sd, t, alpha=alpha) - power, _MAX_LOG_SHIFT)


def required_n_signed_rank(
    shift: float, sd: float, *, alpha: float, power: float = DEFAULT_POWER
) -> int | None:
    """Pairs the signed-rank test needs to detect a log shift ``shift`` (``None``: > MAX_N)."""
    _check(alpha, power)
    if shift <= 0.0:
        raise ValueError(f"log shift {shift!r} must be > 0")
    start = math.ceil(((_z(1.0 - alpha) + _z(power)) * max(sd, 1e-12) / shift) ** 2 * math.pi / 3)
    return _smallest_n(
        lambda n: power_signed_rank(n, sd, shift, alpha=alpha) >= power, max(start, 2), 2
    )


def required_n_rank_sum(
    shift: float, sd: float, *, alpha: float, power: float = DEFAULT_POWER
) -> int | None:
    """Runs per side the Mann-Whitney U test needs to detect a log shift ``shift``."""
    _check(alpha, power)
    if shift <= 0.0:
        raise ValueError(f"log shift {shift!r} must be > 0")
    start = math.ceil(
        2 * ((_z(1.0 - alpha) + _z(power)) * max(sd, 1e-12) / shift) ** 2 * math.pi / 3
    )
    return _smallest_n(
        lambda n: power_rank_sum(n, n, sd, shift, alpha=alpha) >= power, max(start, 2), 2
    )


def relative_degradation(shift: float, margin: float, *, higher_is_better: bool) -> float:
    """The relative degradation a log shift ``shift`` beyond a relative ``margin`` is.

    Lower is better (times): the candidate is ``(1 + margin) e^θ`` times the
    baseline, a degradation of ``(1 + margin) e^θ - 1``. Higher is better
    (rates): ``(1 - margin) e^{-θ}`` times, a degradation of ``1 - (1 - margin) e^{-θ}``.
    """
    if math.isinf(shift):
        return 1.0 if higher_is_better else math.inf
    if higher_is_better:
        return 1.0 - (1.0 - margin) * math.exp(-shift)
    return (1.0 + margin) * math.exp(shift) - 1.0


def log_shift(degradation: float, margin: float, *, higher_is_better: bool) -> float:
    """Inverse of :func:`relative_degradation`: the log shift beyond ``margin`` of a degradation."""
    if higher_is_better:
        return math.log(1.0 - margin) - math.log(1.0 - degradation)
    return math.log(1.0 + degradation) - math.log(1.0 + margin)


# ------------------------------------------------------------------ statements


@dataclass(frozen=True)
class PowerStatement:
    """What the test behind one verdict could detect.

    ``mde`` and ``critical`` are on the bound's scale: the metric's unit when
    ``mode == "absolute"``, a fraction of ``|reference|`` (``reference``) when
    ``"relative"``. ``mde`` is ``inf`` when no degradation is detectable at
    ``power``. ``n`` is the sample count of the test (runs per side, the
    smaller, for timings).
    """

    metric: str
    slice: str | None
    n: int
    mde: float
    critical: float
    mode: str
    power: float
    alpha: float
    test: str
    higher_is_better: bool
    against: str = DEFAULT_AGAINST
    #: ``|r|``, the reference value's magnitude (converts between the two scales).
    reference: float = 1.0

    @property
    def key(self) -> str:
        """``metric`` or ``metric[slice]``."""
        return f"{self.metric}[{self.slice}]" if self.slice else self.metric

    @property
    def underpowered(self) -> bool:
        """The critical bound is below the MDE: a critical regression would probably pass."""
        return self.critical < self.mde

    @property
    def mde_value(self) -> float:
        """The MDE in the metric's unit (``inf``: none detectable)."""
        return self.mde * self.reference if self.mode == "relative" else self.mde

    @property
    def mde_relative(self) -> float | None:
        """The MDE as a fraction of ``|reference|``; ``None`` at reference 0."""
        if self.mode == "relative":
            return self.mde
        return self.mde / self.reference if self.reference > 0.0 else None

    def _amount(self, x: float) -> str:
        if self.mode == "relative":
            return f"{x * 100:.3g}%"
        text = f"{x:#.2g}"
        return text[:-1] if text.endswith(".") else text

    @property
    def message(self) -> str:
        """One line: ``fidelity.cga: n = 12 can only detect a drop of 0.18; the critical
        bound is 0.10 - UNDERPOWERED`` (or what it detects, when not underpowered)."""
        word = "drop" if self.higher_is_better else "rise"
        if math.isinf(self.mde):
            can = f"n = {self.n} cannot detect any {word} with {self.power:.0%} power"
        elif self.underpowered:
            can = f"n = {self.n} can only detect a {word} of {self._amount(self.mde)}"
        else:
            can = (
                f"n = {self.n} detects a {word} of {self._amount(self.mde)}"
                f" with {self.power:.0%} power"
            )
        text = f"{self.key}: {can}; the critical bound is {self._amount(self.critical)}"
        return text + (" - UNDERPOWERED" if self.underpowered else "")

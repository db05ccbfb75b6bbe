"""Statistics behind a verdict: seeded bootstrap CIs and one-sided paired and repeated-run tests.

docs/metrics.md "Severity and statistics": a metric's verdict escalates only when the
evidence supports it. Each test here answers one question, "is the candidate
*worse* than the baseline?", one-sided, and returns a p-value for it
(``p_worse``) together with an effect size and a confidence interval.

* :func:`mcnemar` — paired 0/1 correctness (McNemar 1947, exact form): under
  H0 the discordant pairs split 50/50, so the count ``b`` of pairs where only
  the candidate is worse is Binomial(b + c, 1/2).
* :func:`paired_bootstrap` — paired real scores (Efron & Tibshirani 1993,
  ch. 16): resample items with replacement, recompute the mean difference.
* :func:`repeated_runs_test` — unpaired repeated timings: Mann-Whitney U
  (Mann & Whitney 1947) for "candidate stochastically worse", plus a bootstrap
  CI of the relative change of the median.
* :func:`paired_runs_test` — repeated timings taken in pairs (one request of
  each build per round, the order drawn per round): Wilcoxon's signed-rank test (Wilcoxon 1945) on the per-pair
  log ratios ``log(c_i / b_i)``, so a slow stretch of the machine that lasts
  longer than one pair cancels out of every ratio.

Both repeated-run tests take a ``margin``: the null hypothesis is then "the
candidate is at most ``margin`` (relative) worse", not "no worse". The gate
uses it to block a build (critical) only when the runs show it worse by more
than the warn bound, which keeps a noisy runner from blocking a build whose
median merely wobbled past the critical bound.
* :func:`wilson_interval` — the Wilson (1927) score interval of a proportion.

Every resampling is seeded, so the same inputs always give the same verdict.
The heavy lifting is scipy's (``scipy.stats.bootstrap``, ``binomtest``,
``mannwhitneyu``); this module only fixes the conventions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

# scipy.stats is imported inside the functions that use it: importing it costs more
# than the rest of a ``gate`` start, and input checks (``gate run --dry-run``, a
# misspelt ``[tiers.*]`` key) must answer in well under a second without it.

Statistic = Callable[..., Any]

#: Default number of bootstrap resamples.
N_RESAMPLES = 2000


@dataclass(frozen=True)
class PairedResult:
    """Paired comparison of per-item scores.

    ``delta = stat(cand - base)`` (raw units, not direction-signed); ``ci`` its
    percentile bootstrap interval; ``p_worse`` the one-sided bootstrap p-value
    of "the candidate is worse" in the given direction.
    """

    delta: float
    ci: tuple[float, float]
    p_worse: float
    n: int


@dataclass(frozen=True)
class McNemarResult:
    """McNemar's exact test on paired binary outcomes.

    ``b``: pairs where only the candidate is worse; ``c``: pairs where only the
    candidate is better. ``p_value`` is two-sided, ``p_worse`` is one-sided
    (``P[Binom(b + c, 1/2) >= b]``).
    """

    b: int
    c: int
    p_value: float
    p_worse: float
    n: int


@dataclass(frozen=True)
class RepeatedResult:
    """Unpaired comparison of repeated runs.

    ``rel_change_median = median(cand) / median(base) - 1`` (raw direction: a
    positive value is an increase); ``ci`` its percentile bootstrap interval;
    ``p_worse`` the one-sided Mann-Whitney U p-value of "the candidate is worse".
    """

    rel_change_median: float
    ci: tuple[float, float]
    p_worse: float
    n_cand: int
    n_base: int


def _as_1d(values: ArrayLike, what: str) -> NDArray[np.float64]:
    arr = np.asarray(values, dtype=np.float64).reshape(-1)
    if arr.size == 0:
        raise ValueError(f"{what}: no samples")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{what}: non-finite samples")
    return arr


def _ci(res: Any) -> tuple[float, float]:
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def bootstrap_ci(
    samples: ArrayLike,
    *,
    stat: Statistic = np.mean,
    confidence: float = 0.95,
    n_resamples: int = N_RESAMPLES,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap confidence interval of ``stat(samples)``.

    ``stat`` must accept ``axis=`` (numpy reductions do). With one sample, or
    all samples equal, the interval collapses to the point value.
    """
    from scipy import stats as sps

    x = _as_1d(samples, "bootstrap_ci")
    point = float(stat(x, axis=-1))
    if x.size < 2 or np.ptp(x) == 0.0:
        return point, point
    res = sps.bootstrap(
        (x,),
        stat,
        n_resamples=n_resamples,
        confidence_level=confidence,
        method="percentile",
        vectorized=True,
        rng=np.random.default_rng(seed),
    )
    return _ci(res)


def paired_bootstrap(
    cand: ArrayLike,
    base: ArrayLike,
    *,
    higher_is_better: bool = True,
    stat: Statistic = np.mean,
    confidence: float = 0.95,
    n_resamples: int = N_RESAMPLES,
    seed: int = 0,
) -> PairedResult:
    """Paired bootstrap of ``stat(cand_i - base_i)`` over items.

    Items are resampled with replacement (pairs kept together). With
    ``w = -delta*`` when higher is better (``+delta*`` otherwise) for each
    resampled statistic ``delta*``, the one-sided p-value of "worse" is
    ``(1 + #{w <= 0}) / (B + 1)``: the smallest level at which a one-sided
    percentile interval excludes "not worse", and never below ``2^-m``, ``m`` the
    pairs that differ: the smallest one-sided p-value the exact sign-flip
    (permutation) test can reach on ``m`` pairs, all moved the same way. A
    bootstrap of a few pairs has too few distinct resamples to go lower: on one
    pair every resample is that pair, and the floor makes its p-value 1/2.
    """
    from scipy import stats as sps

    c = _as_1d(cand, "paired_bootstrap cand")
    b = _as_1d(base, "paired_bootstrap base")
    if c.shape != b.shape:
        raise ValueError(f"paired_bootstrap: {c.size} candidate vs {b.size} baseline samples")
    diff = c - b
    delta = float(stat(diff, axis=-1))
    sign = -1.0 if higher_is_better else 1.0
    floor = 0.5 ** int(np.count_nonzero(diff))
    if diff.size < 2 or np.ptp(diff) == 0.0:
        worse = sign * delta > 0
        p = max(1.0 / (n_resamples + 1), floor) if worse else 1.0
        return PairedResult(delta=delta, ci=(delta, delta), p_worse=p, n=int(diff.size))
    res = sps.bootstrap(
        (diff,),
        stat,
        n_resamples=n_resamples,
        confidence_level=confidence,
        method="percentile",
        vectorized=True,
        rng=np.random.default_rng(seed),
    )
    boot = np.asarray(res.bootstrap_distribution, dtype=np.float64)
    p = (1.0 + float(np.count_nonzero(sign * boot <= 0.0))) / (boot.size + 1.0)
    return PairedResult(delta=delta, ci=_ci(res), p_worse=min(1.0, max(p, floor)), n=int(diff.size))


def _binary(values: ArrayLike, what: str) -> NDArray[np.bool_]:
    arr = _as_1d(values, what)
    if not np.all((arr == 0.0) | (arr == 1.0)):
        raise ValueError(f"{what}: samples must be 0 or 1")
    return arr.astype(bool)


def mcnemar(
    cand_correct: ArrayLike, base_correct: ArrayLike, *, higher_is_better: bool = True
) -> McNemarResult:
    """McNemar's exact test: a binomial test on the discordant pairs.

    With ``higher_is_better`` (1 = correct), ``b = #{base 1, cand 0}`` and
    ``c = #{base 0, cand 1}``; for a lower-is-better indicator (1 = a flip or
    an error) the roles swap so that ``b`` always counts pairs where the
    candidate alone is worse. ``p_worse = P[Binom(b + c, 1/2) >= b]``; with no
    discordant pair both p-values are 1.
    """
    from scipy import stats as sps

    c_arr = _binary(cand_correct, "mcnemar cand")
    b_arr = _binary(base_correct, "mcnemar base")
    if c_arr.shape != b_arr.shape:
        raise ValueError(f"mcnemar: {c_arr.size} candidate vs {b_arr.size} baseline samples")
    good_c = c_arr if higher_is_better else ~c_arr
    good_b = b_arr if higher_is_better else ~b_arr
    b = int(np.count_nonzero(good_b & ~good_c))
    c = int(np.count_nonzero(~good_b & good_c))
    if b + c == 0:
        return McNemarResult(b=0, c=0, p_value=1.0, p_worse=1.0, n=int(c_arr.size))
    two_sided = float(sps.binomtest(b, b + c, 0.5).pvalue)
    worse = float(sps.binomtest(b, b + c, 0.5, alternative="greater").pvalue)
    return McNemarResult(b=b, c=c, p_value=two_sided, p_worse=worse, n=int(c_arr.size))


def paired_binary_ci(
    cand: ArrayLike,
    base: ArrayLike,
    *,
    confidence: float = 0.95,
    n_resamples: int = N_RESAMPLES,
    seed: int = 0,
) -> tuple[float, float]:
    """Paired bootstrap interval of ``mean(cand) - mean(base)`` for 0/1 outcomes.

    Each item's difference is -1, 0 or +1, so resampling ``n`` items with
    replacement is a multinomial draw of the three counts; the resampled
    difference is ``(n_plus - n_minus) / n``. This is the same bootstrap
    distribution as :func:`paired_bootstrap` gives, drawn in count form (fast
    for thousands of questions); the interval is its percentile interval.
    """
    c = _binary(cand, "paired_binary_ci cand").astype(np.int8)
    b = _binary(base, "paired_binary_ci base").astype(np.int8)
    if c.shape != b.shape:
        raise ValueError(f"paired_binary_ci: {c.size} candidate vs {b.size} baseline samples")
    n = int(c.size)
    plus = int(np.count_nonzero(c > b))
    minus = int(np.count_nonzero(c < b))
    delta = (plus - minus) / n
    if plus + minus == 0:
        return delta, delta
    rng = np.random.default_rng(seed)
    draws = rng.multinomial(n, [plus / n, minus / n, (n - plus - minus) / n], size=n_resamples)
    boot = (draws[:, 0] - draws[:, 1]) / n
    tail = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(boot, [tail, 1.0 - tail])
    return float(lo), float(hi)


def _median_ratio_of_logs(log_ratio: NDArray[np.float64], axis: int = -1) -> Any:
    return np.expm1(np.median(log_ratio, axis=axis))


def _median_ratio(c: NDArray[np.float64], b: NDArray[np.float64], axis: int = -1) -> Any:
    return np.median(c, axis=axis) / np.median(b, axis=axis) - 1.0


def _worse_factor(margin: float, higher_is_better: bool) -> float:
    """The factor a baseline value is scaled by to be ``margin`` (relative) worse."""
    if margin < 0.0 or (higher_is_better and margin >= 1.0):
        raise ValueError(f"relative margin {margin!r} must be >= 0 (and < 1 when higher is better)")
    return 1.0 - margin if higher_is_better else 1.0 + margin


def repeated_runs_test(
    cand: ArrayLike,
    base: ArrayLike,
    *,
    higher_is_better: bool,
    margin: float = 0.0,
    confidence: float = 0.95,
    n_resamples: int = 1000,
    seed: int = 0,
) -> RepeatedResult:
    """Compare unpaired repeated runs (timings, throughputs).

    ``p_worse`` is the exact-or-asymptotic Mann-Whitney U p-value (scipy picks)
    of the one-sided alternative "candidate values are stochastically larger"
    (lower is better, e.g. latency) or "smaller" (higher is better, e.g.
    tokens/s) than the baseline's scaled by ``1 ± margin``: with ``margin =
    0.1`` a latency must be shown more than 10 % above the baseline's. ``ci``
    bootstraps both samples independently (it does not depend on ``margin``).
    Medians must be positive for the relative change to mean anything.
    """
    from scipy import stats as sps

    c = _as_1d(cand, "repeated_runs_test cand")
    b = _as_1d(base, "repeated_runs_test base")
    med_b = float(np.median(b))
    if med_b == 0.0:
        raise ValueError("repeated_runs_test: baseline median is 0; a relative change is undefined")
    rel = float(_median_ratio(c, b))
    alternative = "less" if higher_is_better else "greater"
    shifted = b * _worse_factor(margin, higher_is_better)
    if c.size < 2 or b.size < 2:
        p = 1.0
    else:
        p = float(sps.mannwhitneyu(c, shifted, alternative=alternative).pvalue)
    if c.size < 2 or b.size < 2 or (np.ptp(c) == 0.0 and np.ptp(b) == 0.0):
        ci = (rel, rel)
    else:
        res = sps.bootstrap(
            (c, b),
            _median_ratio,
            n_resamples=n_resamples,
            confidence_level=confidence,
            method="percentile",
            vectorized=True,
            rng=np.random.default_rng(seed),
        )
        ci = _ci(res)
    return RepeatedResult(
        rel_change_median=rel, ci=ci, p_worse=p, n_cand=int(c.size), n_base=int(b.size)
    )


def paired_runs_test(
    cand: ArrayLike,
    base: ArrayLike,
    *,
    higher_is_better: bool,
    margin: float = 0.0,
    confidence: float = 0.95,
    n_resamples: int = 1000,
    seed: int = 0,
) -> RepeatedResult:
    """Compare repeated runs taken in pairs: ``cand[i]`` beside ``base[i]``.

    The statistic is the per-pair log ratio ``r_i = log(c_i / b_i)``. A machine
    that runs ``s`` times slower for a while multiplies both members of the
    pairs it hits by ``s``, which cancels in ``r_i``; unpaired tests see the
    same stretch as noise on both sides. ``p_worse`` is Wilcoxon's signed-rank
    p-value (exact for small ``n``, scipy picks) of the one-sided alternative
    "``r_i - log(1 ± margin)`` is centred above 0" (lower is better) or below
    0 (higher is better); pairs with a zero difference are dropped (Wilcoxon's
    convention), and all-zero differences give ``p = 1``. ``rel_change_median``
    is ``median(cand) / median(base) - 1`` as in :func:`repeated_runs_test`;
    ``ci`` is the percentile bootstrap interval of ``exp(median(r)) - 1`` over
    resampled pairs. Values must be positive (times, rates).
    """
    from scipy import stats as sps

    c = _as_1d(cand, "paired_runs_test cand")
    b = _as_1d(base, "paired_runs_test base")
    if c.shape != b.shape:
        raise ValueError(f"paired_runs_test: {c.size} candidate vs {b.size} baseline runs")
    if np.any(c <= 0.0) or np.any(b <= 0.0):
        raise ValueError("paired_runs_test: runs must be positive for a log ratio")
    rel = float(_median_ratio(c, b))
    log_ratio = np.log(c) - np.log(b)
    shifted = log_ratio - np.log(_worse_factor(margin, higher_is_better))
    alternative = "less" if higher_is_better else "greater"
    if c.size < 2 or not np.any(shifted != 0.0):
        p = 1.0
    else:
        p = float(sps.wilcoxon(shifted, alternative=alternative).pvalue)
    ci = bootstrap_ci(
        log_ratio,
        stat=_median_ratio_of_logs,
        confidence=confidence,
        n_resamples=n_resamples,
        seed=seed,
    )
    return RepeatedResult(
        rel_change_median=rel, ci=ci, p_worse=p, n_cand=int(c.size), n_base=int(b.size)
    )

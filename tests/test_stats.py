"""gate.gating.stats against independent computations (explicit loops, textbook formulas)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as sps

from gate.gating import stats


def _discordant(cand: list[int], base: list[int]) -> tuple[int, int]:
    """(base right & cand wrong, base wrong & cand right), counted by hand."""
    b = c = 0
    for x, y in zip(cand, base, strict=True):
        if y == 1 and x == 0:
            b += 1
        elif y == 0 and x == 1:
            c += 1
    return b, c


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1), st.integers(0, 1)), min_size=1, max_size=80))
def test_mcnemar_is_binomtest_on_discordant_pairs(pairs: list[tuple[int, int]]) -> None:
    cand = [p[0] for p in pairs]
    base = [p[1] for p in pairs]
    b, c = _discordant(cand, base)
    res = stats.mcnemar(cand, base)
    assert (res.b, res.c, res.n) == (b, c, len(pairs))
    if b + c == 0:
        assert res.p_value == res.p_worse == 1.0
    else:
        assert res.p_value == pytest.approx(sps.binomtest(b, b + c).pvalue)
        assert res.p_worse == pytest.approx(sps.binomtest(b, b + c, alternative="greater").pvalue)
        # The one-sided tail by explicit summation: P[Binom(b + c, 1/2) >= b].
        tail = sum(math.comb(b + c, k) for k in range(b, b + c + 1)) / 2 ** (b + c)
        assert res.p_worse == pytest.approx(tail)


def test_mcnemar_lower_is_better_swaps_roles() -> None:
    flips_cand = [1, 1, 1, 0, 0, 1]
    flips_base = [0, 0, 0, 0, 1, 1]
    res = stats.mcnemar(flips_cand, flips_base, higher_is_better=False)
    # candidate alone flips on 3 items (worse), baseline alone on 1 (candidate better)
    assert (res.b, res.c) == (3, 1)
    assert res.p_worse == pytest.approx(5 / 16)


def test_mcnemar_rejects_non_binary() -> None:
    with pytest.raises(ValueError, match="0 or 1"):
        stats.mcnemar([0.5, 1], [1, 1])
    with pytest.raises(ValueError, match="candidate vs"):
        stats.mcnemar([1, 1, 0], [1, 1])


def test_bootstrap_ci_is_seeded_and_close_to_the_normal_interval() -> None:
    rng = np.random.default_rng(7)
    x = rng.normal(5.0, 2.0, 400)
    lo, hi = stats.bootstrap_ci(x, seed=3)
    assert (lo, hi) == stats.bootstrap_ci(x, seed=3)
    half = 1.96 * x.std(ddof=1) / math.sqrt(x.size)
    assert lo < x.mean() < hi
    assert (hi - lo) / 2 == pytest.approx(half, rel=0.15)
    assert stats.bootstrap_ci([2.0, 2.0, 2.0]) == (2.0, 2.0)


def test_bootstrap_ci_other_statistic() -> None:
    x = np.arange(1.0, 101.0)
    lo, hi = stats.bootstrap_ci(x, stat=np.median)
    assert lo < 50.5 < hi


def test_paired_bootstrap_delta_direction_and_p() -> None:
    rng = np.random.default_rng(0)
    base = rng.uniform(0.5, 1.0, 100)
    worse = base - 0.05 + rng.normal(0, 0.02, 100)
    res = stats.paired_bootstrap(worse, base, higher_is_better=True)
    assert res.delta == pytest.approx(float(np.mean(worse - base)))
    assert res.ci[0] < res.delta < res.ci[1] < 0
    assert res.p_worse < 0.001
    # same data, lower is better: the candidate is now better
    assert stats.paired_bootstrap(worse, base, higher_is_better=False).p_worse > 0.99
    # identical scores: no evidence at all
    same = stats.paired_bootstrap(base, base)
    assert same.delta == 0.0 and same.p_worse == 1.0


def test_paired_bootstrap_p_is_the_share_of_resamples_not_worse() -> None:
    """Independent recomputation with numpy's own resampling of the same seed stream."""
    rng = np.random.default_rng(1)
    base = rng.normal(0.0, 1.0, 30)
    cand = base + rng.normal(-0.3, 1.0, 30)
    res = stats.paired_bootstrap(cand, base, n_resamples=4000)
    diff = cand - base
    own = np.random.default_rng(99)
    boots = diff[own.integers(0, diff.size, (4000, diff.size))].mean(axis=1)
    expected = (1 + np.count_nonzero(boots >= 0)) / 4001
    assert res.p_worse == pytest.approx(expected, abs=0.02)


def _sign_flip_p(diff: np.ndarray) -> float:
    """The exact one-sided sign-flip p-value of "the mean difference is below 0": the
    share of the 2^m sign assignments of the m nonzero differences whose mean is at
    least as low as the observed one."""
    moved = diff[diff != 0]
    observed = moved.mean()
    m = moved.size
    signs = np.array([[1 if (k >> i) & 1 else -1 for i in range(m)] for k in range(2**m)])
    means = (signs * np.abs(moved)).mean(axis=1)
    return float(np.count_nonzero(means <= observed + 1e-12)) / 2**m


@pytest.mark.parametrize("m", [1, 2, 4, 6])
def test_a_few_moved_pairs_are_never_more_significant_than_a_sign_flip_test_allows(
    m: int,
) -> None:
    """Every one of m pairs worse (by different amounts): the bootstrap alone would say
    p = 1 / (B + 1); the floor is the exact sign-flip test's p-value, 2^-m."""
    base = np.full(m + 3, 0.8)
    cand = base.copy()
    cand[:m] -= np.linspace(0.1, 0.3, m)  # m pairs move, the others do not
    res = stats.paired_bootstrap(cand, base)
    assert _sign_flip_p(cand - base) == pytest.approx(0.5**m)
    assert res.p_worse == pytest.approx(0.5**m)
    one = stats.paired_bootstrap([0.5], [0.9])  # a slice of one item
    assert one.p_worse == 0.5


def test_many_moved_pairs_keep_the_bootstraps_p_value() -> None:
    rng = np.random.default_rng(3)
    base = rng.uniform(0.5, 1.0, 40)
    cand = base - 0.2 - rng.uniform(0, 0.05, 40)
    assert stats.paired_bootstrap(cand, base).p_worse == pytest.approx(1 / 2001)


def test_paired_binary_ci_agrees_with_the_generic_paired_bootstrap() -> None:
    rng = np.random.default_rng(2)
    base = (rng.random(300) < 0.7).astype(float)
    cand = base.copy()
    cand[rng.choice(300, 30, replace=False)] = 0.0
    fast = stats.paired_binary_ci(cand, base)
    generic = stats.paired_bootstrap(cand, base).ci
    assert fast == pytest.approx(generic, abs=0.01)
    assert stats.paired_binary_ci(base, base) == (0.0, 0.0)


def test_repeated_runs_test_matches_mann_whitney_and_median_ratio() -> None:
    rng = np.random.default_rng(4)
    base = rng.lognormal(0.0, 0.1, 20)
    cand = 1.3 * rng.lognormal(0.0, 0.1, 20)
    res = stats.repeated_runs_test(cand, base, higher_is_better=False)
    assert res.rel_change_median == pytest.approx(np.median(cand) / np.median(base) - 1)
    assert res.p_worse == pytest.approx(sps.mannwhitneyu(cand, base, alternative="greater").pvalue)
    assert res.p_worse < 0.001
    assert res.ci[0] < res.rel_change_median < res.ci[1]
    # throughput-like (higher is better): a rise is an improvement
    assert stats.repeated_runs_test(cand, base, higher_is_better=True).p_worse > 0.99


def test_repeated_runs_test_refuses_zero_baseline_median() -> None:
    with pytest.raises(ValueError, match="median is 0"):
        stats.repeated_runs_test([1.0, 2.0], [0.0, 0.0, 0.0], higher_is_better=False)


@pytest.mark.parametrize(
    ("bad", "word"),
    [([], "no samples"), ([1.0, float("nan")], "non-finite"), ([float("inf")], "non-finite")],
)
def test_bad_samples_are_refused(bad: list[float], word: str) -> None:
    with pytest.raises(ValueError, match=f"bootstrap_ci: {word}"):
        stats.bootstrap_ci(bad)


def _signed_rank_p_by_enumeration(d: np.ndarray) -> float:
    """Exact one-sided p of Wilcoxon's T+ ("greater"): all 2^n sign patterns, by hand."""
    ranks = sps.rankdata(np.abs(d))
    observed = ranks[d > 0].sum()
    n = d.size
    hits = 0
    for mask in range(2**n):
        t = sum(ranks[i] for i in range(n) if mask >> i & 1)
        hits += t >= observed - 1e-9
    return hits / 2**n


def test_paired_runs_test_is_the_signed_rank_test_of_shifted_log_ratios() -> None:
    rng = np.random.default_rng(7)
    machine = np.exp(rng.uniform(0.0, 1.0, 10))  # drift shared by both members of a pair
    base = machine * rng.lognormal(0.0, 0.03, 10)
    cand = 1.2 * machine * rng.lognormal(0.0, 0.03, 10)
    res = stats.paired_runs_test(cand, base, higher_is_better=False, margin=0.1)
    shifted = np.log(cand / base) - math.log(1.1)
    assert res.p_worse == pytest.approx(_signed_rank_p_by_enumeration(shifted))
    assert res.p_worse < 0.01
    assert res.rel_change_median == pytest.approx(np.median(cand) / np.median(base) - 1)
    ratio = float(np.exp(np.median(np.log(cand / base))) - 1)
    assert res.ci[0] <= ratio <= res.ci[1]
    # 20 % slower is not shown to be more than 30 % slower
    assert stats.paired_runs_test(cand, base, higher_is_better=False, margin=0.3).p_worse > 0.5
    # throughput (higher is better): the same numbers are an improvement
    assert stats.paired_runs_test(cand, base, higher_is_better=True).p_worse > 0.99
    # tokens/s 20 % lower, tested against a 10 % bound: significant
    thr = stats.paired_runs_test(1 / cand, 1 / base, higher_is_better=True, margin=0.1)
    assert thr.p_worse == pytest.approx(res.p_worse)


def test_paired_runs_test_identical_runs_and_bad_input() -> None:
    same = stats.paired_runs_test([1.0, 2.0, 3.0], [1.0, 2.0, 3.0], higher_is_better=False)
    assert same.p_worse == 1.0 and same.ci == (0.0, 0.0)
    with pytest.raises(ValueError, match="positive"):
        stats.paired_runs_test([1.0, 0.0], [1.0, 1.0], higher_is_better=False)
    with pytest.raises(ValueError, match="baseline runs"):
        stats.paired_runs_test([1.0, 2.0], [1.0, 2.0, 3.0], higher_is_better=False)
    with pytest.raises(ValueError, match="margin"):
        stats.repeated_runs_test([1.0, 2.0], [1.0, 2.0], higher_is_better=True, margin=1.0)

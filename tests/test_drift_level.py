"""The drift audit's level test (gate.gating.drift_level) against independent computations:
the textbook prediction interval, scipy's noncentral t, and simulations of the model."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from gate.gating import drift_level as dl
from gate.gating import power as pw


def _runs(levels: np.ndarray, within: float | None = None) -> list[dl.Run]:
    return [dl.Run(float(y), within) for y in levels]


@pytest.mark.parametrize("k", [1, 3])
def test_without_summaries_it_is_the_textbook_prediction_interval(k: int) -> None:
    """No within-run summaries: T = (mean of k new - mean of m old) / (S sqrt(1/k + 1/m)),
    Student's t with m - 1 degrees of freedom (scipy.stats.t)."""
    rng = np.random.default_rng(3)
    old, new = rng.normal(0.0, 0.1, 7), rng.normal(0.12, 0.1, k)
    got = dl.level_test(_runs(old), _runs(new), higher_is_better=False, margin_log=0.02)
    assert got is not None
    s = float(np.std(old, ddof=1))
    t = (new.mean() - old.mean() - 0.02) / (s * math.sqrt(1 / k + 1 / old.size))
    assert got.statistic == pytest.approx(t, rel=1e-12)
    assert got.p_value == pytest.approx(float(sps.t.sf(t, old.size - 1)), rel=1e-9)
    # higher is better: the same numbers read the other way round
    up = dl.level_test(_runs(old), _runs(new), higher_is_better=True)
    assert up is not None and up.shift == pytest.approx(old.mean() - new.mean())


def test_within_run_error_is_a_floor_and_a_noisy_run_widens_the_interval() -> None:
    old = np.array([0.0, 0.001, -0.001, 0.0005])  # runs that agree closer than their samples
    tight = dl.level_test(_runs(old, 1e-4), _runs(np.array([0.05]), 1e-4), higher_is_better=False)
    assert tight is not None
    # run-to-run estimate floored at 0; the new run's own error 1e-4 plus S^2/m
    s2 = float(np.var(old, ddof=1))
    assert tight.tau2 == 0.0
    assert tight.se == pytest.approx(math.sqrt(1e-4 + s2 / 4))
    noisy = dl.level_test(_runs(old, 1e-4), _runs(np.array([0.05]), 4e-4), higher_is_better=False)
    assert noisy is not None and noisy.p_value > tight.p_value
    # a recent run without a summary counts as the earlier runs' mean
    unknown = dl.level_test(_runs(old, 1e-4), _runs(np.array([0.05])), higher_is_better=False)
    assert unknown is not None and unknown.se == pytest.approx(tight.se)


def test_too_few_earlier_runs_is_no_test() -> None:
    assert dl.level_test(_runs(np.zeros(2)), _runs(np.ones(1)), higher_is_better=False) is None
    flat = dl.level_test(_runs(np.zeros(3)), _runs(np.ones(1) * 0.1), higher_is_better=False)
    assert flat is not None and flat.p_value == 0.0  # constant history, a shift is certain


@pytest.mark.parametrize(("df", "alpha"), [(2, 0.05), (6, 0.0167), (20, 0.01)])
def test_power_and_noncentrality_match_scipy_nct(df: int, alpha: float) -> None:
    crit = float(sps.t.ppf(1 - alpha, df))
    for nc in (0.0, 1.0, 3.5):
        assert dl.rejection_probability(df, nc, alpha=alpha) == pytest.approx(
            float(sps.nct.sf(crit, df, nc)) if nc else alpha, abs=1e-9
        )
    lam = dl.noncentrality(df, alpha=alpha, power=0.8)
    assert float(sps.nct.sf(crit, df, lam)) == pytest.approx(0.8, abs=1e-7)


def test_mde_is_detected_with_the_stated_power_in_a_simulation() -> None:
    """Levels N(0, sigma^2) and a new run shifted by the MDE (beyond a 5 % margin): the test
    rejects in 80 % of 20 000 simulated histories (exact for equal within-run variances)."""
    rng = np.random.default_rng(11)
    m, sigma, alpha, margin = 6, 0.08, 0.05 / 3, 0.05
    margin_log = pw.log_shift(margin, 0.0, higher_is_better=False)
    lam = dl.noncentrality(m - 1, alpha=alpha, power=0.8)
    theta = lam * sigma * math.sqrt(1 + 1 / m)  # sigma of (new - mean of old)
    sims = 20_000
    old = rng.normal(0.0, sigma, (sims, m))
    new = rng.normal(margin_log + theta, sigma, sims)
    t = (new - old.mean(axis=1) - margin_log) / (old.std(axis=1, ddof=1) * math.sqrt(1 + 1 / m))
    rate = float(np.mean(t > sps.t.ppf(1 - alpha, m - 1)))
    assert rate == pytest.approx(0.8, abs=0.015)
    # and the module's test on one of these histories reports that MDE for its own se
    one = dl.level_test(
        _runs(old[0]), _runs(new[:1]), higher_is_better=False, margin_log=margin_log
    )
    assert one is not None
    assert dl.mde_log_shift(one, alpha=alpha) == pytest.approx(lam * one.se)
    rel = dl.mde_relative(one, margin=margin, higher_is_better=False, alpha=alpha)
    assert rel == pytest.approx((1 + margin) * math.exp(lam * one.se) - 1)


def test_false_alarms_of_the_model_stay_below_alpha() -> None:
    """Steady histories drawn from the model (run-to-run tau, within-run samples of sd s over
    n runs): the latest-run test rejects at most alpha of the time, with and without a large
    within-run part."""
    rng = np.random.default_rng(5)
    alpha, m, n_samples = 0.05, 6, 10
    for tau, s in ((0.05, 0.02), (0.01, 0.1), (0.0, 0.1)):
        hits, sims = 0, 4000
        for _ in range(sims):
            levels = rng.normal(0.0, tau, m + 1)
            samples = levels[:, None] + rng.normal(0.0, s, (m + 1, n_samples))
            ys, vs = samples.mean(axis=1), samples.var(axis=1, ddof=1) / n_samples
            runs = [dl.Run(float(y), float(v)) for y, v in zip(ys, vs, strict=True)]
            got = dl.level_test(runs[:-1], runs[-1:], higher_is_better=False)
            assert got is not None
            hits += got.p_value < alpha
        # at most alpha plus three standard errors of the simulation
        assert hits / sims <= alpha + 3 * math.sqrt(alpha * (1 - alpha) / sims), (tau, s)

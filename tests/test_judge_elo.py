"""gate.judge.elo against independent computations (textbook formulas, scipy, numpy)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import optimize

from gate.judge.elo import (
    EloResult,
    Match,
    clamp_score,
    elo_from_score,
    elo_result,
    fit_ratings,
    score,
    transitivity,
)
from gate.judge.protocol import Outcome

W, L, T = Outcome.WIN, Outcome.LOSS, Outcome.TIE


def _outcomes(w: int, r: int, t: int) -> list[Outcome]:
    return [W] * w + [L] * r + [T] * t


def test_score_counts_ties_as_half() -> None:
    assert score(3, 1, 2) == pytest.approx(4 / 6)
    with pytest.raises(ValueError, match="no scored pairs"):
        score(0, 0, 0)


@pytest.mark.parametrize(
    ("p", "elo"), [(0.5, 0.0), (10 / 11, 400.0), (1 / 11, -400.0), (0.76, 200.24)]
)
def test_elo_formula(p: float, elo: float) -> None:
    # -400 log10(1/p - 1): odds of 10 are 400 points
    delta, clamped = elo_from_score(p, n=1000)
    assert delta == pytest.approx(elo, abs=0.01) and not clamped


@pytest.mark.parametrize("n", [1, 2, 10, 100, 1000])
def test_all_lost_and_all_won_are_finite_flagged_bounds(n: int) -> None:
    lost = elo_result(_outcomes(0, n, 0))
    won = elo_result(_outcomes(n, 0, 0))
    cap = 400 * math.log10(2 * n - 1)
    assert lost.clamped and won.clamped
    assert math.isfinite(lost.delta) and math.isfinite(won.delta)
    assert lost.delta == pytest.approx(-cap) and won.delta == pytest.approx(cap)
    assert all(math.isfinite(x) for x in (*lost.ci, *won.ci))
    assert lost.score == 0.0 and won.score == 1.0


def test_clamp_is_half_a_game() -> None:
    assert clamp_score(0.0, 10) == (0.05, True)
    assert clamp_score(1.0, 10) == (0.95, True)
    assert clamp_score(0.3, 10) == (0.3, False)
    with pytest.raises(ValueError, match=r"score 1\.2 outside \[0, 1\]"):
        clamp_score(1.2, 10)


def test_baseline_against_itself_is_zero_with_zero_width() -> None:
    r = elo_result(_outcomes(0, 0, 50))
    assert (r.delta, r.ci, r.p_worse, r.clamped) == (0.0, (0.0, 0.0), 1.0, False)


def _sign_test_tail(w: int, r: int) -> float:
    """P[Binom(w + r, 1/2) >= r] by explicit summation."""
    n = w + r
    return sum(math.comb(n, k) for k in range(r, n + 1)) / 2**n if n else 1.0


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 30), st.integers(0, 30), st.integers(0, 30))
def test_score_delta_and_sign_test(w: int, r: int, t: int) -> None:
    if w + r + t == 0:
        return
    res = elo_result(_outcomes(w, r, t), n_resamples=200)
    n = w + r + t
    p = (w + t / 2) / n
    assert res.score == pytest.approx(p)
    assert (res.wins, res.losses, res.ties, res.n) == (w, r, t, n)
    if 0 < p < 1:
        assert res.delta == pytest.approx(-400 * math.log10(1 / p - 1))
    assert res.p_worse == pytest.approx(_sign_test_tail(w, r))
    assert res.ci[0] <= res.delta + 1e-9 <= res.ci[1] + 2e-9


def test_ci_matches_an_independent_numpy_bootstrap() -> None:
    outcomes = _outcomes(30, 45, 25)
    res = elo_result(outcomes, n_resamples=4000, seed=3)
    s = np.array([o.score for o in outcomes])
    rng = np.random.default_rng(12345)
    means = s[rng.integers(0, s.size, size=(20000, s.size))].mean(axis=1)
    lo, hi = np.quantile(means, [0.025, 0.975])
    elo = lambda p: -400 * math.log10(1 / p - 1)  # noqa: E731
    assert res.ci[0] == pytest.approx(elo(lo), abs=6.0)
    assert res.ci[1] == pytest.approx(elo(hi), abs=6.0)
    assert res.ci[0] < res.delta < res.ci[1]
    # a clear loss: 30 wins vs 45 losses is significant at 5 % but not at 1 %
    assert 0.01 < res.p_worse < 0.06
    assert elo_result(outcomes, n_resamples=4000, seed=3) == res  # seeded


def test_bradley_terry_two_builds_closed_form() -> None:
    # first scores W = wins + ties/2 of n; one virtual tie: 400 log10((W+.5)/(n-W+.5))
    m = Match("base", "cand", wins=12, losses=5, ties=3)
    ratings = fit_ratings([m], anchor="base")
    w_pts = 12 + 1.5
    expected = -400 * math.log10((w_pts + 0.5) / (m.games - w_pts + 0.5))
    assert ratings["base"] == 0.0
    assert ratings["cand"] == pytest.approx(expected, abs=1e-6)
    shut_out = fit_ratings([Match("base", "cand", 20, 0, 0)], anchor="base")
    assert shut_out["cand"] == pytest.approx(-400 * math.log10(20.5 / 0.5), abs=1e-6)


def test_bradley_terry_matches_direct_likelihood_maximisation() -> None:
    matches = [
        Match("base", "b", 30, 12, 8),
        Match("base", "c", 40, 5, 5),
        Match("b", "c", 25, 15, 10),
    ]
    names = ["base", "b", "c"]
    idx = {n: i for i, n in enumerate(names)}

    def nll(x: np.ndarray) -> float:
        r = np.concatenate([[0.0], x])  # base fixed at 0
        total = 0.0
        for m in matches:
            i, j = idx[m.first], idx[m.second]
            p = 1 / (1 + 10 ** ((r[j] - r[i]) / 400))
            wins = m.wins + m.ties / 2 + 0.5  # one virtual tie per pair
            losses = m.losses + m.ties / 2 + 0.5
            total -= wins * math.log(p) + losses * math.log(1 - p)
        return total

    best = optimize.minimize(
        nll,
        x0=np.zeros(2),
        method="Nelder-Mead",
        options={"xatol": 1e-8, "fatol": 1e-12, "maxiter": 20000},
    )
    ratings = fit_ratings(matches, anchor="base")
    assert ratings["b"] == pytest.approx(best.x[0], abs=0.05)
    assert ratings["c"] == pytest.approx(best.x[1], abs=0.05)
    assert ratings["base"] > ratings["b"] > ratings["c"]


def test_bradley_terry_rejects_disconnected_builds() -> None:
    with pytest.raises(ValueError, match="connected"):
        fit_ratings([Match("a", "b", 1, 1, 0), Match("c", "d", 1, 0, 0)], anchor="a")
    with pytest.raises(ValueError, match="anchor"):
        fit_ratings([Match("a", "b", 1, 1, 0)], anchor="z")


def _result(delta: float, half: float, clamped: bool = False) -> EloResult:
    return EloResult(1, 1, 1, 0.5, delta, (delta - half, delta + half), 0.5, clamped)


def test_transitivity() -> None:
    ok = transitivity(_result(-120, 30), _result(-50, 30), _result(-60, 40))
    assert ok.via == -110 and ok.residual == pytest.approx(-10)
    assert ok.tolerance == pytest.approx(math.sqrt(30**2 + 30**2 + 40**2))
    assert ok.holds is True
    bad = transitivity(_result(-300, 20), _result(-50, 20), _result(-60, 20))
    assert bad.holds is False
    assert transitivity(_result(-300, 20), _result(-50, 20), _result(-60, 20), tolerance=500).holds
    unknown = transitivity(_result(-920, 0, clamped=True), _result(-50, 20), _result(-60, 20))
    assert unknown.holds is None


def test_transitivity_of_elo_results_from_an_exact_elo_world() -> None:
    # outcomes drawn as their expectations under ratings 0 / -100 / -250 (exact Elo world)
    def expected_outcomes(d: float, n: int = 2000) -> list[Outcome]:
        p = 1 / (1 + 10 ** (-d / 400))
        wins = round(p * n)
        return _outcomes(wins, n - wins, 0)

    base_b = elo_result(expected_outcomes(-100), n_resamples=500)
    b_c = elo_result(expected_outcomes(-150), n_resamples=500)
    base_c = elo_result(expected_outcomes(-250), n_resamples=500)
    check = transitivity(base_c, base_b, b_c)
    assert abs(check.residual) < 1.0 and check.holds

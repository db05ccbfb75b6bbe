"""The two promises of docs/metrics.md "Severity and statistics", with the shipped thresholds.

1. Identical builds never fail: candidate and baseline drawn from the same
   distribution are flagged (WARN or CRITICAL) in at most 2 % of 200 seeded trials.
2. A regression of twice the critical bound is CRITICAL in at least 99 % of them.

Noise models (realistic, stated):
* latency (REPEATED, ``latency.ttft_p50``): 20 timed runs per side, lognormal
  with sigma 0.08 (about 8 % run-to-run spread, a busy CPU runner; GPUs after
  warm-up are quieter); value = median of the runs.
* correctness (PAIRED_BINARY, ``accuracy.mcq_acc``): 500 questions, each with
  its own difficulty p_i ~ Beta(0.1, 0.1); both builds answer independently
  with probability p_i, so about 8 % of questions are discordant, like the
  5-13 % flips of quantized builds (Dutta et al.).
* flips-like (PAIRED_BINARY, lower is better, ``accuracy.flips`` against an
  approved earlier build's own flips): 500 questions, flip probability
  q_i ~ Beta(0.5, 5.5) (mean 8 %) for both builds.
* per-window scores (PAIRED_SCORE, ``accuracy.perplexity``): 64 windows with
  mean NLL_i ~ U(2, 3) nats and independent N(0, 0.05) run noise per side;
  value = exp(mean NLL).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from gate.gating.compare import compare_measurements
from gate.gating.thresholds import Thresholds, load_thresholds, packaged_thresholds_path
from gate.gating.verdict import Severity
from gate.measurement import Measurement

TRIALS = 200
Pair = tuple[Measurement, Measurement]
Generator = Callable[[np.random.Generator, float], Pair]


@pytest.fixture(scope="module")
def shipped() -> Thresholds:
    return load_thresholds(packaged_thresholds_path())


def _latency(rng: np.random.Generator, shift: float) -> Pair:
    name = "latency.ttft_p50"
    base = 0.050 * rng.lognormal(0.0, 0.08, 20)
    cand = 0.050 * (1.0 + shift) * rng.lognormal(0.0, 0.08, 20)
    return (
        Measurement(name, float(np.median(cand)), tuple(cand)),
        Measurement(name, float(np.median(base)), tuple(base)),
    )


def _ids(n: int) -> tuple[str, ...]:
    return tuple(f"q{i:04d}" for i in range(n))


def _correctness(rng: np.random.Generator, drop: float) -> Pair:
    """``drop``: accuracy points the candidate loses (correct answers turned wrong)."""
    n, name = 500, "accuracy.mcq_acc"
    p = rng.beta(0.1, 0.1, n)
    base = (rng.random(n) < p).astype(float)
    cand = (rng.random(n) < p).astype(float)
    if drop:
        right = np.flatnonzero(cand == 1.0)
        cand[rng.choice(right, round(drop * n), replace=False)] = 0.0
    return (
        Measurement(name, float(cand.mean()), tuple(cand), _ids(n)),
        Measurement(name, float(base.mean()), tuple(base), _ids(n)),
    )


def _flips(rng: np.random.Generator, rise: float) -> Pair:
    """``rise``: extra share of questions that flip in the candidate."""
    n, name = 500, "accuracy.flips"
    q = rng.beta(0.5, 5.5, n)
    base = (rng.random(n) < q).astype(float)
    cand = (rng.random(n) < q).astype(float)
    if rise:
        stable = np.flatnonzero(cand == 0.0)
        cand[rng.choice(stable, round(rise * n), replace=False)] = 1.0
    return (
        Measurement(name, float(cand.mean()), tuple(cand), _ids(n)),
        Measurement(name, float(base.mean()), tuple(base), _ids(n)),
    )


def _perplexity(rng: np.random.Generator, rel_rise: float) -> Pair:
    """``rel_rise``: relative perplexity increase (a shift of log(1 + rel_rise) nats)."""
    n, name = 64, "accuracy.perplexity"
    true = rng.uniform(2.0, 3.0, n)
    base = true + rng.normal(0.0, 0.05, n)
    cand = true + rng.normal(0.0, 0.05, n) + np.log1p(rel_rise)
    return (
        Measurement(name, float(np.exp(cand.mean())), tuple(cand), _ids(n)),
        Measurement(name, float(np.exp(base.mean())), tuple(base), _ids(n)),
    )


CASES = {
    "latency (REPEATED)": ("latency.ttft_p50", _latency),
    "correctness (PAIRED_BINARY)": ("accuracy.mcq_acc", _correctness),
    "flips (PAIRED_BINARY, lower is better)": ("accuracy.flips", _flips),
    "perplexity (PAIRED_SCORE)": ("accuracy.perplexity", _perplexity),
}


def _severities(gen: Generator, shift: float, thresholds: Thresholds) -> np.ndarray:
    out = []
    for trial in range(TRIALS):
        cand, base = gen(np.random.default_rng(trial), shift)
        (verdict,) = compare_measurements([cand], [base], thresholds, n_resamples=1000)
        out.append(int(verdict.severity))
    return np.asarray(out)


@pytest.mark.parametrize("case", list(CASES))
def test_identical_builds_rarely_flagged(case: str, shipped: Thresholds) -> None:
    metric, gen = CASES[case]
    assert shipped.for_metric(metric) is not None, f"{metric} must be gated by default"
    flagged = np.mean(_severities(gen, 0.0, shipped) >= Severity.WARN)
    assert flagged <= 0.02, f"{case}: {flagged:.1%} false alarms"


@pytest.mark.parametrize("case", list(CASES))
def test_twice_critical_is_caught(case: str, shipped: Thresholds) -> None:
    metric, gen = CASES[case]
    threshold = shipped.for_metric(metric)
    assert threshold is not None
    shift = 2.0 * threshold.bound.critical
    critical = np.mean(_severities(gen, shift, shipped) == Severity.CRITICAL)
    assert critical >= 0.99, f"{case}: only {critical:.1%} critical at a {shift:g} shift"

"""The divergence position's horizon: one bound means the same at every cap.

A build that leaves the baseline's greedy path with probability ``h`` per token
keeps it for ``T`` tokens, ``P(T >= k) = (1 - h)^k``. Censored at the cap
``C``, its mean relative to the baseline's answers of ``C`` tokens is
``(1 - h)(1 - (1 - h)^C) / (h C)``: the same build reads -71 % at a cap of 64
and -85 % at 128 for ``h = 0.05``, a warning at one cap and a block at the
other. Censored at the horizon ``H`` (``[tiers.generation]
divergence_horizon``, default 48) it reads the same at every cap of at least
``H``. Hand-made answers go through the tier's own aggregation and the real
comparison with the shipped thresholds, as a run's do.
"""

from __future__ import annotations

import math
import random

import pytest

from gate.gating.compare import compare_measurements
from gate.gating.thresholds import load_thresholds, packaged_thresholds_path
from gate.gating.verdict import Severity
from gate.metrics.catalog import generation as catalog
from gate.store.reference import PackPrompt
from gate.tiers import generation as tier

PROMPTS = 1200


def _runs(h: float, seed: int = 3) -> list[int]:
    """``T`` for each prompt: tokens kept before the first difference, geometric in ``h``."""
    rng = random.Random(seed)
    return [int(math.log(1.0 - rng.random()) / math.log(1.0 - h)) for _ in range(PROMPTS)]


def _answers(runs: list[int], cap: int) -> tuple[list[tier.StoredAnswer], list[list[int]]]:
    """Stored answers that run to the cap, and candidates that keep ``T`` of their tokens."""
    stored, answered = [], []
    for j, kept in enumerate(runs):
        tokens = tuple(1000 + (37 * j + 11 * i) % 4000 for i in range(cap))
        meta = PackPrompt(f"p{j}", ("chat", "code", "math")[j % 3], "medium", 8, cap)
        stored.append(tier.StoredAnswer(j, meta, tokens, cap))
        if kept >= cap:
            answered.append(list(tokens))
        else:
            answered.append([*tokens[:kept], tokens[kept] + 1, *tokens[kept + 1 :]])
    return stored, answered


def _divergence(
    runs: list[int], cap: int, settings: tier.GenerationSettings
) -> tuple[float, float]:
    """The candidate's and the baseline's mean divergence position."""
    stored, answered = _answers(runs, cap)
    values = tier.paired_values(stored, answered, cap, settings)[catalog.DIVERGENCE_POSITION]
    return math.fsum(values.candidate) / PROMPTS, math.fsum(values.baseline) / PROMPTS


def _verdict(runs: list[int], cap: int, settings: tier.GenerationSettings) -> Severity:
    stored, answered = _answers(runs, cap)
    values = tier.paired_values(stored, answered, cap, settings)
    measurements = tier.to_measurements(values, side="candidate", against="fp32")
    thresholds = load_thresholds(packaged_thresholds_path())
    verdicts = compare_measurements(measurements, {}, thresholds, against="fp32")
    (whole,) = [v for v in verdicts if v.metric == catalog.DIVERGENCE_POSITION and v.slice is None]
    return whole.severity


@pytest.mark.parametrize("h", [0.02, 0.05, 0.10])
def test_the_same_build_reads_the_same_at_every_cap_past_the_horizon(h: float) -> None:
    settings = tier.GenerationSettings()
    horizon = settings.divergence_horizon
    runs = _runs(h)
    means = {cap: _divergence(runs, cap, settings) for cap in (horizon, 64, 128, 256)}
    assert {base for _, base in means.values()} == {float(horizon)}
    assert len({candidate for candidate, _ in means.values()}) == 1
    # and that value is the geometric build's expectation, (1 - h)(1 - (1 - h)^H) / h
    expected = (1 - h) * (1 - (1 - h) ** horizon) / h
    candidate, _ = means[128]
    spread = math.sqrt(expected * (1 + expected) / PROMPTS)  # at most a geometric's sd
    assert abs(candidate - expected) < 4 * spread, (candidate, expected)


def test_without_the_horizon_the_cap_decides_the_verdict() -> None:
    """``h = 0.05`` (5 points of greedy agreement lost: fidelity.cga's warning) warns at
    caps 64 and 128 with the horizon; censored at the cap alone it warns at 64 and blocks
    at 128."""
    runs = _runs(0.05)
    horizon = tier.GenerationSettings()
    assert _verdict(runs, 64, horizon) == Severity.WARN
    assert _verdict(runs, 128, horizon) == Severity.WARN
    at_the_cap = tier.GenerationSettings(divergence_horizon=128)
    assert _verdict(runs, 64, at_the_cap) == Severity.WARN
    assert _verdict(runs, 128, at_the_cap) == Severity.CRITICAL


@pytest.mark.parametrize(("h", "severity"), [(0.005, Severity.PASS), (0.10, Severity.CRITICAL)])
def test_the_horizon_still_passes_a_faithful_build_and_blocks_a_damaged_one(
    h: float, severity: Severity
) -> None:
    for cap in (64, 128):
        assert _verdict(_runs(h), cap, tier.GenerationSettings()) == severity


def test_a_horizon_under_one_token_is_refused() -> None:
    with pytest.raises(ValueError, match="divergence_horizon"):
        tier.GenerationSettings(divergence_horizon=0)

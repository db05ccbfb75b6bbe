"""The Wilson interval reported with every capability pass rate, against the textbook formula."""

from __future__ import annotations

import math

import pytest
from scipy import stats as sps

from gate.metrics.capability import wilson_interval


def _wilson_by_hand(k: int, n: int, confidence: float) -> tuple[float, float]:
    z = sps.norm.ppf(1 - (1 - confidence) / 2)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return centre - half, centre + half


@pytest.mark.parametrize(
    ("k", "n", "conf"), [(0, 10, 0.95), (3, 10, 0.95), (10, 10, 0.95), (57, 200, 0.99), (1, 1, 0.9)]
)
def test_wilson_matches_the_score_formula(k: int, n: int, conf: float) -> None:
    lo, hi = wilson_interval(k, n, conf)
    elo, ehi = _wilson_by_hand(k, n, conf)
    assert lo == pytest.approx(max(0.0, elo), abs=1e-12)
    assert hi == pytest.approx(min(1.0, ehi), abs=1e-12)


def test_wilson_rejects_bad_counts() -> None:
    with pytest.raises(ValueError, match="n must be positive"):
        wilson_interval(3, 0)
    with pytest.raises(ValueError, match="11 successes out of 10"):
        wilson_interval(11, 10)

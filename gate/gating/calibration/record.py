"""What a calibration run found, as a calibrated ``thresholds.toml`` keeps it: its
``[calibration]`` table (the spreads, item counts and timings the run planner
reads back, and where the numbers came from).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gate.gating.calibration.bounds import MetricCalibration

#: Key of the calibration record in a calibrated ``thresholds.toml``.
CALIBRATION_KEY = "calibration"


@dataclass(frozen=True)
class TierTiming:
    """How long a tier took at its configured item counts on the calibrating machine."""

    tier: str
    seconds: float
    #: Items of the tier's largest per-item metric at the configured settings.
    items: int


@dataclass(frozen=True)
class CalibrationRecord:
    """The ``[calibration]`` table of a calibrated ``thresholds.toml``: what the run
    planner needs (spreads, item counts, timings) and where the numbers came from."""

    model: str
    created: str
    hardware: str
    alpha: float
    power: float
    margin: float
    quantile: float
    sources: tuple[str, ...]
    metrics: Mapping[str, MetricCalibration]
    timings: Mapping[str, TierTiming] = field(default_factory=dict)

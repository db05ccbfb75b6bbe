"""The ``[calibration]`` table of a calibrated ``thresholds.toml`` read back, checked:
what the run planner uses of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gate.errors import ConfigError
from gate.gating import power as pw
from gate.gating.calibration.record import CALIBRATION_KEY, TierTiming


@dataclass(frozen=True)
class CalibratedMetric:
    """One metric of a ``[calibration]`` table as the run planner reads it."""

    metric: str
    test: str
    n: int
    spread: float | None


@dataclass(frozen=True)
class Calibration:
    """The parts of a ``[calibration]`` table the run planner uses."""

    model: str
    created: str
    hardware: str
    power: float
    metrics: Mapping[str, CalibratedMetric]
    timings: Mapping[str, TierTiming]


def _num(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{where}: expected a number, got {value!r}", "re-run gate calibrate")
    return float(value)


def read_calibration(table: Mapping[str, Any], source: str) -> Calibration:
    """The ``[calibration]`` table of ``source`` (a calibrated ``thresholds.toml``), checked."""
    where = f"{source} [{CALIBRATION_KEY}]"
    try:
        metrics: dict[str, CalibratedMetric] = {}
        for name, raw in dict(table.get("metrics", {})).items():
            spread = raw.get("spread")
            metrics[name] = CalibratedMetric(
                metric=name,
                test=str(raw["test"]),
                n=int(raw["n"]),
                spread=_num(spread, f"{where}.metrics.{name}.spread")
                if spread is not None
                else None,
            )
        timings = {
            tier: TierTiming(
                tier, _num(raw["seconds"], f"{where}.timings.{tier}"), int(raw["items"])
            )
            for tier, raw in dict(table.get("timings", {})).items()
        }
        power = _num(table.get("power", pw.DEFAULT_POWER), f"{where}.power")
        return Calibration(
            model=str(table.get("model", "?")),
            created=str(table.get("created", "?")),
            hardware=str(table.get("hardware", "?")),
            power=power,
            metrics=metrics,
            timings=timings,
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ConfigError(
            f"{where}: malformed calibration record ({exc})", "re-run gate calibrate"
        ) from None

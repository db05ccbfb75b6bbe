"""``gate calibrate``'s report: its console table and its JSON document (``--json``).

Both are made from the :class:`~gate.gating.calibration.record.CalibrationRecord` a
calibration wrote (per metric: the noise each source showed, the bounds derived
from it, the MDE and the items needed) and the exit code of each session it ran.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from gate.errors import ExitCode
from gate.gating.calibration.record import CalibrationRecord


def _g(value: float | None) -> str:
    """A figure of the table: 3 significant digits, ``-`` unknown, ``none`` infinite."""
    if value is None:
        return "-"
    if math.isinf(value):
        return "none"
    return f"{value:.3g}"


def calibration_lines(
    model: str, record: CalibrationRecord, session_codes: Mapping[str, int]
) -> list[str]:
    """The console report: a headline, one row per calibrated metric (the noisiest source,
    the bounds and the sample sizes) and the sessions whose noise crossed a critical bound."""
    lines = [
        f"gate calibrate: {model} on {record.hardware}, {len(record.sources)} noise sources: "
        + ", ".join(record.sources),
        f"{'metric':24} {'noise max':>10} {'(source)':<20} {'Q':>9} {'warn':>9} {'critical':>9}"
        f" {'rule':>9} {'spread':>9} {'n':>5} {'MDE':>9} {'n needed':>9}",
    ]
    for name, cal in record.metrics.items():
        if cal.warn is None:
            continue
        sources = cal.noise_sources
        worst = max(sources, key=lambda s: sources[s]) if sources else "-"
        lines.append(
            f"{name:24} {_g(sources.get(worst)):>10} {worst[:20]:<20} {_g(cal.noise):>9}"
            f" {_g(cal.warn):>9} {_g(cal.critical):>9} {cal.rule:>9} {_g(cal.spread):>9}"
            f" {cal.n:>5} {_g(cal.mde):>9} {cal.needed_n if cal.needed_n else '-':>9}"
        )
    blocked = [s for s, c in session_codes.items() if c == ExitCode.BLOCKED]
    if blocked:
        lines.append(
            "noise crossed a declared critical bound in: "
            + ", ".join(blocked)
            + " (the bounds above are raised past it)"
        )
    return lines


def calibration_document(
    model: str, thresholds: str, record: CalibrationRecord, session_codes: Mapping[str, int]
) -> dict[str, Any]:
    """The ``gate-calibration`` JSON document of ``--json`` (an infinite MDE is ``null``)."""
    return {
        "kind": "gate-calibration",
        "model": model,
        "thresholds": thresholds,
        "hardware": record.hardware,
        "created": record.created,
        "sources": list(record.sources),
        "session_exit_codes": dict(session_codes),
        "metrics": {
            name: {
                "noise": cal.summary(),
                "sources": cal.noise_sources,
                "warn": cal.warn,
                "critical": cal.critical,
                "rule": cal.rule,
                "test": cal.test,
                "spread": cal.spread,
                "n": cal.n,
                "mde": cal.mde if cal.mde is None or math.isfinite(cal.mde) else None,
                "needed_n": cal.needed_n,
            }
            for name, cal in record.metrics.items()
        },
    }


__all__ = ["calibration_document", "calibration_lines"]

"""Metrics that say what they saw: did the candidate's cache method touch the scored requests?

A KV-cache method acts on the cache a generation builds; a score request it
never touched (a one-token continuation, a StreamingLLM budget larger than
prompt + continuation) measures the uncompressed model. A backend that runs
such a method keeps an ``exercise_log`` (requests scored, requests exercised:
:class:`gate.models.backends.chunked.ExerciseLog`). A tier reads the log
around its scoring (:func:`counts`) and attaches the difference to its
measurements' details (:func:`attach`, key
:attr:`~gate.measurement.MeasurementDetail.COMPRESSION_EXERCISED`);
:func:`notes` turns every measurement whose requests the method never touched
into a report note, so such a value is never a silent pass.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from gate.measurement import Measurement, MeasurementDetail

KEY = MeasurementDetail.COMPRESSION_EXERCISED


def counts(backend: Any) -> tuple[int, int] | None:
    """``(requests, exercised)`` of the backend's exercise log; None without a cache method."""
    log = getattr(backend, "exercise_log", None)
    if log is None:
        return None
    return int(log.requests), int(log.exercised)


def attach(
    measurements: Sequence[Measurement], backend: Any, before: tuple[int, int] | None
) -> list[Measurement]:
    """``measurements`` with the requests scored since ``before`` and how many were exercised."""
    after = counts(backend)
    if after is None or before is None:
        return list(measurements)
    entry = {
        "method": str(getattr(backend, "label", "")),
        "requests": after[0] - before[0],
        "exercised": after[1] - before[1],
    }
    return [dataclasses.replace(m, details={**m.details, KEY: entry}) for m in measurements]


def notes(measurements: Sequence[Measurement]) -> list[str]:
    """One note per tier whose measurements were scored only on requests the method never touched.

    ``fidelity.cga, fidelity.kl_mean ... were scored on 16 request(s) that
    kv-streaming:sinks=4,window=256 never compressed ...``: the metrics are
    named (tier by tier), so the report says which values do not measure the method.
    """
    untouched: dict[tuple[str, str, int], list[str]] = {}
    for m in measurements:
        entry = m.details.get(KEY)
        if isinstance(entry, dict) and entry.get("requests") and not entry.get("exercised"):
            tier = m.name.partition(".")[0]
            untouched.setdefault((tier, str(entry["method"]), int(entry["requests"])), []).append(
                m.name
            )
    return [
        f"{', '.join(names)}: scored on {requests} request(s) that {method} never compressed"
        " (its cache held every pair), so these values do not measure the method;"
        " give longer prompts or a smaller budget"
        for (_, method, requests), names in untouched.items()
    ]


__all__ = ["KEY", "attach", "counts", "notes"]

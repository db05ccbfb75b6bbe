"""The append-only latency history: one JSONL file per fingerprint.

``DIR/<fingerprint hash>.jsonl`` holds one JSON object per gated run::

    {"schema": 1, "time": "2025-06-02T03:00:00+00:00", "label": "...",
     "fingerprint": {...}, "metrics": {"latency.e2e_p50": 0.41, ...},
     "spread": {"latency.e2e_p50": {"n": 10, "log_mean": -0.892, "log_sd": 0.0714}, ...}}

``spread`` summarises each metric's within-run samples (the timed runs of that
gated run) on the log scale: their count ``n``, mean and sample sd (``ddof =
1``) of ``log(sample)``, six significant digits. It is what the drift audit
needs of the samples (:mod:`gate.gating.drift`: the standard error of the run's
level, ``log_sd / sqrt(n)``), in about 75 bytes a metric however many samples
there are. A metric with fewer than two samples, or a sample ``<= 0``, has no
entry. Records written before ``spread`` existed, and metrics without an
entry, are read as run-level values only (an empty or partial ``spread``).

Appends are a single ``write`` of one line followed by ``fsync``, so a crash
leaves at worst one partial last line. Reading is tolerant: a line that is not
a complete record (partial, corrupt, wrong schema) is skipped and reported as a
warning, never an error; the weekly audit keeps working on the rest.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gate.hw.fingerprint import Fingerprint
from gate.measurement import Measurement
from gate.store.writable import writing

SCHEMA = 1
#: Significant digits the within-run summaries keep.
_DIGITS = 6


@dataclass(frozen=True)
class SampleSummary:
    """A metric's within-run samples on the log scale: count, mean and sd (``ddof = 1``)."""

    n: int
    log_mean: float
    log_sd: float

    @classmethod
    def of(cls, samples: Iterable[float]) -> SampleSummary | None:
        """The summary of ``samples``; ``None`` for fewer than two or any ``<= 0``."""
        xs = [float(x) for x in samples]
        if len(xs) < 2 or any(not x > 0.0 or not math.isfinite(x) for x in xs):
            return None
        logs = [math.log(x) for x in xs]
        mean = math.fsum(logs) / len(logs)
        var = math.fsum((v - mean) ** 2 for v in logs) / (len(logs) - 1)
        return cls(len(xs), float(f"{mean:.{_DIGITS}g}"), float(f"{math.sqrt(var):.{_DIGITS}g}"))

    @property
    def level_se(self) -> float:
        """Standard error of the mean log sample, ``log_sd / sqrt(n)``."""
        return self.log_sd / math.sqrt(self.n)

    def to_dict(self) -> dict[str, float]:
        """The ``spread`` entry."""
        return {"n": self.n, "log_mean": self.log_mean, "log_sd": self.log_sd}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SampleSummary:
        """Read a ``spread`` entry (``ValueError`` when it is not one)."""
        n, mean, sd = int(data["n"]), float(data["log_mean"]), float(data["log_sd"])
        if n < 2 or not math.isfinite(mean) or not (math.isfinite(sd) and sd >= 0.0):
            raise ValueError("bad within-run summary")
        return cls(n, mean, sd)


@dataclass(frozen=True)
class HistoryRecord:
    """One gated run: when, what build label, the metric values and their within-run spread."""

    time: datetime
    label: str
    fingerprint_hash: str
    metrics: Mapping[str, float]
    #: Per metric, the summary of its within-run samples (absent: a run-level value only).
    spread: Mapping[str, SampleSummary] = field(default_factory=dict)

    def to_json(self, fingerprint: Fingerprint | None = None) -> str:
        """One line of JSON (no trailing newline)."""
        data: dict[str, Any] = {
            "schema": SCHEMA,
            "time": self.time.isoformat(),
            "label": self.label,
            "fingerprint_hash": self.fingerprint_hash,
            "metrics": dict(self.metrics),
        }
        if self.spread:
            data["spread"] = {k: v.to_dict() for k, v in self.spread.items()}
        if fingerprint is not None:
            data["fingerprint"] = fingerprint.to_dict()
        return json.dumps(data, sort_keys=True)


def history_path(directory: Path, fingerprint_hash: str) -> Path:
    """``DIR/<hash>.jsonl``."""
    return Path(directory) / f"{fingerprint_hash}.jsonl"


def append(
    directory: Path,
    fingerprint: Fingerprint,
    measurements: Iterable[Measurement],
    *,
    label: str = "",
    time: datetime | None = None,
) -> Path:
    """Append one record of ``measurements`` (values and within-run summaries) to the
    fingerprint's history; its path.

    A failed write is a one-line :class:`~gate.errors.UsageError` (exit 4) naming the file.
    """
    measured = list(measurements)
    summaries = {m.name: SampleSummary.of(m.samples or ()) for m in measured}
    record = HistoryRecord(
        time=time or datetime.now(timezone.utc),
        label=label,
        fingerprint_hash=fingerprint.hash,
        metrics={m.name: float(m.value) for m in measured},
        spread={k: v for k, v in summaries.items() if v is not None},
    )
    path = history_path(directory, fingerprint.hash)
    with writing("the latency history", path):
        _append_line(path, record.to_json(fingerprint) + "\n")
    return path


def _append_line(path: Path, line: str) -> None:
    """Append ``line`` to ``path`` (created with its directory), flushed to disk."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab") as fh:
        # a previous writer killed mid-line left no newline: start on a fresh line
        if fh.tell() > 0:
            with open(path, "rb") as check:
                check.seek(-1, os.SEEK_END)
                if check.read(1) != b"\n":
                    line = "\n" + line
        fh.write(line.encode())
        fh.flush()
        os.fsync(fh.fileno())


def _parse(line: str) -> HistoryRecord:
    data = json.loads(line)
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise ValueError(f"not a schema-{SCHEMA} record")
    metrics = {str(k): float(v) for k, v in dict(data["metrics"]).items()}
    if any(not math.isfinite(v) for v in metrics.values()):
        raise ValueError("non-finite metric value")
    spread = {
        str(k): SampleSummary.from_dict(v)
        for k, v in dict(data.get("spread") or {}).items()
        if str(k) in metrics
    }
    when = datetime.fromisoformat(str(data["time"]))
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return HistoryRecord(
        time=when,
        label=str(data.get("label", "")),
        fingerprint_hash=str(data.get("fingerprint_hash", "")),
        metrics=metrics,
        spread=spread,
    )


def read(path: Path) -> tuple[list[HistoryRecord], list[str]]:
    """Records in time order, and one warning line per skipped line."""
    records: list[HistoryRecord] = []
    warnings: list[str] = []
    with open(path, encoding="utf-8", errors="replace") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                records.append(_parse(line))
            except (ValueError, KeyError, TypeError) as exc:
                warnings.append(f"{path.name}:{number}: skipped unreadable record ({exc})")
    records.sort(key=lambda r: r.time)
    return records, warnings


def histories(directory: Path) -> list[Path]:
    """Every ``*.jsonl`` history in ``directory``, sorted by name."""
    return sorted(Path(directory).glob("*.jsonl"))

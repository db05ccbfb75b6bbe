"""The measurements file: input of ``gate compare`` and ``gate baseline add``.

It is the results JSON without verdicts (docs/contracts.md "Measurements file")::

    {"schema_version": 1, "kind": "measurements",
     "model": {provenance}, "environment": {...},
     "tiers": ["fidelity", ...],            # optional: the tiers that ran
     "metrics": [Measurement.to_dict(), ...]}

so that teams who measure with other tools can still use the gate, and so
that a run can be re-gated later (``gate run --measurements``: the file holds
the run's measurements, the candidate's provenance, the environment it was
measured in and the tiers that ran, whose baseline metrics it should have
measured). Values must
be finite: JSON ``NaN``/``Infinity`` literals (which Python's :mod:`json`
accepts by default) are refused with a :class:`~gate.errors.DataError`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gate.errors import DataError, GateError
from gate.measurement import Measurement
from gate.provenance import ModelProvenance
from gate.store.atomic import write_atomic
from gate.store.schema import check_schema_version

SCHEMA_VERSION = 1
KIND = "measurements"


class _NonFinite(ValueError):
    """A NaN/Infinity literal met while parsing."""


def _refuse_constant(token: str) -> float:
    raise _NonFinite(token)


def parse_json(text: str, source: str, error: type[GateError]) -> Any:
    """Parse JSON strictly: NaN/Infinity literals -> DataError, bad syntax -> ``error``."""
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except _NonFinite as exc:
        raise DataError(
            f"{source} contains a non-finite number ({exc})",
            "NaN/Infinity are not measurements; fix or drop the metric",
        ) from None
    except json.JSONDecodeError as exc:
        raise error(
            f"{source} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})",
            "the file is truncated or corrupt; re-create it",
        ) from None


def read_json(path: Path, error: type[GateError], *, what: str = "") -> Any:
    """Read and strictly parse a JSON file; a missing or unreadable file -> ``error``.

    ``what`` ("baseline") prefixes the path in messages.
    """
    source = f"{what} {path}" if what else str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise error(f"{source} does not exist", "check the path") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"cannot read {source}: {exc}", "check the file and its permissions") from None
    return parse_json(text, source, error)


def dump_json(data: Any) -> bytes:
    """Canonical JSON bytes (sorted keys, indented, NaN refused)."""
    try:
        return (json.dumps(data, indent=2, sort_keys=True, allow_nan=False) + "\n").encode()
    except ValueError as exc:
        raise DataError(f"cannot write a non-finite number: {exc}", "a metric is NaN/inf") from None


def parse_metrics(raw: Any, source: str) -> list[Measurement]:
    """Parse and validate a ``metrics`` list; duplicate names and NaN -> DataError."""
    if not isinstance(raw, list):
        raise DataError(f"{source}: 'metrics' must be a list", "see examples/baseline.json")
    out: list[Measurement] = []
    seen: set[str] = set()
    for entry in raw:
        if not isinstance(entry, Mapping):
            raise DataError(f"{source}: a metrics entry is not an object", "see examples/")
        measurement = Measurement.from_dict(entry)
        measurement.validate()
        if measurement.name in seen:
            raise DataError(
                f"{source}: metric {measurement.name!r} appears twice", "keep one entry per metric"
            )
        seen.add(measurement.name)
        out.append(measurement)
    return out


@dataclass(frozen=True)
class MeasurementsFile:
    """A parsed measurements file."""

    measurements: list[Measurement]
    #: The measured model's provenance (the file's ``model`` object).
    model: ModelProvenance = field(default_factory=ModelProvenance)
    environment: dict[str, Any] = field(default_factory=dict)
    #: The tiers that ran (``None``: not recorded; those of the metrics then count).
    tiers: tuple[str, ...] | None = None


def load_measurements(path: Path) -> MeasurementsFile:
    """Load and validate a measurements file; any problem is a one-line DataError."""
    data = read_json(path, DataError, what="measurements file")
    if not isinstance(data, Mapping):
        raise DataError(f"{path} is not a JSON object", "see examples/baseline.json")
    check_schema_version(data, str(path), reads_up_to=SCHEMA_VERSION, error=DataError)
    kind = data.get("kind", KIND)
    if kind != KIND:
        raise DataError(f"{path} is a {kind!r} file, not measurements", "pass a measurements file")
    if "metrics" not in data:
        raise DataError(f"{path} has no 'metrics' list", "see examples/baseline.json")
    model = data.get("model") or {}
    environment = data.get("environment") or {}
    if not isinstance(model, Mapping) or not isinstance(environment, Mapping):
        raise DataError(f"{path}: 'model' and 'environment' must be objects", "see examples/")
    tiers = data.get("tiers")
    if tiers is not None and not (
        isinstance(tiers, list) and all(isinstance(t, str) for t in tiers)
    ):
        raise DataError(f"{path}: 'tiers' must be a list of tier names", "see examples/")
    return MeasurementsFile(
        measurements=parse_metrics(data["metrics"], str(path)),
        model=ModelProvenance.from_document(model),
        environment=dict(environment),
        tiers=tuple(tiers) if tiers is not None else None,
    )


def save_measurements(
    path: Path,
    measurements: Sequence[Measurement],
    *,
    model: ModelProvenance | None = None,
    environment: Mapping[str, Any] | None = None,
    tiers: Sequence[str] | None = None,
) -> None:
    """Write a measurements file atomically (validating every measurement first)."""
    for measurement in measurements:
        measurement.validate()
    data: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "kind": KIND,
        "model": model.to_document() if model is not None else {},
        "environment": dict(environment or {}),
        "metrics": [m.to_dict() for m in measurements],
    }
    if tiers is not None:
        data["tiers"] = list(tiers)
    write_atomic(Path(path), dump_json(data))

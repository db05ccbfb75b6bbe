"""The results JSON (docs/contracts.md "Results JSON"): written by ``--json`` and the plugin.

Shape (``schema_version`` 1)::

    {"schema_version": 1, "kind": "results", "verdict": "pass|warn|block|not_exercised",
     "headline": "APPROVED", "exit_code": 0,
     "baseline": {provenance of the first ref}, "baselines": {ref: {...}},
     "candidate": {provenance}, "environment": {...}, "notes": [...],
     "unmeasured": [{"name", "against"}], "unbounded": [name, ...],
     "version_drift": [{"package", "baseline", "candidate", "against"}],
     "not_exercised": ["<tier> NOT EXERCISED: <why>; <fix>", ...],
     "metrics": [{"name", "tier", "slice", "value", "baseline_value", "delta",
                  "relative_delta", "ci", "n", "higher_is_better", "severity",
                  "threshold", "breakdown", "against", "reason", "unit",
                  "p_value", "test", "details"}]}

One ``metrics`` entry per verdict (a metric, or one slice of it, against one
ref). ``unmeasured``: metrics a baseline holds, of the tiers that ran, that the
run did not measure (each a warning; ``--strict`` blocks); ``unbounded``:
measured metrics ``thresholds.toml`` sets no bound for (reported, not gated);
``version_drift``: torch, transformers, a kernel package or the serving engine
at another version on the candidate's side than baseline ``against`` was
measured with (each a warning; ``--strict`` blocks; :mod:`gate.gating.versions`).
:func:`results_from_json` reads the file back into verdicts so that the
markdown/HTML/GitHub reports can be produced from a finished run.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gate.errors import DataError, ExitCode, exit_meaning
from gate.gating.verdict import GateOutcome, Severity, Verdict, VerdictThreshold, VersionDrift
from gate.store.atomic import write_atomic
from gate.store.measurements_file import dump_json, read_json
from gate.store.schema import check_schema_version
from gate.store.writable import writing

SCHEMA_VERSION = 1
KIND = "results"


def _finite(value: float | None) -> float | None:
    """JSON has no NaN: a non-finite number is written as ``null``."""
    if value is None or not math.isfinite(value):
        return None
    return float(value)


def verdict_to_dict(verdict: Verdict) -> dict[str, Any]:
    """The ``metrics[]`` entry of one verdict."""
    return {
        "name": verdict.metric,
        "tier": verdict.tier,
        "slice": verdict.slice,
        "against": verdict.against,
        "value": _finite(verdict.value),
        "baseline_value": _finite(verdict.baseline_value),
        "delta": _finite(verdict.delta),
        "relative_delta": _finite(verdict.relative_delta),
        "ci": [_finite(verdict.ci[0]), _finite(verdict.ci[1])] if verdict.ci else None,
        "n": verdict.n,
        "higher_is_better": verdict.higher_is_better,
        "severity": verdict.severity.label,
        "threshold": verdict.threshold.to_dict() if verdict.threshold is not None else {},
        "breakdown": {k: _finite(v) for k, v in verdict.breakdown.items()},
        "reason": verdict.reason,
        "unit": verdict.unit,
        "p_value": _finite(verdict.p_value),
        "test": verdict.test,
        "details": dict(verdict.details),
    }


def verdict_from_dict(entry: Mapping[str, Any]) -> Verdict:
    """Inverse of :func:`verdict_to_dict`; malformed entries raise :class:`DataError`."""
    try:
        ci = entry.get("ci")
        return Verdict(
            metric=str(entry["name"]),
            tier=str(entry["tier"]),
            severity=Severity[str(entry["severity"]).upper()],
            value=float(entry["value"]) if entry["value"] is not None else math.nan,
            baseline_value=_opt_float(entry.get("baseline_value")),
            delta=_opt_float(entry.get("delta")),
            relative_delta=_opt_float(entry.get("relative_delta")),
            higher_is_better=bool(entry["higher_is_better"]),
            n=int(entry.get("n") or 0),
            reason=str(entry.get("reason", "")),
            against=str(entry.get("against", "baseline")),
            slice=entry.get("slice"),
            unit=str(entry.get("unit", "")),
            ci=(float(ci[0]), float(ci[1])) if ci and None not in ci else None,
            p_value=_opt_float(entry.get("p_value")),
            test=entry.get("test"),
            threshold=VerdictThreshold.from_dict(entry.get("threshold") or {}),
            breakdown={
                str(k): float(v) for k, v in (entry.get("breakdown") or {}).items() if v is not None
            },
            details=dict(entry.get("details") or {}),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise DataError(
            f"malformed metrics entry in results JSON: {exc}", "the file is corrupt"
        ) from None


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)


def final_words(outcome: GateOutcome, exit_code: int) -> tuple[str, str]:
    """``(verdict word, headline)`` of a run that ended with ``exit_code``.

    When the run's exit code differs from the comparison's own (a tier crashed,
    bad input, nothing measured), the run is not approved whatever was measured,
    and the headline is what that exit code means (:func:`gate.errors.exit_meaning`):
    bad input is ``ERROR (input)``, never ``BLOCKED``.
    """
    if exit_code == outcome.exit_code:
        return outcome.word, outcome.headline
    return "block", exit_meaning(exit_code)


def build_results(
    outcome: GateOutcome,
    *,
    exit_code: ExitCode | int | None = None,
    baselines: Mapping[str, Mapping[str, Any]] | None = None,
    candidate: Mapping[str, Any] | None = None,
    environment: Mapping[str, Any] | None = None,
    notes: Sequence[str] = (),
    unbounded: Sequence[str] = (),
) -> dict[str, Any]:
    """The results JSON document of one run.

    ``exit_code`` overrides the outcome's own (a crashed tier, nothing measured);
    ``baselines`` maps each ref compared against to its description.
    """
    refs = dict(baselines or {})
    first = next(iter(refs.values()), {})
    code = int(outcome.exit_code if exit_code is None else exit_code)
    word, headline = final_words(outcome, code)
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": KIND,
        "verdict": word,
        "headline": headline,
        "exit_code": code,
        "baseline": dict(first),
        "baselines": {k: dict(v) for k, v in refs.items()},
        "candidate": dict(candidate or {}),
        "environment": dict(environment or {}),
        "notes": list(notes),
        "unmeasured": [item.to_dict() for item in outcome.unmeasured],
        "unbounded": list(unbounded),
        "version_drift": [item.to_dict() for item in outcome.version_drift],
        "not_exercised": list(outcome.not_exercised),
        "metrics": [verdict_to_dict(v) for v in outcome.verdicts],
    }


def write_results(path: Path, results: Mapping[str, Any]) -> None:
    """Write a results document atomically; a failed write is a one-line UsageError (exit 4)."""
    with writing("the results JSON", path):
        write_atomic(Path(path), dump_json(dict(results)))


@dataclass(frozen=True)
class Results:
    """A results JSON read back."""

    verdict: str
    headline: str
    exit_code: int
    verdicts: list[Verdict]
    baseline: dict[str, Any] = field(default_factory=dict)
    baselines: dict[str, dict[str, Any]] = field(default_factory=dict)
    candidate: dict[str, Any] = field(default_factory=dict)
    environment: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    #: Packages measured at other versions than a baseline's (absent in older files).
    version_drift: list[VersionDrift] = field(default_factory=list)


def version_drift_from(data: Mapping[str, Any]) -> list[VersionDrift]:
    """The ``version_drift`` entries of a results document (none in files written before it)."""
    return [VersionDrift.from_dict(entry) for entry in data.get("version_drift") or []]


def results_from_json(path: Path) -> Results:
    """Read a results JSON; anything malformed or newer is a one-line DataError."""
    data = read_json(Path(path), DataError)
    if not isinstance(data, Mapping) or data.get("kind", KIND) != KIND:
        raise DataError(f"{path} is not a gate results file", "pass the file written by --json")
    check_schema_version(data, str(path), reads_up_to=SCHEMA_VERSION, error=DataError)
    try:
        return Results(
            verdict=str(data["verdict"]),
            headline=str(data.get("headline", "")),
            exit_code=int(data["exit_code"]),
            verdicts=[verdict_from_dict(entry) for entry in data["metrics"]],
            baseline=dict(data.get("baseline") or {}),
            baselines={str(k): dict(v) for k, v in (data.get("baselines") or {}).items()},
            candidate=dict(data.get("candidate") or {}),
            environment=dict(data.get("environment") or {}),
            notes=[str(n) for n in data.get("notes") or []],
            version_drift=version_drift_from(data),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise DataError(f"{path} is missing {exc}", "the file is corrupt") from None

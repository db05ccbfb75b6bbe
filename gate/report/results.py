"""The typed results document: :class:`Results`, its one reader and its one writer.

A finished run's results (docs/contracts.md "Results JSON") exist in two
forms: the JSON document (a ``dict`` of JSON types, what ``--json`` writes)
and :class:`Results` (frozen, typed: verdicts, unmeasured metrics, version
drift). :meth:`Results.from_document` is the only place a document is read
and :meth:`Results.to_document` the only place one is made; every report, the
multi-candidate summary, the demo panel and the judge's round robin use
:class:`Results`.

Round trip: ``Results.from_document(doc).to_document() == doc`` for every
document the gate writes, keys in the same order. Two normalisations apply to
numbers only: JSON has no NaN, so a non-finite number is written as ``null``
(and a ``null`` value reads back as NaN, which writes as ``null`` again); a
``ci`` with a ``null`` end and a ``null`` ``breakdown`` entry read as absent.

Unknown keys: a key this reader does not know, at the top level, in a
``metrics`` entry or in the ``run`` object, is a :class:`~gate.errors.DataError` (a writer that adds
one bumps ``schema_version``). The free-form objects (``baseline``,
``baselines``, ``candidate``, ``environment`` and a metric's ``details``) are
kept as they are, unknown keys included. Keys a document lacks take the
defaults older writers implied (``version_drift`` ``[]``, ``against``
``"baseline"``, ``mde`` ``null`` ..., ``run`` ``null``: schema 1 had none).

``run`` (:class:`RunIdentity`, schema 2) names the candidate and what its verdicts
were decided with (gate version, thresholds digest, ``--strict``, run config
digest): what ``gate merge`` requires the results of one matrix to share.

Power (docs/metrics.md "Power"): a metric entry's ``mde`` object holds its
power statement (with the entry's ``threshold``, ``n`` and ``baseline_value``
it is the whole :class:`~gate.gating.power.PowerStatement`); the top-level
``underpowered`` list is derived from those statements when written, and read
back from them (never from the list).

The judge panel (schema 3): ``judge`` lists one typed
:class:`~gate.judge.summary.JudgeSummary` per baseline ref the judge tier ran
against (its judges and counters, pair counts, stability gate, Elo estimate and
the candidate's judged answers), never parsed back from a metric's details.
A document of schema 1 or 2 kept the panel in the judge metrics' ``details``:
it is read from there (:func:`gate.report.judge_summary.split_judge_summaries`)
and written as ``judge``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from gate.errors import DataError, ExitCode, exit_meaning
from gate.gating.against import DEFAULT_AGAINST
from gate.gating.power import PowerStatement
from gate.gating.verdict import (
    GateOutcome,
    NotExercised,
    Severity,
    Unmeasured,
    Verdict,
    VerdictThreshold,
    VersionDrift,
    underpowered,
)
from gate.judge.summary import JudgeSummary
from gate.provenance import ModelProvenance
from gate.report.judge_summary import split_judge_summaries
from gate.store.schema import check_schema_version

SCHEMA_VERSION = 3
KIND = "results"

#: The top-level keys, in the order they are written.
DOCUMENT_KEYS = (
    "schema_version",
    "kind",
    "verdict",
    "headline",
    "exit_code",
    "baseline",
    "baselines",
    "candidate",
    "run",
    "environment",
    "notes",
    "unmeasured",
    "unbounded",
    "version_drift",
    "not_exercised",
    "underpowered",
    "judge",
    "metrics",
)

#: The keys of one ``metrics[]`` entry, in the order they are written.
METRIC_KEYS = (
    "name",
    "tier",
    "slice",
    "against",
    "value",
    "baseline_value",
    "delta",
    "relative_delta",
    "ci",
    "n",
    "higher_is_better",
    "severity",
    "threshold",
    "breakdown",
    "reason",
    "unit",
    "p_value",
    "test",
    "details",
    "mde",
)


def _finite(value: float | None) -> float | None:
    """JSON has no NaN: a non-finite number is written as ``null``."""
    if value is None or not math.isfinite(value):
        return None
    return float(value)


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)


def _unknown(entry: Mapping[str, Any], known: Sequence[str], what: str) -> None:
    """Raise on a key ``known`` does not list (see the module docstring)."""
    extra = [str(k) for k in entry if k not in known]
    if extra:
        raise DataError(
            f"unknown key(s) in {what}: {', '.join(extra)}",
            "the file was written by a newer or different gate",
        )


def _provenance(document: Any) -> ModelProvenance:
    if not isinstance(document, Mapping):
        raise TypeError("candidate is not an object")
    return ModelProvenance.from_document(document)


def verdict_to_entry(verdict: Verdict) -> dict[str, Any]:
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
        "mde": _mde_to_dict(verdict.power),
    }


def _mde_to_dict(power: PowerStatement | None) -> dict[str, Any] | None:
    """A metric entry's ``mde`` object (``null`` without a power statement).

    ``value`` is the MDE in the metric's unit and ``relative`` as a fraction of
    ``|baseline_value|`` (``null``: no degradation detectable, or a reference
    of 0); the bound's mode, ``critical`` and ``alpha`` are the entry's
    ``threshold``.
    """
    if power is None:
        return None
    return {
        "value": _finite(power.mde_value),
        "relative": _finite(power.mde_relative),
        "power": power.power,
        "test": power.test,
        "underpowered": power.underpowered,
    }


def _mde_from_dict(
    data: Any, entry: Mapping[str, Any], threshold: VerdictThreshold | None
) -> PowerStatement | None:
    """Inverse of :func:`_mde_to_dict`, with the entry's own fields; absent in older files."""
    if data is None or threshold is None:
        return None
    relative = threshold.bound.mode == "relative"
    raw = data["relative"] if relative else data["value"]
    reference = abs(float(entry.get("baseline_value") or 0.0))
    return PowerStatement(
        metric=str(entry["name"]),
        slice=entry.get("slice"),
        n=int(entry.get("n") or 0),
        mde=math.inf if raw is None else float(raw),
        critical=threshold.bound.critical,
        mode=threshold.bound.mode,
        power=float(data["power"]),
        alpha=threshold.alpha,
        test=str(data["test"]),
        higher_is_better=bool(entry["higher_is_better"]),
        against=str(entry.get("against", DEFAULT_AGAINST)),
        reference=reference,
    )


def underpowered_entry(power: PowerStatement) -> dict[str, Any]:
    """The results JSON ``underpowered[]`` entry of one statement."""
    return {
        "name": power.metric,
        "slice": power.slice,
        "against": power.against,
        "message": power.message,
    }


def verdict_from_entry(entry: Mapping[str, Any]) -> Verdict:
    """Inverse of :func:`verdict_to_entry`; a malformed entry raises :class:`DataError`."""
    _unknown(entry, METRIC_KEYS, "a metrics entry of the results JSON")
    try:
        ci = entry.get("ci")
        threshold = VerdictThreshold.from_dict(entry.get("threshold") or {})
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
            against=str(entry.get("against", DEFAULT_AGAINST)),
            slice=entry.get("slice"),
            unit=str(entry.get("unit", "")),
            ci=(float(ci[0]), float(ci[1])) if ci and None not in ci else None,
            p_value=_opt_float(entry.get("p_value")),
            test=entry.get("test"),
            threshold=threshold,
            breakdown={
                str(k): float(v) for k, v in (entry.get("breakdown") or {}).items() if v is not None
            },
            details=dict(entry.get("details") or {}),
            power=_mde_from_dict(entry.get("mde"), entry, threshold),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise DataError(
            f"malformed metrics entry in results JSON: {exc}", "the file is corrupt"
        ) from None


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


#: The keys of the ``run`` object, in the order they are written.
RUN_KEYS = (
    "candidate",
    "gate_version",
    "thresholds",
    "thresholds_sha256",
    "strict",
    "config",
    "config_sha256",
)


@dataclass(frozen=True)
class RunIdentity:
    """Which candidate a results document is of, and what decided its verdicts.

    Results that ``gate merge`` combines must agree on everything here but the
    candidate's name (docs/contracts.md "Results JSON").
    """

    #: The candidate's name: its ``[[candidates]]`` name, else the model's store slug
    #: (``gate run --candidate``), else the measurements file's stem (``gate compare``).
    candidate: str
    #: The version of the gate that compared and decided.
    gate_version: str
    #: The thresholds file as it was named, and the digest of what it says
    #: (:func:`gate.gating.thresholds.thresholds_digest`).
    thresholds: str
    thresholds_sha256: str
    #: Whether warnings blocked (``--strict`` or ``[run] strict``).
    strict: bool
    #: The run config the candidate came from and the sha256 of its file (``None``: none).
    config: str | None = None
    config_sha256: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The ``run`` object (keys in :data:`RUN_KEYS` order)."""
        return {
            "candidate": self.candidate,
            "gate_version": self.gate_version,
            "thresholds": self.thresholds,
            "thresholds_sha256": self.thresholds_sha256,
            "strict": self.strict,
            "config": self.config,
            "config_sha256": self.config_sha256,
        }

    @classmethod
    def from_dict(cls, entry: Any, source: str = "results document") -> RunIdentity:
        """Inverse of :meth:`to_dict`; a malformed or unknown entry raises :class:`DataError`."""
        if not isinstance(entry, Mapping):
            raise DataError(f"the run object of {source} is not an object", "the file is corrupt")
        _unknown(entry, RUN_KEYS, f"the run object of {source}")
        try:
            strict = entry["strict"]
            if not isinstance(strict, bool):
                raise ValueError(f"strict is {strict!r}")
            config, digest = entry.get("config"), entry.get("config_sha256")
            return cls(
                candidate=str(entry["candidate"]),
                gate_version=str(entry["gate_version"]),
                thresholds=str(entry["thresholds"]),
                thresholds_sha256=str(entry["thresholds_sha256"]),
                strict=strict,
                config=None if config is None else str(config),
                config_sha256=None if digest is None else str(digest),
            )
        except (KeyError, ValueError) as exc:
            raise DataError(
                f"malformed run object in {source}: {exc}", "the file is corrupt"
            ) from None


def _judge_panels(entries: Any, source: str) -> tuple[JudgeSummary, ...]:
    """The ``judge`` list, typed; a malformed entry raises :class:`DataError`."""
    try:
        return tuple(JudgeSummary.from_document(e) for e in entries or [])
    except (KeyError, TypeError, ValueError) as exc:
        what = f"{exc} is missing" if isinstance(exc, KeyError) else str(exc)
        raise DataError(
            f"malformed judge entry in {source}: {what}", "the file is corrupt"
        ) from None


@dataclass(frozen=True)
class Results:
    """A finished run's results: what the results JSON holds, typed.

    ``baseline`` is the description of the first ref compared against (the
    same object as the first of ``baselines``, kept as the file has it).
    """

    verdict: str
    headline: str
    exit_code: int
    verdicts: tuple[Verdict, ...]
    baseline: Mapping[str, Any] = field(default_factory=dict)
    baselines: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    #: The candidate's provenance (the document's ``candidate`` object, typed).
    candidate: ModelProvenance = field(default_factory=ModelProvenance)
    environment: Mapping[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    #: Baseline metrics of the tiers that ran which the run did not measure.
    unmeasured: tuple[Unmeasured, ...] = ()
    #: Measured metrics without a bound in ``thresholds.toml``.
    unbounded: tuple[str, ...] = ()
    #: Packages measured at other versions than a baseline's (absent in older files).
    version_drift: tuple[VersionDrift, ...] = ()
    #: The tiers the compression never acted on (in the file: ``{"tier", "why"}`` objects;
    #: schema 1 and 2 wrote ``<tier> NOT EXERCISED: <why>`` lines, still read).
    not_exercised: tuple[NotExercised, ...] = ()
    #: The candidate's name and what decided its verdicts (``None``: written before schema 2).
    run: RunIdentity | None = None
    #: The judge panel, one per baseline ref the judge tier ran against (none: no judge tier).
    judge: tuple[JudgeSummary, ...] = ()

    @property
    def underpowered(self) -> tuple[PowerStatement, ...]:
        """Verdicts whose critical bound is below their MDE (from the verdicts' statements)."""
        return underpowered(self.verdicts)

    def ended_with(self, exit_code: int) -> Results:
        """These results of a run that ended with ``exit_code`` after all (a report file
        that could not be written): not approved, whatever was measured, and the headline
        is what the code means (as :func:`final_words` words it)."""
        if exit_code == self.exit_code:
            return self
        return replace(
            self, exit_code=int(exit_code), verdict="block", headline=exit_meaning(exit_code)
        )

    @classmethod
    def of_run(
        cls,
        outcome: GateOutcome,
        *,
        exit_code: ExitCode | int | None = None,
        baselines: Mapping[str, Mapping[str, Any]] | None = None,
        candidate: ModelProvenance | None = None,
        environment: Mapping[str, Any] | None = None,
        notes: Sequence[str] = (),
        unbounded: Sequence[str] = (),
        run: RunIdentity | None = None,
    ) -> Results:
        """The results of one run from its outcome.

        ``exit_code`` overrides the outcome's own (a crashed tier, nothing
        measured); ``baselines`` maps each ref compared against to its description;
        ``run`` names the candidate and what decided it. The judge panel leaves the
        verdicts' details for ``judge`` (:func:`split_judge_summaries`).
        """
        verdicts, panels = split_judge_summaries(outcome.verdicts)
        refs = {str(k): dict(v) for k, v in (baselines or {}).items()}
        code = int(outcome.exit_code if exit_code is None else exit_code)
        word, headline = final_words(outcome, code)
        return cls(
            verdict=word,
            headline=headline,
            exit_code=code,
            verdicts=verdicts,
            baseline=dict(next(iter(refs.values()), {})),
            baselines=refs,
            candidate=candidate if candidate is not None else ModelProvenance(),
            environment=dict(environment or {}),
            notes=tuple(notes),
            unmeasured=tuple(outcome.unmeasured),
            unbounded=tuple(unbounded),
            version_drift=tuple(outcome.version_drift),
            not_exercised=tuple(outcome.not_exercised),
            run=run,
            judge=panels,
        )

    def to_document(self) -> dict[str, Any]:
        """The results JSON document (keys in :data:`DOCUMENT_KEYS` order)."""
        return {
            "schema_version": SCHEMA_VERSION,
            "kind": KIND,
            "verdict": self.verdict,
            "headline": self.headline,
            "exit_code": self.exit_code,
            "baseline": dict(self.baseline),
            "baselines": {k: dict(v) for k, v in self.baselines.items()},
            "candidate": self.candidate.to_document(),
            "run": self.run.to_dict() if self.run is not None else None,
            "environment": dict(self.environment),
            "notes": list(self.notes),
            "unmeasured": [item.to_dict() for item in self.unmeasured],
            "unbounded": list(self.unbounded),
            "version_drift": [item.to_dict() for item in self.version_drift],
            "not_exercised": [item.to_dict() for item in self.not_exercised],
            "underpowered": [underpowered_entry(p) for p in self.underpowered],
            "judge": [panel.to_document() for panel in self.judge],
            "metrics": [verdict_to_entry(v) for v in self.verdicts],
        }

    @classmethod
    def from_document(cls, doc: Any, source: str = "results document") -> Results:
        """Read a results document; anything malformed, unknown or newer is a DataError.

        ``source`` names the document in messages (the file's path).
        """
        if not isinstance(doc, Mapping) or doc.get("kind", KIND) != KIND:
            raise DataError(
                f"{source} is not a gate results file", "pass the file written by --json"
            )
        check_schema_version(doc, source, reads_up_to=SCHEMA_VERSION, error=DataError)
        _unknown(doc, DOCUMENT_KEYS, source)
        try:
            verdicts = tuple(verdict_from_entry(entry) for entry in doc["metrics"])
            if "judge" in doc:
                panels = _judge_panels(doc["judge"], source)
            else:  # schema 1 and 2: the panel rode in the judge metrics' details
                verdicts, panels = split_judge_summaries(verdicts)
            return cls(
                verdict=str(doc["verdict"]),
                headline=str(doc.get("headline", "")),
                exit_code=int(doc["exit_code"]),
                verdicts=verdicts,
                baseline=dict(doc.get("baseline") or {}),
                baselines={str(k): dict(v) for k, v in (doc.get("baselines") or {}).items()},
                candidate=_provenance(doc.get("candidate") or {}),
                environment=dict(doc.get("environment") or {}),
                notes=tuple(str(n) for n in doc.get("notes") or []),
                unmeasured=tuple(Unmeasured.from_dict(e) for e in doc.get("unmeasured") or []),
                unbounded=tuple(str(n) for n in doc.get("unbounded") or []),
                version_drift=tuple(
                    VersionDrift.from_dict(e) for e in doc.get("version_drift") or []
                ),
                not_exercised=tuple(
                    NotExercised.from_dict(n) for n in doc.get("not_exercised") or []
                ),
                run=(
                    RunIdentity.from_dict(doc["run"], source)
                    if doc.get("run") is not None
                    else None
                ),
                judge=panels,
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise DataError(f"{source} is missing {exc}", "the file is corrupt") from None

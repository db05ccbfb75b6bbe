"""One judgement: measurements x baselines x thresholds x options -> verdicts and ``Results``.

``gate run`` (at the end of its session, :mod:`gate.session.finish`; ``gate
demo`` and ``gate calibrate`` run their sessions through it), ``gate compare``
(of a measurements file, such as ``gate run --measurements`` writes) and ``gate
import lm-eval`` (of two samples files) reach their verdicts here and nowhere
else, so a run re-gated from its measurements file reaches the same verdict,
metric by metric; ``gate merge`` only reads back the results made here.

A baseline is a :class:`BaselineInput`: a stored
:class:`~gate.store.baseline.Baseline` (a model's provenance and the versions
that measured it), or an :class:`ExternalBaseline` that another tool measured
(a description of its source and its measurements, no model provenance). The
checks that read a baseline's provenance (steps 2 and 4's versions and
placement) apply to the baselines that record one. In order:

1. ``exercised_only = true`` in ``[gate]``: a partly exercised tier's per-item
   metrics are narrowed to its exercised items (:func:`gate.tiers.exercised.gate_on_exercised`);
2. each baseline that records its model must be of the candidate's tokenizer
   and model family (:func:`gate.store.baseline.check_same_model`);
3. thresholds that bound none of the measured metrics are refused (exit 4),
   unless the run already failed (its exit status stands);
4. each measurement is compared with each baseline
   (:func:`gate.gating.compare.compare_many`); baseline metrics of the tiers
   that ran but were not measured, versions and placement (device, dtype) that
   drifted from a recorded baseline's, and tiers the compression never acted on (NOT EXERCISED) are collected;
5. :func:`gate.gating.verdict.decide` turns them into the outcome
   (``strict``: warnings block); a failed run keeps its own exit status;
6. the notes (what could not be judged, version drift, exercise) and the
   :class:`~gate.report.results.Results` every report is rendered from.

Pure apart from reading the baselines' files (their digests, for the results'
baseline descriptions): no model, no printing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from gate.errors import NothingMeasuredError

if TYPE_CHECKING:
    from gate.gating.thresholds import Thresholds
    from gate.gating.verdict import GateOutcome
    from gate.measurement import Measurement
    from gate.metrics.metric_spec import MetricSpec
    from gate.provenance import ModelProvenance
    from gate.report.results import Results, RunIdentity


class BaselineInput(Protocol):
    """What the judgement reads of a baseline (:class:`~gate.store.baseline.Baseline`
    provides it; so does :class:`ExternalBaseline`)."""

    @property
    def display(self) -> str:
        """How messages and report titles name it."""
        ...

    @property
    def measurements(self) -> Mapping[str, Measurement]:
        """Its measurements by metric name."""
        ...

    @property
    def provenance(self) -> ModelProvenance | None:
        """The model it measured (``None``: its source records none, so the model,
        version and placement checks do not apply)."""
        ...

    @property
    def environment(self) -> Mapping[str, Any]:
        """The package versions that measured it (``gate.provenance.environment``)."""
        ...

    def describe(self, ref: str | None = None) -> dict[str, Any]:
        """Its description in the results (``baselines[ref]``)."""
        ...


@dataclass(frozen=True)
class ExternalBaseline:
    """A baseline another tool measured (an lm-eval samples file): its measurements and a
    description of where they came from; it records no model and no package versions."""

    #: The results' description of it (``{"source": ..., "samples": ...}``).
    source: Mapping[str, Any]
    measurements: Mapping[str, Measurement]
    #: What messages call it.
    display: str
    provenance: None = None
    environment: Mapping[str, Any] = field(default_factory=dict)

    def describe(self, ref: str | None = None) -> dict[str, Any]:
        """The source's description as given (an external file has no ref, number or digest
        of the store's)."""
        return dict(self.source)


@dataclass(frozen=True)
class JudgementInputs:
    """Everything a judgement is decided from, typed and already checked."""

    #: What the candidate measured (a run's session, or a measurements file).
    measurements: Sequence[Measurement]
    #: The baselines compared against, by the ref the user named (the verdicts' ``against``).
    baselines: Mapping[str, BaselineInput]
    thresholds: Thresholds
    #: The candidate's provenance (tokenizer, family: checked against each baseline).
    candidate: ModelProvenance
    #: The environment the candidate was measured in (its versions are compared too).
    environment: Mapping[str, Any]
    #: The candidate's name and what decided it (the results' ``run`` object).
    run: RunIdentity
    #: Warnings block.
    strict: bool = False
    #: The tiers that ran (``None``: those of the measurements): which baseline metrics
    #: the candidate should have measured.
    tiers: Sequence[str] | None = None
    #: Notes from before the judgement (a failed tier's lines), first in the report.
    notes: Sequence[str] = field(default_factory=tuple)
    #: The exit status a failure already dictates (``None``: the run itself was clean).
    problem: int | None = None
    #: What the measurements are in messages ("this run", the measurements file).
    subject: str = "this run"
    #: The metrics' specs (``None``: the registry's; an import adds the files' own metrics).
    specs: Mapping[str, MetricSpec] | None = None


@dataclass(frozen=True)
class Judgement:
    """The verdicts and their decision, and the results every report is rendered from."""

    outcome: GateOutcome
    results: Results
    #: The measurements the verdicts were decided on (after ``exercised_only``).
    measured: tuple[Measurement, ...]

    @property
    def exit_code(self) -> int:
        return self.results.exit_code


def judge_run(inputs: JudgementInputs) -> Judgement:
    """Decide ``inputs`` (module docstring); may raise a ``GateError`` (exit 4 or 5)."""
    from gate.gating.compare import compare_many, unmeasured
    from gate.gating.placement import placement_drift, placement_notes
    from gate.gating.thresholds import require_a_bound, unbounded_metrics
    from gate.gating.verdict import decide
    from gate.gating.versions import check_refs, drift_of, measured_with, version_notes
    from gate.models.backends.batch_fit import backoff_notes
    from gate.report.results import Results
    from gate.store.baseline import check_same_model
    from gate.tiers.exercised import gate_on_exercised, not_exercised, reason
    from gate.tiers.exercised import notes as exercised_notes

    limits = inputs.thresholds
    measured = list(inputs.measurements)
    narrowed: list[str] = []
    if limits.exercised_only:
        measured, narrowed = gate_on_exercised(measured)
    # the baselines that record their model: the model, version and placement checks
    recorded = {
        ref: (b, b.provenance) for ref, b in inputs.baselines.items() if b.provenance is not None
    }
    for baseline, provenance in recorded.values():
        check_same_model(baseline.display, provenance, inputs.candidate)
    names = [m.name for m in measured]
    if inputs.problem is None:  # a failed run already has its exit code
        require_a_bound(limits, names, what=inputs.subject)
    stored = {ref: list(b.measurements.values()) for ref, b in inputs.baselines.items()}
    verdicts = compare_many(measured, stored, limits, specs=inputs.specs)
    if not verdicts and inputs.problem is None:
        raise NothingMeasuredError("no metric to compare", "the candidate measured nothing")
    missing = unmeasured(measured, stored, inputs.tiers)
    # the versions that measured each side: the candidate's own record, never this machine's
    versions = check_refs(
        {ref: measured_with(b.environment, p) for ref, (b, p) in recorded.items()},
        measured_with(dict(inputs.environment), inputs.candidate),
    )
    # the device and compute dtype each side was measured on (a warning when they differ)
    placement = placement_drift({ref: p for ref, (_, p) in recorded.items()}, inputs.candidate)
    outcome = decide(
        verdicts,
        strict=inputs.strict,
        unmeasured=missing,
        version_drift=drift_of(versions) + placement,
        not_exercised=[reason(tier, e) for tier, e in not_exercised(measured).items()],
        require_power=limits.require_power,
    )
    code = int(outcome.exit_code) if inputs.problem is None else inputs.problem
    unbounded = unbounded_metrics(limits, names)
    notes = list(inputs.notes)
    notes += coverage_notes(missing, unbounded, limits.source, inputs.strict)
    notes += version_notes(versions, strict=inputs.strict)
    notes += placement_notes(placement, strict=inputs.strict)
    notes += backoff_notes(inputs.candidate.batch_backoffs)
    notes += exercised_notes(measured) + narrowed
    results = Results.of_run(
        outcome,
        exit_code=code,
        baselines={ref: b.describe(ref) for ref, b in inputs.baselines.items()},
        candidate=inputs.candidate,
        environment=inputs.environment,
        notes=notes,
        unbounded=unbounded,
        run=inputs.run,
    )
    return Judgement(outcome=outcome, results=results, measured=tuple(measured))


def coverage_notes(
    missing: Sequence[Any], unbounded: Sequence[str], source: str, strict: bool
) -> list[str]:
    """Report notes for what the comparison could not judge: baseline metrics the run did
    not measure (:class:`~gate.gating.verdict.Unmeasured`, a warning each; ``--strict``
    blocks) and metrics without a bound."""
    notes: list[str] = []
    by_ref: dict[str, list[str]] = {}
    for item in missing:
        by_ref.setdefault(item.against, []).append(item.metric)
    for ref, metrics in by_ref.items():
        effect = "blocks under --strict" if strict else "a warning; --strict blocks"
        notes.append(
            f"{len(metrics)} metric(s) of baseline {ref} not measured in this run ({effect}): "
            + ", ".join(metrics)
        )
    if unbounded:
        notes.append(
            f"{len(unbounded)} measured metric(s) have no bound in {source}"
            " (reported, not gated): " + ", ".join(unbounded)
        )
    return notes


def baseline_titles(baselines: Mapping[str, BaselineInput], *, refs_always: bool = False) -> str:
    """``ref = slug#0003 (label)`` for each baseline (the ref alone when it is the display,
    unless ``refs_always``)."""
    return ", ".join(
        ref if ref == b.display and not refs_always else f"{ref} = {b.display}"
        for ref, b in baselines.items()
    )


__all__ = [
    "BaselineInput",
    "ExternalBaseline",
    "Judgement",
    "JudgementInputs",
    "baseline_titles",
    "coverage_notes",
    "judge_run",
]

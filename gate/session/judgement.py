"""One judgement: measurements x baselines x thresholds x options -> verdicts and ``Results``.

``gate run`` (at the end of its session, :mod:`gate.session.finish`) and ``gate
compare`` (of a measurements file, such as ``gate run --measurements`` writes)
reach their verdicts here and nowhere else, so a run re-gated from its
measurements file reaches the same verdict, metric by metric. In order:

1. ``exercised_only = true`` in ``[gate]``: a partly exercised tier's per-item
   metrics are narrowed to its exercised items (:func:`gate.tiers.exercised.gate_on_exercised`);
2. each baseline must be of the candidate's tokenizer and model family
   (:func:`gate.store.baseline.check_compatible`);
3. thresholds that bound none of the measured metrics are refused (exit 4),
   unless the run already failed (its exit status stands);
4. each measurement is compared with each baseline
   (:func:`gate.gating.compare.compare_many`); baseline metrics of the tiers
   that ran but were not measured, versions that drifted from a baseline's and
   tiers the compression never acted on (NOT EXERCISED) are collected;
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
from typing import TYPE_CHECKING, Any

from gate.errors import NothingMeasuredError

if TYPE_CHECKING:
    from gate.gating.thresholds import Thresholds
    from gate.gating.verdict import GateOutcome
    from gate.measurement import Measurement
    from gate.provenance import ModelProvenance
    from gate.report.results import Results, RunIdentity
    from gate.store.baseline import Baseline


@dataclass(frozen=True)
class JudgementInputs:
    """Everything a judgement is decided from, typed and already checked."""

    #: What the candidate measured (a run's session, or a measurements file).
    measurements: Sequence[Measurement]
    #: The baselines compared against, by the ref the user named.
    baselines: Mapping[str, Baseline]
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


def judge(inputs: JudgementInputs) -> Judgement:
    """Decide ``inputs`` (module docstring); may raise a ``GateError`` (exit 4 or 5)."""
    from gate.gating.compare import compare_many, unmeasured
    from gate.gating.placement import placement_drift, placement_notes
    from gate.gating.thresholds import require_a_bound, unbounded_metrics
    from gate.gating.verdict import decide
    from gate.gating.versions import check_refs, drift_of, measured_with, version_notes
    from gate.models.backends.batch_fit import backoff_notes
    from gate.report.results import Results
    from gate.store.baseline import check_compatible
    from gate.tiers.exercised import gate_on_exercised, not_exercised, reason
    from gate.tiers.exercised import notes as exercised_notes

    limits = inputs.thresholds
    measured = list(inputs.measurements)
    narrowed: list[str] = []
    if limits.exercised_only:
        measured, narrowed = gate_on_exercised(measured)
    for baseline in inputs.baselines.values():
        check_compatible(baseline, inputs.candidate)
    names = [m.name for m in measured]
    if inputs.problem is None:  # a failed run already has its exit code
        require_a_bound(limits, names, what=inputs.subject)
    stored = {ref: list(b.measurements.values()) for ref, b in inputs.baselines.items()}
    verdicts = compare_many(measured, stored, limits)
    if not verdicts and inputs.problem is None:
        raise NothingMeasuredError("no metric to compare", "the candidate measured nothing")
    missing = unmeasured(measured, stored, inputs.tiers)
    # the versions that measured each side: the candidate's own record, never this machine's
    versions = check_refs(
        {ref: measured_with(b.environment, b.provenance) for ref, b in inputs.baselines.items()},
        measured_with(dict(inputs.environment), inputs.candidate),
    )
    # the device and compute dtype each side was measured on (a warning when they differ)
    placement = placement_drift(
        {ref: b.provenance for ref, b in inputs.baselines.items()}, inputs.candidate
    )
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


def baseline_titles(baselines: Mapping[str, Baseline], *, refs_always: bool = False) -> str:
    """``ref = slug#0003 (label)`` for each baseline (the ref alone when it is the display,
    unless ``refs_always``)."""
    return ", ".join(
        ref if ref == b.display and not refs_always else f"{ref} = {b.display}"
        for ref, b in baselines.items()
    )


__all__ = ["Judgement", "JudgementInputs", "baseline_titles", "coverage_notes", "judge"]

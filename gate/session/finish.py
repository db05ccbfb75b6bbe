"""The end of a gate session: store the baseline (record mode) or compare (run mode).

:func:`store_or_compare` is a plain function of the session's
:class:`~gate.session.run.GateRun`, its validated inputs and the failure (if
any) the tier tests ended with; it returns a :class:`SessionEnd` — the exit
status and what to print — and leaves printing to the caller (the pytest
plugin). Rules:

* a failed tier never lets a baseline be stored and never lets a run be
  approved: its exit status (a ``GateError``'s, else pytest's) is kept;
* nothing measured -> exit 5 (no baseline stored);
* record mode stores the measurements with the session's tier settings (less
  machine keys) in the provenance and moves ``--gate-ref`` to the new number;
* run mode checks each baseline is compatible with the candidate, refuses
  thresholds that bound none of the measured metrics (exit 4), compares,
  decides (``--gate-strict`` makes warnings block) and writes the reports
  asked for (JSON, HTML, JUnit, markdown; GitHub annotations under Actions);
  a report file that cannot be written ends the run with exit 4 (one line
  naming it) after the report is printed, so nothing measured is lost;
* a baseline metric of a tier that ran but was not measured is listed in the
  report and the results JSON (``unmeasured``) and counts as a warning (so
  ``--strict`` blocks, exit 1); measured metrics without a bound are listed
  too (``unbounded``);
* torch, transformers, a kernel package or the serving engine at another
  version than a baseline was measured with is a warning named in the notes
  and the results JSON (``version_drift``, :mod:`gate.gating.versions`;
  ``--strict`` blocks); a baseline without a version record is a note;
* a tier on whose requests the candidate's compression never acted is NOT
  EXERCISED (:mod:`gate.tiers.exercised`): exit 5 unless a measured
  regression blocks (exit 1); ``exercised_only = true`` in ``[gate]`` gates a
  partly exercised tier's per-item metrics on its exercised items.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gate.errors import ExitCode, GateError, decided

if TYPE_CHECKING:
    from rich.console import Console

    from gate.measurement import Measurement
    from gate.provenance import ModelProvenance
    from gate.report.outputs import ReportTargets
    from gate.report.results import Results, RunIdentity
    from gate.session.inputs import SessionInputs
    from gate.session.run import GateRun


@dataclass
class SessionEnd:
    """How a session ended: its exit status and what to print."""

    code: int
    #: ``gate: ...`` lines printed after the report.
    lines: list[str] = field(default_factory=list)
    #: Renders the comparison report on a rich console (run mode, when compared).
    render: Callable[[Console], None] | None = None
    #: GitHub ``::error``/``::warning`` lines, printed at the start of a line.
    annotations: str = ""


def store_or_compare(
    run: GateRun,
    inputs: SessionInputs,
    *,
    problem: int | None,
    lines: list[str],
    tiers: Sequence[str] | None = None,
) -> SessionEnd:
    """Finish the session; ``problem`` is the exit status a failure dictates (None: clean).

    ``lines`` are the ``gate:`` lines so far (failures); they end up in the
    report's notes (run mode) or are printed as they are. ``tiers``: the tiers
    the session ran (``None``: those of its measurements), whose baseline
    metrics the run must have measured. May raise ``GateError``.
    """
    from gate.provenance import ModelProvenance, environment

    measured = list(run.measurements.values())
    candidate = ModelProvenance(
        model=run.model,
        recipe=run.recipe,
        slug=run.model_slug,
        document_keys=("model", "recipe", "slug"),
    )
    if run.backend_loaded:
        candidate = candidate.updated(run.backend.provenance())
    if run.mode == "record":
        return _store(run, inputs, measured, candidate, environment(), problem, lines)
    return _compare(run, inputs, measured, candidate, environment(), problem, lines, tiers)


def _store(
    run: GateRun,
    inputs: SessionInputs,
    measured: list[Measurement],
    candidate: ModelProvenance,
    env: dict[str, Any],
    problem: int | None,
    lines: list[str],
) -> SessionEnd:
    from gate.session.settings import storable_settings

    if problem is not None:
        why = "interrupted" if problem == ExitCode.INTERRUPTED else "a tier failed"
        return SessionEnd(problem, [*lines, f"gate: {why}; no baseline was stored"])
    if not measured:
        return SessionEnd(
            int(ExitCode.NO_MEASUREMENTS),
            [*lines, "gate: nothing was measured; no baseline was stored"],
        )
    options = inputs.options
    stored = inputs.store.add(
        run.model_slug,
        options.label or "",
        measured,
        candidate.with_facts(
            {**run.provenance, "tier_settings": storable_settings(run.tier_settings)}
        ),
        env,
        run.artifacts,
        refs=(options.ref,) if options.ref else (),
    )
    from gate.models.backends.batch_fit import backoff_notes

    backoffs = [f"gate: {note}" for note in backoff_notes(candidate.batch_backoffs)]
    out = [*lines, *backoffs, f"gate: stored baseline {stored.display} at {stored.path}"]
    if options.ref:
        out.append(f"gate: ref {options.ref} -> #{stored.number:04d}")
    return SessionEnd(int(ExitCode.OK), out)


def _compare(
    run: GateRun,
    inputs: SessionInputs,
    measured: list[Measurement],
    candidate: ModelProvenance,
    env: dict[str, Any],
    problem: int | None,
    lines: list[str],
    tiers: Sequence[str] | None,
) -> SessionEnd:
    from gate.report.console import render
    from gate.session.handoff import publish, publish_measurements
    from gate.session.judgement import JudgementInputs, baseline_titles, judge_run

    if not measured:
        code = problem if problem is not None else int(ExitCode.NO_MEASUREMENTS)
        return SessionEnd(code, [*lines, "gate: nothing was measured"])
    reports = inputs.options.reports
    saved = _save_measurements(reports, measured, candidate, env, tiers)
    judgement = judge_run(
        JudgementInputs(
            measurements=measured,
            baselines=run.baselines,
            thresholds=inputs.thresholds,
            candidate=candidate,
            environment=env,
            run=run_identity(inputs, run.model_slug),
            strict=inputs.options.strict,
            tiers=tiers,
            notes=[line.removeprefix("gate: ") for line in lines],
            problem=problem,
            subject="this run",
        )
    )
    publish_measurements(list(judgement.measured))
    results = judgement.results
    title = f"gate run: {run.model} ({run.recipe or 'no recipe'}) vs " + baseline_titles(
        run.baselines, refs_always=True
    )
    buffer = io.StringIO()
    failure = saved or _write_reports(results, reports, buffer)
    publish(results)
    end: list[str] = []
    code = results.exit_code
    if failure is not None:  # the measurements are still shown; the run ends with the error
        end.append(f"gate: error: {failure.format_line()}")
        if decided(code):  # an input error outranks a verdict
            code = int(failure.exit_code)
    shown = results.ended_with(code)

    def show(console: Console) -> None:
        render(shown, console, title=title)

    return SessionEnd(code, end, show, buffer.getvalue())


def _save_measurements(
    reports: ReportTargets,
    measured: Sequence[Measurement],
    candidate: ModelProvenance,
    env: dict[str, Any],
    tiers: Sequence[str] | None,
) -> GateError | None:
    """Write ``--measurements`` (what the run measured, before any verdict); a failed write
    is returned (one-line error) like a report's, so the report is still printed."""
    from gate.store.measurements_file import save_measurements

    if reports.measurements is None:
        return None
    try:
        save_measurements(
            reports.measurements, measured, model=candidate, environment=env, tiers=tiers
        )
    except GateError as exc:
        return exc
    except OSError as exc:
        from gate.errors import UsageError

        return UsageError(
            f"cannot write --measurements {reports.measurements}: {exc.strerror or exc}",
            "check the directory exists and is writable",
        )
    return None


def run_identity(inputs: SessionInputs, model_slug: str) -> RunIdentity:
    """What a session's verdicts were decided with, and the candidate's name (its
    ``[[candidates]]`` name, else ``model_slug``): the results document's ``run`` object."""
    from gate import __version__
    from gate.report.results import RunIdentity

    options = inputs.options
    config = inputs.run_config.path if inputs.run_config is not None else None
    return RunIdentity(
        candidate=options.candidate_name or model_slug,
        gate_version=__version__,
        thresholds=inputs.thresholds.source,
        thresholds_sha256=inputs.thresholds.digest,
        strict=options.strict,
        config=str(config) if config is not None else None,
        config_sha256=inputs.run_config.sha256 if inputs.run_config is not None else None,
    )


def _write_reports(
    results: Results, reports: ReportTargets, stream: io.StringIO
) -> GateError | None:
    """Write the report files; a failed write is returned (one-line error), not raised, so that
    what was measured is still printed."""
    from gate.report.outputs import write_reports

    try:
        write_reports(results, reports, stream=stream)
    except GateError as exc:
        return exc
    return None


__all__ = ["SessionEnd", "run_identity", "store_or_compare"]

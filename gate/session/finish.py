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
* run mode checks each baseline is compatible with the candidate, compares,
  decides (``--gate-strict`` makes warnings block) and writes the reports
  asked for (JSON, HTML, JUnit, markdown; GitHub annotations under Actions).
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gate.errors import ExitCode

if TYPE_CHECKING:
    from rich.console import Console

    from gate.measurement import Measurement
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
    run: GateRun, inputs: SessionInputs, *, problem: int | None, lines: list[str]
) -> SessionEnd:
    """Finish the session; ``problem`` is the exit status a failure dictates (None: clean).

    ``lines`` are the ``gate:`` lines so far (failures); they end up in the
    report's notes (run mode) or are printed as they are. May raise ``GateError``.
    """
    from gate.provenance import environment

    measured = list(run.measurements.values())
    candidate: dict[str, Any] = {"model": run.model, "recipe": run.recipe, "slug": run.model_slug}
    if run.backend_loaded:
        candidate.update(run.backend.provenance())
    if run.mode == "record":
        return _store(run, inputs, measured, candidate, environment(), problem, lines)
    return _compare(run, inputs, measured, candidate, environment(), problem, lines)


def _store(
    run: GateRun,
    inputs: SessionInputs,
    measured: list[Measurement],
    candidate: dict[str, Any],
    env: dict[str, Any],
    problem: int | None,
    lines: list[str],
) -> SessionEnd:
    from gate.session.settings import storable_settings

    if problem is not None:
        return SessionEnd(problem, [*lines, "gate: a tier failed; no baseline was stored"])
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
        {**candidate, **run.provenance, "tier_settings": storable_settings(run.tier_settings)},
        env,
        run.artifacts,
        refs=(options.ref,) if options.ref else (),
    )
    out = [*lines, f"gate: stored baseline {stored.display} at {stored.path}"]
    if options.ref:
        out.append(f"gate: ref {options.ref} -> #{stored.number:04d}")
    return SessionEnd(int(ExitCode.OK), out)


def _compare(
    run: GateRun,
    inputs: SessionInputs,
    measured: list[Measurement],
    candidate: dict[str, Any],
    env: dict[str, Any],
    problem: int | None,
    lines: list[str],
) -> SessionEnd:
    from gate.gating.compare import compare_many
    from gate.gating.verdict import decide
    from gate.report.console import render
    from gate.report.outputs import write_reports
    from gate.report.results_json import build_results
    from gate.store.baseline import check_compatible
    from gate.tiers.exercised import notes as exercised_notes

    if not measured:
        code = problem if problem is not None else int(ExitCode.NO_MEASUREMENTS)
        return SessionEnd(code, [*lines, "gate: nothing was measured"])
    for baseline in run.baselines.values():
        check_compatible(baseline, candidate)
    verdicts = compare_many(
        measured,
        {ref: list(b.measurements.values()) for ref, b in run.baselines.items()},
        inputs.thresholds,
    )
    outcome = decide(verdicts, strict=inputs.options.strict)
    code = int(outcome.exit_code) if problem is None else problem
    notes = [line.removeprefix("gate: ") for line in lines] + exercised_notes(measured)
    title = f"gate run: {run.model} ({run.recipe or 'no recipe'}) vs " + ", ".join(
        f"{ref} = {b.display}" for ref, b in run.baselines.items()
    )

    def show(console: Console) -> None:
        render(outcome, console, exit_code=code, title=title, notes=notes)

    results = build_results(
        outcome,
        exit_code=code,
        baselines={ref: b.describe(ref) for ref, b in run.baselines.items()},
        candidate=candidate,
        environment=env,
        notes=notes,
    )
    buffer = io.StringIO()
    write_reports(results, inputs.options.reports, stream=buffer)
    return SessionEnd(code, [], show, buffer.getvalue())


__all__ = ["SessionEnd", "store_or_compare"]

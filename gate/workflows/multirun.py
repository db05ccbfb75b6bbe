"""Gate several candidates, one pytest session each, then one summary: the one loop.

``gate run`` (with ``--config``, and with ``--candidate``) and ``gate demo``
both land in :func:`run_candidates`:

1. every candidate has been checked before (:func:`gate.workflows.plan.check_plan`:
   its baseline refs resolve in the store, its settings and calibration file
   read), so a typo fails at once with exit 4;
2. each candidate runs its own gate session on the inputs checked in step 1
   (:func:`gate.session.runner.run_session`; the session reads none again),
   which prints that candidate's report; a candidate's ``GateError`` is printed
   on one line and becomes its exit code without stopping the others; an
   interrupted candidate ends the loop;
3. each candidate's :class:`~gate.report.results.Results`, handed over by its
   session in this process (:mod:`gate.session.handoff`), make its :class:`CandidateOutcome`.

:func:`execute_plan` then prints ``gate run``'s summary table (candidate,
recipe, verdict, exit code, the worst findings) and returns the worst exit
code (:func:`worst_exit`); the demo prints its own table from the same
outcomes (:mod:`gate.workflows.demo`).

Report files: with one candidate the paths given are used as they are; with
several, each candidate writes ``<stem>-<name><suffix>`` beside the given path
(``out/results.json`` -> ``out/results-nf4.json``), and the markdown path also
receives one combined document (summary table, then every candidate's
report) so that a workflow can post it as a single pull-request comment.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from gate import progress
from gate.errors import SEVERITY_ORDER, ExitCode, GateError, exit_label, exit_meaning, worst_exit
from gate.gating.verdict import Severity, Verdict
from gate.report.markdown import HEADLINE_MARK, cell
from gate.report.outputs import ReportTargets, check_targets
from gate.report.results import Results
from gate.session.handoff import collect
from gate.session.run_config import Candidate, RunConfig
from gate.store.atomic import write_atomic
from gate.store.writable import writing
from gate.workflows.plan import CheckedCandidate, RunPlan

#: Runs one candidate's gate session: ``(candidate, report targets) -> exit code``.
SessionRunner = Callable[[Candidate, ReportTargets], ExitCode]


@dataclass(frozen=True)
class CandidateOutcome:
    """How one candidate ended."""

    candidate: Candidate
    exit_code: ExitCode
    headline: str
    findings: tuple[str, ...]
    markdown: Path | None = None
    #: The session's results (``None``: it ended before comparing).
    results: Results | None = None
    #: Where its results JSON was written (``None``: none was asked for or written).
    json: Path | None = None
    #: The one-line GateError that stopped the session, if one did.
    error: str | None = None


_SEVERITY_RANK = {Severity.CRITICAL: 0, Severity.WARN: 1}


def _number(value: float | None) -> float | None:
    """A number as the results JSON has it: ``None`` when absent or not finite."""
    return value if value is not None and math.isfinite(value) else None


def _finding(verdict: Verdict) -> str:
    value = _number(verdict.value)
    base = _number(verdict.baseline_value)
    shown = f"{value:.4g}" if value is not None else "-"
    if base is not None:
        shown += f" vs {base:.4g}"
    return f"{verdict.key} {shown} ({verdict.severity.label})"


def worst_findings(results: Results, limit: int = 3) -> tuple[str, ...]:
    """The ``limit`` worst non-passing metrics of a run's results, critical first.

    Within a severity, whole-metric verdicts before per-slice ones, then the
    larger change first (``|relative_delta|``, else ``|delta|``).
    """
    bad = [v for v in results.verdicts if v.severity in _SEVERITY_RANK]

    def key(verdict: Verdict) -> tuple[int, bool, float]:
        change = _number(verdict.relative_delta)
        if change is None:
            change = _number(verdict.delta)
        size = 0.0 if change is None else change
        return (_SEVERITY_RANK[verdict.severity], bool(verdict.slice), -abs(size))

    return tuple(_finding(v) for v in sorted(bad, key=key)[:limit])


def outcome_of(
    candidate: Candidate,
    code: ExitCode,
    results: Results | None,
    markdown: Path | None = None,
    error: str | None = None,
    json: Path | None = None,
) -> CandidateOutcome:
    """The :class:`CandidateOutcome` of a candidate's session from its results (when it made them)."""
    if results is None or code in (ExitCode.INTERRUPTED, ExitCode.INTERNAL_ERROR):
        word = exit_meaning(code)
        reason = "see its report above" if code != ExitCode.OK else ""
        findings: tuple[str, ...] = (reason,) if reason else ()
        return CandidateOutcome(candidate, code, word, findings, markdown, results, json, error)
    headline = results.headline or results.verdict
    if code in (ExitCode.USAGE_ERROR, ExitCode.NO_MEASUREMENTS):
        headline = exit_meaning(code)
    findings = worst_findings(results)
    if not findings:
        count = len(results.verdicts)
        findings = (f"all {count} metric checks pass",) if code == ExitCode.OK else ()
    if code == ExitCode.BLOCKED and not results.verdicts:
        findings = ("a tier test failed; see its report above",)
    return CandidateOutcome(candidate, code, headline, findings, markdown, results, json, error)


def summary_table(outcomes: Sequence[CandidateOutcome]) -> Table:
    """The rich summary table of a multi-candidate run."""
    table = Table(box=box.SIMPLE_HEAD, title="gate: candidates", title_justify="left")
    for column in ("candidate", "model", "recipe", "verdict", "exit", "worst findings"):
        table.add_column(column, no_wrap=column != "worst findings")
    for item in outcomes:
        cells = (
            item.candidate.name,
            item.candidate.model,
            item.candidate.recipe_label,
            item.headline,
            str(int(item.exit_code)),
            "\n".join(item.findings) or "-",
        )
        table.add_row(*(Text(cell) for cell in cells))  # Text: "[slice]" is not markup
    return table


def _clean(item: CandidateOutcome) -> bool:
    """Approved without a warning: its report holds no finding."""
    return (
        item.exit_code == ExitCode.OK
        and item.results is not None
        and all(v.severity == Severity.PASS for v in item.results.verdicts)
    )


def _findings_first(item: CandidateOutcome) -> tuple[int, bool]:
    """Sort key: the worst exit code first, then a report with a finding."""
    return -SEVERITY_ORDER.index(item.exit_code), _clean(item)


def summary_markdown(outcomes: Sequence[CandidateOutcome], code: ExitCode) -> str:
    """A combined markdown document: the summary table (the config's order), then each
    candidate's own report, findings first: worst exit code first
    (:data:`~gate.errors.SEVERITY_ORDER`), approved with warnings before approved
    without, the config's order among equals; a report without a finding is folded in a
    ``<details>`` block."""
    lines = [
        f"## gate: {len(outcomes)} candidates, exit {int(code)}",
        "",
        "| candidate | model | recipe | verdict | exit | worst findings |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for item in outcomes:
        cells = [
            item.candidate.name,
            item.candidate.model,
            item.candidate.recipe_label,
            item.headline,
            str(int(item.exit_code)),
            "<br>".join(item.findings) or "-",
        ]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    for item in sorted(outcomes, key=_findings_first):  # stable: the config's order among equals
        title = f"{item.candidate.name} ({item.candidate.recipe_label})"
        if item.markdown is not None and item.markdown.is_file():
            report = item.markdown.read_text(encoding="utf-8").rstrip()
        else:
            report = f"No report: {exit_label(int(item.exit_code), item.headline)}."
        if _clean(item):
            marked = f"{HEADLINE_MARK.get(item.headline, '')} {item.headline}".strip()
            summary = cell(f"{title}: {marked}, its full report")
            lines += ["", f"<details><summary>{summary}</summary>", "", report, "", "</details>"]
        else:
            lines += ["", f"### {title}", "", report]
    return "\n".join(lines) + "\n"


def announce(index: int, total: int, candidate: Candidate) -> None:
    """Progress line of a candidate's start (``candidate 2/3: nf4 (demo, recipe bnb-nf4)``)."""
    progress.note(
        f"candidate {index}/{total}: {candidate.name}"
        f" ({candidate.model}, recipe {candidate.recipe_label})"
    )


def run_candidates(
    candidates: Sequence[Candidate],
    session: SessionRunner,
    targets_for: Callable[[Candidate], ReportTargets],
    *,
    on_start: Callable[[int, int, Candidate], None] = announce,
    on_done: Callable[[CandidateOutcome], None] | None = None,
) -> list[CandidateOutcome]:
    """Run ``session`` for every candidate in order; returns their outcomes.

    ``session`` gets each candidate's report targets (``targets_for``) and hands
    its results over in this process (:func:`gate.session.handoff.collect`). A
    ``GateError`` ends that candidate (one line on stderr, its exit code); an
    interrupted candidate ends the loop.
    """
    outcomes: list[CandidateOutcome] = []
    for index, candidate in enumerate(candidates, start=1):
        mine = targets_for(candidate)
        on_start(index, len(candidates), candidate)
        error: str | None = None
        with collect() as handed:
            try:
                code = session(candidate, mine)
            except GateError as exc:  # one candidate's error must not stop the others
                error = exc.format_line()
                print(f"gate: error: {error}", file=sys.stderr)
                code = exc.exit_code
        results = _shown(handed[-1]) if handed else None
        written = results is not None and mine.json is not None and mine.json.is_file()
        json = mine.json if written else None
        outcome = outcome_of(candidate, code, results, mine.markdown, error, json)
        outcomes.append(outcome)
        if on_done is not None:
            on_done(outcome)
        if code == ExitCode.INTERRUPTED:
            break
    return outcomes


def _shown(results: Results) -> Results:
    """``results`` as their JSON document reads back (non-finite numbers absent), as every
    report shows them."""
    return Results.from_document(results.to_document())


def session_runner(checked: Sequence[CheckedCandidate]) -> SessionRunner:
    """Runs one checked candidate in its own pytest session, handing it the inputs
    :func:`gate.workflows.plan.check_plan` read (the session reads none of them again).

    Report paths other than the checked ones (the demo's ``--json-dir``) are checked here,
    once, and replace them.
    """
    from gate.session.runner import run_session

    by_name = {item.candidate.name: item for item in checked}

    def run(candidate: Candidate, targets: ReportTargets) -> ExitCode:
        item = by_name[candidate.name]
        inputs = item.inputs
        if targets != item.targets:
            check_targets(targets)
            inputs = replace(inputs, options=replace(inputs.options, reports=targets))
        return run_session(inputs, tiers=candidate.tiers)

    return run


def execute_plan(plan: RunPlan, checked: Sequence[CheckedCandidate], console: Console) -> ExitCode:
    """Run every candidate of ``plan`` on its ``checked`` inputs (:func:`~gate.workflows.plan.check_plan`);
    the summary (several or ``--config``) and worst exit code.

    One ``--candidate`` prints its own report only; its exit code is the command's.
    """
    session = session_runner(checked)
    if plan.single:
        (candidate,) = plan.candidates
        return session(candidate, plan.targets_for(candidate))
    outcomes = run_candidates(plan.candidates, session, plan.targets_for)
    worst = worst_exit(o.exit_code for o in outcomes)
    console.print(summary_table(outcomes))
    skipped = len(plan.candidates) - len(outcomes)
    if skipped:
        console.print(f"gate: {skipped} candidate(s) not run (interrupted)")
    console.print(f"gate: worst exit code {int(worst)} over {len(outcomes)} candidate(s)")
    judge_round_robin(outcomes, plan.run_config, plan.targets.json, console)
    if plan.several and plan.targets.markdown is not None:
        with writing("the combined markdown report", plan.targets.markdown):
            write_atomic(plan.targets.markdown, summary_markdown(outcomes, worst).encode())
    return worst


def judge_round_robin(
    outcomes: Sequence[CandidateOutcome],
    config: RunConfig | None,
    json_path: Path | None,
    console: Console,
) -> None:
    """Two or more candidates judged by the judge tier: their round robin, judged per the
    run ``config``'s judge settings (printed; JSON ``<stem>-round-robin.json`` beside
    ``json_path``). A failure there is one line."""
    from gate.workflows.round_robin import report_round_robin, write_round_robin

    try:
        runs = {o.candidate.name: o.results for o in outcomes}
        rr = report_round_robin(runs, config, console)
        if rr is not None and json_path is not None:
            write_round_robin(json_path.with_name(f"{json_path.stem}-round-robin.json"), rr)
    except GateError as exc:
        console.print(f"gate: judge round robin failed: {exc.format_line()}", markup=False)


__all__ = [
    "SEVERITY_ORDER",
    "CandidateOutcome",
    "SessionRunner",
    "announce",
    "execute_plan",
    "judge_round_robin",
    "outcome_of",
    "run_candidates",
    "session_runner",
    "summary_markdown",
    "summary_table",
    "worst_exit",
    "worst_findings",
]

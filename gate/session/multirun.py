"""Gate several candidates of a run config, one pytest session each, then one summary.

``gate run --config gate.toml`` (without ``--candidate``) lands here:

1. every candidate is checked before any model is loaded — its baseline refs
   resolve in the store and its calibration file reads — so a typo fails at
   once with exit 4;
2. each candidate runs its own gate session (:func:`gate.session.runner.run_pytest`),
   which prints that candidate's report;
3. a summary table follows (candidate, recipe, verdict, exit code, the worst
   findings), and the command exits with the worst exit code (:func:`worst_exit`).

Report files: with one candidate the paths given are used as they are; with
several, each candidate writes ``<stem>-<name><suffix>`` beside the given path
(``out/results.json`` -> ``out/results-nf4.json``), and the markdown path also
receives one combined document (summary table, then every candidate's
report) so that a workflow can post it as a single pull-request comment.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from gate import progress
from gate.errors import ExitCode
from gate.report.outputs import ReportTargets
from gate.session.run_config import Candidate
from gate.store.atomic import write_atomic

#: Exit codes from least to most severe: an error that stopped a candidate from
#: being judged outranks a regression, and an interrupt ends the whole run.
SEVERITY_ORDER: tuple[ExitCode, ...] = (
    ExitCode.OK,
    ExitCode.BLOCKED,
    ExitCode.NO_MEASUREMENTS,
    ExitCode.USAGE_ERROR,
    ExitCode.INTERNAL_ERROR,
    ExitCode.INTERRUPTED,
)

_FAILURE_WORDS: dict[ExitCode, str] = {
    ExitCode.BLOCKED: "BLOCKED",
    ExitCode.INTERRUPTED: "INTERRUPTED",
    ExitCode.INTERNAL_ERROR: "ERROR (model or internal)",
    ExitCode.USAGE_ERROR: "ERROR (input)",
    ExitCode.NO_MEASUREMENTS: "NOTHING MEASURED",
}

#: Runs one candidate's gate session: ``(candidate, report targets) -> exit code``.
SessionRunner = Callable[[Candidate, ReportTargets], ExitCode]


def worst_exit(codes: Iterable[int]) -> ExitCode:
    """The most severe exit code by :data:`SEVERITY_ORDER` (``OK`` for none)."""
    worst = ExitCode.OK
    for raw in codes:
        try:
            code = ExitCode(raw)
        except ValueError:
            code = ExitCode.INTERNAL_ERROR
        if SEVERITY_ORDER.index(code) > SEVERITY_ORDER.index(worst):
            worst = code
    return worst


def suffixed(path: Path | None, name: str) -> Path | None:
    """``out/results.json`` -> ``out/results-<name>.json``."""
    if path is None:
        return None
    return path.with_name(f"{path.stem}-{name}{path.suffix}")


def candidate_targets(targets: ReportTargets, name: str, several: bool) -> ReportTargets:
    """The report paths of one candidate (suffixed when there are several candidates)."""
    if not several:
        return targets
    return ReportTargets(
        json=suffixed(targets.json, name),
        html=suffixed(targets.html, name),
        junit=suffixed(targets.junit, name),
        markdown=suffixed(targets.markdown, name),
    )


@dataclass(frozen=True)
class Outcome:
    """How one candidate ended."""

    candidate: Candidate
    exit_code: ExitCode
    headline: str
    findings: tuple[str, ...]
    markdown: Path | None = None


_SEVERITY_RANK = {"critical": 0, "warn": 1}


def _finding(entry: Mapping[str, Any]) -> str:
    name = str(entry.get("name", "?"))
    if entry.get("slice"):
        name += f"[{entry['slice']}]"
    value = entry.get("value")
    base = entry.get("baseline_value")
    shown = f"{value:.4g}" if isinstance(value, (int, float)) else "-"
    if isinstance(base, (int, float)):
        shown += f" vs {base:.4g}"
    return f"{name} {shown} ({entry.get('severity')})"


def worst_findings(doc: Mapping[str, Any], limit: int = 3) -> tuple[str, ...]:
    """The ``limit`` worst non-passing metrics of a results document, critical first.

    Within a severity, whole-metric verdicts before per-slice ones, then the
    larger change first (``|relative_delta|``, else ``|delta|``).
    """
    bad = [m for m in doc.get("metrics", []) if m.get("severity") in _SEVERITY_RANK]

    def key(entry: Mapping[str, Any]) -> tuple[int, bool, float]:
        size = 0.0
        for field_name in ("relative_delta", "delta"):
            value = entry.get(field_name)
            if isinstance(value, (int, float)):
                size = float(value)
                break
        return (_SEVERITY_RANK[str(entry["severity"])], bool(entry.get("slice")), -abs(size))

    return tuple(_finding(m) for m in sorted(bad, key=key)[:limit])


def outcome_of(
    candidate: Candidate, code: ExitCode, results: Path, markdown: Path | None = None
) -> Outcome:
    """Read the candidate's results JSON (when written) into an :class:`Outcome`."""
    doc: Mapping[str, Any] | None = None
    if results.is_file():
        try:
            loaded = json.loads(results.read_text(encoding="utf-8"))
            doc = loaded if isinstance(loaded, dict) else None
        except (OSError, ValueError):
            doc = None
    if doc is None or code in (ExitCode.INTERRUPTED, ExitCode.INTERNAL_ERROR):
        word = _FAILURE_WORDS.get(code, "APPROVED")
        reason = "see its report above" if code != ExitCode.OK else ""
        return Outcome(candidate, code, word, (reason,) if reason else (), markdown)
    headline = str(doc.get("headline") or doc.get("verdict") or "")
    if code in (ExitCode.USAGE_ERROR, ExitCode.NO_MEASUREMENTS):
        headline = _FAILURE_WORDS[code]
    findings = worst_findings(doc)
    if not findings:
        count = len(doc.get("metrics", []))
        findings = (f"all {count} metric checks pass",) if code == ExitCode.OK else ()
    if code == ExitCode.BLOCKED and not doc.get("metrics"):
        findings = ("a tier test failed; see its report above",)
    return Outcome(candidate, code, headline, findings, markdown)


def summary_table(outcomes: Sequence[Outcome]) -> Table:
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


def summary_markdown(outcomes: Sequence[Outcome], code: ExitCode) -> str:
    """A combined markdown document: the summary table, then each candidate's own report."""
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
    for item in outcomes:
        lines += ["", f"### {item.candidate.name} ({item.candidate.recipe_label})", ""]
        if item.markdown is not None and item.markdown.is_file():
            lines.append(item.markdown.read_text(encoding="utf-8").rstrip())
        else:
            lines.append(f"No report: {item.headline} (exit {int(item.exit_code)}).")
    return "\n".join(lines) + "\n"


def precheck(candidates: Sequence[Candidate], store: Path) -> None:
    """Fail before any model loads: every model spec parses, every baseline ref
    resolves in ``store``, every needed calibration file reads (exit 4 otherwise)."""
    from gate.data.calibration import calibration_for
    from gate.models.spec import ModelSpec
    from gate.store.baseline import BaselineStore

    baselines = BaselineStore(store)
    for candidate in candidates:
        slug = candidate.model_slug or ModelSpec.parse(candidate.model).slug
        for ref in candidate.against or ("latest",):
            baselines.resolve(ref, slug)
        calibration_for(candidate.recipe, candidate.calibration)


def run_candidates(
    candidates: Sequence[Candidate],
    session: SessionRunner,
    targets: ReportTargets,
    console: Console,
) -> ExitCode:
    """Run ``session`` for every candidate, print the summary, return the worst exit code.

    ``session`` gets each candidate's report targets; the JSON target is always
    set (a temporary file when the user asked for none) so the summary can read
    the verdicts back. An interrupted candidate ends the run.
    """
    several = len(candidates) > 1
    outcomes: list[Outcome] = []
    with tempfile.TemporaryDirectory(prefix="gate-run-") as scratch:
        for index, candidate in enumerate(candidates, start=1):
            mine = candidate_targets(targets, candidate.name, several)
            results = mine.json or Path(scratch) / f"results-{candidate.name}.json"
            mine = ReportTargets(
                json=results, html=mine.html, junit=mine.junit, markdown=mine.markdown
            )
            progress.note(
                f"candidate {index}/{len(candidates)}: {candidate.name}"
                f" ({candidate.model}, recipe {candidate.recipe_label})"
            )
            code = session(candidate, mine)
            outcomes.append(outcome_of(candidate, code, results, mine.markdown))
            if code == ExitCode.INTERRUPTED:
                break
        worst = worst_exit(o.exit_code for o in outcomes)
        console.print(summary_table(outcomes))
        skipped = len(candidates) - len(outcomes)
        if skipped:
            console.print(f"gate: {skipped} candidate(s) not run (interrupted)")
        console.print(f"gate: worst exit code {int(worst)} over {len(outcomes)} candidate(s)")
        if several and targets.markdown is not None:
            write_atomic(targets.markdown, summary_markdown(outcomes, worst).encode())
    return worst


__all__ = [
    "SEVERITY_ORDER",
    "Outcome",
    "SessionRunner",
    "candidate_targets",
    "outcome_of",
    "precheck",
    "run_candidates",
    "suffixed",
    "summary_markdown",
    "summary_table",
    "worst_exit",
    "worst_findings",
]

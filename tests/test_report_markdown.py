"""Markdown report (PR comment / step summary) of real comparisons."""

from __future__ import annotations

from pathlib import Path

from gate.gating.verdict import Severity
from gate.report.console import order
from gate.report.markdown import MAX_FINDINGS, cell, render_markdown
from gate.report.outputs import ReportTargets, write_reports
from gate.report.results import Results
from tests import report_cases


def test_blocked_comment_leads_with_verdict_and_worst_findings(tmp_path: Path) -> None:
    case = report_cases.blocked()
    path = tmp_path / "comment.md"
    env = {"GITHUB_SERVER_URL": "https://h", "GITHUB_REPOSITORY": "o/r", "GITHUB_RUN_ID": "7"}
    write_reports(case.results, ReportTargets(markdown=path), environ=env)
    text = path.read_text()
    first = text.splitlines()[0]
    assert first == "## ❌ gate: BLOCKED"
    assert "`demo (quanto-int2)` vs `fp16 = #0001 fp16`" in text
    counts = [line for line in text.splitlines() if " · exit 1 · " in line]
    assert len(counts) == 1
    n_crit = sum(1 for v in case.outcome.verdicts if v.severity == Severity.CRITICAL)
    assert f"{n_crit} critical" in counts[0]
    findings = [v for v in order(case.outcome.verdicts) if v.severity != Severity.PASS]
    rows = text.split("### Findings")[1].split("<details>")[0].splitlines()
    table = [r for r in rows if r.startswith("| **")]
    assert len(table) == min(MAX_FINDINGS, len(findings))
    worst = findings[0]
    assert f"`{worst.metric}` | {worst.slice}" in table[0] and "CRITICAL" in table[0]
    assert "[run artifacts](https://h/o/r/actions/runs/7#artifacts)" in text
    total = len(case.outcome.verdicts)
    assert f"<summary>All {total} results, by tier</summary>" in text


def test_approved_comment_is_short_and_green() -> None:
    results = Results.from_document(report_cases.approved().doc)
    text = render_markdown(results)
    assert text.startswith("## ✅ gate: APPROVED")
    assert "Every metric is within its bounds." in text
    assert "### Findings" not in text


def test_cells_cannot_break_the_table() -> None:
    assert cell("a|b\nc <x>") == "a\\|b c &lt;x&gt;"


def test_what_the_run_could_not_see_is_one_line_per_tier_and_the_list_is_folded() -> None:
    case = report_cases.blocked()  # small slices, and a whole metric, underpowered in two tiers
    results = Results.from_document(case.doc)
    text = render_markdown(results)
    # counted independently, from the results JSON's underpowered list
    keys: dict[str, set[tuple[str, str | None]]] = {}
    for entry in case.doc["underpowered"]:
        keys.setdefault(entry["name"].split(".")[0], set()).add((entry["name"], entry["slice"]))
    assert len(keys) >= 2
    shown = report_cases.outside_details(text)
    lines = [line for line in shown if "UNDERPOWERED" in line]
    assert len(lines) == len(keys)  # one per tier, nothing else unfolded
    for tier, found in sorted(keys.items()):
        metrics = sum(1 for _, s in found if s is None)
        slices = len(found) - metrics
        words = [f"{metrics} metric{'s' * (metrics != 1)}"] * bool(metrics)
        words += [f"{slices} slice{'s' * (slices != 1)}"] * bool(slices)
        assert f"- {tier}: {' and '.join(words)} UNDERPOWERED (critical bound below" in "\n".join(
            lines
        )
    assert "### What the run could not see" in shown
    folded = text.split("### What the run could not see")[1].split("</details>")[0]
    n = len(case.doc["underpowered"])
    assert f"<details><summary>The {n} underpowered verdicts" in folded
    for entry in case.doc["underpowered"]:  # the whole list, folded: nothing left out
        assert f"- {cell(entry['message'])}" in folded


def test_the_combined_comment_puts_findings_first_and_folds_clean_candidates(
    tmp_path: Path,
) -> None:
    from gate.errors import ExitCode, worst_exit
    from gate.session.run_config import Candidate
    from gate.workflows.multirun import outcome_of, summary_markdown

    outcomes = []
    for name, case in (("control", report_cases.approved()), ("int2", report_cases.blocked())):
        results = Results.from_document(case.doc)
        own = tmp_path / f"comment-{name}.md"
        own.write_text(render_markdown(results), encoding="utf-8")
        candidate = Candidate(name, "demo", None, ("fp16",), None, None, "demo")
        outcomes.append(outcome_of(candidate, ExitCode(results.exit_code), results, own))
    text = summary_markdown(outcomes, worst_exit(o.exit_code for o in outcomes))
    blocked = Results.from_document(report_cases.blocked().doc)
    worst = next(v for v in order(blocked.verdicts) if v.severity == Severity.CRITICAL)
    row = f"| **❌ CRITICAL** | `{worst.metric}` | {worst.slice} |"
    assert row in text and text.index(row) < text.index("<details>")  # before any fold
    assert text.index("| control | demo |") < text.index("| int2 | demo |")  # table: config order
    assert "<details><summary>control (none): ✅ APPROVED, its full report</summary>" in text
    control = (tmp_path / "comment-control.md").read_text(encoding="utf-8").strip()
    assert control in text and control not in "\n".join(report_cases.outside_details(text))
    shown = report_cases.outside_details(text)
    assert "## ✅ gate: APPROVED" not in shown and "## ❌ gate: BLOCKED" in shown
    underpowered = [line for line in shown if "UNDERPOWERED" in line]
    assert 0 < len(underpowered) <= len({v.tier for v in blocked.verdicts})  # a few, counted

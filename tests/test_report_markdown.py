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

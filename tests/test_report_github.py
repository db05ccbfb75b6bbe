"""GitHub output: annotations and the step summary of a blocked run, through write_reports."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

# pre-imported: pytester's in-process sessions cannot re-import C extensions (matplotlib)
import gate.report.html
import gate.report.junit
import gate.report.plots  # noqa: F401
from gate.gating.verdict import Severity
from gate.report.console import order
from gate.report.github import (
    MAX_ANNOTATIONS,
    annotation_lines,
    artifacts_url,
    escape_data,
    escape_property,
)
from gate.report.outputs import ReportTargets, write_reports
from tests import report_cases
from tests.test_plugin import _gate, _record, gate_dir  # noqa: F401  (gate_dir: fixture)


@pytest.fixture(scope="module")
def blocked() -> report_cases.Case:
    return report_cases.blocked()


def _env(summary: Path) -> dict[str, str]:
    return {
        "GITHUB_ACTIONS": "true",
        "GITHUB_STEP_SUMMARY": str(summary),
        "GITHUB_SERVER_URL": "https://github.example",
        "GITHUB_REPOSITORY": "org/models",
        "GITHUB_RUN_ID": "4242",
    }


def test_blocked_run_annotates_and_summarises(blocked: report_cases.Case, tmp_path: Path) -> None:
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    out = io.StringIO()
    write_reports(blocked.results, ReportTargets(), environ=_env(summary), stream=out)
    lines = out.getvalue().splitlines()
    errors = [line for line in lines if line.startswith("::error ")]
    warnings = [line for line in lines if line.startswith("::warning ")]
    criticals = [v for v in blocked.outcome.verdicts if v.severity == Severity.CRITICAL]
    warns = [v for v in blocked.outcome.verdicts if v.severity == Severity.WARN]
    assert len(errors) == min(MAX_ANNOTATIONS, len(criticals)) == MAX_ANNOTATIONS
    assert len(warnings) == min(MAX_ANNOTATIONS, len(warns))
    assert len(lines) == len(errors) + len(warnings)
    # worst first: the first error names the worst critical metric
    worst = order(criticals)[0]
    assert errors[0].endswith("%0A" + escape_data(worst.reason))
    assert errors[0].startswith(f"::error title={escape_property(f'gate CRITICAL: {worst.key}')}")
    assert all(e.count("::") == 2 for e in errors)  # "::error props::message", nothing more
    assert any("fidelity.cga" in e for e in errors)
    text = summary.read_text()
    assert text.startswith("earlier step\n")  # appended, never overwritten
    assert "BLOCKED" in text
    assert "| severity | metric | slice | candidate | baseline | delta |" in text
    assert "`fidelity.cga`" in text and "0.03 / 0.06" in text  # code slice's tighter bound
    assert "https://github.example/org/models/actions/runs/4242#artifacts" in text


def test_nothing_happens_outside_github(blocked: report_cases.Case, tmp_path: Path) -> None:
    out = io.StringIO()
    assert write_reports(blocked.results, ReportTargets(), environ={}, stream=out) == []
    assert out.getvalue() == ""


def test_approved_run_has_no_annotations(tmp_path: Path) -> None:
    case = report_cases.approved()
    summary = tmp_path / "summary.md"
    out = io.StringIO()
    write_reports(case.results, ReportTargets(), environ=_env(summary), stream=out)
    assert out.getvalue() == ""
    assert "APPROVED" in summary.read_text() and "BLOCKED" not in summary.read_text()


def test_escaping_follows_the_workflow_command_rules() -> None:
    assert escape_data("50% drop\r\nnext") == "50%25 drop%0D%0Anext"
    assert escape_property("a:b, c%") == "a%3Ab%2C c%25"


def test_annotation_message_cannot_break_the_command(blocked: report_cases.Case) -> None:
    lines = annotation_lines(blocked.outcome.verdicts)
    assert lines  # the blocked case has critical verdicts: there is something to check
    for line in lines:
        props, message = line[2:].split("::", 1)
        command, title = props.split(" ", 1)
        assert command in ("error", "warning")
        assert "\n" not in line and "\r" not in line
        assert title.startswith("title=") and "," not in title and ":" not in title[6:]
        assert "%0A" in message  # the reason sits on its own (escaped) line


def test_artifacts_url_needs_all_variables() -> None:
    assert artifacts_url({"GITHUB_SERVER_URL": "https://x", "GITHUB_REPOSITORY": "o/r"}) is None


# The plugin end to end (an in-memory backend through the plugin's documented hook):
# `--gate-html/--gate-junit/--gate-markdown` and the GitHub output of a blocked run.


def test_plugin_writes_every_report_and_annotates(
    gate_dir: pytest.Pytester,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    summary = gate_dir.path / "summary.md"
    for key, value in _env(summary).items():
        monkeypatch.setenv(key, value)
    _record(gate_dir)
    result = _gate(
        gate_dir,
        "--gate-recipe",
        "critical",
        "--gate-html",
        "out/report.html",
        "--gate-junit",
        "out/junit.xml",
        "--gate-markdown",
        "out/comment.md",
    )
    assert result.ret == 1
    result.stdout.fnmatch_lines(["::error title=gate CRITICAL%3A accuracy.mcq_acc vs latest::*"])
    out = gate_dir.path / "out"
    assert "BLOCKED" in (out / "report.html").read_text()
    assert b'failures="1"' in (out / "junit.xml").read_bytes()
    assert (out / "comment.md").read_text().startswith("## ❌ gate: BLOCKED")
    assert "`accuracy.mcq_acc`" in summary.read_text()

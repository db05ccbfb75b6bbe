"""Every report says, in words, which verdicts are underpowered (docs/metrics.md "Power").

The report cases go through the real pipeline (tests/report_cases.py): the
approved build has small slices (12 prompts a category, 24 to 88 questions a
margin bucket) whose critical bounds are below what their tests detect; the
blocked build also has a whole metric (``fidelity.kl_mean``) in that state.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from lxml import etree

from gate.gating.verdict import decide
from gate.report.console import make_console, render
from gate.report.html import html_tiers_section, underpowered_section
from gate.report.junit import render_junit
from gate.report.markdown import render_markdown
from gate.report.results import Results
from gate.report.results_json import build_results
from tests import report_cases

XSD = Path(__file__).parent / "junit" / "junit.xsd"


@pytest.fixture(scope="module")
def blocked() -> report_cases.Case:
    return report_cases.blocked()


@pytest.fixture(scope="module")
def approved() -> report_cases.Case:
    return report_cases.approved()


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_console_lists_underpowered_verdicts_in_words_without_changing_the_verdict(
    blocked: report_cases.Case, approved: report_cases.Case
) -> None:
    case = blocked
    buffer = io.StringIO()
    render(build_results(case.outcome), make_console(buffer))
    text = _flat(buffer.getvalue())
    weak = case.outcome.underpowered
    kl = next(p for p in weak if p.key == "fidelity.kl_mean")
    assert kl.message.startswith("fidelity.kl_mean: n = 36 can only detect a rise of ")
    assert kl.message.endswith("; the critical bound is 0.10 - UNDERPOWERED")
    assert "underpowered (a regression of the critical size would probably pass):" in text
    assert kl.message in text
    assert buffer.getvalue().splitlines()[-1].endswith(f", {len(weak)} underpowered")
    assert "MDE" in text  # the tables' column
    assert approved.outcome.underpowered and approved.outcome.headline == "APPROVED"


def test_markdown_html_and_junit_say_it_too(blocked: report_cases.Case) -> None:
    results = Results.from_document(blocked.doc)
    kl = next(p for p in results.underpowered if p.key == "fidelity.kl_mean")
    markdown = render_markdown(results)
    assert "- fidelity: 1 metric and 10 slices UNDERPOWERED (critical bound below" in markdown
    folded = markdown.split("### What the run could not see")[1].split("</details>")[0]
    assert "underpowered verdicts (a regression of the critical size would probably pass)" in folded
    assert f"- {kl.message}" in folded
    assert f" · {len(results.underpowered)} underpowered" in markdown
    page = underpowered_section(results) + html_tiers_section(
        results
    )  # render_html's parts, no plots
    assert f'<h2 id="underpowered">Underpowered: {len(results.underpowered)}</h2>' in page
    assert f"<li>{kl.message}</li>" in page
    assert "<th>MDE</th>" in page
    root = etree.fromstring(render_junit(results))
    etree.XMLSchema(etree.parse(str(XSD))).assertValid(root)
    props = {p.get("name"): p.get("value") for p in root.iter("property")}
    assert props["warning:underpowered:fidelity.kl_mean"] == kl.message
    case_el = next(c for c in root.iter("testcase") if c.get("name") == "fidelity.kl_mean")
    assert kl.message in (case_el.findtext("system-out") or "")


def test_a_run_blocked_only_for_power_says_why_in_junit(approved: report_cases.Case) -> None:
    verdicts = approved.outcome.verdicts
    outcome = decide(verdicts, require_power=True)
    assert outcome.exit_code == 1 and outcome.headline == "BLOCKED"
    results = build_results(outcome)
    root = etree.fromstring(render_junit(results))
    error = root.find("testsuite[@name='gate']/testcase[@name='run']/error")
    assert error is not None and error.get("message") == "BLOCKED (exit 1)"
    assert "underpowered verdicts block this run (--strict or require_power = true)" in (
        error.text or ""
    )
    assert outcome.underpowered[0].message in (error.text or "")

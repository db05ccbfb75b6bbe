"""JUnit XML: valid against tests/junit/junit.xsd, one failure per critical verdict, right totals."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest
from lxml import etree

from gate.gating.verdict import Severity
from gate.report.junit import render_junit
from gate.report.results import Results
from tests import report_cases

XSD = Path(__file__).parent / "junit" / "junit.xsd"
WHEN = datetime.datetime(2025, 6, 2, 3, 17, tzinfo=datetime.timezone.utc)


@pytest.fixture(scope="module")
def schema() -> etree.XMLSchema:
    return etree.XMLSchema(etree.parse(str(XSD)))


def _parse(results: Results, schema: etree.XMLSchema) -> etree._Element:
    doc = etree.fromstring(render_junit(results, timestamp=WHEN))
    schema.assertValid(doc)
    return doc


def test_blocked_run_has_one_failure_per_critical(schema: etree.XMLSchema) -> None:
    case = report_cases.blocked()
    results = Results.from_document(case.doc)
    root = _parse(results, schema)
    verdicts = case.outcome.verdicts
    criticals = [v for v in verdicts if v.severity == Severity.CRITICAL]
    cases = root.findall("testsuite/testcase")
    failures = root.findall("testsuite/testcase/failure")
    assert len(cases) == len(verdicts) == int(root.get("tests"))
    assert len(failures) == len(criticals) == int(root.get("failures"))
    assert root.findall("testsuite/testcase/error") == []
    # each critical verdict is the failing case of its name, classname = tier
    failing = {(c.get("classname"), c.get("name")) for c in cases if c.find("failure") is not None}
    assert failing == {(v.tier, v.key) for v in criticals}
    cga = next(c for c in cases if c.get("name") == "fidelity.cga")
    assert cga.get("classname") == "fidelity"
    assert cga.find("failure").get("message") == next(
        v.reason for v in criticals if v.key == "fidelity.cga"
    )
    for suite in root.findall("testsuite"):
        assert int(suite.get("tests")) == len(suite.findall("testcase"))
        assert int(suite.get("failures")) == len(suite.findall("testcase/failure"))
        assert suite.get("timestamp") == "2025-06-02T03:17:00"


def test_warnings_are_properties_not_failures(schema: etree.XMLSchema) -> None:
    case = report_cases.blocked()
    root = _parse(Results.from_document(case.doc), schema)
    warns = [v for v in case.outcome.verdicts if v.severity == Severity.WARN]
    props = {p.get("name"): p.get("value") for p in root.findall("testsuite/properties/property")}
    assert {f"warning:{v.key}" for v in warns} <= set(props)
    ttft = next(v for v in warns if v.key == "latency.ttft_p50")
    assert props["warning:latency.ttft_p50"] == ttft.reason
    case_el = next(c for c in root.iter("testcase") if c.get("name") == "latency.ttft_p50")
    assert case_el.find("failure") is None and "WARN" in case_el.findtext("system-out")


def test_approved_run_is_all_green(schema: etree.XMLSchema) -> None:
    root = _parse(Results.from_document(report_cases.approved().doc), schema)
    assert root.get("failures") == "0" and root.get("errors") == "0"
    assert int(root.get("tests")) > 0


def test_several_refs_name_the_ref(schema: etree.XMLSchema) -> None:
    case = report_cases.blocked(refs=("fp16", "prod"))
    root = _parse(Results.from_document(case.doc), schema)
    names = [c.get("name") for c in root.iter("testcase")]
    assert "fidelity.cga vs fp16" in names and "fidelity.cga vs prod" in names
    assert len(names) == len(set(names))


def test_a_run_that_crashed_is_an_error_not_green(schema: etree.XMLSchema) -> None:
    doc = dict(report_cases.approved().doc, exit_code=3, verdict="block", headline="BLOCKED")
    doc["notes"] = ["tier test failed: test_fidelity.py::test_fidelity"]
    root = _parse(Results.from_document(doc), schema)
    (error,) = root.findall("testsuite/testcase/error")
    assert "exit 3" in error.get("message") and "test_fidelity" in error.text
    assert root.get("errors") == "1"


def test_schema_rejects_a_malformed_file(schema: etree.XMLSchema) -> None:
    bad = etree.fromstring(b'<testsuites><testsuite tests="x"><testcase/></testsuite></testsuites>')
    assert not schema.validate(bad)

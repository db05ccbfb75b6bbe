"""JUnit XML: one test case per metric verdict, for the common test-report tools.

Layout (the Jenkins / Ant JUnit format that CI test reporters read)::

    <testsuites name="gate" tests failures errors skipped time>
      <testsuite name="<tier>" tests failures errors="0" skipped="0" time timestamp>
        <properties>            run facts, and one "warning:<case>" per warning
        <testcase classname="<tier>" name="<metric>[<slice>] vs <ref>" time>
          <failure type="critical" message="<reason>">details</failure>   (critical)
          <system-out>WARN: reason</system-out>                            (warning)
        </testcase> ...

* a critical verdict is a ``<failure>`` whose message is the verdict's reason;
* a warning passes, and is recorded as a suite ``<property>`` named
  ``warning:<case name>`` (properties belong to the suite in that format, so
  strict validators accept the file) and in the case's ``<system-out>``;
* a passing metric is a plain ``<testcase>``;
* an underpowered verdict (critical bound below its MDE, docs/metrics.md
  "Power") is a warning too: a property ``warning:underpowered:<case name>``
  whose value says it in words, repeated in the case's ``<system-out>``;
* a package (or the serving engine) measured at another version than a
  baseline's (version drift, :mod:`gate.gating.versions`) is a warning: a
  property ``warning:version drift: <package> vs <ref>`` of a suite ``gate``
  and a passing case ``versions`` whose ``<system-out>`` names both versions;
* a run that exits nonzero with no critical metric to show for it (a tier
  crashed, bad input, nothing measured, warnings under ``--strict``) adds to the
  suite ``gate`` a case ``run`` holding an ``<error>`` and the
  run's notes, so the report never looks green for an unmeasured build.

The suffix `` vs <ref>`` is added only when several baseline refs were
compared, so case names stay ``tier.metric`` in the common case.
``tests``/``failures`` totals are counted from the cases themselves.
"""

from __future__ import annotations

import datetime
import xml.etree.ElementTree as ET
from collections.abc import Sequence

from gate.errors import ExitCode
from gate.gating.verdict import Severity, Verdict
from gate.report.console import fmt_bound, fmt_ci, fmt_delta, fmt_mde, fmt_number, order
from gate.report.judge_summary import JudgeSummary, summary_lines
from gate.report.markdown import candidate_text, headline
from gate.report.results import Results


def case_name(verdict: Verdict, *, several_refs: bool) -> str:
    """``fidelity.cga[category:code]`` (`` vs prod`` when several refs were compared)."""
    return verdict.key + (f" vs {verdict.against}" if several_refs else "")


def _detail(verdict: Verdict) -> str:
    return (
        f"candidate {fmt_number(verdict.value)} vs baseline {fmt_number(verdict.baseline_value)} "
        f"({verdict.against}); delta {fmt_delta(verdict)}; bound warn/critical "
        f"{fmt_bound(verdict.threshold)}; CI of delta {fmt_ci(verdict.ci)}; n={verdict.n}; "
        f"MDE {fmt_mde(verdict)}; test {verdict.test or '-'}"
        + (f", p={verdict.p_value:.3g}" if verdict.p_value is not None else "")
        + f"\n{verdict.reason}"
    )


def _suite(
    tier: str,
    verdicts: Sequence[Verdict],
    *,
    several_refs: bool,
    timestamp: str,
    panels: Sequence[JudgeSummary] = (),
) -> ET.Element:
    failures = sum(1 for v in verdicts if v.severity == Severity.CRITICAL)
    suite = ET.Element(
        "testsuite",
        {
            "name": tier,
            "tests": str(len(verdicts)),
            "failures": str(failures),
            "errors": "0",
            "skipped": "0",
            "time": "0.000",
            "timestamp": timestamp,
        },
    )
    props = ET.SubElement(suite, "properties")
    ET.SubElement(props, "property", {"name": "tier", "value": tier})
    for verdict in verdicts:
        if verdict.severity == Severity.WARN:
            name = f"warning:{case_name(verdict, several_refs=several_refs)}"
            ET.SubElement(props, "property", {"name": name, "value": verdict.reason})
    for verdict in verdicts:
        if verdict.power is not None and verdict.power.underpowered:
            name = f"warning:underpowered:{case_name(verdict, several_refs=several_refs)}"
            ET.SubElement(props, "property", {"name": name, "value": verdict.power.message})
    for verdict in verdicts:
        case = ET.SubElement(
            suite,
            "testcase",
            {
                "classname": tier,
                "name": case_name(verdict, several_refs=several_refs),
                "time": "0.000",
            },
        )
        if verdict.severity == Severity.CRITICAL:
            failure = ET.SubElement(
                case, "failure", {"type": "critical", "message": verdict.reason}
            )
            failure.text = _detail(verdict)
        texts = [f"WARN: {_detail(verdict)}"] if verdict.severity == Severity.WARN else []
        if verdict.power is not None and verdict.power.underpowered:
            texts.append(verdict.power.message)
        if texts:
            out = ET.SubElement(case, "system-out")
            out.text = "\n".join(texts)
    if panels:  # the judge panel (after the cases, as the format orders a suite's children)
        text = ET.SubElement(suite, "system-out")
        text.text = "\n".join(line for panel in panels for line in summary_lines(panel))
    return suite


def _run_failed(results: Results) -> bool:
    """Nonzero exit with no critical metric to show for it (crash, bad input, strict)."""
    return results.exit_code != ExitCode.OK and not any(
        v.severity == Severity.CRITICAL for v in results.verdicts
    )


def _run_error_text(results: Results) -> str:
    lines = list(results.notes)
    warned = results.version_drift or any(v.severity == Severity.WARN for v in results.verdicts)
    if results.exit_code == ExitCode.BLOCKED and warned:
        lines.append("warnings block this run (strict)")
    if results.exit_code == ExitCode.BLOCKED and results.underpowered:
        lines.append("underpowered verdicts block this run (--strict or require_power = true):")
        lines += [p.message for p in results.underpowered]
    return "\n".join(lines) or "the run did not complete its comparison"


def _gate_suite(results: Results, stamp: str) -> ET.Element | None:
    """The suite ``gate``: version drift warnings and the run's own error; ``None`` without."""
    drift = results.version_drift
    failed = _run_failed(results)
    if not drift and not failed:
        return None
    suite = ET.Element(
        "testsuite",
        {
            "name": "gate",
            "tests": "0",
            "failures": "0",
            "errors": "1" if failed else "0",
            "skipped": "0",
            "time": "0.000",
            "timestamp": stamp,
        },
    )
    if drift:
        props = ET.SubElement(suite, "properties")
        for item in drift:
            name = f"warning:version drift: {item.package} vs {item.against}"
            ET.SubElement(props, "property", {"name": name, "value": item.message})
        case = ET.SubElement(
            suite, "testcase", {"classname": "gate", "name": "versions", "time": "0.000"}
        )
        out = ET.SubElement(case, "system-out")
        out.text = "\n".join(f"WARN: {item.message}" for item in drift)
    if failed:
        case = ET.SubElement(
            suite, "testcase", {"classname": "gate", "name": "run", "time": "0.000"}
        )
        error = ET.SubElement(
            case,
            "error",
            {
                "type": f"exit {results.exit_code}",
                "message": f"{headline(results)} (exit {results.exit_code})",
            },
        )
        error.text = _run_error_text(results)
    suite.set("tests", str(len(suite.findall("testcase"))))
    return suite


def render_junit(results: Results, *, timestamp: datetime.datetime | None = None) -> bytes:
    """The JUnit XML document (UTF-8 bytes with an XML declaration)."""
    when = (timestamp or datetime.datetime.now(datetime.timezone.utc)).replace(microsecond=0)
    stamp = when.astimezone(datetime.timezone.utc).replace(tzinfo=None).isoformat()
    verdicts = results.verdicts
    several = len({v.against for v in verdicts}) > 1
    tiers: dict[str, list[Verdict]] = {}
    for verdict in order(verdicts):
        tiers.setdefault(verdict.tier, []).append(verdict)
    root = ET.Element(
        "testsuites",
        {
            "name": f"gate: {candidate_text(results.candidate)} - {headline(results)}",
            "tests": str(len(verdicts)),
            "failures": str(sum(1 for v in verdicts if v.severity == Severity.CRITICAL)),
            "errors": "0",
            "skipped": "0",
            "time": "0.000",
        },
    )
    for tier in sorted(tiers):
        panels = results.judge if tier == "judge" else ()
        root.append(_suite(tier, tiers[tier], several_refs=several, timestamp=stamp, panels=panels))
    gate_suite = _gate_suite(results, stamp)
    if gate_suite is not None:
        root.append(gate_suite)
    root.set("tests", str(sum(int(s.get("tests", "0")) for s in root)))
    root.set("errors", str(sum(int(s.get("errors", "0")) for s in root)))
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n"

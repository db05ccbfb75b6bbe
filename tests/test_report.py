"""Console report and results JSON: ordering, plain-text readability, round trip."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from pathlib import Path

import pytest

from gate.errors import DataError, ExitCode
from gate.gating.compare import compare_measurements
from gate.gating.thresholds import load_thresholds, packaged_thresholds_path
from gate.gating.verdict import Bound, Severity, Verdict, VerdictDetail, VerdictThreshold, decide
from gate.measurement import Measurement, from_samples
from gate.provenance import ModelProvenance
from gate.report.console import make_console, order, render, summary_line
from gate.report.results_json import build_results, results_from_json, write_results


def _verdict(metric: str, severity: Severity, delta: float, **kw: object) -> Verdict:
    base = 0.8
    return Verdict(
        metric=metric,
        tier=metric.split(".")[0],
        severity=severity,
        value=base + delta,
        baseline_value=base,
        delta=delta,
        relative_delta=delta / base,
        higher_is_better=True,
        n=200,
        reason=f"{metric} moved by {delta:+g}",
        ci=(delta - 0.01, delta + 0.01),
        threshold=VerdictThreshold(Bound(warn=0.02, critical=0.05), alpha=0.01, min_samples=10),
        **kw,  # type: ignore[arg-type]
    )


VERDICTS = [
    _verdict("accuracy.mcq_acc", Severity.PASS, -0.001),
    _verdict("accuracy.mcq_acc", Severity.WARN, -0.03, slice="category:law"),
    _verdict("fidelity.cga", Severity.CRITICAL, -0.07, breakdown={"category:code": 0.7}),
    _verdict("accuracy.mcq_acc_norm", Severity.CRITICAL, -0.2),
]


def _text(outcome_verdicts: list[Verdict], **kw: object) -> str:
    buffer = io.StringIO()
    results = build_results(decide(outcome_verdicts), **kw)  # type: ignore[arg-type]
    render(results, make_console(buffer))
    return buffer.getvalue()


def test_worst_first_and_plain_text() -> None:
    assert [v.key for v in order(VERDICTS)] == [
        "accuracy.mcq_acc_norm",
        "fidelity.cga",
        "accuracy.mcq_acc[category:law]",
        "accuracy.mcq_acc",
    ]
    text = _text(VERDICTS)
    assert "\x1b[" not in text  # no colour codes when not a terminal
    lines = text.splitlines()
    assert lines[-1] == "gate: BLOCKED (exit 1) - 2 critical, 1 warning, 1 passed"
    # accuracy rows: the critical one precedes the warn one, which precedes the pass
    rows = [li for li in lines if li.strip().startswith("accuracy.")]
    assert [r.split()[0] for r in rows] == [
        "accuracy.mcq_acc_norm",
        "accuracy.mcq_acc",
        "accuracy.mcq_acc",
    ]
    assert "CRITICAL" in rows[0] and "WARN" in rows[1] and "PASS" in rows[2]
    assert "0.02 / 0.05" in rows[0] and "-0.2 (-25.0%)" in rows[0]
    # every non-passing finding is repeated with its reason
    assert (
        "  WARN accuracy.mcq_acc[category:law] vs baseline: accuracy.mcq_acc moved by -0.03"
        in lines
    )
    # tables by tier: a tier with a critical finding first
    assert text.index("tier: accuracy") < text.index("tier: fidelity")


def test_passing_slices_are_folded_findings_and_near_misses_shown() -> None:
    sliced = [
        _verdict("accuracy.mcq_acc", Severity.PASS, -0.001),
        _verdict("accuracy.mcq_acc", Severity.PASS, 0.01, slice="subject:history"),
        _verdict("accuracy.mcq_acc", Severity.PASS, -0.004, slice="subject:physics"),
        _verdict("accuracy.mcq_acc", Severity.CRITICAL, -0.08, slice="subject:law"),
        _verdict(
            "accuracy.mcq_acc",
            Severity.PASS,
            -0.03,
            slice="subject:math",
            details={VerdictDetail.NOT_SIGNIFICANT: "warn"},
        ),
        _verdict("fidelity.cga", Severity.PASS, 0.0, slice="category:chat"),
    ]
    lines = _text(sliced).splitlines()
    text = "\n".join(lines)
    # passing slices get no row of their own ...
    assert "subject:history" not in text and "subject:physics" not in text
    assert "category:chat" not in text
    # ... but one folded row per metric counts them
    folds = [li for li in lines if "folded" in li]
    assert len(folds) == 2
    assert folds[0].split()[:5] == ["accuracy.mcq_acc", "2", "passing", "slices", "folded"]
    assert folds[1].split()[:5] == ["fidelity.cga", "1", "passing", "slice", "folded"]
    # the failing slice, the near miss and the whole-metric row keep their rows
    rows = {li.split()[1]: li for li in lines if li.strip().startswith("accuracy.mcq_acc ")}
    assert "CRITICAL" in rows["subject:law"] and "-0.08 (-10.0%)" in rows["subject:law"]
    assert "PASS (n.s.)" in rows["subject:math"]
    assert "PASS" in rows["all"]
    # the verdict line still counts every slice
    assert lines[-1] == "gate: BLOCKED (exit 1) - 1 critical, 0 warnings, 5 passed"


def test_headlines_and_exit_overrides() -> None:
    passing = [VERDICTS[0]]
    assert _text(passing).splitlines()[-1].startswith("gate: APPROVED (exit 0)")
    warn = VERDICTS[:2]
    assert "APPROVED WITH WARNINGS (exit 0)" in _text(warn)
    assert "BLOCKED (exit 1)" in summary_line(build_results(decide(warn, strict=True)))
    # a crashed tier overrides an approving comparison
    text = _text(passing, exit_code=1, notes=["tier test failed: test_x"])
    assert "note: tier test failed: test_x" in text
    assert text.splitlines()[-1].startswith("gate: BLOCKED (exit 1)")


def test_colour_on_request() -> None:
    buffer = io.StringIO()
    render(build_results(decide(VERDICTS)), make_console(buffer, color=True))
    assert "\x1b[" in buffer.getvalue()


def test_results_json_round_trip(tmp_path: Path) -> None:
    outcome = decide(VERDICTS)
    path = tmp_path / "results.json"
    results = build_results(
        outcome,
        baselines={"prod": {"ref": "prod", "number": 3}},
        candidate=ModelProvenance.from_document({"recipe": "bnb-nf4"}),
        environment={"python": "3.11"},
    )
    write_results(path, results)
    raw = json.loads(path.read_text())
    assert (raw["schema_version"], raw["verdict"], raw["exit_code"]) == (3, "block", 1)
    assert raw["baseline"] == {"ref": "prod", "number": 3}
    entry = raw["metrics"][2]
    assert entry["name"] == "fidelity.cga" and entry["severity"] == "critical"
    assert entry["breakdown"] == {"category:code": 0.7}
    assert set(entry) >= {
        "name", "tier", "value", "baseline_value", "delta", "ci", "n",
        "higher_is_better", "severity", "threshold", "breakdown", "against", "reason",
    }  # fmt: skip
    back = results_from_json(path)
    assert back.verdicts == outcome.verdicts
    assert back.candidate.to_document() == {"recipe": "bnb-nf4"} == raw["candidate"]
    assert back.exit_code == ExitCode.BLOCKED


def test_nothing_measured_headline(tmp_path: Path) -> None:
    results = build_results(decide([]), exit_code=ExitCode.NO_MEASUREMENTS)
    assert (results.verdict, results.headline) == ("block", "NOTHING MEASURED")


def test_results_from_json_rejects_bad_files(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text('{"schema_version": 9, "kind": "results"}')
    with pytest.raises(DataError, match="schema_version 9"):
        results_from_json(path)
    path.write_text('{"kind": "baseline"}')
    with pytest.raises(DataError, match="not a gate results file"):
        results_from_json(path)


def test_typed_threshold_and_detail_keys_keep_the_results_json_format(tmp_path: Path) -> None:
    """compare -> results JSON: the ``threshold`` object and compare's ``details`` keys are
    the flat, string-keyed form the format has always had, and read back to equal verdicts."""
    th = load_thresholds(packaged_thresholds_path())
    ids = [f"q{i}" for i in range(200)]
    base = [1.0] * 160 + [0.0] * 40
    cand = [0.0] * 15 + [1.0] * 145 + [1.0] * 5 + [0.0] * 35  # -5 points, b=15, c=5: n.s.
    verdicts = compare_measurements(
        [
            from_samples("accuracy.mcq_acc", cand, ids, groups={"category:law": range(20)}),
            Measurement("fidelity.kl_max", 2.0),  # ungated
        ],
        [from_samples("accuracy.mcq_acc", base, ids, groups={"category:law": range(20)})],
        th,
    )
    path = tmp_path / "r.json"
    write_results(path, build_results(decide(verdicts)))
    raw = {(m["name"], m["slice"]): m for m in json.loads(path.read_text())["metrics"]}
    acc = raw[("accuracy.mcq_acc", None)]
    assert acc["threshold"] == {
        "warn": 0.02,
        "critical": 0.04,
        "mode": "absolute",
        "alpha": th.alpha,
        "min_samples": th.min_samples,
        "category_override": False,
    }
    assert acc["severity"] == "pass"
    assert acc["details"] == {"reference": "baseline", "not_significant": "critical"}
    assert raw[("fidelity.kl_max", None)]["threshold"] == {}
    assert raw[("fidelity.kl_max", None)]["details"] == {"reference": "ideal"}
    assert set(raw[("accuracy.mcq_acc", "category:law")]["threshold"]) == set(acc["threshold"])
    assert results_from_json(path).verdicts == tuple(verdicts)
    back = {v.key: v for v in results_from_json(path).verdicts}
    assert back["fidelity.kl_max"].threshold is None
    assert back["accuracy.mcq_acc"].threshold == VerdictThreshold(
        Bound(0.02, 0.04), alpha=th.alpha, min_samples=th.min_samples
    )
    assert VerdictDetail.NOT_SIGNIFICANT in back["accuracy.mcq_acc"].details


def test_non_finite_verdict_numbers_are_written_as_null_in_strict_json(tmp_path: Path) -> None:
    inf = float("inf")
    odd = replace(_verdict("accuracy.perplexity", Severity.CRITICAL, inf), ci=(-inf, float("nan")))
    path = tmp_path / "r.json"
    write_results(path, build_results(decide([odd])))
    entry = json.loads(path.read_text(), parse_constant=pytest.fail)["metrics"][0]
    assert (entry["value"], entry["delta"], entry["ci"]) == (None, None, [None, None])


def test_malformed_threshold_object_is_a_data_error(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    doc = build_results(decide(VERDICTS)).to_document()
    doc["metrics"][0]["threshold"] = {"warn": 0.02, "mode": "sideways"}
    path.write_text(json.dumps(doc))
    with pytest.raises(DataError, match="malformed metrics entry"):
        results_from_json(path)


def test_findings_list_keeps_every_whole_metric_and_counts_the_slices_it_cuts() -> None:
    whole = [_verdict(f"accuracy.m{i}", Severity.WARN, -0.03) for i in range(3)]
    slices = [
        _verdict("fidelity.cga", Severity.CRITICAL, -0.06 - i / 100, slice=f"category:c{i:02d}")
        for i in range(15)
    ]
    lines = _text(whole + slices).splitlines()
    listed = lines[lines.index("findings:") + 1 :]
    findings = [li for li in listed if li.startswith(("  WARN", "  CRITICAL"))]
    assert len(findings) == 12
    # the three whole-metric findings lead, then the worst slices (largest drop) first
    assert sum("[" not in li.split(" vs ")[0] for li in findings) == 3
    assert "fidelity.cga[category:c14]" in findings[3]
    assert "fidelity.cga[category:c05]" not in "\n".join(findings)
    assert "  ... 6 more slice findings in the tables above" in "\n".join(listed)
    # every slice keeps its row in the tier table
    assert sum(li.strip().startswith("fidelity.cga ") for li in lines) == 15

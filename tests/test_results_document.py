"""The results document has one reader and one writer (:class:`gate.report.results.Results`).

Documents the gate really writes (``gate compare`` on the shipped examples, the
report cases built through compare/decide, version drift, unmeasured and
NOT EXERCISED runs) read back and write out unchanged: same keys, same order,
same bytes. Unknown keys fail at the top level and in ``metrics`` entries and
survive inside the free-form objects; missing keys read as older writers
implied them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gate.cli import main
from gate.errors import DataError, ExitCode
from gate.gating.verdict import NotExercised, Severity, Unmeasured, Verdict, VersionDrift, decide
from gate.judge.elo import EloResult
from gate.judge.protocol import Stability
from gate.judge.summary import JudgeSummary
from gate.measurement import JudgedOutput
from gate.provenance import ModelProvenance, sha256_file
from gate.report.results import DOCUMENT_KEYS, METRIC_KEYS, SCHEMA_VERSION, Results
from gate.report.results_json import build_results, results_from_json, write_results
from gate.session.handoff import collect, publish
from gate.store.measurements_file import dump_json
from gate.workflows.round_robin import judged_candidates
from tests import report_cases

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _compare_json(tmp_path: Path, candidate: str) -> Path:
    """The results file ``gate compare`` writes for an example candidate."""
    out = tmp_path / f"{candidate}.results.json"
    args = [
        "compare",
        str(EXAMPLES / candidate),
        "--baseline",
        str(EXAMPLES / "baseline.json"),
        "--thresholds",
        str(EXAMPLES / "thresholds.toml"),
        "--json",
        str(out),
    ]
    main(args)
    assert out.is_file()
    return out


def _round_trip(doc: dict[str, Any]) -> dict[str, Any]:
    return Results.from_document(doc).to_document()


def _unmeasured_drift_idle() -> Results:
    v = Verdict(
        metric="accuracy.mcq_acc",
        tier="accuracy",
        severity=Severity.WARN,
        value=0.7,
        baseline_value=0.72,
        delta=-0.02,
        relative_delta=-0.02 / 0.72,
        higher_is_better=True,
        n=200,
        reason="r",
        details={"reference": "baseline", "extra": {"nested": [1, 2]}},
    )
    outcome = decide(
        [v],
        unmeasured=[Unmeasured("fidelity.kl_mean", "fp16")],
        version_drift=[VersionDrift("transformers", "5.23.0", "5.24.0", "fp16")],
        not_exercised=[NotExercised("latency", "no quantized layer ran; use another recipe")],
    )
    return build_results(
        outcome,
        baselines={"fp16": {"ref": "fp16", "number": 1}, "prod": {"ref": "prod", "number": 4}},
        candidate=ModelProvenance.from_document({"model": "demo", "recipe": "bnb-nf4"}),
        environment={"python": "3.11"},
        notes=["a note"],
        unbounded=["fidelity.kl_max"],
    )


@pytest.mark.parametrize(
    "candidate", ["candidate-equal.json", "candidate-warn.json", "candidate-critical.json"]
)
def test_compare_results_files_round_trip_byte_for_byte(tmp_path: Path, candidate: str) -> None:
    path = _compare_json(tmp_path, candidate)
    raw = path.read_bytes()
    doc = json.loads(raw)
    again = _round_trip(doc)
    assert again == doc
    assert dump_json(again) == raw  # the file's key order is dump_json's (sorted)
    assert tuple(again) == DOCUMENT_KEYS  # in memory, the writer's order
    rewritten = tmp_path / "again.json"
    write_results(rewritten, results_from_json(path))
    assert rewritten.read_bytes() == raw


@pytest.mark.parametrize(
    "case",
    [
        report_cases.approved(),
        report_cases.blocked(),
        report_cases.blocked(refs=("fp16", "prod")),
    ],
    ids=["approved", "blocked", "two-refs"],
)
def test_report_case_documents_round_trip(case: report_cases.Case) -> None:
    written = dump_json(case.doc)
    doc = json.loads(written)
    assert _round_trip(doc) == doc
    assert dump_json(_round_trip(doc)) == written
    again = _round_trip(case.doc)  # in memory: same keys in the same order
    assert tuple(again) == tuple(case.doc) == DOCUMENT_KEYS
    assert [tuple(m) for m in again["metrics"]] == [tuple(m) for m in case.doc["metrics"]]
    assert all(tuple(m) == METRIC_KEYS for m in again["metrics"])


def test_every_top_level_list_round_trips_typed() -> None:
    results = _unmeasured_drift_idle()
    doc = json.loads(dump_json(results.to_document()))
    back = Results.from_document(doc)
    assert back.unmeasured == (Unmeasured("fidelity.kl_mean", "fp16"),)
    assert back.version_drift == results.version_drift
    assert back.not_exercised == results.not_exercised
    assert back.unbounded == ("fidelity.kl_max",)
    assert back.baseline == {"ref": "fp16", "number": 1}
    assert back == results  # nothing in it is lossy
    assert back.to_document() == doc


def test_unknown_keys_fail_in_the_document_and_in_metrics_entries() -> None:
    doc = report_cases.approved().doc
    with pytest.raises(DataError, match=r"unknown key.*: colour"):
        Results.from_document({**doc, "colour": "blue"})
    doc["metrics"][0]["colour"] = "blue"
    with pytest.raises(DataError, match=r"unknown key.*metrics entry.*: colour"):
        Results.from_document(doc)


def test_unknown_keys_survive_in_free_form_objects() -> None:
    doc = json.loads(dump_json(_unmeasured_drift_idle().to_document()))
    doc["candidate"]["future_field"] = {"a": 1}
    doc["baselines"]["fp16"]["future_field"] = [1]
    doc["environment"]["future_field"] = None
    doc["metrics"][0]["details"]["future_field"] = "kept"
    assert _round_trip(doc) == doc


def test_missing_keys_read_as_older_writers_implied() -> None:
    doc = report_cases.approved().doc
    older = {k: v for k, v in doc.items() if k not in ("version_drift", "unmeasured")}
    back = Results.from_document(older)
    assert back.version_drift == () and back.unmeasured == ()
    assert back.to_document() == doc  # the missing lists are written empty


def test_power_statements_round_trip_typed_and_older_files_have_none() -> None:
    """Each entry's ``mde`` object, with its entry, is the verdict's whole power statement."""
    case = report_cases.blocked()
    back = Results.from_document(json.loads(dump_json(case.doc)))
    statements = [v.power for v in case.results.verdicts]
    assert [v.power for v in back.verdicts] == statements
    assert any(p is not None and p.mode == "relative" for p in statements)
    assert back.underpowered == case.results.underpowered != ()
    assert [e["message"] for e in case.doc["underpowered"]] == [
        p.message for p in case.results.underpowered
    ]
    older = {k: v for k, v in case.doc.items() if k != "underpowered"}
    older["metrics"] = [{k: v for k, v in m.items() if k != "mde"} for m in case.doc["metrics"]]
    old = Results.from_document(older)
    assert all(v.power is None for v in old.verdicts) and old.underpowered == ()
    assert old.to_document()["metrics"][0]["mde"] is None


def test_non_document_and_newer_schema_are_data_errors() -> None:
    with pytest.raises(DataError, match="not a gate results file"):
        Results.from_document([])
    with pytest.raises(DataError, match="not a gate results file"):
        Results.from_document({"kind": "baseline"})
    newer = SCHEMA_VERSION + 1
    with pytest.raises(DataError, match=f"schema_version {newer}"):
        Results.from_document({**report_cases.approved().doc, "schema_version": newer})
    with pytest.raises(DataError, match="missing 'exit_code'"):
        Results.from_document(
            {k: v for k, v in report_cases.approved().doc.items() if k != "exit_code"}
        )


def test_compare_writes_the_run_identity_and_it_round_trips(tmp_path: Path) -> None:
    """``gate compare`` names the candidate after its file and records what decided it."""
    from gate import __version__
    from gate.gating.thresholds import load_thresholds

    doc = json.loads(_compare_json(tmp_path, "candidate-warn.json").read_text())
    assert doc["schema_version"] == SCHEMA_VERSION == 3
    limits = load_thresholds(EXAMPLES / "thresholds.toml")
    assert doc["run"] == {
        "candidate": "candidate-warn",
        "gate_version": __version__,
        "thresholds": str(EXAMPLES / "thresholds.toml"),
        "thresholds_sha256": limits.digest,
        "strict": False,
        "config": None,
        "config_sha256": None,
    }
    assert len(limits.digest) == 64
    back = Results.from_document(doc)
    assert back.run is not None and back.run.candidate == "candidate-warn"
    assert back.to_document() == doc
    # the baseline's description carries the digest of its file
    assert doc["baselines"][str(EXAMPLES / "baseline.json")]["sha256"] == sha256_file(
        EXAMPLES / "baseline.json"
    )


def test_the_run_object_is_strict_and_absent_in_schema_1_documents() -> None:
    doc = report_cases.approved().doc
    assert doc["run"] is None  # built without one
    older = {k: v for k, v in doc.items() if k != "run"} | {"schema_version": 1}
    assert Results.from_document(older).run is None
    run = {
        "candidate": "a",
        "gate_version": "0.1",
        "thresholds": "t.toml",
        "thresholds_sha256": "0" * 64,
        "strict": False,
        "config": None,
        "config_sha256": None,
    }
    assert Results.from_document({**doc, "run": run}).to_document()["run"] == run
    with pytest.raises(DataError, match=r"unknown key.*run object.*: colour"):
        Results.from_document({**doc, "run": {**run, "colour": "blue"}})
    with pytest.raises(DataError, match=r"malformed run object.*strict"):
        Results.from_document({**doc, "run": {**run, "strict": "no"}})


def test_thresholds_digest_ignores_layout_and_follows_the_bounds(tmp_path: Path) -> None:
    from gate.gating.thresholds import load_thresholds

    one = tmp_path / "one.toml"
    one.write_text('[metrics."fidelity.cga"]\nwarn = 0.02\ncritical = 0.05\n')
    two = tmp_path / "two.toml"  # same bounds, other order and a comment
    two.write_text('# bounds\n[metrics."fidelity.cga"]\ncritical = 0.05\nwarn = 0.02\n')
    three = tmp_path / "three.toml"
    three.write_text('[metrics."fidelity.cga"]\nwarn = 0.02\ncritical = 0.06\n')
    digests = [load_thresholds(p).digest for p in (one, two, three)]
    assert digests[0] == digests[1] != digests[2]


def test_non_finite_numbers_are_written_as_null_and_read_back_as_nan() -> None:
    odd = Verdict(
        metric="accuracy.perplexity",
        tier="accuracy",
        severity=Severity.CRITICAL,
        value=float("inf"),
        baseline_value=3.0,
        delta=float("inf"),
        relative_delta=None,
        higher_is_better=False,
        n=1,
        reason="r",
    )
    doc = json.loads(dump_json(build_results(decide([odd])).to_document()))
    assert (doc["metrics"][0]["value"], doc["metrics"][0]["delta"]) == (None, None)
    back = Results.from_document(doc)
    assert back.verdicts[0].value != back.verdicts[0].value  # NaN
    assert back.to_document() == doc


def test_elo_result_details_round_trip() -> None:
    elo = EloResult(3, 1, 2, 0.6667, -0.0, (-10.0, 40.0), 0.31, False)
    data = elo.to_dict()
    assert data["delta"] == 0.0 and str(data["delta"]) == "0.0"  # -0.0 written as 0.0
    assert EloResult.from_dict(json.loads(json.dumps(data))) == elo


def _judged_results(delta: float) -> Results:
    elo = EloResult(5, 3, 2, 0.6, delta, (delta - 50.0, delta + 50.0), 0.2, False)
    output = {
        "id": "p1",
        "category": "chat",
        "length": "short",
        "prompt": "hi",
        "prompt_tokens": 2,
        "text": "hello",
        "tokens": 1,
    }
    verdict = Verdict(
        metric="judge.elo_delta",
        tier="judge",
        severity=Severity.PASS,
        value=delta,
        baseline_value=0.0,
        delta=delta,
        relative_delta=None,
        higher_is_better=True,
        n=10,
        reason="r",
        details=JudgeSummary(
            judges=({"name": "j0", "calls": 3},),
            tally={"pairs": 10},
            stability=Stability(True, None, 0.15, "one judge"),
            elo=elo,
            outputs=(JudgedOutput.from_dict(output),),
        ).to_details(),
    )
    doc = build_results(decide([verdict])).to_document()
    return Results.from_document(json.loads(dump_json(doc)))


def test_round_robin_reads_the_judge_tier_from_results() -> None:
    judged = judged_candidates({"a": _judged_results(12.5), "b": None, "c": _judged_results(-3)})
    assert list(judged) == ["a", "c"]
    assert judged["a"].elo.delta == 12.5 and judged["a"].elo.wins == 5
    assert [o.text for o in judged["c"].outputs.outputs] == ["hello"]


def test_sessions_hand_their_results_to_the_caller() -> None:
    results = report_cases.approved().results
    publish(results)  # outside collect(): nowhere to go, no error
    with collect() as handed:
        publish(results)
        with collect() as inner:
            publish(results)
        assert len(inner) == 1
    assert handed == [results]


def test_run_candidates_uses_the_handed_results_without_a_json_file(tmp_path: Path) -> None:
    from gate.report.outputs import ReportTargets
    from gate.session.run_config import Candidate
    from gate.workflows.multirun import run_candidates

    blocked = report_cases.blocked()

    def session(candidate: Candidate, targets: ReportTargets) -> ExitCode:
        assert targets.json is None  # no scratch file is asked for any more
        publish(blocked.results)
        return ExitCode.BLOCKED

    cand = Candidate("nf4", "demo", "bnb-nf4", ("fp16",), None, None, "demo")
    (outcome,) = run_candidates(
        [cand], session, lambda c: ReportTargets(), on_start=lambda *a: None
    )
    assert outcome.results == Results.from_document(blocked.doc)
    assert outcome.json is None
    assert outcome.headline == "BLOCKED" and outcome.findings[0].startswith("fidelity.")


def test_not_exercised_entries_are_objects_and_older_lines_still_read() -> None:
    results = _unmeasured_drift_idle()
    doc = json.loads(dump_json(results.to_document()))
    why = "no quantized layer ran; use another recipe"
    assert doc["not_exercised"] == [{"tier": "latency", "why": why}]
    older = {**doc, "schema_version": 2, "not_exercised": [f"latency NOT EXERCISED: {why}"]}
    assert Results.from_document(older).not_exercised == results.not_exercised
    with pytest.raises(DataError, match="not_exercised entry"):
        Results.from_document({**doc, "not_exercised": [{"tier": "latency"}]})


def test_a_malformed_judge_entry_is_one_data_error() -> None:
    results = _judged_results(4.0)
    doc = json.loads(dump_json(results.to_document()))
    (entry,) = doc["judge"]
    assert entry["against"] == "baseline" and entry["elo"]["delta"] == 4.0
    assert Results.from_document(doc).judge == results.judge
    with pytest.raises(DataError, match=r"malformed judge entry.*colour"):
        Results.from_document({**doc, "judge": [{**entry, "colour": "blue"}]})
    with pytest.raises(DataError, match=r"malformed judge entry.*'bound' is missing"):
        Results.from_document({**doc, "judge": [{**entry, "stability": {"stable": True}}]})

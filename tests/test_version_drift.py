"""Version drift is part of the measurement (gate/gating/versions.py).

* the pure comparison: the same versions give nothing; transformers at another
  version is one drift naming both; a baseline without a version record is an
  unknown (a note, never a warning); kernel packages on one side only and
  engines of one served side are not compared;
* a drift is a warning: approved (exit 0) with a note, blocked (exit 1) under
  ``--strict``; it is listed in the results JSON and named in the console,
  markdown, HTML, JUnit and GitHub outputs;
* end to end: ``gate compare`` on measurements files and ``gate run`` on the
  demo model against a copy of its packaged fp32 baseline whose environment
  claims transformers 5.0.0.
"""

from __future__ import annotations

import io
import json
import shutil
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from lxml import etree

# pre-imported: in-process pytest sessions cannot re-import C extensions (matplotlib)
import gate.report.html
import gate.report.junit
import gate.report.plots
from gate.cli import main
from gate.errors import ExitCode
from gate.gating.verdict import Severity, VersionDrift, decide
from gate.gating.versions import (
    COMPARED_PACKAGES,
    ENGINE,
    MeasuredWith,
    UnknownVersion,
    VersionCheck,
    check_refs,
    compare_versions,
    drift_of,
    measured_with,
    version_notes,
)
from gate.provenance import PACKAGES, ModelProvenance
from gate.report.console import summary_line
from gate.report.junit import render_junit
from gate.report.markdown import render_markdown
from gate.report.outputs import ReportTargets, write_reports
from gate.report.results import Results
from gate.report.results_json import build_results, results_from_json
from gate.workflows.plan import packaged_store

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
XSD = Path(__file__).parent / "junit" / "junit.xsd"

PACKAGES_523 = {
    "torch": "2.13.0+cpu",
    "transformers": "5.23.0",
    "tokenizers": "0.23.3",
    "bitsandbytes": "0.50.2",
    "optimum_quanto": "0.2.7",
    "numpy": "2.4.6",
}


def _env(**packages: str | None) -> dict[str, Any]:
    return {"python": "3.11.7", "packages": {**PACKAGES_523, **packages}}


def _side(env: dict[str, Any], provenance: ModelProvenance | None = None) -> MeasuredWith:
    return measured_with(env, provenance or ModelProvenance())


# ------------------------------------------------------------------------------ the pure function


def test_the_same_versions_are_no_drift() -> None:
    check = compare_versions(_side(_env()), _side(_env()), against="fp16")
    assert (check.drift, check.unknown) == ((), ())
    assert version_notes([check], strict=False) == []


def test_transformers_at_another_version_is_one_drift_naming_both() -> None:
    check = compare_versions(_side(_env()), _side(_env(transformers="5.24.0")), against="fp16")
    assert check.drift == (VersionDrift("transformers", "5.23.0", "5.24.0", "fp16"),)
    assert check.unknown == ()
    assert check.drift[0].message == (
        "baseline fp16 measured with transformers 5.23.0, candidate with 5.24.0: "
        "numbers may move for that reason alone"
    )
    assert check.drift[0].to_dict() == {
        "package": "transformers",
        "baseline": "5.23.0",
        "candidate": "5.24.0",
        "against": "fp16",
    }
    (note,) = version_notes([check], strict=False)
    assert note.startswith("version drift (a warning; --strict blocks): baseline fp16")
    assert "blocks under --strict" in version_notes([check], strict=True)[0]


def test_a_baseline_without_a_version_record_is_unknown_not_drift() -> None:
    old = _side({"python": "3.11.7"})  # recorded before the gate kept package versions
    check = compare_versions(old, _side(_env()), against="fp16")
    assert check.drift == ()
    assert check.unknown == (UnknownVersion("baseline"),)
    (note,) = version_notes([check], strict=True)
    assert "baseline fp16 records no package versions" in note and "unknown" in note
    assert "not a failure" in note
    assert decide([], strict=True, version_drift=drift_of([check])).exit_code == ExitCode.OK
    # a candidate side without a record (a hand-written measurements file) is unknown too
    blank = compare_versions(_side(_env()), _side({}), against="fp16")
    assert blank.unknown == (UnknownVersion("candidate"),) and blank.drift == ()
    assert "the candidate records no package versions" in version_notes([blank], strict=False)[0]


def test_which_packages_count() -> None:
    # every compared package is one the environment records
    assert {key for key, _ in COMPARED_PACKAGES} <= {key for key, _ in PACKAGES}
    # python, numpy, tokenizers and accelerate do not count
    moved = {"numpy": "2.5.0", "tokenizers": "0.24.0", "accelerate": "2.0.0"}
    other = {"python": "3.11.9", "packages": {**PACKAGES_523, **moved}}
    assert compare_versions(_side(_env()), _side(other)).drift == ()
    # a kernel package at another version counts; the full string is compared
    check = compare_versions(
        _side(_env(compressed_tensors="0.20.0")),
        _side(_env(torch="2.13.0+cu126", compressed_tensors="0.21.0", bitsandbytes="0.50.2")),
    )
    assert [(d.package, d.baseline, d.candidate) for d in check.drift] == [
        ("torch", "2.13.0+cpu", "2.13.0+cu126"),
        ("compressed-tensors", "0.20.0", "0.21.0"),
    ]


def test_a_kernel_package_on_one_side_only_is_not_compared() -> None:
    # installed on one side only: the other side cannot have run it
    assert compare_versions(_side(_env(bitsandbytes=None)), _side(_env())).drift == ()
    # not in an older record at all: read as not installed there, no note
    check = compare_versions(_side(_env()), _side(_env(compressed_tensors="0.20.0")))
    assert (check.drift, check.unknown) == ((), ())
    # ... but a record without torch or transformers is unknown there
    env = _env()
    del env["packages"]["transformers"]
    check = compare_versions(_side(env), _side(_env()), against="prod")
    assert check.unknown == (UnknownVersion("baseline", "transformers", "5.23.0"),)
    (note,) = version_notes([check], strict=False)
    assert note.startswith("baseline prod records no version of transformers (candidate: 5.23.0)")


def _served(version: str | None, engine: str = "vllm") -> ModelProvenance:
    return ModelProvenance(backend="http", engine=engine, engine_version=version)


def test_the_serving_engine_counts_when_both_sides_were_served() -> None:
    base = _side(_env(), _served("0.11.0"))
    same = compare_versions(base, _side(_env(), _served("0.11.0")))
    assert same.drift == ()
    moved = compare_versions(base, _side(_env(), _served("0.11.1")), against="prod")
    assert moved.drift == (VersionDrift("vllm", "0.11.0", "0.11.1", "prod"),)
    other = compare_versions(base, _side(_env(), _served("0.5.0", engine="sglang")))
    assert other.drift == (VersionDrift(ENGINE, "vllm 0.11.0", "sglang 0.5.0"),)
    # a server that reports no version: unknown, a note
    silent = compare_versions(base, _side(_env(), _served(None)), against="prod")
    assert silent.drift == ()
    assert silent.unknown == (UnknownVersion("candidate", "vllm", "0.11.0", engine=True),)
    (note,) = version_notes([silent], strict=False)
    assert "vllm server that measured the candidate reported no version" in note
    # served against in process: compared across paths by design, not an engine drift
    assert compare_versions(_side(_env()), _side(_env(), _served("0.11.0"))).drift == ()


def test_several_refs_are_checked_each() -> None:
    checks = check_refs(
        {"fp16": _side(_env()), "prod": _side(_env(transformers="5.22.0"))},
        _side(_env(transformers="5.23.0")),
    )
    assert [c.against for c in checks] == ["fp16", "prod"]
    assert drift_of(checks) == [VersionDrift("transformers", "5.22.0", "5.23.0", "prod")]


# --------------------------------------------------------------------- the verdict and the reports


DRIFT = VersionDrift("transformers", "5.23.0", "5.24.0", "fp16")


def test_a_drift_is_a_warning_that_strict_turns_into_a_block() -> None:
    relaxed = decide([], version_drift=[DRIFT])
    assert (relaxed.severity, relaxed.exit_code) == (Severity.WARN, ExitCode.OK)
    assert relaxed.headline == "APPROVED WITH WARNINGS"
    assert summary_line(Results.of_run(relaxed)).endswith(", 1 version drift")
    strict = decide([], strict=True, version_drift=[DRIFT])
    assert (strict.exit_code, strict.headline) == (ExitCode.BLOCKED, "BLOCKED")


def compare_versions_of(drift: VersionDrift) -> VersionCheck:
    """The check that finds ``drift`` (transformers only)."""
    return compare_versions(
        _side(_env(transformers=drift.baseline)),
        _side(_env(transformers=drift.candidate)),
        against=drift.against,
    )


def test_every_report_names_the_drift(tmp_path: Path) -> None:
    outcome = decide([], strict=True, version_drift=[DRIFT])
    note = version_notes([compare_versions_of(DRIFT)], strict=True)[0]
    built = build_results(outcome, notes=[note])
    assert built.to_document()["version_drift"] == [DRIFT.to_dict()]
    results = Results.from_document(built.to_document())
    assert results.version_drift == (DRIFT,)
    assert DRIFT.message in render_markdown(results)
    assert "1 version drift" in render_markdown(results)
    assert DRIFT.message in gate.report.html.render_html(results)
    junit = etree.fromstring(render_junit(results))
    etree.XMLSchema(etree.parse(str(XSD))).assertValid(junit)
    (suite,) = junit.findall("testsuite[@name='gate']")
    props = {p.get("name"): p.get("value") for p in suite.findall("properties/property")}
    assert props == {"warning:version drift: transformers vs fp16": DRIFT.message}
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert DRIFT.message in cases["versions"].findtext("system-out")
    assert "warnings block this run (strict)" in cases["run"].findtext("error")
    assert suite.get("tests") == "2" and suite.get("errors") == "1"
    # approved with the warning: the case passes, no error
    relaxed = build_results(decide([], version_drift=[DRIFT]))
    relaxed_xml = etree.fromstring(render_junit(relaxed))
    assert relaxed_xml.get("errors") == "0"
    assert [c.get("name") for c in relaxed_xml.iter("testcase")] == ["versions"]
    # GitHub: one ::warning naming both versions
    out = io.StringIO()
    write_reports(built, ReportTargets(), environ={"GITHUB_ACTIONS": "true"}, stream=out)
    (line,) = out.getvalue().splitlines()
    assert line.startswith("::warning title=gate WARN%3A transformers version vs fp16::")
    assert line.endswith(DRIFT.message)
    # read back from a file; files written before the field have none
    path = tmp_path / "r.json"
    write_reports(built, ReportTargets(json=path), environ={})
    assert results_from_json(path).version_drift == (DRIFT,)
    old = {k: v for k, v in json.loads(path.read_text()).items() if k != "version_drift"}
    path.write_text(json.dumps(old))
    assert results_from_json(path).version_drift == ()


# ------------------------------------------------------------------------------------ end to end


def _flat(text: str) -> str:
    """Console text with the terminal's line wrapping undone."""
    return " ".join(text.split())


def _measurements_file(path: Path, source: Path, transformers: str) -> Path:
    data = json.loads(source.read_text())
    data["environment"] = _env(transformers=transformers)
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("strict", [False, True])
def test_gate_compare_warns_on_drift_and_strict_blocks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], strict: bool
) -> None:
    base = _measurements_file(tmp_path / "base.json", EXAMPLES / "baseline.json", "5.23.0")
    cand = _measurements_file(tmp_path / "cand.json", EXAMPLES / "candidate-equal.json", "5.24.0")
    out_json = tmp_path / "r.json"
    argv = ["compare", str(cand), "--baseline", str(base),
            "--thresholds", str(EXAMPLES / "thresholds.toml"), "--json", str(out_json)]  # fmt: skip
    code = main([*argv, "--strict"] if strict else argv)
    out = capsys.readouterr().out
    assert "measured with transformers 5.23.0, candidate with 5.24.0" in _flat(out)
    results = json.loads(out_json.read_text())
    assert results["version_drift"] == [
        {"package": "transformers", "baseline": "5.23.0", "candidate": "5.24.0",
         "against": str(base)}
    ]  # fmt: skip
    assert any("transformers 5.23.0" in note for note in results["notes"])
    # the examples' 100-question slices are also underpowered (listed after the drift)
    assert ", 1 version drift" in out.splitlines()[-1]
    if strict:
        assert code == ExitCode.BLOCKED and results["headline"] == "BLOCKED"
    else:
        assert code == ExitCode.OK and results["headline"] == "APPROVED WITH WARNINGS"


def test_gate_compare_on_files_without_versions_notes_them_and_approves(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The shipped examples record no environment: unknown, a note, not a warning.

    Under ``--strict`` the run blocks, but only for its underpowered slices (100
    questions cannot show a 5-point drop at alpha 0.01), never for the versions.
    """
    argv = ["compare", str(EXAMPLES / "candidate-equal.json"),
            "--baseline", str(EXAMPLES / "baseline.json"),
            "--thresholds", str(EXAMPLES / "thresholds.toml")]  # fmt: skip
    assert main(argv) == ExitCode.OK
    out = _flat(capsys.readouterr().out)
    assert "records no package versions" in out and "version drift" not in out
    assert "gate: APPROVED (exit 0)" in out
    assert main([*argv, "--strict"]) == ExitCode.BLOCKED
    last = capsys.readouterr().out.splitlines()[-1]
    assert last == "gate: BLOCKED (exit 1) - 0 critical, 0 warnings, 9 passed, 4 underpowered"


@pytest.fixture
def drifted_store(tmp_path: Path) -> Path:
    """A copy of the packaged demo store whose fp32 baseline claims transformers 5.0.0."""
    store = tmp_path / "store"
    shutil.copytree(packaged_store(), store)
    (path,) = store.glob("demo/*-fp32.json")
    data = json.loads(path.read_text())
    data["environment"]["packages"]["transformers"] = "5.0.0"
    path.write_text(json.dumps(data, indent=1))
    return store


@pytest.mark.slow
def test_gate_run_against_a_baseline_of_other_versions_warns_and_strict_blocks(
    drifted_store: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GATE_PROGRESS", "plain")
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    (tmp_path / "gate.toml").write_text("[tiers.fidelity]\nlimit = 8\n")  # 8 prompts are enough
    live = metadata.version("transformers")
    assert live != "5.0.0"
    words = f"baseline fp32 measured with transformers 5.0.0, candidate with {live}"
    argv = ["run", "--candidate", "demo", "--against", "fp32", "--tiers", "fidelity",
            "--store", str(drifted_store), "--config", "gate.toml"]  # fmt: skip
    reports = ["--json", "r.json", "--markdown", "r.md", "--junit", "r.xml", "--html", "r.html"]
    assert main([*argv, *reports]) == ExitCode.OK
    out = capsys.readouterr().out
    assert words in _flat(out) and "numbers may move for that reason alone" in _flat(out)
    results = json.loads((tmp_path / "r.json").read_text())
    # (on a machine with another torch build than the baseline's, torch drifts too)
    entry = {"package": "transformers", "baseline": "5.0.0", "candidate": live, "against": "fp32"}
    assert entry in results["version_drift"]
    assert results["headline"] == "APPROVED WITH WARNINGS"
    assert any(words in note for note in results["notes"])
    for report in ("r.md", "r.xml", "r.html"):
        assert words in (tmp_path / report).read_text(), report

    assert main([*argv, "--strict", "--json", "strict.json"]) == ExitCode.BLOCKED
    out = capsys.readouterr().out
    assert words in _flat(out)
    assert out.splitlines()[-1].startswith("gate: BLOCKED (exit 1) - 0 critical")
    assert json.loads((tmp_path / "strict.json").read_text())["exit_code"] == 1

"""``gate merge``: results JSONs of separate runs, one summary and one exit code.

The documents merged here are real results files, written by ``gate compare``
on the shipped example measurements (no model is loaded): ``candidate-equal``
is approved, ``candidate-warn`` approved with warnings, ``candidate-critical``
blocked. Results compared with another stored baseline behind the same ref
come from a store where the ref moved between two runs, as it does when a
baseline is promoted while a matrix is running. The demo's real fan-out
(every ``--only`` job of examples/gate.toml merged, against one process) is
tests/test_matrix_demo.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gate.errors import ExitCode
from gate.session.run_config import Candidate
from gate.workflows.matrix import matrix_document
from tests.cli_support import GateRun, run_gate

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
THRESHOLDS = EXAMPLES / "thresholds.toml"
NAMES = {"pass": "candidate-equal", "warn": "candidate-warn", "block": "candidate-critical"}


def _compare(out: Path, kind: str, *extra: str) -> Path:
    """``gate compare`` of one example candidate; returns its results file."""
    path = out / f"{kind}.json"
    done = run_gate(
        "compare", str(EXAMPLES / f"{NAMES[kind]}.json"), "--thresholds", str(THRESHOLDS),
        "--json", str(path), *extra,
    )  # fmt: skip
    assert path.is_file(), done.stdout + done.stderr
    return path


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("merge-results")
    base = ("--baseline", str(EXAMPLES / "baseline.json"))
    return {kind: _compare(out, kind, *base) for kind in NAMES}


def _merge(cwd: Path, *args: str) -> GateRun:
    return run_gate("merge", *args, cwd=cwd)


def _rows(stdout: str) -> dict[str, str]:
    """The summary table's rows by candidate (a row's first cell is indented by two spaces,
    a wrapped findings line by more)."""
    table = stdout[stdout.index("─") : stdout.index("gate: worst exit code")]
    rows = [ln for ln in table.splitlines()[1:] if ln.startswith("  ") and ln[2:3].strip()]
    return {ln.split()[0]: ln for ln in rows}


def _error(done: GateRun) -> str:
    errors = [ln for ln in done.stderr.splitlines() if ln.startswith("gate: error:")]
    assert len(errors) == 1, done.stderr
    return errors[0]


def test_pass_warn_block_exits_1_and_the_markdown_names_all_three(
    results: dict[str, Path], tmp_path: Path
) -> None:
    files = [str(results[k]) for k in ("pass", "warn", "block")]
    done = _merge(tmp_path, *files, "--markdown", "out/comment.md", "--json", "out/results.json")
    assert done.returncode == ExitCode.BLOCKED, done.stdout + done.stderr
    rows = _rows(done.stdout)
    assert list(rows)[:3] == [NAMES["pass"], NAMES["warn"], NAMES["block"]]  # files' order
    assert "APPROVED " in rows[NAMES["pass"]] and " 0 " in rows[NAMES["pass"]]
    assert "APPROVED WITH WARNINGS" in rows[NAMES["warn"]]
    assert "BLOCKED" in rows[NAMES["block"]] and " 1 " in rows[NAMES["block"]]
    assert "gate: worst exit code 1 over 3 candidate(s)" in done.stdout
    combined = (tmp_path / "out" / "comment.md").read_text(encoding="utf-8")
    assert combined.startswith("## gate: 3 candidates, exit 1")
    for kind, verdict in (("pass", "APPROVED"), ("warn", "WITH WARNINGS"), ("block", "BLOCKED")):
        name = NAMES[kind]
        assert f"| {name} | example-org/example-7b |" in combined and verdict in combined
        own = (tmp_path / "out" / f"comment-{name}.md").read_text(encoding="utf-8")
        assert own.strip() in combined  # each candidate's own report follows the table
        # each candidate's results JSON, as gate run --config names them, says what its file says
        written = json.loads((tmp_path / "out" / f"results-{name}.json").read_text())
        assert written == json.loads(results[kind].read_text())


def test_pass_and_warn_exit_0(results: dict[str, Path], tmp_path: Path) -> None:
    done = _merge(tmp_path, str(results["pass"]), str(results["warn"]))
    assert done.returncode == ExitCode.OK, done.stdout + done.stderr
    assert "gate: worst exit code 0 over 2 candidate(s)" in done.stdout


def test_two_different_baselines_behind_one_ref_exit_4(tmp_path: Path) -> None:
    store = tmp_path / "store"
    add = ("baseline", "add", str(EXAMPLES / "baseline.json"), "--model", "example-7b")
    first = run_gate(*add, "--label", "fp16", "--ref", "fp16", "--store", str(store))
    assert first.returncode == 0, first.stderr
    against = ("--baseline", "fp16", "--store", str(store))
    before = _compare(tmp_path, "pass", *against)  # fp16 -> #1
    second = run_gate(*add, "--label", "fp16", "--ref", "fp16", "--store", str(store))
    assert "ref fp16 -> #0002" in second.stdout, second.stderr
    after = _compare(tmp_path, "warn", *against)  # fp16 -> #2: same measurements, other file
    done = _merge(tmp_path, str(before), str(after))
    assert done.returncode == ExitCode.USAGE_ERROR
    line = _error(done)
    assert f"{before} and {after} were compared with different baselines" in line
    assert "as ref fp16 of example-7b: example-7b#0001" in line and "example-7b#0002" in line
    assert line.endswith("- ERROR (input, exit 4)")
    assert "gate: candidates" not in done.stdout  # refused before anything was written


def test_other_thresholds_or_strict_or_gate_version_exit_4(
    results: dict[str, Path], tmp_path: Path
) -> None:
    other = tmp_path / "other-thresholds.toml"
    text = THRESHOLDS.read_text(encoding="utf-8")
    other.write_text(text.replace("alpha = 0.01", "alpha = 0.02", 1), encoding="utf-8")
    looser = tmp_path / "looser"
    looser.mkdir()
    path = looser / "warn.json"
    run_gate(
        "compare", str(EXAMPLES / "candidate-warn.json"), "--thresholds", str(other),
        "--baseline", str(EXAMPLES / "baseline.json"), "--json", str(path),
    )  # fmt: skip
    done = _merge(tmp_path, str(results["pass"]), str(path))
    assert done.returncode == ExitCode.USAGE_ERROR
    assert "were decided with different thresholds" in _error(done)
    assert "rerun every candidate of the matrix with one thresholds.toml" in _error(done)

    strict = tmp_path / "strict"
    strict.mkdir()
    strict_path = strict / "warn.json"
    run_gate(
        "compare", str(EXAMPLES / "candidate-warn.json"), "--thresholds", str(THRESHOLDS),
        "--baseline", str(EXAMPLES / "baseline.json"), "--strict", "--json", str(strict_path),
    )  # fmt: skip
    done = _merge(tmp_path, str(results["pass"]), str(strict_path))
    assert done.returncode == ExitCode.USAGE_ERROR
    assert "differ in --strict (not strict; strict)" in _error(done)

    doc = json.loads(results["warn"].read_text())
    doc["run"]["gate_version"] = "0.0.1"  # as an older gate would have written it
    older = tmp_path / "older.json"
    older.write_text(json.dumps(doc), encoding="utf-8")
    done = _merge(tmp_path, str(results["pass"]), str(older))
    assert done.returncode == ExitCode.USAGE_ERROR
    assert "were decided by different gate versions" in _error(done)
    assert "gate 0.0.1)" in _error(done)


def test_unmergeable_documents_exit_4(results: dict[str, Path], tmp_path: Path) -> None:
    doc = json.loads(results["warn"].read_text())
    schema1 = {k: v for k, v in doc.items() if k != "run"} | {"schema_version": 1}
    old = tmp_path / "schema1.json"
    old.write_text(json.dumps(schema1), encoding="utf-8")
    done = _merge(tmp_path, str(results["pass"]), str(old))
    assert done.returncode == ExitCode.USAGE_ERROR
    assert f"{old} names no candidate and no thresholds (no 'run' object)" in _error(done)

    twice = _merge(tmp_path, str(results["pass"]), str(results["pass"]))
    assert twice.returncode == ExitCode.USAGE_ERROR
    assert "candidate 'candidate-equal' is in both" in _error(twice)

    nothing = _merge(tmp_path)
    assert nothing.returncode == ExitCode.USAGE_ERROR
    assert "no results files to merge" in _error(nothing)

    absent = _merge(tmp_path, str(tmp_path / "nope.json"))
    assert absent.returncode == ExitCode.USAGE_ERROR
    assert "does not exist" in _error(absent)


def _saved_matrix(tmp_path: Path, *names: str) -> Path:
    candidates = [Candidate(n, "example-org/example-7b", None, (), None, None, None) for n in names]
    path = tmp_path / "matrix.json"
    path.write_text(json.dumps(matrix_document(candidates)), encoding="utf-8")
    return path


def test_expected_candidate_without_results_is_missing_and_exit_5(
    results: dict[str, Path], tmp_path: Path
) -> None:
    jobs = tmp_path / "artifacts" / "candidate-equal"
    jobs.mkdir(parents=True)
    (jobs / "results.json").write_bytes(results["pass"].read_bytes())
    matrix = _saved_matrix(tmp_path, "candidate-equal", "candidate-lost")
    done = _merge(
        tmp_path, str(tmp_path / "artifacts"), "--expect-from", str(matrix),
        "--markdown", "out/comment.md",
    )  # fmt: skip
    assert done.returncode == ExitCode.NO_MEASUREMENTS, done.stdout + done.stderr
    rows = _rows(done.stdout)
    assert list(rows)[:2] == ["candidate-equal", "candidate-lost"]  # the matrix's order
    assert "MISSING" in rows["candidate-lost"] and " 5 " in rows["candidate-lost"]
    assert "gate: 1 candidate(s) missing: candidate-lost (no results file" in done.stdout
    combined = (tmp_path / "out" / "comment.md").read_text(encoding="utf-8")
    assert "| candidate-lost | example-org/example-7b | none | MISSING | 5 |" in combined
    # a block elsewhere does not hide a missing candidate (5 outranks 1)
    blocked = _saved_matrix(tmp_path, "candidate-critical", "candidate-lost")
    both = _merge(tmp_path, str(results["block"]), "--expect-from", str(blocked))
    assert both.returncode == ExitCode.NO_MEASUREMENTS


def test_a_result_the_expected_list_does_not_name_is_refused(
    results: dict[str, Path], tmp_path: Path
) -> None:
    matrix = _saved_matrix(tmp_path, "candidate-equals")
    done = _merge(tmp_path, str(results["pass"]), "--expect-from", str(matrix))
    assert done.returncode == ExitCode.USAGE_ERROR
    line = _error(done)
    assert f"is of candidate 'candidate-equal', which {matrix} does not name" in line
    assert "did you mean 'candidate-equals'?" in line


def test_github_annotations_and_step_summary(results: dict[str, Path], tmp_path: Path) -> None:
    summary = tmp_path / "summary.md"
    done = run_gate(
        "merge", str(results["warn"]), str(results["block"]),
        cwd=tmp_path, env={"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary)}, unset=(),
    )  # fmt: skip
    assert done.returncode == ExitCode.BLOCKED
    errors = [ln for ln in done.stdout.splitlines() if ln.startswith("::error ")]
    warnings = [ln for ln in done.stdout.splitlines() if ln.startswith("::warning ")]
    assert errors and warnings  # critical findings of the blocked one, warnings of both
    text = summary.read_text(encoding="utf-8")
    assert text.count("gate: BLOCKED") == 1 and text.count("APPROVED WITH WARNINGS") >= 1

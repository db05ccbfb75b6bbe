"""The fan-out of examples/gate.toml, end to end on the demo model.

``gate run --config examples/gate.toml`` in one process, against the same
config fanned out: ``--matrix``, one ``gate run --only NAME`` per entry (each
its own session, as each CI job would run it) and ``gate merge`` of their
results JSONs. The merged summary, verdicts, report files and exit code must
be the one process's. The config's three candidates end three ways on the
demo's fp32 baseline — ``int8`` approved, ``wanda-30`` approved with warnings
(CGA 0.94), ``int2`` blocked (CGA 0.76) — so the same runs also show a merge
of a pass, a warn and a block (exit 1) and of a pass and a warn (exit 0).

Cost: the config gated twice (about 50 s each on an idle 2-core CPU; the
module takes about 2 minutes), once per module.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gate.errors import ExitCode
from gate.provenance import sha256_file
from gate.session.run_config import load_run_config
from tests.cli_support import GateRun, run_gate
from tests.demo_support import demo_baseline_present
from tests.report_cases import outside_details

ROOT = Path(__file__).resolve().parents[1]
CONFIG = "examples/gate.toml"


pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not demo_baseline_present(),
        reason="needs the committed demo model and its fp32 baseline in baselines/demo",
    ),
]


@dataclass(frozen=True)
class FanOut:
    """What one process and the fanned-out jobs wrote."""

    out: Path
    one: GateRun
    matrix: dict[str, Any]
    jobs: dict[str, GateRun]
    merged: GateRun


@pytest.fixture(scope="module")
def fan_out(tmp_path_factory: pytest.TempPathFactory) -> FanOut:
    out = tmp_path_factory.mktemp("fan-out")
    one = run_gate(
        "run", "--config", CONFIG, "--json", str(out / "one" / "results.json"),
        "--markdown", str(out / "one" / "comment.md"), cwd=ROOT,
    )  # fmt: skip
    planned = run_gate("run", "--config", CONFIG, "--matrix", cwd=ROOT)
    assert planned.returncode == 0, planned.stderr
    matrix = json.loads(planned.stdout)
    jobs = {}
    for entry in matrix["include"]:  # each job on a machine of its own: its own directory
        name = entry["candidate"]
        target = out / "artifacts" / f"gate-results-{name}" / f"results-{name}.json"
        jobs[name] = run_gate(
            "run", "--config", CONFIG, "--only", name, "--json", str(target), cwd=ROOT
        )
    merged = run_gate(
        "merge", str(out / "artifacts"), "--expect-from", CONFIG,
        "--json", str(out / "merged" / "results.json"),
        "--markdown", str(out / "merged" / "comment.md"), cwd=ROOT,
    )  # fmt: skip
    return FanOut(out, one, matrix, jobs, merged)


def _summary(stdout: str) -> str:
    """The summary table and the worst-exit line, as printed."""
    start = stdout.index("gate: candidates")
    end = stdout.index("\n", stdout.index("gate: worst exit code"))
    return stdout[start:end]


def _verdicts(path: Path) -> list[tuple[Any, ...]]:
    doc = json.loads(path.read_text(encoding="utf-8"))
    return [
        (m["name"], m["slice"], m["against"], m["severity"], m["value"], m["ci"], m["p_value"])
        for m in doc["metrics"]
    ]


def test_matrix_has_one_entry_per_candidate(fan_out: FanOut) -> None:
    names = [c.name for c in load_run_config(ROOT / CONFIG).candidates]
    assert [e["candidate"] for e in fan_out.matrix["include"]] == names
    assert [fan_out.jobs[n].returncode for n in names] == [0, 0, 1]


def test_merged_jobs_give_the_one_process_summary_verdicts_and_exit_code(
    fan_out: FanOut,
) -> None:
    one, merged = fan_out.one, fan_out.merged
    assert one.returncode == merged.returncode == ExitCode.BLOCKED, merged.stderr
    assert _summary(merged.stdout) == _summary(one.stdout)
    for name in fan_out.jobs:
        mine = fan_out.out / "merged" / f"results-{name}.json"
        theirs = fan_out.out / "one" / f"results-{name}.json"
        assert _verdicts(mine) == _verdicts(theirs) != []
        doc = json.loads(mine.read_text(encoding="utf-8"))
        assert doc["exit_code"] == json.loads(theirs.read_text(encoding="utf-8"))["exit_code"]
        assert doc["run"]["candidate"] == name  # each job named its candidate
        assert doc["run"]["config_sha256"] == sha256_file(ROOT / CONFIG)
    combined = (fan_out.out / "merged" / "comment.md").read_text(encoding="utf-8")
    assert combined == (fan_out.out / "one" / "comment.md").read_text(encoding="utf-8")


def test_pass_warn_block_merge_exits_1_and_names_all_three(fan_out: FanOut) -> None:
    summary = _summary(fan_out.merged.stdout)
    rows = {
        ln.split()[0]: ln for ln in summary.splitlines() if ln.startswith("  ") and ln[2] != " "
    }
    assert "APPROVED " in rows["int8"] and "WITH WARNINGS" not in rows["int8"]
    assert "APPROVED WITH WARNINGS" in rows["wanda-30"]
    assert "BLOCKED" in rows["int2"]
    combined = (fan_out.out / "merged" / "comment.md").read_text(encoding="utf-8")
    assert combined.startswith("## gate: 3 candidates, exit 1")
    for row in ("| int8 | demo | bnb-int8 | APPROVED |", "| wanda-30 | demo | prune-wanda:0.3 |"):
        assert row in combined
    assert "| int2 | demo | quanto-int2 | BLOCKED | 1 |" in combined


def test_the_comment_shows_the_block_first_and_folds_what_the_runs_could_not_see(
    fan_out: FanOut,
) -> None:
    combined = (fan_out.out / "one" / "comment.md").read_text(encoding="utf-8")
    docs = {
        name: json.loads((fan_out.out / "one" / f"results-{name}.json").read_text())
        for name in fan_out.jobs
    }
    critical = [m for m in docs["int2"]["metrics"] if m["severity"] == "critical"]
    assert critical and "| **❌ CRITICAL** |" in combined
    assert combined.index("| **❌ CRITICAL** |") < combined.index("<details>")
    assert combined.index("### int2 (quanto-int2)") < combined.index("<details>")
    assert "<details><summary>int8 (bnb-int8): ✅ APPROVED, its full report</summary>" in combined
    shown = outside_details(combined)
    lines = [line for line in shown if "UNDERPOWERED" in line]
    # one line per tier of the two candidates with findings (wanda-30: 2 tiers, int2: 1)
    assert 0 < len(lines) <= 3
    assert sum(len(doc["underpowered"]) for doc in docs.values()) > 3 * len(lines)
    for doc in docs.values():  # every underpowered verdict is still there, folded
        assert all(entry["message"] in combined for entry in doc["underpowered"])


def test_pass_and_warn_merge_exits_0(fan_out: FanOut, tmp_path: Path) -> None:
    artifacts = fan_out.out / "artifacts"
    done = run_gate(
        "merge", str(artifacts / "gate-results-int8"), str(artifacts / "gate-results-wanda-30"),
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == ExitCode.OK, done.stdout + done.stderr
    assert "gate: worst exit code 0 over 2 candidate(s)" in done.stdout


def test_a_failed_job_is_missing_and_another_gate_toml_is_refused(
    fan_out: FanOut, tmp_path: Path
) -> None:
    artifacts = tmp_path / "artifacts"
    shutil.copytree(fan_out.out / "artifacts", artifacts)
    shutil.rmtree(artifacts / "gate-results-int2")  # its job died before writing results
    done = run_gate("merge", str(artifacts), "--expect-from", str(ROOT / CONFIG), cwd=tmp_path)
    assert done.returncode == ExitCode.NO_MEASUREMENTS, done.stdout + done.stderr
    assert "gate: 1 candidate(s) missing: int2 (no results file" in done.stdout
    edited = tmp_path / "gate.toml"
    edited.write_text((ROOT / CONFIG).read_text(encoding="utf-8") + "# edited\n", "utf-8")
    other = run_gate("merge", str(artifacts), "--expect-from", str(edited), cwd=tmp_path)
    assert other.returncode == ExitCode.USAGE_ERROR
    assert f"was run from another {edited}" in other.stderr

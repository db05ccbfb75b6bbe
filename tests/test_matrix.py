"""``gate run --matrix`` / ``--only`` and the ``runs_on`` key of the run config.

The matrix is read from the run config alone: these tests load no model (one
of them checks, in a fresh interpreter, that no model library is imported).
The demo's whole fan-out (every ``--only`` job merged against one process) is
tested in tests/test_matrix_demo.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gate.errors import ConfigError, DataError, ExitCode
from gate.session.run_config import DEFAULT_RUNS_ON, load_run_config
from gate.workflows.matrix import expected_from_matrix, matrix_document
from tests.cli_support import run_gate

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "gate.toml"

CONFIG = textwrap.dedent(
    """
    [run]
    baseline = "demo"
    runs_on = ["self-hosted", "gpu", "a10"]

    [[candidates]]
    name = "int8"
    model = "demo"
    recipe = "bnb-int8"

    [[candidates]]
    name = "big-fp8"
    model = "demo"
    recipe = "bnb-nf4"
    runs_on = ["self-hosted", "gpu", "h100"]

    [[candidates]]
    name = "control"
    model = "demo"
    """
)


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "gate.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_runs_on_defaults_from_run_and_per_candidate(tmp_path: Path) -> None:
    config = load_run_config(_write(tmp_path, CONFIG))
    labels = {c.name: c.runs_on for c in config.resolved()}
    assert labels == {
        "int8": ("self-hosted", "gpu", "a10"),
        "big-fp8": ("self-hosted", "gpu", "h100"),
        "control": ("self-hosted", "gpu", "a10"),
    }
    bare = load_run_config(_write(tmp_path, "[[candidates]]\nname = 'a'\nmodel = 'demo'\n"))
    assert bare.resolved()[0].runs_on == DEFAULT_RUNS_ON == ("self-hosted", "linux", "x64", "gpu")


@pytest.mark.parametrize(
    ("runs_on", "message"),
    [
        ("[]", "runs_on is empty"),
        ('["self-hosted", "gpu h100"]', "runs_on label 'gpu h100' must be 1-100 letters"),
        ('["gpu", "gpu"]', "runs_on names a label twice"),
        ('"gpu"', "expected a list"),
        ("[1]", "expected a string"),
    ],
)
def test_bad_runs_on_is_one_config_error(tmp_path: Path, runs_on: str, message: str) -> None:
    text = f"[[candidates]]\nname = 'a'\nmodel = 'demo'\nruns_on = {runs_on}\n"
    with pytest.raises(ConfigError, match=message) as caught:
        load_run_config(_write(tmp_path, text))
    assert "candidate 'a'" in caught.value.message
    with pytest.raises(ConfigError, match=message):
        load_run_config(_write(tmp_path, f"[run]\nruns_on = {runs_on}\n"))


def test_matrix_prints_one_entry_per_candidate_with_its_labels(tmp_path: Path) -> None:
    config = _write(tmp_path, CONFIG)
    done = run_gate("run", "--config", str(config), "--matrix", cwd=tmp_path)
    assert done.returncode == ExitCode.OK, done.stderr
    (line,) = done.stdout.strip().splitlines()  # one line: a $GITHUB_OUTPUT value
    assert json.loads(line) == {
        "include": [
            {
                "candidate": "int8",
                "model": "demo",
                "recipe": "bnb-int8",
                "runs_on": ["self-hosted", "gpu", "a10"],
            },
            {
                "candidate": "big-fp8",
                "model": "demo",
                "recipe": "bnb-nf4",
                "runs_on": ["self-hosted", "gpu", "h100"],
            },
            {
                "candidate": "control",
                "model": "demo",
                "recipe": "none",
                "runs_on": ["self-hosted", "gpu", "a10"],
            },
        ]
    }
    only = run_gate("run", "--config", str(config), "--matrix", "--only", "big-fp8", cwd=tmp_path)
    assert [e["candidate"] for e in json.loads(only.stdout)["include"]] == ["big-fp8"]


def test_example_config_matrix_is_valid_json_one_entry_per_candidate() -> None:
    done = run_gate("run", "--config", str(EXAMPLE), "--matrix", cwd=ROOT)
    assert done.returncode == ExitCode.OK, done.stderr
    entries = json.loads(done.stdout)["include"]
    assert [e["candidate"] for e in entries] == [
        c.name for c in load_run_config(EXAMPLE).candidates
    ]
    assert [e["candidate"] for e in entries] == ["int8", "wanda-30", "int2"]
    assert all(e["runs_on"] == list(DEFAULT_RUNS_ON) for e in entries)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("--only", "int9"),
            "--only 'int9': {config} has no such candidate (did you mean 'int8'?)",
        ),
        (
            ("--only", "zzz", "--matrix"),
            "has no such candidate (known names: big-fp8, control, int8)",
        ),
        (("--only", "int8", "--candidate", "demo"), "--only picks a [[candidates]] entry"),
        (("--matrix", "--candidate", "demo"), "--matrix lists the [[candidates]] of --config"),
    ],
)
def test_only_and_matrix_misuse_is_one_line_exit_4(
    tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    config = _write(tmp_path, CONFIG)
    done = run_gate("run", "--config", str(config), *args, cwd=tmp_path)
    assert done.returncode == ExitCode.USAGE_ERROR
    errors = [line for line in done.stderr.splitlines() if line.startswith("gate: error:")]
    assert len(errors) == 1 and message.format(config=config) in errors[0], done.stderr
    assert errors[0].endswith("ERROR (input, exit 4)")
    assert done.stdout == ""


def test_matrix_without_config_is_exit_4(tmp_path: Path) -> None:
    done = run_gate("run", "--matrix", cwd=tmp_path)
    assert done.returncode == ExitCode.USAGE_ERROR
    assert "--matrix lists the [[candidates]] of --config" in done.stderr


def test_dry_run_prints_the_matrix_it_would_produce() -> None:
    done = run_gate("run", "--config", str(EXAMPLE), "--dry-run", cwd=ROOT)
    assert done.returncode == ExitCode.OK, done.stderr
    prefix = "matrix (--matrix, one job per candidate): "
    (line,) = [ln for ln in done.stdout.splitlines() if ln.startswith(prefix)]
    matrix = run_gate("run", "--config", str(EXAMPLE), "--matrix", cwd=ROOT)
    assert json.loads(line.removeprefix(prefix)) == json.loads(matrix.stdout)
    assert done.stdout.rstrip().endswith("gate: dry run OK (exit 0)")
    one = run_gate("run", "--config", str(EXAMPLE), "--dry-run", "--only", "int2", cwd=ROOT)
    assert one.returncode == ExitCode.OK, one.stderr
    assert "candidate int2: model demo, recipe quanto-int2" in one.stdout
    assert "candidate int8" not in one.stdout
    assert '"candidate": "int2"' in one.stdout


_NO_MODEL_LIBRARY = """
import json, sys
from gate.cli import main
code = main(["run", "--config", sys.argv[1], "--matrix"])
print(json.dumps({"code": code, "loaded": sorted({"torch", "transformers"} & set(sys.modules))}))
"""


def test_matrix_loads_no_model_library() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _NO_MODEL_LIBRARY, str(EXAMPLE)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    matrix_line, verdict_line = done.stdout.strip().splitlines()
    assert len(json.loads(matrix_line)["include"]) == 3
    assert json.loads(verdict_line) == {"code": 0, "loaded": []}


def test_a_saved_matrix_names_the_expected_candidates(tmp_path: Path) -> None:
    candidates = load_run_config(_write(tmp_path, CONFIG)).resolved()
    saved = tmp_path / "matrix.json"
    saved.write_text(json.dumps(matrix_document(candidates)), encoding="utf-8")
    back = expected_from_matrix(saved)
    assert [(c.name, c.model, c.recipe_label, c.runs_on) for c in back] == [
        (c.name, c.model, c.recipe_label, c.runs_on) for c in candidates
    ]
    for text, message in [
        ('{"matrix": []}', "has no 'include' list"),
        ('{"include": [{"model": "demo"}]}', r"include\[0\] names no candidate"),
        ('{"include": [{"candidate": "a", "os": "linux"}]}', r"unknown key\(s\) os"),
        ('{"include": [{"candidate": "a"}, {"candidate": "a"}]}', "names a twice"),
        ("{", "matrix"),
    ]:
        saved.write_text(text, encoding="utf-8")
        with pytest.raises(DataError, match=message):
            expected_from_matrix(saved)


def test_the_workflow_fans_out_plan_candidates_merge() -> None:
    """.github/workflows/gate.yml has the shape docs/self-hosted-runners.md describes (actionlint,
    run by scripts/test.sh and tests/test_init.py, checks its syntax and the action's inputs;
    this checks what the jobs run through the action, action.yml)."""
    import yaml

    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "gate.yml").read_text())
    jobs = workflow["jobs"]
    assert list(jobs) == ["changes", "plan", "candidate", "merge", "verdict"]
    plan, candidate, merge = jobs["plan"], jobs["candidate"], jobs["merge"]

    def action_step(job: dict[str, object]) -> dict[str, object]:
        steps = job["steps"]
        assert isinstance(steps, list)
        (step,) = [s for s in steps if s.get("uses") == "./"]
        return step

    assert action_step(plan)["with"]["command"] == "matrix"
    assert plan["outputs"]["matrix"] == "${{ steps.plan.outputs.matrix }}"
    assert "repo.full_name == github.repository" in plan["if"]  # no fork reaches a runner
    assert candidate["needs"] == "plan"
    assert candidate["strategy"] == {
        "fail-fast": False,
        "matrix": "${{ fromJSON(needs.plan.outputs.matrix) }}",
    }
    assert candidate["runs-on"] == "${{ matrix.runs_on }}"
    assert action_step(candidate)["with"]["candidate"] == "${{ matrix.candidate }}"
    assert action_step(candidate)["with"]["artifact-name"] == "gate-results-${{ matrix.candidate }}"
    assert merge["needs"] == ["plan", "candidate"] and "!cancelled()" in merge["if"]
    downloads = [s for s in merge["steps"] if "download-artifact" in str(s.get("uses"))]
    assert downloads[0]["with"]["pattern"] == "gate-results-*"
    assert action_step(merge)["with"]["command"] == "merge"
    assert merge["permissions"]["pull-requests"] == "write"
    assert "permissions" not in candidate  # the default: contents read
    assert jobs["verdict"]["if"] == "always()"

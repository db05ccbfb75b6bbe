"""A model path that does not exist is input (exit 4); one that exists but does not load is 3.

Every place gate takes a model path is covered, each through the real command line
(``gate run``, ``gate baseline record``, ``gate localize``), with ``--dry-run`` where the
command has one and without it: the candidate's directory, a separate speculative draft
(``spec-model:PATH``), an in-process judge's directory (``[[judges]] model``), and the
model a ``--serve`` / ``--baseline-serve`` command names. A wrong path is refused in one
line before anything loads, and nothing is written to the store; a path that exists but
holds no loadable model (an empty directory, a file) still fails as a model load (exit 3).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gate.errors import ConfigError, ExitCode, ModelLoadError
from gate.judge.judges import TransformersJudge
from gate.models.model_spec import ModelSpec
from gate.session.engine import named_local_models
from tests.cli_support import GateRun, run_gate

REPO = Path(__file__).resolve().parents[1]
STORE = REPO / "baselines"
MISSING = "/nonexistent/gate-test/model"
INPUT = int(ExitCode.USAGE_ERROR)
LOAD = int(ExitCode.INTERNAL_ERROR)


def _one_error_line(done: GateRun) -> str:
    """The single ``gate: error:`` line of a refused command (no traceback)."""
    errors = [line for line in done.stderr.splitlines() if line.startswith("gate: error:")]
    assert len(errors) == 1, done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    return errors[0]


@pytest.mark.parametrize("dry_run", [True, False], ids=["dry-run", "run"])
def test_a_missing_speculative_draft_is_input(dry_run: bool) -> None:
    args = ["run", "--candidate", "demo", "--tiers", "speculative", "--store", str(STORE)]
    args += ["--recipe", f"spec-model:{MISSING}"] + (["--dry-run"] if dry_run else [])
    done = run_gate(*args)
    assert done.returncode == INPUT, done.stderr
    line = _one_error_line(done)
    assert f"spec-model:{MISSING}" in line and "draft model directory" in line
    assert "exit 4" in line


def test_a_missing_draft_refuses_a_recording_before_anything_is_stored(tmp_path: Path) -> None:
    store = tmp_path / "store"
    args = ["baseline", "record", "--model", "demo", "--recipe", f"spec-model:{MISSING}"]
    done = run_gate(*args, "--tiers", "speculative", "--store", str(store))
    assert done.returncode == INPUT, done.stderr
    assert "draft model directory" in done.stderr
    assert not store.exists() or not any(store.rglob("*.json"))


SLUGS = {"slug given": ["--model-slug", "demo"], "slug from the path": []}


@pytest.mark.parametrize("slug", list(SLUGS))
@pytest.mark.parametrize("dry_run", [True, False], ids=["dry-run", "run"])
def test_a_missing_candidate_directory_is_input(dry_run: bool, slug: str) -> None:
    """The path is named before the store is searched for the baselines of its slug."""
    args = ["run", "--candidate", MISSING, *SLUGS[slug], "--tiers", "accuracy"]
    done = run_gate(*args, "--store", str(STORE), *(["--dry-run"] if dry_run else []))
    assert done.returncode == INPUT, done.stderr
    assert f"model directory {MISSING} does not exist" in _one_error_line(done)


def test_a_missing_model_refuses_a_recording(tmp_path: Path) -> None:
    store = tmp_path / "store"
    done = run_gate("baseline", "record", "--model", MISSING, "--store", str(store))
    assert done.returncode == INPUT, done.stderr
    assert f"model directory {MISSING} does not exist" in _one_error_line(done)
    assert not store.exists() or not any(store.rglob("*.json"))


@pytest.mark.parametrize("slug", list(SLUGS))
@pytest.mark.parametrize("dry_run", [True, False], ids=["dry-run", "run"])
def test_localize_refuses_a_missing_candidate_as_input(dry_run: bool, slug: str) -> None:
    args = ["localize", "--candidate", MISSING, *SLUGS[slug], "--recipe", "quanto-int2"]
    done = run_gate(*args, "--store", str(STORE), *(["--dry-run"] if dry_run else []))
    assert done.returncode == INPUT, done.stderr
    assert f"model directory {MISSING} does not exist" in _one_error_line(done)


def _judge_config(tmp_path: Path, judge_model: str) -> Path:
    config = tmp_path / "gate.toml"
    config.write_text(
        f'[run]\nbaseline = "demo"\ntiers = ["judge"]\nstore = "{STORE}"\n\n'
        '[[candidates]]\nname = "int8"\nmodel = "demo"\nrecipe = "quanto-int8"\n\n'
        f'[[judges]]\nname = "local"\nmodel = "{judge_model}"\n',
        encoding="utf-8",
    )
    return config


@pytest.mark.parametrize("dry_run", [True, False], ids=["dry-run", "run"])
def test_a_missing_judge_directory_is_input(tmp_path: Path, dry_run: bool) -> None:
    config = _judge_config(tmp_path, MISSING)
    done = run_gate("run", "--config", str(config), *(["--dry-run"] if dry_run else []))
    assert done.returncode == INPUT, done.stderr
    assert f"model directory {MISSING} does not exist" in _one_error_line(done)


def test_the_judge_class_refuses_a_missing_directory_as_input(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist") as refused:
        TransformersJudge(tmp_path / "absent")
    assert refused.value.exit_code is ExitCode.USAGE_ERROR
    (tmp_path / "empty").mkdir()  # there, but no model in it: a failed load
    with pytest.raises(ModelLoadError):
        TransformersJudge(tmp_path / "empty")


def _server(model_option: str) -> str:
    """A server command whose program exists (this interpreter) naming a model."""
    return f"{sys.executable} -m vllm.entrypoints.openai.api_server {model_option}"


@pytest.mark.parametrize("dry_run", [True, False], ids=["dry-run", "run"])
@pytest.mark.parametrize("side", ["--serve", "--baseline-serve"])
def test_a_missing_model_in_a_server_command_is_input(side: str, dry_run: bool) -> None:
    present = _server(f"--model {REPO / 'gate' / 'assets' / 'demo_model'}")
    commands = {
        "--serve": present,
        "--baseline-serve": present,
        side: _server(f"--model={MISSING}"),
    }
    args = ["run", "--candidate", "demo", "--tiers", "latency", "--store", str(STORE)]
    for option, command in commands.items():
        args += [option, command]
    done = run_gate(*args, *(["--dry-run"] if dry_run else []))
    assert done.returncode == INPUT, done.stderr
    line = _one_error_line(done)
    assert f"the model {MISSING} the server command names does not exist" in line
    assert ("baseline's" in line) == (side == "--baseline-serve")


def test_the_local_paths_a_server_command_names() -> None:
    argv = ["vllm", "serve", "./m", "--model-path", "/abs", "-m", "~/x.gguf", "--model=../y"]
    assert named_local_models(argv) == ["./m", "/abs", "~/x.gguf", "../y"]
    # hub ids, a Python module after -m and option values that are no model: none of them
    argv = ["python", "-m", "vllm.entrypoints.openai.api_server", "--model", "org/name", "-tp", "2"]
    assert named_local_models(argv) == []


def test_the_spec_refuses_a_missing_path_as_input_and_a_file_as_a_load(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as missing:
        _ = ModelSpec.parse(str(tmp_path / "nope")).local_dir
    assert missing.value.exit_code is ExitCode.USAGE_ERROR
    afile = tmp_path / "weights.bin"
    afile.write_bytes(b"")
    with pytest.raises(ModelLoadError) as a_file:
        _ = ModelSpec.parse(str(afile)).local_dir
    assert a_file.value.exit_code is ExitCode.INTERNAL_ERROR


def test_an_existing_directory_without_a_model_stays_a_load_failure(tmp_path: Path) -> None:
    empty = tmp_path / "empty-model"
    empty.mkdir()
    args = ["run", "--candidate", str(empty), "--model-slug", "demo", "--tiers", "accuracy"]
    assert run_gate(*args, "--store", str(STORE), "--dry-run").returncode == int(ExitCode.OK)
    done = run_gate(*args, "--store", str(STORE))
    assert done.returncode == LOAD, done.stderr


def test_an_existing_draft_directory_without_a_model_stays_a_load_failure(tmp_path: Path) -> None:
    empty = tmp_path / "empty-draft"
    empty.mkdir()
    args = ["run", "--candidate", "demo", "--tiers", "speculative", "--store", str(STORE)]
    done = run_gate(*args, "--recipe", f"spec-model:{empty}")
    assert done.returncode == LOAD, done.stderr

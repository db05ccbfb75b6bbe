"""The distribution as a team installs it: a wheel, non-editable, used outside the repository.

The wheel is built from this checkout and installed without dependencies into a
fresh virtual environment, which borrows the project environment's packages
(torch, transformers, ...) through a ``.pth`` line, so nothing is downloaded;
the gate it runs is the installed copy, not this checkout (checked). From an
empty git repository: ``gate init --model demo``, a second ``gate init`` (exit
4, nothing changed), ``gate run --config gate.toml --dry-run`` against the
packaged demo baseline. scripts/check_install.sh does the same from the
registry under every supported Python (CI job "install").
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: What a run needs from the wheel, beyond the modules.
REQUIRED = (
    "gate/py.typed",
    "gate/suites/test_fidelity.py",
    "gate/suites/test_latency.py",
    "gate/assets/demo_model/model.safetensors",
    "gate/assets/baselines/demo/refs.json",
    "gate/assets/baselines/demo/0001-fp32.reference.safetensors",
    "gate/assets/thresholds.toml",
    "gate/assets/init/gate.yml",
    "gate/assets/init/latency-audit.yml",
    "gate/assets/init/gate.toml",
    "gate/assets/calibration/sharegpt_calibration.jsonl",
)


def _run(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_the_wheel_installs_and_gate_init_runs_outside_the_repository(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "PYTHON"))}
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    pip = [sys.executable, "-m", "pip"]
    dist = tmp_path / "dist"
    build = [*pip, "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(dist), str(ROOT)]
    built = _run(build, tmp_path, env)
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = dist.glob("llm_compression_gate-*-py3-none-any.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert not [name for name in REQUIRED if name not in names]
    assert not [n for n in names if n.startswith(("tests/", "scripts/", "suites/"))]

    venv = tmp_path / "venv"
    made = _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp_path, env)
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    installed = _run(
        [*pip, "--python", str(python), "install", "-q", "--no-deps", "--no-index", str(wheel)],
        tmp_path,
        env,
    )
    assert installed.returncode == 0, installed.stderr[-2000:]
    site = Path(
        _run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            tmp_path,
            env,
        ).stdout.strip()
    )
    # the dependencies, from the project's environment (appended: the venv's own come first)
    (site / "zz_project_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    team = tmp_path / "team-repo"
    team.mkdir()
    assert _run(["git", "init", "-q"], team, env).returncode == 0
    where = _run([str(python), "-c", "import gate; print(gate.__file__)"], team, env)
    assert where.stdout.strip().startswith(str(venv)), where.stdout + where.stderr
    gate = str(venv / "bin" / "gate")

    first = _run([gate, "init", "--model", "demo"], team, env)
    assert first.returncode == 0, first.stderr
    files = sorted(
        str(p.relative_to(team)) for p in team.rglob("*") if p.is_file() and ".git" not in p.parts
    )
    assert files == [
        ".github/workflows/gate.yml",
        ".github/workflows/latency-audit.yml",
        "gate.toml",
        "thresholds.toml",
    ]
    before = {f: (team / f).read_bytes() for f in files}
    second = _run([gate, "init", "--model", "demo"], team, env)
    assert second.returncode == 4 and "gate.toml exists" in second.stderr
    assert {f: (team / f).read_bytes() for f in before} == before

    dry = _run([gate, "run", "--config", "gate.toml", "--dry-run"], team, env)
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert f"store:      {venv}" in dry.stdout  # the packaged demo baseline of the install
    assert "gate: dry run OK" in dry.stdout

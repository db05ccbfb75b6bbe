"""Progress reaches the user of a real ``gate baseline record`` process.

The tiers run inside the gate's own pytest session, which captures the
process's descriptors 1 and 2; the progress lines must still come out on the
command's standard error, as plain lines (standard error is a pipe here, as in
a CI log), one per phase with its done/total, never one per item.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

CONFIG = textwrap.dedent(
    """
    [run]
    baseline = "demo"
    tiers = ["fidelity"]
    store = "store"

    [tiers.fidelity]
    limit = 8
    max_new_tokens = 8
    batch_size = 2
    """
)


def _gate_command() -> list[str]:
    script = Path(sys.executable).with_name("gate")
    return (
        [str(script)]
        if script.exists()
        else [sys.executable, "-c", "import gate.cli as c; c.main()"]
    )


def test_baseline_record_prints_each_phase_with_done_and_total_on_stderr(tmp_path: Path) -> None:
    (tmp_path / "gate.toml").write_text(CONFIG, encoding="utf-8")
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
    }
    env.pop("GATE_PROGRESS", None)  # the style follows the stream: a pipe gets plain lines
    done = subprocess.run(
        [*_gate_command(), "baseline", "record", "--config", "gate.toml", "--label", "fp32"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    err = done.stderr.splitlines()
    for phase in (
        "fidelity: generating reference outputs",
        "fidelity: scoring reference outputs",
        "fidelity: scoring against the reference",
    ):
        assert f"gate: {phase}: 0/8" in err, done.stderr
        finished = [line for line in err if line.startswith(f"gate: {phase}: done 8/8 in ")]
        assert len(finished) == 1, done.stderr
        lines = [line for line in err if line.startswith(f"gate: {phase}:")]
        assert len(lines) <= 2 + 9  # start, at most one per tenth, done: never one per item
        for line in lines[1:-1]:  # intermediate lines (if the machine was slow enough)
            assert re.fullmatch(rf"gate: {phase}: \d/8 \(\d+%\), .* elapsed, ~.* left", line)
    assert "gate: loading demo (recipe none) ..." in err
    assert not any(line.startswith("gate: fidelity") for line in done.stdout.splitlines())


def test_plain_progress_is_gates_voice_alone_while_models_load(tmp_path: Path) -> None:
    """``gate localize`` loads both builds in its own process (no pytest session captures
    descriptor 2): transformers' "Loading weights" bars used to leak into the CI log."""
    from gate.workflows.plan import packaged_store

    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
        "GATE_PROGRESS": "plain",
    }
    for name in ("TQDM_DISABLE", "HF_HUB_DISABLE_PROGRESS_BARS"):
        env.pop(name, None)  # as a user's shell has it: gate switches them itself
    argv = ["localize", "--candidate", "demo", "--recipe", "quanto-int2:only=model.layers.2.*"]
    argv += ["--against", "fp32", "--store", str(packaged_store()), "--prompts", "2", "--no-gate"]
    done = subprocess.run(
        [*_gate_command(), *argv],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    err = done.stderr.splitlines()
    for phase in (
        "localize: loading the baseline build demo (none)",
        "localize: loading the candidate demo (quanto-int2:only=model.layers.2.*)",
    ):
        assert f"gate: {phase} ..." in err, done.stderr
        assert any(line.startswith(f"gate: {phase}: done in ") for line in err), done.stderr
    divergence = "gate: localize: divergence pass over 2 prompts, 4 layers"
    assert f"{divergence}: 0/2" in err
    assert any(line.startswith(f"{divergence}: done 2/2 in ") for line in err), done.stderr
    assert (
        "Loading weights" not in done.stderr and "%|" not in done.stderr and "\r" not in done.stderr
    )
    assert [line for line in err if not line.startswith("gate: ")] == []  # one voice

"""No child outlives the gate (gate/processes.py), with real processes.

* :func:`end_children` ends a child, its own child, one that ignores SIGTERM and reaps one
  that already ended, and spares what the calling program had started before;
* the console entry point, interrupted while :func:`subprocess.run` waits on a shell
  that started a child of its own (``subprocess.run`` kills the shell and does not reap
  it; the shell's child is orphaned in the gate's process group), exits 2 with its
  process group empty.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from gate.errors import ExitCode
from gate.processes import descendants, end_children

#: A guard against a hang, not a speed check.
HANG_GUARD_S = 120.0


def _python(code: str, **kwargs: object) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        stdout=subprocess.PIPE,
        text=True,
        **kwargs,  # type: ignore[call-overload]
    )


def _ready(process: subprocess.Popen[str]) -> str:
    assert process.stdout is not None
    return process.stdout.readline().strip()


def _wait_zombie(pid: int) -> None:
    deadline = time.monotonic() + HANG_GUARD_S
    while psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the child never ended (hang guard)"
        time.sleep(0.02)


def _gone(pid: int) -> bool:
    """Ended and reaped: not even a zombie is left."""
    return not psutil.pid_exists(pid)


def _ended(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_end_children_ends_and_reaps_what_was_started_and_spares_the_rest() -> None:
    kept = subprocess.Popen(["sleep", "60"])
    spare = descendants()
    assert kept.pid in spare
    parent = _python(
        """
        import subprocess, time
        grandchild = subprocess.Popen(["sleep", "60"])
        print(grandchild.pid, flush=True)
        time.sleep(60)
        """
    )
    stubborn = _python(
        """
        import signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("ready", flush=True)
        time.sleep(60)
        """
    )
    ended = subprocess.Popen(["true"])
    grandchild = int(_ready(parent))
    assert _ready(stubborn) == "ready"
    _wait_zombie(ended.pid)
    try:
        found = end_children(grace_s=1.0, spare=spare)
        assert {parent.pid, grandchild, stubborn.pid, ended.pid} <= set(found)
        assert kept.pid not in found
        # the caller's children ended and reaped (the stubborn one ignored SIGTERM: killed)
        for pid in (parent.pid, stubborn.pid, ended.pid):
            assert _gone(pid), f"{pid} outlived end_children"
        assert _ended(grandchild)  # its parent ended: the system reaps it, in its own time
        assert kept.poll() is None  # the caller's own child runs on
    finally:
        kept.kill()
        kept.wait()


def test_an_interrupted_subprocess_run_leaves_no_process_of_the_gates_group(
    tmp_path: Path,
) -> None:
    script = tmp_path / "gate_with_an_orphan.py"
    script.write_text(
        textwrap.dedent(
            """
            import os, signal, subprocess, sys, threading
            import gate.cli
            from gate.commands.group import cli

            def command_interrupted_while_waiting(*args, **kwargs):
                # the shell starts a child of its own and waits; SIGINT hits the wait
                threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT)).start()
                subprocess.run(["sh", "-c", "sleep 60 & echo started; wait"])
                return 0

            cli.main = command_interrupted_while_waiting
            gate.cli.main()
            """
        )
    )
    process = subprocess.Popen(
        [sys.executable, str(script)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as CI runs a job
    )
    _, err = process.communicate(timeout=HANG_GUARD_S)
    try:
        assert process.returncode == ExitCode.INTERRUPTED, err
        assert "gate: interrupted" in err and "Traceback" not in err, err
        with pytest.raises(ProcessLookupError):  # the orphaned sleep was ended too
            os.killpg(process.pid, 0)
    finally:  # whatever the outcome, nothing of it stays behind this test
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)

"""``gate`` run in the test's own process, as a user's shell would run it.

:func:`run_gate` calls :func:`gate.cli.main` with ``argv`` and returns what a
subprocess would have given: the exit status and everything written to
standard output and standard error, captured at the file-descriptor level
(the gate's progress lines and the tier session's own pytest output go to
descriptors 1 and 2, not only to ``sys.stdout``). The working directory and
the environment are the ones given, restored afterwards.

Running in process spares each call a fresh interpreter that imports torch
and transformers again (about 6 s here); the tests that need a real process
boundary (signals, concurrent writers, a fresh import, the console script)
keep their subprocess.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

#: pytest-xdist's variables: the gate's own pytest session is no xdist worker.
XDIST_VARIABLES = ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID")

#: Environment every in-process run gets (offline, plain progress lines, no CI annotations).
BASE_ENV: Mapping[str, str] = {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "GATE_PROGRESS": "plain",
}


@dataclass(frozen=True)
class GateRun:
    """The outcome of one ``gate`` command: what ``subprocess.run`` would return."""

    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


@contextlib.contextmanager
def _environment(env: Mapping[str, str]) -> Iterator[None]:
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextlib.contextmanager
def _captured_descriptors(captured: list[str]) -> Iterator[None]:
    """Descriptors 1 and 2 (and ``sys.stdout``/``sys.stderr``) into two files whose
    text is appended to ``captured`` (stdout, stderr) when the block ends."""
    with tempfile.TemporaryDirectory(prefix="gate-cli-") as tmp:
        out_path, err_path = Path(tmp) / "stdout", Path(tmp) / "stderr"
        sys.stdout.flush()
        sys.stderr.flush()
        saved_fds = os.dup(1), os.dup(2)
        saved_streams = sys.stdout, sys.stderr
        with open(out_path, "wb") as out_file, open(err_path, "wb") as err_file:
            os.dup2(out_file.fileno(), 1)
            os.dup2(err_file.fileno(), 2)
        sys.stdout = open(1, "w", encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
        try:
            yield
        finally:
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    stream.flush()
            sys.stdout, sys.stderr = saved_streams
            os.dup2(saved_fds[0], 1)
            os.dup2(saved_fds[1], 2)
            os.close(saved_fds[0])
            os.close(saved_fds[1])
            for path in (out_path, err_path):
                captured.append(path.read_text(encoding="utf-8", errors="replace"))


def run_gate(
    *args: str,
    cwd: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    unset: tuple[str, ...] = ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY"),
) -> GateRun:
    """``gate ARGS...`` in this process, from ``cwd``, with ``os.environ`` plus
    :data:`BASE_ENV` plus ``env`` (less ``unset``); returns its outcome."""
    from gate.cli import main

    full = {**os.environ, **BASE_ENV, **(env or {})}
    for name in (*unset, *XDIST_VARIABLES):
        full.pop(name, None)
    before = os.getcwd()
    argv = sys.argv
    # click names the program after sys.argv[0] unless __main__ is a package's
    # (`python -m pytest`): the usage lines then read as the console script's
    main_module = sys.modules["__main__"]
    package = getattr(main_module, "__package__", None)
    captured: list[str] = []
    with _environment(full), _captured_descriptors(captured):
        try:
            if cwd is not None:
                os.chdir(cwd)
            sys.argv = ["gate", *args]
            main_module.__package__ = None
            try:
                code = main(list(args))
            except SystemExit as exc:  # a command that exits on its own
                code = exc.code if isinstance(exc.code, int) else 1
        finally:
            sys.argv = argv
            main_module.__package__ = package
            os.chdir(before)
    return GateRun(
        args=tuple(args),
        returncode=int(code),
        stdout=captured[0],
        stderr=captured[1],
    )

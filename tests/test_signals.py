"""SIGINT and SIGTERM during ``gate run`` / ``gate baseline record``, sent to real processes.

CI systems cancel a job with SIGINT, then SIGTERM. Whatever phase the signal
hits — interpreter start and imports, the model load, the measuring — the gate
must end with exit 2 and ``gate: interrupted``, print no traceback, leave no
process of its own behind (each run gets its own process group, which must be
empty afterwards) and leave the baseline store byte for byte as it was.

Signals in the import phase are sent at fixed delays after the interpreter is
up (the phase lasts about a second). The interpreter's own start (the site
module, before any gate code runs: about 0.2 s on a loaded two-core host) is
outside the gate's reach, so the delays count from there: the time this
host takes to start Python and import :mod:`gate.cli`, measured first. Later
phases are reached by waiting for the gate's own progress lines on stderr, so
the phase does not depend on the speed of the host.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gate.errors import ExitCode
from gate.workflows.plan import packaged_store

#: A guard against a hang, not a speed check.
HANG_GUARD_S = 1800.0
#: The console script installed beside the interpreter (the real entry point).
GATE = Path(sys.executable).with_name("gate")


def _snapshot(root: Path) -> dict[str, str]:
    """Every file under ``root`` with the sha256 of its bytes."""
    return {
        str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def _start(args: list[str], cwd: Path, err: Path) -> subprocess.Popen[bytes]:
    env = dict(
        os.environ,
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        GATE_PROGRESS="plain",
    )
    env.pop("GITHUB_ACTIONS", None)
    command = [str(GATE)] if GATE.is_file() else [sys.executable, "-m", "gate.cli"]
    return subprocess.Popen(
        [*command, *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=err.open("wb"),
        start_new_session=True,  # its own process group: what it starts must end with it
    )


def _wait_for(err: Path, marker: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + HANG_GUARD_S
    while marker not in err.read_text(errors="replace"):
        assert process.poll() is None, f"ended before {marker!r}: {err.read_text()}"
        assert time.monotonic() < deadline, f"no {marker!r} on stderr (hang guard)"
        time.sleep(0.05)


def _interrupt(
    tmp_path: Path, args: list[str], signum: int, *, delay: float = 0.0, marker: str = ""
) -> str:
    """Run ``gate args``, send ``signum`` after ``delay`` s or once ``marker`` is on stderr;
    check exit 2, the interrupted line, no traceback and an empty process group."""
    err = tmp_path / "stderr.txt"
    process = _start(args, tmp_path, err)
    if marker:
        _wait_for(err, marker, process)
    else:
        time.sleep(delay)
    process.send_signal(signum)
    code = process.wait(timeout=HANG_GUARD_S)
    text = err.read_text(errors="replace")
    if code != ExitCode.INTERRUPTED:  # the whole stderr (a crash's thread dump), untruncated
        pytest.fail(f"exit {code}, not {int(ExitCode.INTERRUPTED)}; stderr:\n{text}")
    assert "gate: interrupted" in text, text
    assert "Traceback" not in text, text
    with pytest.raises(ProcessLookupError):  # nothing of the run's process group is left
        os.killpg(process.pid, 0)
    return text


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """A copy of the packaged store (the demo's fp32 baseline and its artifacts)."""
    target = tmp_path / "baselines"
    shutil.copytree(packaged_store(), target)
    return target


def _run_args(store: Path) -> list[str]:
    return ["run", "--candidate", "demo", "--against", "fp32", "--tiers", "fidelity",
            "--store", str(store), "--json", str(store.parent / "out" / "results.json")]  # fmt: skip


def _record_args(store: Path) -> list[str]:
    return ["baseline", "record", "--model", "demo", "--tiers", "fidelity", "--label", "sig",
            "--ref", "fp32", "--store", str(store)]  # fmt: skip


@pytest.fixture(scope="module")
def interpreter_up_s() -> float:
    """Half again the longest of five starts of Python importing :mod:`gate.cli` (when the
    handlers are installed): signals before it reach the interpreter, not the gate. The
    margin keeps a start stalled by a loaded host out of the interpreter's phase; the
    import phase after it lasts about a second, so the signal still lands in it."""
    times = []
    for _ in range(5):
        start = time.monotonic()
        subprocess.run([sys.executable, "-c", "import gate.cli"], check=True)
        times.append(time.monotonic() - start)
    return 1.5 * max(times)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("after", [0.0, 0.2, 0.5, 1.0])
def test_a_signal_while_starting_is_an_interrupt_without_traceback(
    tmp_path: Path, store: Path, signum: int, after: float, interpreter_up_s: float
) -> None:
    before = _snapshot(store)
    _interrupt(tmp_path, _run_args(store), signum, delay=interpreter_up_s + after)
    assert _snapshot(store) == before


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize(
    "marker", ["gate: loading demo", "done in"], ids=["while-loading", "while-measuring"]
)
def test_a_signal_during_a_run_is_an_interrupt_and_leaves_the_store(
    tmp_path: Path, store: Path, signum: int, marker: str
) -> None:
    before = _snapshot(store)
    _interrupt(tmp_path, _run_args(store), signum, marker=marker)
    assert _snapshot(store) == before


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_during_a_recording_stores_nothing_and_moves_no_ref(
    tmp_path: Path, store: Path, signum: int
) -> None:
    before = _snapshot(store)
    _interrupt(tmp_path, _record_args(store), signum, marker="done in")
    assert _snapshot(store) == before


def test_sigint_then_sigterm_as_ci_sends_them_is_one_interrupt(tmp_path: Path, store: Path) -> None:
    """The second signal must not break the cleanup of the first (one interrupted line)."""
    err = tmp_path / "stderr.txt"
    process = _start(_run_args(store), tmp_path, err)
    _wait_for(err, "gate: loading demo", process)
    process.send_signal(signal.SIGINT)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=HANG_GUARD_S) == ExitCode.INTERRUPTED
    text = err.read_text(errors="replace")
    assert text.count("gate: interrupted") == 1, text
    assert "Traceback" not in text, text


class _SignalInSetName:
    """A descriptor whose ``__set_name__`` receives ``signum``: the signal hits while a
    class is being created, as when a module defining one is imported. Python 3.11 wraps
    the handler's :class:`KeyboardInterrupt` in a :class:`RuntimeError`."""

    def __init__(self, signum: int) -> None:
        self.signum = signum

    def __set_name__(self, owner: type, name: str) -> None:
        signal.raise_signal(self.signum)


def _create_a_class_hit_by(signum: int) -> None:
    type("Hit", (), {"attribute": _SignalInSetName(signum)})


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_wrapped_interrupt_while_importing_is_an_interrupt(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], signum: int
) -> None:
    """The CI failure this reproduces: the signal hit ``import click`` (its class
    definitions) right after the handlers were installed; the wrapped interrupt escaped as
    a traceback with exit 1."""
    import gate.cli

    real_run = gate.cli._run

    def run_hit_while_importing(argv: object, interrupts: object) -> int:
        _create_a_class_hit_by(signum)
        return real_run(argv, interrupts)  # type: ignore[arg-type]

    monkeypatch.setattr(gate.cli, "_run", run_hit_while_importing)
    assert gate.cli.main(["--help"]) == ExitCode.INTERRUPTED
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1] == "gate: interrupted", err
    assert not isinstance(signal.getsignal(signum), gate.cli._Interrupts)  # restored


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_wrapped_interrupt_inside_a_command_is_an_interrupt(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], signum: int
) -> None:
    from gate.cli import main
    from gate.commands.group import cli

    def command_hit_by_the_signal(*args: object, **kwargs: object) -> int:
        _create_a_class_hit_by(signum)
        return 0

    monkeypatch.setattr(cli, "main", command_hit_by_the_signal)
    assert main(["--help"]) == ExitCode.INTERRUPTED
    err = capsys.readouterr().err
    assert "gate: interrupted" in err and "internal error" not in err, err


@pytest.mark.parametrize("surfaced", ["swallowed", "as-a-gate-error"])
def test_an_interrupt_swallowed_or_reworded_on_its_way_up_is_an_interrupt(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], surfaced: str
) -> None:
    """A command that caught the interrupt (as pytest records a test that errored) or
    re-raised it as its own error (a model load failing on it) still ends as an
    interrupt: a cancelled job reports no verdict."""
    from gate.cli import main
    from gate.commands.group import cli
    from gate.errors import ModelLoadError

    def command_that_catches_the_signal(*args: object, **kwargs: object) -> int:
        try:
            _create_a_class_hit_by(signal.SIGINT)
        except RuntimeError as exc:
            if surfaced == "as-a-gate-error":
                raise ModelLoadError("cannot load the model", "check it") from exc
        return 0

    monkeypatch.setattr(cli, "main", command_that_catches_the_signal)
    assert main(["--help"]) == ExitCode.INTERRUPTED
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1] == "gate: interrupted", err
    assert "cannot load" not in err, err


def test_an_error_without_a_signal_is_still_an_internal_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The interrupt rule must not swallow real faults: no signal, exit 3."""
    from gate.cli import main
    from gate.commands.group import cli

    def command_that_fails(*args: object, **kwargs: object) -> int:
        raise RuntimeError("a real fault")

    monkeypatch.setattr(cli, "main", command_that_fails)
    assert main(["--help"]) == ExitCode.INTERNAL_ERROR
    err = capsys.readouterr().err
    assert "internal error: RuntimeError: a real fault" in err and "interrupted" not in err


def _write_module(root: Path, name: str, body: str) -> None:
    (root / f"{name}.py").write_text(body)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_during_a_library_import_waits_until_the_import_finished(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, signum: int
) -> None:
    """The signal hits the middle of a library's module body: the body runs to its end and
    the module stays imported whole; the interrupt comes up at the import statement."""
    from gate.cli import interrupt_handlers

    name = f"held_library_{signum}"
    _write_module(
        tmp_path, name, f"import signal\nsignal.raise_signal({signum})\nFINISHED = True\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with interrupt_handlers() as interrupts, pytest.raises(KeyboardInterrupt, match="held"):
        __import__(name)
    assert interrupts.received == signum
    assert sys.modules[name].FINISHED is True
    del sys.modules[name]


def test_a_held_interrupt_is_not_swallowed_by_a_failing_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An optional import the caller expects may fail (``except ImportError``) still brings
    the interrupt up: it replaces the import's own error."""
    from gate.cli import interrupt_handlers

    _write_module(tmp_path, "held_failing_library", "import signal\nsignal.raise_signal(signal.SIGINT)\nraise ImportError('no backend')\n")  # fmt: skip
    monkeypatch.syspath_prepend(str(tmp_path))
    with (
        interrupt_handlers(),
        pytest.raises(KeyboardInterrupt),
        contextlib.suppress(ImportError),  # the caller's own expectation
    ):
        import held_failing_library  # type: ignore[import-not-found]  # noqa: F401
    assert "held_failing_library" not in sys.modules


def test_outside_an_import_the_signal_raises_at_once_and_the_hook_goes_with_the_handlers() -> None:
    import builtins

    from gate.cli import interrupt_handlers

    before = builtins.__import__
    with interrupt_handlers() as interrupts, pytest.raises(KeyboardInterrupt) as raised:
        signal.raise_signal(signal.SIGINT)
        time.sleep(1.0)
    assert "held" not in str(raised.value) and interrupts.received == signal.SIGINT
    assert builtins.__import__ is before
    assert not isinstance(signal.getsignal(signal.SIGINT), type(interrupts))


#: Imports torch under the gate's handlers, printing ``up`` first; whatever ends the import,
#: touches torch again (as a cleanup path may) and stays in the handlers' block a while so
#: a late signal is an interrupt too. A half-initialised torch crashes on that touch or at
#: exit (SIGSEGV, SIGABRT) in about half the runs without the hold.
_IMPORT_TORCH = """
import sys, time
from gate.cli import interrupt_handlers
with interrupt_handlers():
    print("up", file=sys.stderr, flush=True)
    try:
        import torch
        import transformers
        time.sleep(30)
    except KeyboardInterrupt as exc:
        print(f"interrupted: {exc}", file=sys.stderr, flush=True)
        import torch
        torch.zeros(4).sum()
        sys.exit(2)
"""


@pytest.mark.slow
def test_a_signal_during_the_torch_import_ends_cleanly() -> None:
    """Signals at spread delays across the import of torch and transformers in a real
    process: every run ends with exit 2, the interrupt at least once held by the import."""
    held = 0
    for delay in (0.05, 0.2, 0.4, 0.7, 1.0, 1.4):
        process = subprocess.Popen(
            [sys.executable, "-c", _IMPORT_TORCH],
            stderr=subprocess.PIPE,
            env=dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_VERBOSITY="error"),
        )
        assert process.stderr is not None
        assert process.stderr.readline().strip() == b"up"
        time.sleep(delay)
        process.send_signal(signal.SIGINT)
        text = process.stderr.read().decode(errors="replace")
        code = process.wait(timeout=HANG_GUARD_S)
        assert code == 2, f"signal after {delay} s: exit {code}\n{text}"
        held += "held until an import finished" in text
    assert held, "no signal landed inside the import: the test exercised nothing"

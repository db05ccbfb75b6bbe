"""An interrupt whose traceback has an entry without a line number stays an interrupt.

A signal can land on a bytecode instruction that has no line number (Python
3.11+: ``tb_lineno is None``); pytest's formatting of the interrupt then raised
``TypeError`` and the gate exited 3 instead of 2. The tracebacks here are built
with such an entry (a real frame, an instruction offset whose line is None).
"""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path
from types import TracebackType

import pytest
from _pytest._code import ExceptionInfo

from gate.errors import ExitCode
from gate.session.interrupt_repr import drop_lineless_frames


def _with_block() -> None:
    with open(__file__) as handle:
        for _ in range(2):
            handle.read(1)
    raise KeyboardInterrupt("signal 15")


def _lineless(tb: TracebackType) -> TracebackType:
    """An entry for ``tb``'s frame at the first instruction that has no line number."""
    size = len(tb.tb_frame.f_code.co_code)
    for offset in range(0, size, 2):
        entry = TracebackType(None, tb.tb_frame, offset, -1)
        if entry.tb_lineno is None:
            return entry
    raise AssertionError("no instruction without a line number")  # pragma: no cover


def _interrupt_with_a_lineless_entry() -> KeyboardInterrupt:
    """A KeyboardInterrupt whose traceback is: this test's frame, then a lineless entry
    of the interrupted function, then nothing."""
    try:
        _with_block()
    except KeyboardInterrupt as exc:
        outer = exc.__traceback__
        assert outer is not None and outer.tb_next is not None
        outer.tb_next = _lineless(outer.tb_next)
        return exc
    raise AssertionError("not raised")  # pragma: no cover


def test_pytest_cannot_format_the_raw_traceback() -> None:
    """The failure the module guards against is real (with the pytest of the lock)."""
    excinfo = ExceptionInfo.from_exception(_interrupt_with_a_lineless_entry())
    with pytest.raises(TypeError):
        excinfo.getrepr(funcargs=True)


def test_the_lineless_entry_is_dropped_and_the_rest_formats() -> None:
    excinfo = ExceptionInfo.from_exception(_interrupt_with_a_lineless_entry())
    drop_lineless_frames(excinfo)
    text = str(excinfo.getrepr(funcargs=True))
    assert "KeyboardInterrupt: signal 15" in text
    assert "_interrupt_with_a_lineless_entry" in text  # the entry with a line is kept
    assert [entry.lineno is not None for entry in excinfo.traceback] == [True]


def test_a_chained_exception_is_cleaned_too() -> None:
    """An interrupt raised while another exception was handled: pytest prints both."""
    inner = _interrupt_with_a_lineless_entry()
    outer = KeyboardInterrupt("second signal")
    try:
        raise outer
    except KeyboardInterrupt:
        pass
    outer.__context__ = inner
    with pytest.raises(TypeError):
        ExceptionInfo.from_exception(outer).getrepr(funcargs=True)
    excinfo = ExceptionInfo.from_exception(outer)
    drop_lineless_frames(excinfo)
    text = str(excinfo.getrepr(funcargs=True))
    assert "signal 15" in text and "second signal" in text


def test_an_all_lineless_traceback_leaves_an_empty_one() -> None:
    exc = _interrupt_with_a_lineless_entry()
    assert exc.__traceback__ is not None and exc.__traceback__.tb_next is not None
    exc.__traceback__ = exc.__traceback__.tb_next  # only the lineless entry
    excinfo = ExceptionInfo.from_exception(exc)
    drop_lineless_frames(excinfo)
    assert len(excinfo.traceback) == 0 and exc.__traceback__ is None
    assert "KeyboardInterrupt" in str(excinfo.getrepr(funcargs=True))


def test_a_pytest_session_interrupted_on_a_lineless_instruction_exits_2(
    tmp_path: Path,
) -> None:
    """The real pytest, with the gate's plugin loaded by its entry point: exit 2, no
    INTERNALERROR; without the plugin the same session crashes (the control)."""
    suite = tmp_path / "test_interrupted.py"
    helpers = "\n\n".join(
        inspect.getsource(function)
        for function in (_with_block, _lineless, _interrupt_with_a_lineless_entry)
    )
    suite.write_text(
        "from types import TracebackType\n\n"
        + helpers
        + "\n\ndef test_interrupted() -> None:\n    raise _interrupt_with_a_lineless_entry()\n"
    )
    command = [sys.executable, "-m", "pytest", f"{suite}::test_interrupted",
               "-p", "no:cacheprovider", "-q"]  # fmt: skip
    with_gate = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True)
    assert with_gate.returncode == ExitCode.INTERRUPTED, with_gate.stdout + with_gate.stderr
    assert "TypeError" not in with_gate.stdout + with_gate.stderr
    without = subprocess.run(
        [*command, "-p", "no:gate"], cwd=tmp_path, capture_output=True, text=True
    )
    assert without.returncode != ExitCode.INTERRUPTED
    assert "TypeError" in without.stdout + without.stderr

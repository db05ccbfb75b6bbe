"""The ``gate`` command line: the only place an exception becomes the command's exit code.

Each command lives in a small module under :mod:`gate.commands`
(:mod:`gate.commands.group` assembles them into one click group). :func:`main`
first installs the interrupt handler (SIGINT and SIGTERM, as CI systems cancel
a job), then imports the commands, so a signal while importing is an
interrupt too, not a traceback (one that lands inside a library's import is
held until that import ends: :class:`_Interrupts`). It converts :class:`~gate.errors.GateError`
(one line, no traceback), interrupts and unexpected errors into the exit codes
of :class:`~gate.errors.ExitCode`; the last line printed names what the code
means (``ERROR (input, exit 4)``, :func:`gate.errors.exit_label`). Before it
returns, on every path, every process the command started is ended and reaped
(:func:`gate.processes.end_children`): no child outlives the gate.

This module imports nothing heavy at import time: the console script's
interpreter reaches :func:`main` within milliseconds.
"""

from __future__ import annotations

import builtins
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from types import FrameType
from typing import Any

from gate.errors import ExitCode  # light: enum only
from gate.processes import become_subreaper, descendants, end_children  # light

#: Signals handled as an interrupt (exit 2): Ctrl-C and the cancellation of a CI job.
INTERRUPT_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM)
#: Printed (on stderr) when a command was interrupted.
INTERRUPTED_LINE = "gate: interrupted"


class _Interrupts:
    """SIGINT/SIGTERM raise :class:`KeyboardInterrupt` once; repeats wait for the cleanup.

    CI systems send SIGINT then SIGTERM a moment later: the second signal must
    not break the ``finally`` blocks that stop the servers and subprocesses the
    run started, so only the first one raises.

    While the main thread imports a library from outside the standard library
    (:meth:`held`, entered by :func:`_holding_import`), the interrupt is held
    and raised once that import has finished: an exception raised part-way
    through a native extension's initialisation (torch registering its
    operators) leaves it half-built, and the next touch of it, or the
    interpreter's garbage collection on the way out, can crash the process
    (SIGSEGV or SIGABRT) instead of ending it with exit 2. Imports take seconds,
    so the hold is short.
    """

    def __init__(self) -> None:
        self.received: int | None = None
        self._holds = 0
        self._pending = False

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if self.received is not None:
            return
        self.received = signum
        if self._holds:
            self._pending = True
            return
        raise KeyboardInterrupt(f"signal {signum}")

    @property
    def holding(self) -> bool:
        """Whether an interrupt would be held now."""
        return self._holds > 0

    @contextmanager
    def held(self) -> Iterator[None]:
        """Hold an interrupt inside the block; raise it when the outermost block ends (in place
        of what the block raised, so a caller that expects the import to fail cannot swallow it)."""
        self._holds += 1
        try:
            yield
        finally:
            self._holds -= 1
            if not self._holds and self._pending:
                self._pending = False
                raise KeyboardInterrupt(f"signal {self.received} (held until an import finished)")


#: ``builtins.__import__``'s signature.
_Import = Callable[..., Any]


def _outside_stdlib(name: str) -> bool:
    top = name.partition(".")[0]
    return top not in sys.stdlib_module_names and top != "gate"


def _holding_import(interrupts: _Interrupts, original: _Import) -> _Import:
    """``__import__`` that holds an interrupt across an absolute import, in the main thread,
    of a library outside the standard library and the gate (where the signals are handled)."""
    main = threading.main_thread().ident

    def holding_import(
        name: str,
        globals: Any = None,
        locals: Any = None,
        fromlist: Any = (),
        level: int = 0,
    ) -> Any:
        if (
            level == 0
            and not interrupts.holding
            and threading.get_ident() == main
            and _outside_stdlib(name)
        ):
            with interrupts.held():
                return original(name, globals, locals, fromlist, level)
        return original(name, globals, locals, fromlist, level)

    return holding_import


@contextmanager
def interrupt_handlers() -> Iterator[_Interrupts]:
    """Handle :data:`INTERRUPT_SIGNALS` as interrupts while the block runs (main thread only;
    a signal the parent process set to be ignored stays ignored), holding one across the
    imports of libraries (:class:`_Interrupts`)."""
    handler = _Interrupts()
    previous: dict[signal.Signals, Any] = {}
    original_import = builtins.__import__
    if threading.current_thread() is threading.main_thread():
        builtins.__import__ = _holding_import(handler, original_import)
        for sig in INTERRUPT_SIGNALS:
            if signal.getsignal(sig) is signal.SIG_IGN:  # e.g. nohup: the parent's choice
                continue
            previous[sig] = signal.signal(sig, handler)
    try:
        yield handler
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old if old is not None else signal.SIG_DFL)
        builtins.__import__ = original_import


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _run(argv: Sequence[str] | None, interrupts: _Interrupts) -> int:
    """Import the commands and run one; every outcome becomes an exit code.

    Once ``interrupts`` has received a signal, the outcome is the interrupt,
    whatever surfaced: the :class:`KeyboardInterrupt` the handler raised may
    come up wrapped by the code it hit (Python 3.11 wraps what ``__set_name__``
    raises while a class is being created in a :class:`RuntimeError`; a library
    may re-raise it as its own error) or be swallowed on its way (a test that
    errors instead of stopping pytest). A cancelled job reports no verdict.
    """
    try:
        from gate.commands.group import cli

        result = cli.main(args=list(argv) if argv is not None else None, standalone_mode=False)
        code = int(result) if isinstance(result, int) else int(ExitCode.OK)
    except KeyboardInterrupt:
        code = int(ExitCode.INTERRUPTED)
    except Exception as exc:  # a wrapped interrupt prints no error line of its own
        interrupted = interrupts.received is not None
        code = int(ExitCode.INTERRUPTED) if interrupted else _outcome_of(exc)
    if interrupts.received is not None:
        code = int(ExitCode.INTERRUPTED)
    if code == ExitCode.INTERRUPTED:
        _say(INTERRUPTED_LINE)
    return code


def _outcome_of(exc: Exception) -> int:
    """The exit code of an exception a command raised, its line printed on stderr."""
    import click

    from gate.errors import GateError, exit_label

    if isinstance(exc, click.exceptions.Abort):  # click's own Ctrl-C at a prompt
        return int(ExitCode.INTERRUPTED)
    if isinstance(exc, GateError):
        code = int(exc.exit_code)
        _say(f"gate: error: {exc.format_line()} - {exit_label(code)}")
        return code
    if isinstance(exc, click.exceptions.Exit):
        return int(exc.exit_code)
    if isinstance(exc, click.ClickException):
        exc.show()
        code = int(ExitCode.USAGE_ERROR)
        _say(f"gate: {exit_label(code)}")
        return code
    code = int(ExitCode.INTERNAL_ERROR)
    _say(f"gate: internal error: {type(exc).__name__}: {exc}")
    if _debug():
        import traceback

        traceback.print_exception(exc)
    _say(f"gate: {exit_label(code)} (set GATE_DEBUG=1 for the traceback; please report it)")
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns (and exits with) an :class:`ExitCode`."""
    interrupts: _Interrupts | None = None
    # called inside another program (argv given): that program's own children are spared
    spare = descendants() if argv is not None else None
    if spare is None:
        become_subreaper()  # an orphaned descendant comes to the gate, which reaps it
    try:
        with interrupt_handlers() as interrupts:
            try:
                code = _run(argv, interrupts)
            finally:  # on every path, an interrupt in the first second included
                end_children(spare=spare)
    except KeyboardInterrupt:  # a signal while printing the outcome or restoring the handlers
        _say(INTERRUPTED_LINE)
        code = int(ExitCode.INTERRUPTED)
    except Exception:  # the interrupt, wrapped, where _run does not catch (see _run)
        if interrupts is None or interrupts.received is None:
            raise
        _say(INTERRUPTED_LINE)
        code = int(ExitCode.INTERRUPTED)
    if argv is None:
        sys.exit(code)
    return code


def _debug() -> bool:
    return os.environ.get("GATE_DEBUG", "") not in ("", "0")


def __getattr__(name: str) -> Callable[..., Any]:
    """``gate.cli.cli`` (the click group), imported on first use."""
    if name == "cli":
        from gate.commands.group import cli

        return cli
    raise AttributeError(name)


if __name__ == "__main__":  # pragma: no cover
    main()

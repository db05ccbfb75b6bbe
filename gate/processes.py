"""No child outlives the gate: every process it started is ended and reaped before it exits.

The gate starts processes of its own (managed engine servers, the probes'
sandbox, GuideLLM) and so do the libraries it runs: pytest's plugins ask
``git`` and ``file`` about the checkout, ``platform`` runs ``uname``,
matplotlib runs ``fc-list``. Each has its own cleanup, but an interrupt can
land between a child's start and its ``wait``: :func:`subprocess.run` kills
the child it was waiting for when :class:`KeyboardInterrupt` arrives but does
not reap it, so a zombie (still a member of the gate's process group) would
outlive the gate until the system reaps it.

:func:`end_children` is the last step of :func:`gate.cli.main` on every path:

1. reap every child that has already ended;
2. find the processes still alive that the gate started: its descendants. A
   process whose parent ended is still one: the console script makes the gate
   the *child subreaper* of its descendants first thing (Linux), so an orphan
   is handed to the gate, not to the system's init (which may reap it only
   later, leaving a zombie in the gate's process group after it exited);
3. send each ``SIGTERM`` (to its whole process group when it leads one of its
   own, as a managed server does), wait up to ``grace_s`` seconds for it to
   end and be reaped, then ``SIGKILL`` what is left and wait again (bounded
   by ``grace_s`` too);
4. reap every child again.

The interrupt signals are blocked while this runs, so a second Ctrl-C cannot
cut the cleanup short; one that arrived meanwhile is delivered when it ends.
Nothing here imports a model library (``psutil`` only, inside the function).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import psutil

#: Seconds a child gets to end after SIGTERM, and again after SIGKILL.
GRACE_S = 3.0
#: How often the processes are looked at while waiting for them to end.
_POLL_S = 0.02
#: ``prctl`` option (linux/prctl.h): orphaned descendants are reparented to the caller.
_PR_SET_CHILD_SUBREAPER = 36


def reap_ended_children() -> list[int]:
    """Reap (``waitpid``) every child of this process that has ended; their pids."""
    reaped = []
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:  # no children at all
            break
        if pid == 0:  # children left, none ended
            break
        reaped.append(pid)
    return reaped


def become_subreaper() -> bool:
    """Make this process the child subreaper of its descendants (Linux ``prctl``): a process
    whose parent ends is handed to the gate, not to the system's init, so the gate can end
    and reap it before it exits. ``False`` where the platform has no such thing."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _alive(process: psutil.Process) -> bool:
    import psutil

    try:
        return bool(process.is_running() and process.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def descendants() -> set[int]:
    """The pids of this process's descendants now (zombies included)."""
    import psutil

    with contextlib.suppress(psutil.Error):
        return {child.pid for child in psutil.Process().children(recursive=True)}
    return set()


def _started(spare: Collection[int]) -> list[psutil.Process]:
    import psutil

    with contextlib.suppress(psutil.Error):
        children = psutil.Process().children(recursive=True)
        return [child for child in children if child.pid not in spare]
    return []


def _signal(process: psutil.Process, signum: int) -> None:
    """``signum`` to ``process``, or to its whole process group when it leads its own."""
    with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
        pgid = os.getpgid(process.pid)
        if pgid == process.pid and pgid != os.getpgrp():
            os.killpg(pgid, signum)
        else:
            os.kill(process.pid, signum)


def _unsettled(processes: list[psutil.Process], *, whole: bool) -> list[psutil.Process]:
    """Those of ``processes`` not yet ended and reaped; this process's ended children are
    reaped on the way. An ended process of another parent is settled for a caller running the
    gate in its own process; for the whole process it is not yet: its parent ends next and
    hands it over (:func:`become_subreaper`)."""
    import psutil

    me = os.getpid()
    left = []
    for process in processes:
        try:
            if process.status() != psutil.STATUS_ZOMBIE:
                left.append(process)
            elif process.ppid() == me:
                with contextlib.suppress(ChildProcessError):
                    if os.waitpid(process.pid, os.WNOHANG)[0] == 0:
                        left.append(process)
            elif whole:
                left.append(process)
        except psutil.Error:
            continue  # gone
    return left


def _settle(
    processes: list[psutil.Process], timeout: float, *, whole: bool
) -> list[psutil.Process]:
    """Wait up to ``timeout`` s for ``processes`` to end and be reaped; those still alive."""
    deadline = time.monotonic() + timeout
    left = _unsettled(processes, whole=whole)
    while left and time.monotonic() < deadline:
        time.sleep(_POLL_S)
        left = _unsettled(left, whole=whole)
    return [process for process in left if _alive(process)]


@contextmanager
def _signals_blocked(signums: Collection[int]) -> Iterator[None]:
    """Defer ``signums`` while the block runs (a no-op where the platform cannot)."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, signums)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def end_children(
    grace_s: float = GRACE_S,
    *,
    spare: Collection[int] | None = None,
    defer: Collection[int] = (signal.SIGINT, signal.SIGTERM),
) -> list[int]:
    """End and reap every process this one started (module docstring); the pids it found.

    ``spare=None``: the whole process is the gate's (the console script): every child is
    reaped, and a descendant handed over to it (:func:`become_subreaper`) is waited for
    too. A caller that runs the gate inside its own process passes the pids of the
    descendants it had before (:func:`descendants`): those are left alone, and so are its
    children's ended children, which their parents reap. Bounded: at most about
    ``2 * grace_s`` seconds however the children behave.
    """
    whole = spare is None
    with _signals_blocked(defer):
        if whole:
            reap_ended_children()
        try:
            processes = _started(spare or ())
        except Exception:  # psutil missing or /proc unreadable: reaping is all that is left
            return []
        for process in processes:
            if _alive(process):
                _signal(process, signal.SIGTERM)
        left = _settle(processes, grace_s, whole=whole)
        for process in left:
            _signal(process, signal.SIGKILL)
        _settle(processes, grace_s, whole=whole)
        if whole:
            reap_ended_children()
    return [process.pid for process in processes]

"""Make an interrupt's traceback printable by pytest.

A signal handler runs between bytecode instructions, and on Python 3.11+ some
of them (the cleanup of ``with`` blocks, loop and exception scaffolding) carry
no line number: the traceback entry of a frame interrupted there has
``tb_lineno is None``. pytest formats the traceback of a ``KeyboardInterrupt``
(its terminal reporter's ``pytest_keyboard_interrupt`` hook) and subtracts 1
from every entry's line number, so such an entry turns Ctrl-C or SIGTERM into
a ``TypeError`` escaping ``pytest.main``: an internal error instead of the
documented interrupt (exit 2).

:func:`drop_lineless_frames` unlinks those entries from the exception's
traceback and from every exception chained to it (``__cause__``,
``__context__``), before pytest formats them. The entries dropped have no
source line to show, so the printed traceback loses nothing readable.
"""

from __future__ import annotations

from types import TracebackType

from _pytest._code import ExceptionInfo, Traceback


def _relinked(tb: TracebackType | None) -> TracebackType | None:
    """The first entry of ``tb`` that has a line number, each kept entry's ``tb_next``
    pointing past the entries without one (changed in place; ``None`` when none has)."""
    head = tb
    while head is not None and head.tb_lineno is None:
        head = head.tb_next
    node = head
    while node is not None:
        following = node.tb_next
        while following is not None and following.tb_lineno is None:
            following = following.tb_next
        node.tb_next = following
        node = following
    return head


def drop_lineless_frames(excinfo: ExceptionInfo[BaseException]) -> None:
    """Remove the traceback entries without a line number from ``excinfo`` and its chain."""
    seen: set[int] = set()
    pending: list[BaseException | None] = [excinfo.value]
    while pending:
        exc = pending.pop()
        if exc is None or id(exc) in seen:
            continue
        seen.add(id(exc))
        exc.__traceback__ = _relinked(exc.__traceback__)
        pending += [exc.__cause__, exc.__context__]
    head = excinfo.value.__traceback__
    excinfo.traceback = Traceback(head) if head is not None else Traceback([])

"""How a finished gate session hands its results to the code that started it.

A gate session runs in this process (:func:`gate.session.runner.run_pytest`),
so the caller need not read its results JSON back from a file: inside
:func:`collect`, every session that builds its
:class:`~gate.report.results.Results` passes them to :func:`publish`, and the
caller finds them in the list :func:`collect` yields. Outside :func:`collect`,
:func:`publish` does nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from gate.report.results import Results

__all__ = ["collect", "publish"]

_SINK: ContextVar[list[Results] | None] = ContextVar("gate_results_sink", default=None)


@contextmanager
def collect() -> Iterator[list[Results]]:
    """Collect the results of the sessions run inside the block, in order."""
    sink: list[Results] = []
    token = _SINK.set(sink)
    try:
        yield sink
    finally:
        _SINK.reset(token)


def publish(results: Results) -> None:
    """Hand a session's results to the enclosing :func:`collect`, if there is one."""
    sink = _SINK.get()
    if sink is not None:
        sink.append(results)

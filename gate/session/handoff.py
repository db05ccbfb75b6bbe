"""How a finished gate session hands its results to the code that started it.

A gate session runs in this process (:func:`gate.session.runner.run_session`),
so the caller need not read its results JSON back from a file: inside
:func:`collect`, every session that builds its
:class:`~gate.report.results.Results` passes them to :func:`publish`, and the
caller finds them in the list :func:`collect` yields. Outside :func:`collect`,
:func:`publish` does nothing. :func:`collect_measurements` and
:func:`publish_measurements` do the same for a run-mode session's measurements.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from gate.measurement import Measurement
from gate.report.results import Results

__all__ = ["collect", "collect_measurements", "publish", "publish_measurements"]

_SINK: ContextVar[list[Results] | None] = ContextVar("gate_results_sink", default=None)
_MEASURED: ContextVar[list[list[Measurement]] | None] = ContextVar(
    "gate_measurements_sink", default=None
)


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


@contextmanager
def collect_measurements() -> Iterator[list[list[Measurement]]]:
    """Collect what each run-mode session inside the block measured (per-item samples
    included: ``gate calibrate`` reads the paired spreads from them), one list per session."""
    sink: list[list[Measurement]] = []
    token = _MEASURED.set(sink)
    try:
        yield sink
    finally:
        _MEASURED.reset(token)


def publish_measurements(measured: list[Measurement]) -> None:
    """Hand a run-mode session's measurements to the enclosing :func:`collect_measurements`."""
    sink = _MEASURED.get()
    if sink is not None:
        sink.append(list(measured))

"""Step clocks: one timestamp per decoding step, for the latency tier.

Both clocks implement :class:`gate.models.backends.base.StepClock`. ``start()`` opens
a timed request, every ``mark()`` records the moment one decoding step's
tokens exist, and ``elapsed()`` returns the marks as seconds since ``start``.

* :class:`PerfCounterClock` (CPU): ``time.perf_counter`` at each call; the
  computation is synchronous, so the wall clock is the step time.
* :class:`CudaEventClock` (GPU): kernels are queued asynchronously, so a host
  timestamp would measure the *launch*, not the work. Each mark records a CUDA
  event with ``enable_timing=True`` in the stream; ``elapsed()`` synchronizes
  once (on the last event) and reads ``start.elapsed_time(mark)`` in
  milliseconds. docs/metrics.md "Latency and memory" (clocks).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

from gate.errors import UsageError


class _TimingEvent(Protocol):
    """What :class:`CudaEventClock` needs from ``torch.cuda.Event``."""

    def record(self) -> None: ...

    def synchronize(self) -> None: ...

    def elapsed_time(self, end_event: Any) -> float: ...


class PerfCounterClock:
    """Host wall-clock step timer (``time.perf_counter``), for CPU backends."""

    def __init__(self, now: Callable[[], float] = time.perf_counter) -> None:
        self._now = now
        self._t0: float | None = None
        self._marks: list[float] = []

    def start(self) -> None:
        """Begin a request; forget earlier marks."""
        self._marks = []
        self._t0 = self._now()

    def mark(self) -> None:
        """Record the end of one decoding step."""
        if self._t0 is None:
            raise RuntimeError("PerfCounterClock.mark() before start()")
        self._marks.append(self._now())

    def elapsed(self) -> list[float]:
        """Seconds from :meth:`start` to each :meth:`mark`."""
        if self._t0 is None:
            return []
        t0 = self._t0
        return [t - t0 for t in self._marks]


class CudaEventClock:
    """Device-side step timer from CUDA events, synchronized once when read.

    ``event_factory`` builds a timing event; by default
    ``torch.cuda.Event(enable_timing=True)``. Tests pass a fake with the same
    three methods, so everything here runs on the CPU as it does on a GPU.
    """

    def __init__(self, event_factory: Callable[[], _TimingEvent] | None = None) -> None:
        self._factory = event_factory if event_factory is not None else _torch_cuda_event
        self._start: _TimingEvent | None = None
        self._marks: list[_TimingEvent] = []

    def start(self) -> None:
        """Record the start event in the current stream."""
        self._marks = []
        event = self._factory()
        event.record()
        self._start = event

    def mark(self) -> None:
        """Record one step-end event in the current stream (no host sync)."""
        if self._start is None:
            raise RuntimeError("CudaEventClock.mark() before start()")
        event = self._factory()
        event.record()
        self._marks.append(event)

    def elapsed(self) -> list[float]:
        """Wait for the last event, then ``elapsed_time`` (ms) of each mark, in seconds."""
        if self._start is None or not self._marks:
            return []
        self._marks[-1].synchronize()
        start = self._start
        return [start.elapsed_time(m) / 1000.0 for m in self._marks]


def _torch_cuda_event() -> _TimingEvent:
    import torch

    event: _TimingEvent = torch.cuda.Event(enable_timing=True)
    return event


def make_clock(device: str) -> PerfCounterClock | CudaEventClock:
    """The clock suited to ``device`` (``"cpu"``, ``"cuda"``, ``"cuda:1"``, ...)."""
    kind = device.split(":", 1)[0].strip().lower()
    if kind == "cuda":
        return CudaEventClock()
    if kind == "cpu":
        return PerfCounterClock()
    raise UsageError(f"no step clock for device {device!r}", "use cpu or cuda[:N]")

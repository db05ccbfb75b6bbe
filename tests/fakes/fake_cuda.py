"""A fake CUDA stream and timing event with ``torch.cuda.Event``'s semantics.

Work is queued on :class:`FakeStream` with :meth:`FakeStream.launch` (the host
returns at once, the device clock advances by the kernel's duration). An event
records the device time the stream will have reached; like CUDA,
``elapsed_time`` refuses events that have not completed, and an event completes
only once the host synchronizes on it or on a later event of the stream.
"""

from __future__ import annotations


class FakeStream:
    """A single in-order stream with a device clock in milliseconds."""

    def __init__(self) -> None:
        self.device_ms = 0.0
        self.synced_ms = -1.0
        self.sync_calls = 0

    def launch(self, duration_ms: float) -> None:
        """Queue a kernel of ``duration_ms``; returns immediately like a CUDA launch."""
        self.device_ms += duration_ms

    def event(self) -> FakeCudaEvent:
        """Factory with the signature :class:`gate.hw.timing.CudaEventClock` expects."""
        return FakeCudaEvent(self)


class FakeCudaEvent:
    """Stands for ``torch.cuda.Event(enable_timing=True)``."""

    def __init__(self, stream: FakeStream) -> None:
        self._stream = stream
        self._at: float | None = None

    def record(self) -> None:
        self._at = self._stream.device_ms

    def query(self) -> bool:
        return self._at is not None and self._at <= self._stream.synced_ms

    def synchronize(self) -> None:
        if self._at is None:
            raise RuntimeError("synchronize on an event that was never recorded")
        self._stream.sync_calls += 1
        self._stream.synced_ms = max(self._stream.synced_ms, self._at)

    def elapsed_time(self, end_event: FakeCudaEvent) -> float:
        if not (self.query() and end_event.query()):
            raise RuntimeError("elapsed_time on an event that has not completed")
        assert self._at is not None and end_event._at is not None
        return end_event._at - self._at

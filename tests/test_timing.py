"""Step clocks: the CPU clock on a fake time source, the CUDA clock on fake events."""

from __future__ import annotations

import time

import pytest

from gate.errors import UsageError
from gate.hw.timing import CudaEventClock, PerfCounterClock, make_clock
from tests.fakes.fake_cuda import FakeStream
from tests.fakes.timed_backend import FakeTime


def test_perf_counter_clock_marks_seconds_since_start() -> None:
    fake = FakeTime()
    clock = PerfCounterClock(now=fake.now)
    clock.start()
    for step in (0.5, 0.25, 0.25):
        fake.advance(step)
        clock.mark()
    assert clock.elapsed() == pytest.approx([0.5, 0.75, 1.0])
    clock.start()  # a new request forgets the old marks
    assert clock.elapsed() == []


def test_perf_counter_clock_on_the_real_clock_is_monotonic() -> None:
    clock = PerfCounterClock()
    clock.start()
    for _ in range(3):
        time.sleep(0.001)
        clock.mark()
    marks = clock.elapsed()
    assert len(marks) == 3 and 0 < marks[0] < marks[1] < marks[2]


def test_mark_before_start_is_a_bug() -> None:
    with pytest.raises(RuntimeError, match=r"PerfCounterClock\.mark\(\) before start\(\)"):
        PerfCounterClock().mark()
    with pytest.raises(RuntimeError, match=r"CudaEventClock\.mark\(\) before start\(\)"):
        CudaEventClock(event_factory=FakeStream().event).mark()


def test_cuda_event_clock_reads_device_time_after_one_sync() -> None:
    stream = FakeStream()
    clock = CudaEventClock(event_factory=stream.event)
    stream.launch(3.0)  # work queued before the request is not counted
    clock.start()
    for ms in (40.0, 10.0, 12.0):
        stream.launch(ms)  # asynchronous: the host does not wait
        clock.mark()
    assert stream.sync_calls == 0
    assert clock.elapsed() == pytest.approx([0.040, 0.050, 0.062])
    assert stream.sync_calls == 1


def test_fake_event_refuses_unsynchronized_reads() -> None:
    """The fake keeps CUDA's rule, so the clock's synchronize is really exercised."""
    stream = FakeStream()
    start, end = stream.event(), stream.event()
    start.record()
    stream.launch(5.0)
    end.record()
    with pytest.raises(RuntimeError, match="not completed"):
        start.elapsed_time(end)
    end.synchronize()
    assert start.elapsed_time(end) == pytest.approx(5.0)


def test_make_clock_picks_by_device() -> None:
    assert isinstance(make_clock("cpu"), PerfCounterClock)
    assert isinstance(make_clock("cuda:1"), CudaEventClock)
    with pytest.raises(UsageError):
        make_clock("tpu")

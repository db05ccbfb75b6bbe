"""Memory trackers: RSS polling for real, NVML and torch.cuda through fakes at the boundary."""

from __future__ import annotations

import mmap
import os
import time

import numpy as np
import pytest

from gate.hw.memory import MemoryTracker
from gate.hw.nvml import open_nvml
from tests.fakes.fake_nvml import FakeGpuState, make_fake_nvml


def test_rss_peak_sees_a_transient_allocation() -> None:
    """A 64 MiB buffer allocated and freed inside the region shows in the peak RSS delta.

    The buffer is a fresh anonymous mapping, every page written: a heap block could be
    memory an earlier test in this worker freed and the allocator kept resident (one run
    saw a delta of 4 KiB), which would not raise the RSS at all.
    """
    with MemoryTracker("cpu", interval_s=0.001) as tracker:
        region = mmap.mmap(-1, 64 * 2**20)
        buf = np.frombuffer(region, dtype=np.uint8)
        buf[:] = 1
        polled = tracker.samples
        deadline = time.monotonic() + 600.0  # a hang guard, not a speed check
        while tracker.samples < polled + 3 and time.monotonic() < deadline:
            time.sleep(0.01)  # a loaded runner schedules the poller late, not never
        del buf
        region.close()
    report = tracker.report
    assert report.peak_allocated_bytes is None and report.process_vram_bytes is None
    assert report.rss_delta_bytes >= 48 * 2**20


def test_report_before_exit_is_a_bug() -> None:
    with pytest.raises(RuntimeError, match="read before the tracked region ended"):
        _ = MemoryTracker("cpu").report


class FakeCudaMemory:
    """torch.cuda's four memory functions over a scripted allocator."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.peak_allocated = 900
        self.peak_reserved = 1000

    def synchronize(self, device: int) -> None:
        self.calls.append("synchronize")

    def reset_peak_memory_stats(self, device: int) -> None:
        self.calls.append("reset")
        self.peak_allocated = 100
        self.peak_reserved = 200

    def max_memory_allocated(self, device: int) -> int:
        self.calls.append("max_allocated")
        return self.peak_allocated

    def max_memory_reserved(self, device: int) -> int:
        return self.peak_reserved


def _wait_for_polls(state: FakeGpuState, polls: int, timeout_s: float = 30.0) -> None:
    """Block until the background poller has queried the fake NVML ``polls`` more times."""
    target = state.memory_queries + polls
    deadline = time.monotonic() + timeout_s
    while state.memory_queries < target:
        assert time.monotonic() < deadline, "the memory poller never ran"
        time.sleep(0.001)


def test_cuda_peaks_are_reset_first_and_vram_is_polled() -> None:
    state = FakeGpuState(used=5 * 2**30, processes={os.getpid(): 1 * 2**30, 999: 4 * 2**30})
    nvml = open_nvml(make_fake_nvml(state))
    cuda = FakeCudaMemory()
    with MemoryTracker("cuda:0", nvml=nvml, cuda=cuda, interval_s=0.001) as tracker:
        cuda.peak_allocated, cuda.peak_reserved = 3000, 4096
        state.processes[os.getpid()] = 3 * 2**30  # this process grows ...
        state.used = 7 * 2**30
        _wait_for_polls(state, 3)  # ... the poller sees it ...
        state.processes[os.getpid()] = 1 * 2**30  # ... and it shrinks before the end
        state.used = 5 * 2**30
    report = tracker.report
    assert cuda.calls[:2] == ["synchronize", "reset"]
    assert report.peak_allocated_bytes == 3000 and report.peak_reserved_bytes == 4096
    assert report.process_vram_bytes == 3 * 2**30
    assert report.global_vram_bytes == 7 * 2**30


def test_open_nvml_without_a_driver_is_none() -> None:
    assert open_nvml(make_fake_nvml(FakeGpuState(init_fails=True))) is None


def test_nvml_seam_reads_names_and_versions() -> None:
    nvml = open_nvml(make_fake_nvml())
    assert nvml is not None
    assert nvml.device_name(0) == "NVIDIA Fake GPU 80GB"
    assert nvml.cuda_driver_version() == "12.4"
    assert nvml.process_used_bytes(0, os.getpid()) == 0

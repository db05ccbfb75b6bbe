"""The GPU path above its seams, on the CPU: a model spread over two GPUs is tracked on
both (fake torch.cuda and NVML), and the GPUs a device map occupies are found."""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import Any

from gate.hw.devices import cuda_indices
from gate.hw.memory import GpuMemory, MemoryReport, MemoryTracker
from gate.hw.nvml import Nvml
from gate.tiers.latency import _per_gpu


class TwoGpuCuda:
    """torch.cuda's memory functions for two GPUs with scripted peaks."""

    def __init__(self) -> None:
        self.reset: list[int] = []
        self.synced: list[int] = []
        self.allocated = {0: 0, 1: 0}

    def synchronize(self, device: int) -> None:
        self.synced.append(device)

    def reset_peak_memory_stats(self, device: int) -> None:
        self.reset.append(device)
        self.allocated[device] = 0

    def max_memory_allocated(self, device: int) -> int:
        return self.allocated[device]

    def max_memory_reserved(self, device: int) -> int:
        return self.allocated[device] + 100


def two_gpu_nvml(used: dict[int, int], mine: dict[int, int]) -> Nvml:
    """An NVML seam over a fake pynvml with two GPUs."""
    module = SimpleNamespace(
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetMemoryInfo=lambda h: SimpleNamespace(used=used[h], total=80 * 2**30),
        nvmlDeviceGetComputeRunningProcesses=lambda h: [
            SimpleNamespace(pid=os.getpid(), usedGpuMemory=mine[h])
        ],
    )
    return Nvml(module)


def test_a_model_on_two_gpus_is_tracked_on_both() -> None:
    cuda = TwoGpuCuda()
    used, mine = {0: 10, 1: 20}, {0: 5, 1: 7}
    tracker = MemoryTracker("cuda:0", devices=(0, 1), nvml=two_gpu_nvml(used, mine), cuda=cuda)
    with tracker:
        cuda.allocated.update({0: 3000, 1: 5000})
        used.update({0: 40, 1: 60})
        mine.update({0: 30, 1: 50})
    report = tracker.report
    assert cuda.reset == [0, 1] and set(cuda.synced) == {0, 1}
    assert report.per_gpu == (
        GpuMemory(0, 3000, 3100, 30, 40),
        GpuMemory(1, 5000, 5100, 50, 60),
    )
    assert (report.peak_allocated_bytes, report.peak_reserved_bytes) == (8000, 8200)
    assert (report.process_vram_bytes, report.global_vram_bytes) == (80, 100)
    # per GPU over runs, as the latency tier reports it
    later = MemoryReport(1, 1, 1, 1, 0, 0, per_gpu=(GpuMemory(1, 9000, 1, 1, 1),))
    assert _per_gpu([report, later], "peak_allocated_bytes") == {"cuda:0": 3000, "cuda:1": 9000}


def test_the_cpu_tracks_no_gpu() -> None:
    with MemoryTracker("cpu", devices=(0, 1)) as tracker:
        pass
    report = tracker.report
    assert report.per_gpu == () and report.peak_allocated_bytes is None
    assert report.peak_rss_bytes > 0
    assert _per_gpu([report], "peak_allocated_bytes") == {}


def test_the_gpus_a_model_occupies() -> None:
    spread: dict[str, Any] = {"model.embed": 0, "model.layers.0": 1, "lm_head": "cpu"}
    assert cuda_indices("cpu") == ()
    assert cuda_indices("cuda") == (0,) and cuda_indices("cuda:1") == (1,)
    assert cuda_indices("cuda:0", spread) == (0, 1)
    assert cuda_indices("cuda:0", {"": "cuda:2"}) == (2,)
    assert cuda_indices("cpu", {"": "cpu"}) == ()

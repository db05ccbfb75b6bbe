"""A fake ``pynvml`` module: pynvml's function names over a scripted GPU.

Build one with :func:`make_fake_nvml`; pass it wherever :func:`gate.hw.nvml.open_nvml`
takes ``module``. ``state.used`` and ``state.processes`` can be changed while a
poller runs to script a memory curve.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any


class NVMLError(Exception):
    """Stands for ``pynvml.NVMLError``."""


@dataclass
class FakeGpuState:
    name: str = "NVIDIA Fake GPU 80GB"
    driver: str = "550.54.15"
    cuda_driver: int = 12040
    total: int = 80 * 2**30
    used: int = 2 * 2**30
    processes: dict[int, int] = field(default_factory=dict)
    init_fails: bool = False
    init_calls: int = 0
    shutdown_calls: int = 0
    memory_queries: int = 0  # nvmlDeviceGetMemoryInfo calls: lets a test wait for a poll


def make_fake_nvml(state: FakeGpuState | None = None) -> Any:
    """A module-like namespace with the pynvml functions :mod:`gate.hw.nvml` calls."""
    gpu = state if state is not None else FakeGpuState()

    def nvmlInit() -> None:
        gpu.init_calls += 1
        if gpu.init_fails:
            raise NVMLError("NVML Shared Library Not Found")

    def nvmlShutdown() -> None:
        gpu.shutdown_calls += 1

    def nvmlDeviceGetCount() -> int:
        return 1

    def nvmlDeviceGetHandleByIndex(index: int) -> int:
        if index != 0:
            raise NVMLError("Invalid Argument")
        return index

    def nvmlDeviceGetName(handle: int) -> bytes:
        return gpu.name.encode()  # old pynvml returned bytes

    def nvmlSystemGetDriverVersion() -> str:
        return gpu.driver

    def nvmlSystemGetCudaDriverVersion() -> int:
        return gpu.cuda_driver

    def nvmlDeviceGetMemoryInfo(handle: int) -> SimpleNamespace:
        gpu.memory_queries += 1
        return SimpleNamespace(total=gpu.total, used=gpu.used, free=gpu.total - gpu.used)

    def nvmlDeviceGetComputeRunningProcesses(handle: int) -> list[SimpleNamespace]:
        return [SimpleNamespace(pid=p, usedGpuMemory=b) for p, b in gpu.processes.items()]

    return SimpleNamespace(
        NVMLError=NVMLError,
        state=gpu,
        nvmlInit=nvmlInit,
        nvmlShutdown=nvmlShutdown,
        nvmlDeviceGetCount=nvmlDeviceGetCount,
        nvmlDeviceGetHandleByIndex=nvmlDeviceGetHandleByIndex,
        nvmlDeviceGetName=nvmlDeviceGetName,
        nvmlSystemGetDriverVersion=nvmlSystemGetDriverVersion,
        nvmlSystemGetCudaDriverVersion=nvmlSystemGetCudaDriverVersion,
        nvmlDeviceGetMemoryInfo=nvmlDeviceGetMemoryInfo,
        nvmlDeviceGetComputeRunningProcesses=nvmlDeviceGetComputeRunningProcesses,
    )

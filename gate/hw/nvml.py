"""A thin seam over NVIDIA's management library (``pynvml`` from nvidia-ml-py).

Everything GPU-specific that the gate reads from NVML goes through
:class:`Nvml`, built by :func:`open_nvml`. Only pynvml's own function names are
called on the wrapped module, so a test can pass a fake module with those names
and exercise the real code above this seam on a CPU-only machine.

When pynvml is not installed or no driver is present, :func:`open_nvml`
returns ``None``; callers then simply report no VRAM figures.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType
from typing import Any


def _text(value: Any) -> str:
    """pynvml returns ``str`` in recent releases and ``bytes`` in old ones."""
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass(frozen=True)
class Nvml:
    """An initialised NVML module; each method is one NVML query."""

    module: Any

    def device_count(self) -> int:
        """Number of GPUs NVML sees."""
        return int(self.module.nvmlDeviceGetCount())

    def _handle(self, index: int) -> Any:
        return self.module.nvmlDeviceGetHandleByIndex(index)

    def device_name(self, index: int) -> str:
        """Marketing name of GPU ``index`` (``"NVIDIA H100 80GB HBM3"``)."""
        return _text(self.module.nvmlDeviceGetName(self._handle(index)))

    def driver_version(self) -> str:
        """Kernel driver version string (``"550.54.15"``)."""
        return _text(self.module.nvmlSystemGetDriverVersion())

    def cuda_driver_version(self) -> str:
        """Highest CUDA version the driver supports, as ``"major.minor"``."""
        raw = int(self.module.nvmlSystemGetCudaDriverVersion())
        return f"{raw // 1000}.{(raw % 1000) // 10}"

    def used_bytes(self, index: int) -> int:
        """Device-wide used memory of GPU ``index`` (every process on it)."""
        return int(self.module.nvmlDeviceGetMemoryInfo(self._handle(index)).used)

    def total_bytes(self, index: int) -> int:
        """Total memory of GPU ``index``."""
        return int(self.module.nvmlDeviceGetMemoryInfo(self._handle(index)).total)

    def process_used_bytes(self, index: int, pid: int) -> int:
        """Memory that process ``pid`` holds on GPU ``index`` (0 when it holds none).

        NVML reports ``usedGpuMemory = None`` where it cannot see per-process
        figures (some containers); that counts as 0.
        """
        total = 0
        for proc in self.module.nvmlDeviceGetComputeRunningProcesses(self._handle(index)):
            if int(proc.pid) == pid and proc.usedGpuMemory is not None:
                total += int(proc.usedGpuMemory)
        return total

    def close(self) -> None:
        """Release NVML (it is reference counted, so nested opens are fine)."""
        self.module.nvmlShutdown()


def open_nvml(module: ModuleType | Any | None = None) -> Nvml | None:
    """Initialise NVML; ``None`` when pynvml or the driver is unavailable.

    ``module`` replaces ``pynvml`` (tests pass a fake with pynvml's names).
    """
    if module is None:
        try:
            module = importlib.import_module("pynvml")
        except ImportError:
            return None
    try:
        module.nvmlInit()
    except Exception:  # pynvml.NVMLError or OSError: no driver or library
        return None
    return Nvml(module)

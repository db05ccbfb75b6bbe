"""Memory trackers: a context manager around one measured region.

On entry it resets torch's CUDA peak counters (so the peak belongs to this
region only), records the starting RSS and starts a background thread that
polls the process RSS (psutil) and, when NVML is available, the process and
device-wide VRAM. On exit it synchronizes the device, stops the poller and
reads the peaks. docs/metrics.md "Latency and memory": peak allocated/reserved
(torch), process/global VRAM (pynvml), CPU RSS.

A model spread over several GPUs (a device map) is tracked on each of them
(``devices=``): every figure is kept per GPU (:class:`GpuMemory`) and the
report's totals are their sums (for NVML's polled figures, the sum of each
GPU's own peak: an upper bound on the simultaneous total).

The torch.cuda memory functions and NVML are reached through small seams
(``cuda=`` and ``nvml=``) so tests can drive every branch with fakes.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import psutil

from gate.hw.nvml import Nvml


@dataclass(frozen=True)
class GpuMemory:
    """The peaks of one GPU inside a tracked region (``None``: NVML not available)."""

    index: int
    peak_allocated_bytes: int
    peak_reserved_bytes: int
    process_vram_bytes: int | None
    global_vram_bytes: int | None

    def to_dict(self) -> dict[str, int | None]:
        """JSON form (a measurement's ``details``)."""
        return {
            "index": self.index,
            "peak_allocated_bytes": self.peak_allocated_bytes,
            "peak_reserved_bytes": self.peak_reserved_bytes,
            "process_vram_bytes": self.process_vram_bytes,
            "global_vram_bytes": self.global_vram_bytes,
        }


@dataclass(frozen=True)
class MemoryReport:
    """Peaks observed inside one tracked region (``None`` when not measurable here); the
    VRAM figures are the sums over :attr:`per_gpu`."""

    peak_allocated_bytes: int | None
    peak_reserved_bytes: int | None
    process_vram_bytes: int | None
    global_vram_bytes: int | None
    rss_start_bytes: int
    peak_rss_bytes: int
    #: Each tracked GPU's own peaks (empty on the CPU).
    per_gpu: tuple[GpuMemory, ...] = ()

    @property
    def rss_delta_bytes(self) -> int:
        """Growth of the resident set during the region (never negative)."""
        return max(0, self.peak_rss_bytes - self.rss_start_bytes)


class MemoryTracker:
    """``with MemoryTracker("cuda:0") as t: ...`` then ``t.report``.

    ``device``: ``"cpu"`` or ``"cuda[:N]"``; ``devices``: the CUDA indices to track
    (a model spread over several GPUs; default: ``N`` of ``device``). ``nvml``: an opened
    :class:`gate.hw.nvml.Nvml` (or ``None``: no VRAM figures). ``cuda``: the
    ``torch.cuda`` module or a stand-in with ``reset_peak_memory_stats``,
    ``synchronize``, ``max_memory_allocated`` and ``max_memory_reserved``.
    ``interval_s``: polling period of the background thread.
    """

    def __init__(
        self,
        device: str = "cpu",
        *,
        devices: Sequence[int] | None = None,
        nvml: Nvml | None = None,
        cuda: Any | None = None,
        interval_s: float = 0.005,
    ) -> None:
        kind, _, index = device.partition(":")
        self._is_cuda = kind == "cuda"
        first = int(index) if index else 0
        self._indices: tuple[int, ...] = (
            (tuple(dict.fromkeys(devices)) or (first,)) if devices else (first,)
        )
        if not self._is_cuda:
            self._indices = ()
        self._nvml = nvml if self._is_cuda else None
        if self._is_cuda and cuda is None:
            import torch

            cuda = torch.cuda
        self._cuda: Any = cuda
        self._interval = interval_s
        self._process = psutil.Process(os.getpid())
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._rss_start = 0
        self._rss_peak = 0
        self._proc_vram: dict[int, int] = {}
        self._global_vram: dict[int, int] = {}
        self._report: MemoryReport | None = None
        self._samples = 0

    @property
    def report(self) -> MemoryReport:
        """The peaks, available after the ``with`` block."""
        if self._report is None:
            raise RuntimeError("MemoryTracker.report read before the tracked region ended")
        return self._report

    @property
    def samples(self) -> int:
        """How many readings were taken so far (the entry's, each poll's, the exit's)."""
        with self._lock:
            return self._samples

    def _sample(self) -> None:
        rss = int(self._process.memory_info().rss)
        readings: list[tuple[int, int, int]] = []
        if self._nvml is not None:
            pid = os.getpid()
            readings = [
                (i, self._nvml.process_used_bytes(i, pid), self._nvml.used_bytes(i))
                for i in self._indices
            ]
        with self._lock:
            self._samples += 1
            self._rss_peak = max(self._rss_peak, rss)
            for i, proc, glob in readings:
                self._proc_vram[i] = max(self._proc_vram.get(i, 0), proc)
                self._global_vram[i] = max(self._global_vram.get(i, 0), glob)

    def _poll(self) -> None:
        while not self._stop.wait(self._interval):
            self._sample()

    def __enter__(self) -> MemoryTracker:
        for i in self._indices:
            self._cuda.synchronize(i)
            self._cuda.reset_peak_memory_stats(i)
        self._rss_start = int(self._process.memory_info().rss)
        self._rss_peak = self._rss_start
        self._sample()
        self._stop.clear()
        self._thread = threading.Thread(target=self._poll, name="gate-memory-poll", daemon=True)
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for i in self._indices:
            self._cuda.synchronize(i)
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample()
        gpus = tuple(
            GpuMemory(
                index=i,
                peak_allocated_bytes=int(self._cuda.max_memory_allocated(i)),
                peak_reserved_bytes=int(self._cuda.max_memory_reserved(i)),
                process_vram_bytes=self._proc_vram.get(i),
                global_vram_bytes=self._global_vram.get(i),
            )
            for i in self._indices
        )
        self._report = MemoryReport(
            peak_allocated_bytes=_total(g.peak_allocated_bytes for g in gpus),
            peak_reserved_bytes=_total(g.peak_reserved_bytes for g in gpus),
            process_vram_bytes=_total(g.process_vram_bytes for g in gpus),
            global_vram_bytes=_total(g.global_vram_bytes for g in gpus),
            rss_start_bytes=self._rss_start,
            peak_rss_bytes=self._rss_peak,
            per_gpu=gpus,
        )


def _total(values: Iterable[int | None]) -> int | None:
    """The sum of the known values (``None`` when none is known)."""
    known = [v for v in values if v is not None]
    return sum(known) if known else None

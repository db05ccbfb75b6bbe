"""Memory trackers: a context manager around one measured region.

On entry it resets torch's CUDA peak counters (so the peak belongs to this
region only), records the starting RSS and starts a background thread that
polls the process RSS (psutil) and, when NVML is available, the process and
device-wide VRAM. On exit it synchronizes the device, stops the poller and
reads the peaks. docs/metrics.md "Latency and memory": peak allocated/reserved
(torch), process/global VRAM (pynvml), CPU RSS.

The torch.cuda memory functions and NVML are reached through small seams
(``cuda=`` and ``nvml=``) so tests can drive every branch with fakes.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import psutil

from gate.hw.nvml import Nvml


@dataclass(frozen=True)
class MemoryReport:
    """Peaks observed inside one tracked region (``None`` when not measurable here)."""

    peak_allocated_bytes: int | None
    peak_reserved_bytes: int | None
    process_vram_bytes: int | None
    global_vram_bytes: int | None
    rss_start_bytes: int
    peak_rss_bytes: int

    @property
    def rss_delta_bytes(self) -> int:
        """Growth of the resident set during the region (never negative)."""
        return max(0, self.peak_rss_bytes - self.rss_start_bytes)


class MemoryTracker:
    """``with MemoryTracker("cuda:0") as t: ...`` then ``t.report``.

    ``device``: ``"cpu"`` or ``"cuda[:N]"``. ``nvml``: an opened
    :class:`gate.hw.nvml.Nvml` (or ``None``: no VRAM figures). ``cuda``: the
    ``torch.cuda`` module or a stand-in with ``reset_peak_memory_stats``,
    ``synchronize``, ``max_memory_allocated`` and ``max_memory_reserved``.
    ``interval_s``: polling period of the background thread.
    """

    def __init__(
        self,
        device: str = "cpu",
        *,
        nvml: Nvml | None = None,
        cuda: Any | None = None,
        interval_s: float = 0.005,
    ) -> None:
        kind, _, index = device.partition(":")
        self._is_cuda = kind == "cuda"
        self._index = int(index) if index else 0
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
        self._proc_vram: int | None = None
        self._global_vram: int | None = None
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
        proc = glob = None
        if self._nvml is not None:
            proc = self._nvml.process_used_bytes(self._index, os.getpid())
            glob = self._nvml.used_bytes(self._index)
        with self._lock:
            self._samples += 1
            self._rss_peak = max(self._rss_peak, rss)
            if proc is not None:
                self._proc_vram = max(self._proc_vram or 0, proc)
            if glob is not None:
                self._global_vram = max(self._global_vram or 0, glob)

    def _poll(self) -> None:
        while not self._stop.wait(self._interval):
            self._sample()

    def __enter__(self) -> MemoryTracker:
        if self._is_cuda:
            self._cuda.synchronize(self._index)
            self._cuda.reset_peak_memory_stats(self._index)
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
        if self._is_cuda:
            self._cuda.synchronize(self._index)
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample()
        allocated = reserved = None
        if self._is_cuda:
            allocated = int(self._cuda.max_memory_allocated(self._index))
            reserved = int(self._cuda.max_memory_reserved(self._index))
        self._report = MemoryReport(
            peak_allocated_bytes=allocated,
            peak_reserved_bytes=reserved,
            process_vram_bytes=self._proc_vram,
            global_vram_bytes=self._global_vram,
            rss_start_bytes=self._rss_start,
            peak_rss_bytes=self._rss_peak,
        )

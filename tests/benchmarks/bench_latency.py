"""Latency-tier and audit overheads (pytest-benchmark).

Run: ``python -m pytest tests/benchmarks/bench_latency.py -p no:cacheprovider``.

* ``clock_mark``: cost of one :class:`gate.hw.timing.PerfCounterClock` mark, the
  overhead the gate adds to every decoding step;
* ``summarize``: the percentile summary of 100 runs x 256 tokens;
* ``change_point``: one CUSUM permutation test (999 shuffles) on a 52-week history;
* ``memory_tracker``: entering and leaving a :class:`gate.hw.memory.MemoryTracker`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gate.gating.drift import change_point
from gate.hw.memory import MemoryTracker
from gate.hw.timing import PerfCounterClock
from gate.measurement import TimedGeneration
from gate.metrics.latency import run_latency, summarize


def test_clock_mark(benchmark: Any) -> None:
    clock = PerfCounterClock()
    clock.start()
    benchmark(clock.mark)


def test_summarize(benchmark: Any) -> None:
    rng = np.random.default_rng(0)
    runs = []
    for _ in range(100):
        steps = np.cumsum(rng.uniform(0.01, 0.02, size=256)) + 0.05
        runs.append(run_latency(TimedGeneration(1, 32, 256, tuple(steps), float(steps[-1]))))
    out = benchmark(summarize, runs)
    assert out["e2e_p50"].value > 0


def test_change_point(benchmark: Any) -> None:
    rng = np.random.default_rng(1)
    values = list(np.r_[rng.normal(1.0, 0.02, 30), rng.normal(1.2, 0.02, 22)])
    cp = benchmark(change_point, values)
    assert cp is not None and cp.index == 30


def test_memory_tracker(benchmark: Any) -> None:
    def enter_exit() -> None:
        with MemoryTracker("cpu"):
            pass

    benchmark(enter_exit)

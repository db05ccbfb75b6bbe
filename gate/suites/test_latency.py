"""Tier 4 — latency and memory (marker ``latency``).

One test: the timed loop at the reference batch runs under pytest-benchmark's
``benchmark.pedantic`` (rounds = runs, warm-up rounds = warmup), so
pytest-benchmark's own table and JSON show the same loop the gate measures;
its per-round statistics are handed to the gate in the measurements' details.
Then the batch sweep and the memory runs, the hardware fingerprint check
against every baseline compared with, and the append to the latency history.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gate import history
from gate.fingerprint import check_fingerprint, collect
from gate.memory import MemoryTracker
from gate.nvml import open_nvml
from gate.session import GateRun
from gate.tiers.latency import (
    fingerprint_of,
    has_latency,
    plain_runner,
    run_tier,
    settings_from,
    to_measurements,
)
from gate.timing import make_clock

pytestmark = pytest.mark.latency


def _runner(benchmark: Any) -> Callable[[Callable[[], object], int, int], object]:
    if getattr(benchmark, "disabled", False):
        return plain_runner  # --benchmark-disable would run the loop only once

    def run(fn: Callable[[], object], rounds: int, warmup: int) -> object:
        return benchmark.pedantic(fn, rounds=rounds, warmup_rounds=warmup, iterations=1)

    return run


def test_latency(gate_run: GateRun, benchmark: Any) -> None:
    """TTFT/ITL/TPOT/E2E percentiles, throughput sweep and memory of the model under test."""
    settings = settings_from(gate_run.settings("latency"))
    backend = gate_run.backend
    provenance = backend.provenance()
    device = str(provenance.get("device", "cpu"))
    nvml = open_nvml() if device.startswith("cuda") else None
    fingerprint = collect(device, linear_classes=provenance.get("linear_classes", ()), nvml=nvml)
    for ref, baseline in gate_run.baselines.items():
        if has_latency(baseline.measurements):
            for line in check_fingerprint(
                fingerprint,
                fingerprint_of(baseline.measurements),
                allow_mismatch=settings.allow_hardware_mismatch,
            ):
                warnings.warn(f"[{ref}] {line}", UserWarning, stacklevel=1)
    result = run_tier(
        backend,
        settings,
        fingerprint=fingerprint,
        clock_factory=lambda: make_clock(device),
        tracker_factory=lambda: MemoryTracker(device, nvml=nvml),
        runner=_runner(benchmark),
    )
    stats = getattr(getattr(benchmark, "stats", None), "stats", None)
    bench = (
        {"rounds": len(stats.data), "median_s": stats.median, "min_s": stats.min}
        if stats is not None and stats.data
        else None
    )
    measurements = to_measurements(result)
    for m in measurements:
        if bench is not None and m.name == "latency.e2e_p50":
            m = dataclasses.replace(m, details={**m.details, "pytest_benchmark": bench})
        gate_run.record(m)
    if settings.history_dir:
        history.append(
            Path(settings.history_dir), fingerprint, measurements, label=str(backend.name)
        )
    if nvml is not None:
        nvml.close()

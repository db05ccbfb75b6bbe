"""Tier 4 — latency and memory (marker ``latency``).

One test: the timed loop at the reference batch runs under pytest-benchmark's
``benchmark.pedantic`` (rounds = runs, warm-up rounds = warmup), so
pytest-benchmark's own table and JSON show the same loop the gate measures;
its per-round statistics are handed to the gate in the measurements' details.
Then the batch sweep and the memory runs, the hardware fingerprint check
against every baseline compared with, and the append to the latency history.

Paired mode (``[tiers.latency] paired = true`` or ``--gate-paired-latency``,
run mode only; see :mod:`gate.tiers.latency` for why and when): the baseline
build named by the first baseline's provenance is loaded too and alternated
with the candidate, one pair per pytest-benchmark round. When that build is the
candidate's own (same model, same recipe) the loaded backend is reused, unless
the candidate is served by an engine. The baseline build's own engine
(``--gate-baseline-serve``/``--gate-baseline-endpoint``) replaces the load.

pytest-benchmark is optional: without its plugin, or with ``--benchmark-skip``,
the loop runs on its own; under ``--benchmark-disable`` the whole loop is
handed to the (disabled) fixture, which calls it once, so the fixture is used.
"""

from __future__ import annotations

import dataclasses
import gc
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gate.hw.devices import cuda_indices
from gate.hw.fingerprint import check_fingerprint, collect_fingerprint
from gate.hw.memory import MemoryTracker
from gate.hw.nvml import open_nvml
from gate.hw.timing import make_clock
from gate.models.backends.base import Backend
from gate.session.run import GateRun
from gate.store import history
from gate.tiers.latency import (
    BaselineBuild,
    LatencySettings,
    LoadRunner,
    Runner,
    fingerprint_of,
    has_latency,
    plain_runner,
    reference_build,
    run_tier,
    to_measurements,
)

pytestmark = pytest.mark.latency


def _runner(request: pytest.FixtureRequest) -> tuple[Runner, Any]:
    """The timed-loop runner and the pytest-benchmark fixture behind it (or ``None``)."""
    config = request.config
    if not config.pluginmanager.hasplugin("benchmark") or config.getoption("benchmark_skip"):
        return plain_runner, None
    benchmark = request.getfixturevalue("benchmark")
    if benchmark.disabled:
        # a disabled fixture calls its target once: give it the whole loop
        def whole(fn: Callable[[], object], rounds: int, warmup: int) -> object:
            return benchmark.pedantic(plain_runner, args=(fn, rounds, warmup))

        return whole, benchmark

    def run(fn: Callable[[], object], rounds: int, warmup: int) -> object:
        return benchmark.pedantic(fn, rounds=rounds, warmup_rounds=warmup, iterations=1)

    return run, benchmark


def _baseline_build(gate_run: GateRun, settings: LatencySettings) -> BaselineBuild | None:
    """Paired mode: what to time beside the candidate (``None`` when not paired)."""
    if not settings.paired or gate_run.mode != "run" or gate_run.baseline is None:
        return None
    against = next(iter(gate_run.baselines))
    model, recipe = reference_build(gate_run.baseline.provenance, gate_run.model)
    if gate_run.paired_build is not None:  # the baseline build's engine (--baseline-endpoint)
        return BaselineBuild(gate_run.paired_build, against, model, recipe)
    candidate_recipe = gate_run.recipe if gate_run.recipe not in (None, "", "none") else None
    served = isinstance(gate_run.backend, LoadRunner)  # a served candidate is not the baseline
    if (model, recipe) == (gate_run.model, candidate_recipe) and not served:
        return BaselineBuild(lambda: gate_run.backend, against, model, recipe)

    def load() -> Backend:
        return gate_run.load_build(model, recipe)

    return BaselineBuild(load, against, model, recipe)


def test_latency(gate_run: GateRun, request: pytest.FixtureRequest) -> None:
    """TTFT/ITL/TPOT/E2E percentiles, throughput sweep and memory of the model under test."""
    settings = gate_run.settings("latency")
    backend = gate_run.backend
    provenance = backend.provenance()
    device = provenance.device or "cpu"
    nvml = open_nvml() if device.startswith("cuda") else None
    gpus = cuda_indices(device, provenance.device_map)  # every GPU a device map spread it over
    fingerprint = collect_fingerprint(
        device, linear_classes=provenance.linear_classes or (), nvml=nvml
    )
    for ref, baseline in gate_run.baselines.items():
        if has_latency(baseline.measurements):
            for line in check_fingerprint(
                fingerprint,
                fingerprint_of(baseline.measurements),
                allow_mismatch=settings.allow_hardware_mismatch,
            ):
                warnings.warn(f"[{ref}] {line}", UserWarning, stacklevel=1)
    runner, benchmark = _runner(request)
    result = run_tier(
        backend,
        settings,
        fingerprint=fingerprint,
        clock_factory=lambda: make_clock(device),
        tracker_factory=lambda: MemoryTracker(device, devices=gpus, nvml=nvml),
        runner=runner,
        baseline_build=_baseline_build(gate_run, settings),
    )
    gc.collect()  # a second build loaded for paired mode is released here
    stats = getattr(getattr(benchmark, "stats", None), "stats", None)
    bench = (
        {"rounds": len(stats.data), "median_s": stats.median, "min_s": stats.min}
        if stats is not None and stats.data and result.reference is None
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

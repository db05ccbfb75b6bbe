"""Latency metrics and tier: independent checks, regression verdicts, pytest-benchmark agreement."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from gate.errors import ConfigError, DataError
from gate.gating.compare import compare_measurements
from gate.gating.thresholds import load_thresholds, packaged_thresholds_path
from gate.gating.verdict import Severity
from gate.hw.fingerprint import collect_fingerprint
from gate.hw.memory import MemoryTracker
from gate.measurement import Measurement, TimedGeneration
from gate.metrics.latency import check_consistency, run_latency, summarize
from gate.tiers.latency import (
    LatencySettings,
    fingerprint_of,
    run_tier,
    to_measurements,
)
from gate.tiers.registry import build_settings
from tests.fakes.timed_backend import FakeTime, ScriptedBackend

REPO = Path(__file__).resolve().parents[1]
SMALL = LatencySettings(new_tokens=8, batch_sizes=(1, 2, 4), warmup=1, runs=10, memory_runs=1)


def _gen(steps: list[float], e2e: float, batch: int = 2) -> TimedGeneration:
    return TimedGeneration(batch, 5, len(steps), tuple(steps), e2e)


def test_metrics_against_a_hand_computation() -> None:
    gen = _gen([0.10, 0.13, 0.15, 0.19], e2e=0.19)
    run = run_latency(gen)
    assert run.ttft == pytest.approx(0.10)
    assert run.itls == pytest.approx((0.03, 0.02, 0.04))
    assert run.tpot == pytest.approx(0.09 / 3)
    assert run.tokens_per_s == pytest.approx(2 * 4 / 0.19)
    assert run.requests_per_s == pytest.approx(2 / 0.19)
    # ITLs add up to E - TTFT (the 5 % rule)
    assert sum(run.itls) == pytest.approx(run.e2e - run.ttft, rel=0.05)


def test_steps_that_do_not_add_up_are_refused() -> None:
    with pytest.raises(DataError, match="inter-token"):
        check_consistency(_gen([0.10, 0.13, 0.15, 0.19], e2e=0.30))  # 0.11 s unaccounted
    with pytest.raises(DataError, match="step times"):
        check_consistency(TimedGeneration(1, 5, 3, (0.10, 0.13), 0.13))  # a step not marked


def test_summary_percentiles_match_numpy() -> None:
    rng = np.random.default_rng(0)
    runs = []
    for _ in range(7):
        steps = np.cumsum(rng.uniform(0.01, 0.02, size=6)) + 0.05
        runs.append(run_latency(_gen(list(steps), float(steps[-1]))))
    out = summarize(runs)
    pooled = np.concatenate([np.diff([r.ttft, *np.cumsum(r.itls) + r.ttft]) for r in runs])
    assert out["itl_p95"].value == pytest.approx(np.percentile(pooled, 95))
    assert out["e2e_p50"].value == pytest.approx(np.median([r.e2e for r in runs]))
    assert out["ttft_p95"].samples == tuple(r.ttft for r in runs)
    assert out["itl_p50"].samples == pytest.approx([np.median(r.itls) for r in runs])


def _measure(backend: ScriptedBackend, settings: LatencySettings = SMALL) -> list[Measurement]:
    clock_source = backend.time
    result = run_tier(
        backend,
        settings,
        fingerprint=collect_fingerprint("cpu", linear_classes=["Linear"]),
        clock_factory=clock_source.clock,
        tracker_factory=lambda: MemoryTracker("cpu"),
    )
    return to_measurements(result)


def test_tier_measurements_with_a_controlled_clock() -> None:
    backend = ScriptedBackend(FakeTime(), noise_cv=0.0)
    by_name = {m.name: m for m in _measure(backend)}
    # batch 1: TTFT = prefill 20 ms + 1 ms per sequence; each step 10 + 1 ms
    assert by_name["latency.ttft_p50"].value == pytest.approx(0.021)
    assert by_name["latency.itl_p99"].value == pytest.approx(0.011)
    assert by_name["latency.e2e_p50"].value == pytest.approx(0.021 + 7 * 0.011)
    assert len(by_name["latency.e2e_p50"].samples or ()) == 10
    assert by_name["latency.param_bytes"].value == 123456
    assert by_name["latency.peak_rss_bytes"].value > 0
    # throughput grows with the batch here, so the best batch is the largest
    best = by_name["latency.best_tokens_per_s"]
    assert best.details["best_batch"] == 4 and best.details["oom_batch"] is None
    assert backend.calls == 3 * (1 + 10) + 1
    assert fingerprint_of(by_name) == collect_fingerprint("cpu", linear_classes=["Linear"])


def test_sweep_stops_cleanly_at_out_of_memory() -> None:
    backend = ScriptedBackend(FakeTime(), oom_at_batch=4)
    best = {m.name: m for m in _measure(backend)}["latency.best_tokens_per_s"]
    assert best.details["oom_batch"] == 4 and best.details["best_batch"] == 2
    assert set(best.details["per_batch"]) == {"1", "2"}


def test_settings_are_validated() -> None:
    assert build_settings("latency", {"batch_sizes": [1, 2], "runs": 5}).batch_sizes == (1, 2)
    with pytest.raises(ConfigError, match="new_tokenz"):
        build_settings("latency", {"new_tokenz": 8})
    with pytest.raises(ConfigError):
        build_settings("latency", {"new_tokens": 1})


def _verdicts(cand: list[Measurement], base: list[Measurement]) -> dict[str, Severity]:
    thresholds = load_thresholds(packaged_thresholds_path())
    return {v.key: v.severity for v in compare_measurements(cand, base, thresholds)}


def test_same_build_slowed_2x_and_3_percent_with_controlled_timing() -> None:
    base = _measure(ScriptedBackend(FakeTime(), seed=1))
    same = _verdicts(_measure(ScriptedBackend(FakeTime(), seed=2)), base)
    assert max(same.values()) == Severity.PASS, same
    slow = _verdicts(_measure(ScriptedBackend(FakeTime(), seed=3, slowdown=2.0)), base)
    for name in ("latency.e2e_p50", "latency.ttft_p50", "latency.tpot_p50", "latency.tokens_per_s"):
        assert slow[name] == Severity.CRITICAL, name
    bit = _verdicts(_measure(ScriptedBackend(FakeTime(), seed=4, slowdown=1.03)), base)
    for name in ("latency.e2e_p50", "latency.tpot_p50"):
        assert bit[name] < Severity.CRITICAL, name  # 3 % is inside the 10 % critical bound


INNER = """
import json, os
from gate.hw.fingerprint import collect_fingerprint
from gate.hw.memory import MemoryTracker
from gate.tiers.latency import LatencySettings, run_tier
from tests.fakes.timed_backend import RealTime, ScriptedBackend

def test_loop(benchmark):
    settings = LatencySettings(new_tokens=6, batch_sizes=(1,), warmup=2, runs=12, memory_runs=1)
    source = RealTime()
    backend = ScriptedBackend(source, prefill_s=0.008, step_s=0.004, noise_cv=0.0)
    def runner(fn, rounds, warmup):
        benchmark.pedantic(fn, rounds=rounds, warmup_rounds=warmup, iterations=1)
    result = run_tier(backend, settings, fingerprint=collect_fingerprint("cpu"), clock_factory=source.clock,
                      tracker_factory=lambda: MemoryTracker("cpu"), runner=runner)
    with open(os.environ["OUT_JSON"], "w") as fh:
        json.dump({"bench": list(benchmark.stats.stats.data),
                   "gate": [r.e2e for r in result.runs]}, fh)
"""


def test_pytest_benchmark_and_gate_agree_on_the_same_loop(tmp_path: Path) -> None:
    """The gate's per-run end-to-end times and pytest-benchmark's per-round times agree."""
    (tmp_path / "test_inner.py").write_text(textwrap.dedent(INNER))
    out = tmp_path / "out.json"
    env = {**os.environ, "OUT_JSON": str(out), "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:gate",
            "-p",
            "no:cacheprovider",
            str(tmp_path / "test_inner.py"),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    data = json.loads(out.read_text())
    bench, gate = np.array(data["bench"]), np.array(data["gate"])
    assert len(bench) == len(gate) == 12
    # the round includes the gate's bookkeeping, so it is never shorter than the gate's E2E
    assert np.all(bench >= gate)
    assert np.median(bench) == pytest.approx(np.median(gate), rel=0.05)

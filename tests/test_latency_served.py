"""The latency tier's load runs for a served build (a scripted stand-in for the HTTP backend).

The real server is in tests/test_engine_cli.py; here the per-request timings
are scripted, so the ``latency.load_*`` metrics can be checked against an
independent numpy computation, and a build that is slower under load must be
critical.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pytest

from gate.errors import ConfigError
from gate.gating.compare import compare_measurements
from gate.gating.thresholds import load_thresholds, packaged_thresholds_path
from gate.gating.verdict import Severity
from gate.hw.fingerprint import collect_fingerprint
from gate.hw.memory import MemoryTracker
from gate.measurement import Measurement
from gate.metrics.serving import StreamTiming
from gate.tiers.latency import LatencySettings, LoadRunner, run_tier, to_measurements
from gate.tiers.registry import build_settings
from tests.fakes.timed_backend import FakeTime, ScriptedBackend

SETTINGS = LatencySettings(
    new_tokens=4, batch_sizes=(1,), warmup=0, runs=3, load_requests=8, load_concurrency=(1, 4)
)


class ServedScript(ScriptedBackend):
    """A ScriptedBackend that also answers load runs: request ``r`` at concurrency ``c``
    has TTFT ``ttft * c * (1 + r / 100)`` and ITL ``itl * c``."""

    def __init__(self, *, ttft: float = 0.05, itl: float = 0.01) -> None:
        super().__init__(FakeTime(), noise_cv=0.0)
        self.ttft, self.itl = ttft, itl
        self.loads: list[tuple[int, int, float]] = []

    def stream_timings(
        self,
        prompts: Sequence[Sequence[int]],
        *,
        new_tokens: int,
        request_rate: float = math.inf,
        max_concurrency: int | None = None,
        burstiness: float = 1.0,
        seed: int = 0,
    ) -> tuple[list[StreamTiming], float]:
        c = int(max_concurrency or 1)
        self.loads.append((len(prompts), c, request_rate))
        out = []
        for r in range(len(prompts)):
            first = self.ttft * c * (1 + r / 100)
            times = tuple(first + j * self.itl * c for j in range(new_tokens))
            out.append(StreamTiming(times, prompt_tokens=len(prompts[r]), start=0.0))
        return out, max(t.e2e for t in out)


def _measure(backend: ServedScript) -> dict[str, Measurement]:
    result = run_tier(
        backend,
        SETTINGS,
        fingerprint=collect_fingerprint("cpu"),
        clock_factory=backend.time.clock,
        tracker_factory=lambda: MemoryTracker("cpu"),
    )
    return {m.name: m for m in to_measurements(result)}


def test_load_metrics_match_numpy_at_the_highest_level() -> None:
    backend = ServedScript()
    assert isinstance(backend, LoadRunner)
    by_name = _measure(backend)
    assert [(n, c) for n, c, _ in backend.loads] == [(8, 1), (8, 4)]
    assert all(rate == math.inf for _, _, rate in backend.loads)  # rate 0 = all at once
    ttfts = np.array([0.05 * 4 * (1 + r / 100) for r in range(8)])
    e2es = ttfts + 3 * 0.01 * 4
    assert by_name["latency.load_ttft_p50"].value == pytest.approx(np.percentile(ttfts, 50))
    assert by_name["latency.load_ttft_p95"].value == pytest.approx(np.percentile(ttfts, 95))
    assert by_name["latency.load_e2e_p95"].value == pytest.approx(np.percentile(e2es, 95))
    assert by_name["latency.load_tpot_p50"].value == pytest.approx(0.04)
    assert by_name["latency.load_ttft_p50"].samples == pytest.approx(list(ttfts))
    tput = by_name["latency.load_output_tokens_per_s"]
    assert tput.value == pytest.approx(8 * 4 / e2es.max())
    levels = tput.details["per_concurrency"]
    assert set(levels) == {"1", "4"} and levels["1"]["completed"] == 8
    # the model's memory is the server's: no memory runs in this process
    assert not any(name.startswith("latency.peak_") for name in by_name)


def test_slower_under_load_is_critical() -> None:
    thresholds = load_thresholds(packaged_thresholds_path())
    base = list(_measure(ServedScript()).values())
    slow = [m for m in _measure(ServedScript(ttft=0.08)).values() if "load_" in m.name]
    names = {m.name for m in slow}
    verdicts = {
        v.metric: v
        for v in compare_measurements(slow, [m for m in base if m.name in names], thresholds)
    }
    assert verdicts["latency.load_ttft_p50"].severity == Severity.CRITICAL
    same = [m for m in _measure(ServedScript()).values() if "load_" in m.name]
    unchanged = compare_measurements(same, [m for m in base if m.name in names], thresholds)
    assert "latency.load_ttft_p50" in {v.metric for v in unchanged}
    for v in unchanged:
        assert v.severity == Severity.PASS, v.reason


def test_in_process_builds_have_no_load_metrics() -> None:
    backend = ScriptedBackend(FakeTime(), noise_cv=0.0)
    assert not isinstance(backend, LoadRunner)
    result = run_tier(
        backend,
        SETTINGS,
        fingerprint=collect_fingerprint("cpu"),
        clock_factory=backend.time.clock,
        tracker_factory=lambda: MemoryTracker("cpu"),
    )
    assert not [m for m in to_measurements(result) if "load_" in m.name]


@pytest.mark.parametrize(
    "table",
    [
        {"load_concurrency": []},
        {"load_concurrency": [0]},
        {"load_requests": 1},
        {"load_request_rate": -1},
    ],
)
def test_bad_load_settings_are_refused(table: dict[str, object]) -> None:
    with pytest.raises(ConfigError, match="load_"):
        build_settings("latency", table)

"""Latency metrics from per-step timestamps (pure: numbers in, numbers out).

Definitions (docs/metrics.md "Latency and memory"), for one timed request that
generates ``N = new_tokens`` tokens for each of ``B = batch_size`` sequences,
with step timestamps ``t_0 < t_1 < ... < t_{N-1}`` (seconds since the request
started) and end-to-end latency ``E``:

* time to first token ``TTFT = t_0`` (prefill plus the first decoding step);
* inter-token latency, per generated token, ``ITL_j = t_j - t_{j-1}`` for
  ``j = 1 .. N-1`` -- from the per-step timestamps, never ``E / N``;
* time per output token ``TPOT = (E - TTFT) / (N - 1)``;
* throughput ``B * N / E`` tokens/s and ``B / E`` requests/s.

Because ``sum_j ITL_j = t_{N-1} - t_0``, the ITLs must add up to ``E - TTFT``
up to the time spent after the last step; :func:`check_consistency` enforces
that to within 5 %, which catches a backend that marks steps wrongly.

Over ``R`` repeated runs (after warm-up) a per-request quantity has one value
per run and its ``p50/p95/p99`` are percentiles over the runs; ITL has ``N-1``
values per run, so its percentile is taken over the pooled ITLs of all runs and
the per-run samples are each run's own percentile (independent across runs, as
the repeated-run test needs). Percentiles use numpy's linear interpolation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

import numpy as np

from gate.errors import DataError
from gate.measurement import TimedGeneration

#: Tolerance of the ITL-sum check, relative to ``E - TTFT``.
ITL_SUM_TOLERANCE = 0.05


@dataclass(frozen=True)
class RunLatency:
    """The latency figures of one timed request."""

    batch_size: int
    new_tokens: int
    ttft: float
    itls: tuple[float, ...]
    tpot: float
    e2e: float

    @property
    def tokens_per_s(self) -> float:
        """Generated tokens per second over the whole batch: ``B * N / E``."""
        return self.batch_size * self.new_tokens / self.e2e

    @property
    def requests_per_s(self) -> float:
        """Completed sequences per second: ``B / E``."""
        return self.batch_size / self.e2e


def check_consistency(gen: TimedGeneration, tolerance: float = ITL_SUM_TOLERANCE) -> None:
    """Refuse a timed generation whose steps do not add up (:class:`DataError`).

    Checks: ``len(step_times) == new_tokens >= 2``, timestamps non-decreasing
    and positive, ``E >= t_{N-1}``, and ``|sum ITL - (E - TTFT)| <= tolerance * (E - TTFT)``.
    """
    times = gen.step_times
    if gen.new_tokens < 2 or len(times) != gen.new_tokens:
        raise DataError(
            f"timed generation has {len(times)} step times for {gen.new_tokens} new tokens",
            "the backend must mark every decoding step and generate at least 2 tokens",
        )
    if gen.end_to_end <= 0 or times[0] <= 0 or any(b < a for a, b in pairwise(times)):
        raise DataError(
            "timed generation has non-increasing or non-positive step times",
            "the step clock must be started before the request and marked in order",
        )
    decode = gen.end_to_end - times[0]
    itl_sum = times[-1] - times[0]
    if decode <= 0 or abs(itl_sum - decode) > tolerance * decode:
        raise DataError(
            f"inter-token latencies sum to {itl_sum:.6f}s but E - TTFT is {decode:.6f}s",
            "end-to-end time must stop right after the last decoding step",
        )


def run_latency(gen: TimedGeneration) -> RunLatency:
    """TTFT, ITLs, TPOT and end-to-end of one request (after :func:`check_consistency`)."""
    check_consistency(gen)
    times = np.asarray(gen.step_times, dtype=np.float64)
    ttft = float(times[0])
    return RunLatency(
        batch_size=gen.batch_size,
        new_tokens=gen.new_tokens,
        ttft=ttft,
        itls=tuple(float(d) for d in np.diff(times)),
        tpot=(gen.end_to_end - ttft) / (gen.new_tokens - 1),
        e2e=float(gen.end_to_end),
    )


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100), linear interpolation; DataError when empty."""
    if not values:
        raise DataError("no timed runs to take a percentile of", "raise the number of runs")
    return float(np.percentile(np.asarray(values, dtype=np.float64), q))


@dataclass(frozen=True)
class LatencyStat:
    """One reported figure: its value and the per-run samples behind it."""

    value: float
    samples: tuple[float, ...]


def summarize(runs: Sequence[RunLatency]) -> dict[str, LatencyStat]:
    """Percentiles over repeated runs, keyed by the metric's short name.

    Keys: ``ttft_p50 ttft_p95 itl_p50 itl_p95 itl_p99 tpot_p50 e2e_p50 e2e_p95
    e2e_p99 tokens_per_s requests_per_s`` (the last two are medians over runs).
    """
    if not runs:
        raise DataError("no timed runs to summarize", "raise the number of runs")
    ttft = [r.ttft for r in runs]
    tpot = [r.tpot for r in runs]
    e2e = [r.e2e for r in runs]
    pooled = [d for r in runs for d in r.itls]
    out: dict[str, LatencyStat] = {}
    for q in (50, 95):
        out[f"ttft_p{q}"] = LatencyStat(percentile(ttft, q), tuple(ttft))
    for q in (50, 95, 99):
        out[f"itl_p{q}"] = LatencyStat(
            percentile(pooled, q), tuple(percentile(r.itls, q) for r in runs)
        )
        out[f"e2e_p{q}"] = LatencyStat(percentile(e2e, q), tuple(e2e))
    out["tpot_p50"] = LatencyStat(percentile(tpot, 50), tuple(tpot))
    tps = [r.tokens_per_s for r in runs]
    rps = [r.requests_per_s for r in runs]
    out["tokens_per_s"] = LatencyStat(percentile(tps, 50), tuple(tps))
    out["requests_per_s"] = LatencyStat(percentile(rps, 50), tuple(rps))
    return out

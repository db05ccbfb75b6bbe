"""Latency maths of streamed responses and load runs, against hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gate.errors import DataError
from gate.metrics.serving import (
    StreamTiming,
    arrival_offsets,
    load_summary,
    step_times,
    token_times,
)


def test_token_times_spread_merged_chunks_over_their_gap() -> None:
    # role chunk (0 tokens), 1 token, a merged chunk of 2, a usage chunk (0)
    assert token_times([(0.1, 0), (0.25, 1), (0.45, 2), (0.46, 0)]) == pytest.approx(
        (0.25, 0.35, 0.45)
    )
    # a first chunk with 2 tokens: both at its arrival; then one chunk of 3 over 0.3 s
    times = token_times([(0.2, 2), (0.5, 3)])
    assert times == pytest.approx((0.2, 0.2, 0.3, 0.4, 0.5))
    assert times[-1] - times[0] == pytest.approx(0.3)  # ITLs still add up to E - TTFT
    with pytest.raises(DataError):
        token_times([(0.3, 1), (0.2, 1)])
    with pytest.raises(DataError):
        token_times([(0.3, -1)])


def test_stream_timing_definitions() -> None:
    t = StreamTiming(token_times=(0.2, 0.3, 0.3, 0.6), prompt_tokens=5, start=1.0)
    assert t.ttft == 0.2 and t.e2e == 0.6 and t.output_tokens == 4
    assert t.itls == pytest.approx((0.1, 0.0, 0.3))
    assert sum(t.itls) == pytest.approx(t.e2e - t.ttft)
    assert t.tpot == pytest.approx((0.6 - 0.2) / 3)
    assert t.end == pytest.approx(1.6)
    assert StreamTiming((0.5,), 3).tpot is None
    assert not StreamTiming((), 3, error="HTTP 503").ok


def test_step_times_wait_for_every_stream() -> None:
    assert step_times([(0.1, 0.2, 0.3), (0.15, 0.18, 0.35, 0.5)]) == (0.15, 0.2, 0.35)
    assert step_times([]) == ()


def test_load_summary_by_hand() -> None:
    a = StreamTiming((0.1, 0.2, 0.3), prompt_tokens=10, start=0.0)
    b = StreamTiming((0.3, 0.5), prompt_tokens=4, start=0.5)
    failed = StreamTiming((), prompt_tokens=4, start=0.6, error="boom")
    s = load_summary([a, b, failed])
    # duration: first send 0.0 .. last completion 0.5 + 0.5 = 1.0
    assert s.duration == pytest.approx(1.0)
    assert (s.requests, s.completed, s.failed) == (3, 2, 1)
    assert s.request_throughput == pytest.approx(2.0)
    assert s.output_throughput == pytest.approx(5.0)
    assert s.total_token_throughput == pytest.approx(19.0)
    assert s.latency["ttft"]["mean"] == pytest.approx(0.2)
    assert s.latency["ttft"]["p50"] == pytest.approx(np.percentile([0.1, 0.3], 50))
    assert s.latency["tpot"]["p99"] == pytest.approx(np.percentile([0.1, 0.2], 99))
    itls = [0.1, 0.1, 0.2]
    assert s.latency["itl"]["p95"] == pytest.approx(np.percentile(itls, 95))
    assert s.latency["e2e"]["mean"] == pytest.approx(0.4)
    assert s.to_dict()["latency_s"] == s.latency


def test_load_summary_refuses_a_run_with_no_completion() -> None:
    with pytest.raises(DataError, match=r"no request of the load run completed.*HTTP 500"):
        load_summary([StreamTiming((), 3, error="HTTP 500")])


def test_arrival_offsets() -> None:
    assert arrival_offsets(3, math.inf) == (0.0, 0.0, 0.0)
    offsets = arrival_offsets(2001, 4.0, seed=7)
    assert offsets == arrival_offsets(2001, 4.0, seed=7)  # seeded: repeatable
    gaps = np.diff(offsets)
    assert offsets[0] == 0.0 and (gaps >= 0).all()
    # Poisson process: exponential gaps with mean 1/rate and coefficient of variation 1
    assert gaps.mean() == pytest.approx(0.25, rel=0.1)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.1)
    smooth = np.diff(arrival_offsets(2001, 4.0, burstiness=16.0, seed=7))
    assert smooth.std() / smooth.mean() == pytest.approx(0.25, rel=0.15)  # gamma: cv = 1/sqrt(k)
    with pytest.raises(DataError):
        arrival_offsets(3, 0.0)

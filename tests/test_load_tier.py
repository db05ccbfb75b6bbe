"""The load tier's maths, its GuideLLM results reader and its gate, on scripted sweeps.

The real GuideLLM against the real vLLM servers is tests/test_load_engine.py;
here every figure is checked against an independent computation (by hand or
with numpy/scipy), and a slower candidate must block.
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy import stats

from gate import progress
from gate.errors import ConfigError, DataError
from gate.gating.compare import compare_measurements
from gate.gating.thresholds import load_thresholds, packaged_thresholds_path, require_a_bound
from gate.gating.verdict import Severity
from gate.loadgen import guidellm
from gate.metrics import load as maths
from gate.metrics.load import Latencies, RatePoint, Slo
from gate.tiers.load import BatchRunner, Job, LoadTierSettings, run_tier, to_measurements
from gate.tiers.registry import build_settings

RESULTS = Path(__file__).parent / "guidellm" / "results-0.8.1.json"


def point(rate: float, achieved: float, ttft95: float, itl95: float, tps: float = 0.0) -> RatePoint:
    """A rate with p95 TTFT/ITL given (ms); p50 = p95 / 2, p99 = p95 * 1.2."""
    return RatePoint(
        offered_rate=rate,
        achieved_rate=achieved,
        ttft_ms=Latencies(ttft95 / 2, ttft95, ttft95 * 1.2),
        itl_ms=Latencies(itl95 / 2, itl95, itl95 * 1.2),
        e2e_s=Latencies(ttft95 / 2000, ttft95 / 1000, ttft95 / 800),
        output_tokens_per_s=tps or 16 * achieved,
        completed=max(1, int(achieved * 10)),
    )


SLO = Slo(ttft_p95_ms=500.0, itl_p95_ms=50.0)


def test_goodput_interpolates_where_the_p95_crosses_the_bound() -> None:
    sweep = [
        point(1, 1.0, 100, 10),
        point(2, 2.0, 300, 20),
        point(4, 3.0, 900, 40),  # TTFT past 500: crosses at t = (500-300)/(900-300) = 1/3
        point(8, 3.2, 2000, 80),
    ]
    found = maths.goodput(sweep, SLO)
    assert found.last_ok == 1 and not found.censored
    assert found.value == pytest.approx(2.0 + (1 / 3) * (3.0 - 2.0))
    # both bounds crossed: the earlier crossing wins (ITL at (50-20)/(80-20) = 0.5, TTFT at
    # (500-100)/(700-100) = 2/3)
    two = [point(1, 1.0, 100, 20), point(2, 1.8, 700, 80)]
    assert maths.goodput(two, SLO).value == pytest.approx(1.0 + 0.5 * 0.8)


def test_goodput_censored_zero_and_a_noisy_low_rate() -> None:
    every = [point(1, 1.0, 100, 10), point(2, 2.0, 200, 10)]
    assert maths.goodput(every, SLO) == maths.Capacity(2.0, 1, True)
    none = [point(1, 1.0, 600, 10), point(2, 2.0, 700, 10)]
    assert maths.goodput(none, SLO) == maths.Capacity(0.0, None, False)
    # a noisy first rate does not zero the sweep: the highest rate meeting the SLO counts
    noisy = [point(1, 1.0, 600, 10), point(2, 2.0, 200, 10), point(4, 2.5, 1100, 10)]
    assert maths.goodput(noisy, SLO).value == pytest.approx(2.0 + (300 / 900) * 0.5)


def test_knee_and_maximum_sustainable_rate() -> None:
    sweep = [point(1, 0.95, 1, 1), point(2, 1.9, 1, 1), point(4, 2.5, 1, 1), point(8, 2.6, 1, 1)]
    found = maths.max_sustainable(sweep, 0.8)
    assert (found.value, found.last_ok, found.censored) == (1.9, 1, False)
    assert maths.knee_rate(sweep, 0.8) == 4
    assert (
        maths.knee_rate(sweep[:2], 0.8) is None and maths.max_sustainable(sweep[:2], 0.8).censored
    )
    assert maths.knee_rate([point(1, 0.3, 1, 1)], 0.8) == 1
    assert maths.saturation_tokens_per_s(sweep) == pytest.approx(16 * 2.6)


def test_ratio_interval_is_the_t_interval_of_the_log_ratios() -> None:
    cand, base = [1.8, 2.2, 2.0, 1.7], [2.0, 2.1, 2.3, 2.0]
    ci = maths.ratio_interval(cand, base, level=0.9)
    logs = np.log(np.array(cand) / np.array(base))
    lo, hi = stats.t.interval(0.9, len(logs) - 1, loc=logs.mean(), scale=stats.sem(logs))
    assert ci.value == pytest.approx(math.exp(logs.mean()))
    assert (ci.low, ci.high) == (pytest.approx(math.exp(lo)), pytest.approx(math.exp(hi)))
    assert ci.ratios == pytest.approx(tuple(np.array(cand) / np.array(base)))
    # scipy's one-sample t confidence interval of the log ratios, another route to the same
    direct = stats.ttest_1samp(logs, 0.0).confidence_interval(0.9)
    assert (ci.low, ci.high) == (
        pytest.approx(math.exp(direct.low)),
        pytest.approx(math.exp(direct.high)),
    )
    # a zero goodput is floored, not a crash
    assert maths.ratio_interval([0.0, 1.0, 1.0], [1.0, 1.0, 1.0]).ratios[0] == 0.0
    # fewer than MIN_PAIRS = 3 pairs: the ratio, no interval (1 df would span decades)
    two = maths.ratio_interval([1.0, 2.0], [1.0, 1.0])
    assert two.value == pytest.approx(math.sqrt(2.0)) and two.low is None and two.high is None
    assert not two.contains(1.0)
    with pytest.raises(ValueError, match="at least one paired observation"):
        maths.ratio_interval([], [])


@pytest.mark.parametrize(("true_ratio", "n"), [(1.0, 3), (0.8, 6), (1.25, 12)])
def test_ratio_interval_covers_at_its_level_in_simulation(true_ratio: float, n: int) -> None:
    """Independent check of the interval: 4000 simulated experiments of ``n`` paired
    log-normal ratios (noise sd 0.3 on the log scale, the assumption of the maths) cover
    the true ratio in 95 % of them, within 3 binomial standard errors."""
    rng = np.random.default_rng(20261126)
    trials = 4000
    logs = np.log(true_ratio) + 0.3 * rng.standard_normal((trials, n))
    base = np.exp(rng.normal(0.0, 0.5, (trials, n)))  # the baseline's own level is irrelevant
    cand = base * np.exp(logs)
    covered = 0
    for c, b in zip(cand, base, strict=True):
        ci = maths.ratio_interval(list(c), list(b))
        covered += ci.contains(true_ratio)
    tolerance = 3 * math.sqrt(0.95 * 0.05 / trials)
    assert abs(covered / trials - 0.95) < tolerance


def test_slo_speedup_pairs_every_rate_and_blocks_a_slower_build() -> None:
    slo = Slo(ttft_p95_ms=500.0, itl_p95_ms=50.0)
    # u = max(TTFT/500, ITL/50): the baseline's ITL binds at 1 and 2 req/s, its TTFT at 4
    base = [point(1, 1.0, 100, 10), point(2, 2.0, 200, 20), point(4, 3.5, 450, 30)]
    assert [maths.slo_load(p, slo) for p in base] == pytest.approx([0.2, 0.4, 0.9])
    # at the median (p50 = p95 / 2 in these points) every share halves
    assert [maths.slo_load(p, slo, "p50") for p in base] == pytest.approx([0.1, 0.2, 0.45])
    # the candidate twice as slow (both latencies x2, with a little noise) ...
    noise = [1.02, 0.97, 1.01]
    cand = [
        point(p.offered_rate, p.achieved_rate, 2 * f * p.ttft_ms.p95, 2 * f * p.itl_ms.p95)
        for p, f in zip(base, noise, strict=True)
    ]
    # ... and, in the second pass, at 4 req/s completing nothing: that rate gives no pair
    dead = dataclasses.replace(cand[2], completed=0)
    pairs = maths.paired_rates([cand, [*cand[:2], dead]], [base, base])
    assert [(p.repeat, p.rate) for p in pairs] == [(0, 1), (0, 2), (0, 4), (1, 1), (1, 2)]
    ci = maths.slo_speedup(pairs, slo)
    # independent: u_b / u_c = 1 / (2 f) per pair, the t-interval of their logs by scipy
    logs = np.log([1 / (2 * f) for f in (*noise, *noise[:2])])
    lo, hi = stats.t.interval(0.95, len(logs) - 1, loc=logs.mean(), scale=stats.sem(logs))
    assert ci.value == pytest.approx(math.exp(logs.mean()))
    assert (ci.low, ci.high) == (pytest.approx(math.exp(lo)), pytest.approx(math.exp(hi)))
    assert ci.high is not None and ci.high < 1.0  # shown slower: the gate blocks (below)


def _scripted(
    scale: dict[str, float], calls: list[str], repeats: int = 2
) -> tuple[LoadTierSettings, BatchRunner]:
    """A batch runner: the baseline serves x = min(r, 4) at TTFT 100 r ms; the candidate is
    the baseline with its latencies multiplied by ``scale`` (and throughput divided), each
    benchmark with its own small wobble (:data:`WOBBLE`, in running order)."""
    settings = LoadTierSettings(
        rates=(1.0, 2.0, 4.0, 8.0), repeats=repeats, duration_s=5, ttft_p95_ms=500, itl_p95_ms=50
    )

    def runner(jobs: Sequence[Job]) -> list[tuple[RatePoint, float]]:
        out = []
        for job, wobble in zip(jobs, WOBBLE, strict=False):
            calls.append(job.name)
            k = scale[job.side] * wobble
            r = job.rate
            out.append((point(r, min(r, 4.0) / k, 100 * r * k, 10 * k, 16 * min(r, 4.0) / k), 1.0))
        return out

    return settings, runner


#: One factor per benchmark of a scripted plan (up to 3 passes of 4 rates x 2 builds).
WOBBLE = [1.0 + 0.03 * math.sin(1.7 * i) for i in range(24)]


def test_plan_interleaves_pairs_and_an_identical_build_passes() -> None:
    calls: list[str] = []
    settings, runner = _scripted({"baseline": 1.0, "candidate": 1.0}, calls)
    result = run_tier(runner, settings)
    # each rate a back-to-back pair, the build that goes first alternating pair by pair
    assert calls[:8] == [
        "baseline-1-1r",
        "candidate-1-1r",
        "candidate-1-2r",
        "baseline-1-2r",
        "baseline-1-4r",
        "candidate-1-4r",
        "candidate-1-8r",
        "baseline-1-8r",
    ]
    assert calls[8:10] == ["baseline-2-1r", "candidate-2-1r"] and len(calls) == 16
    assert [p.offered_rate for p in result.candidate[1]] == [1.0, 2.0, 4.0, 8.0]
    assert result.wall_s["baseline"] == 8.0 and result.wall_s["total"] >= 0.0
    measured = {m.name: m for m in to_measurements(result)}
    speed = measured["load.slo_speedup"]
    assert len(speed.samples) == 8  # 2 passes x 4 rates
    low, high = speed.details["ratio_ci"]
    assert low <= 1.0 <= high
    verdicts = compare_measurements(
        list(measured.values()), [], load_thresholds(packaged_thresholds_path())
    )
    gated = next(v for v in verdicts if v.metric == "load.slo_speedup")
    assert gated.severity is not Severity.CRITICAL
    assert {v.metric for v in verdicts if v.threshold is not None} == {"load.slo_speedup"}


def test_a_slower_build_blocks_and_a_not_faster_one_warns() -> None:
    thresholds = load_thresholds(packaged_thresholds_path())
    calls: list[str] = []
    settings, runner = _scripted({"baseline": 1.0, "candidate": 1.6}, calls, repeats=1)
    measured = to_measurements(run_tier(runner, settings))
    speed = next(m for m in measured if m.name == "load.slo_speedup")
    # independent: in the scripted curves both latencies scale with k, so u_b / u_c is
    # k_b / k_c per pair; the geometric mean and the t-interval of their logs by numpy/scipy
    k = dict(zip(calls, WOBBLE, strict=False))
    logs = np.log(
        [k[f"baseline-1-{r:g}r"] / (1.6 * k[f"candidate-1-{r:g}r"]) for r in settings.rates]
    )
    lo, hi = stats.t.interval(0.95, len(logs) - 1, loc=logs.mean(), scale=stats.sem(logs))
    assert speed.value == pytest.approx(math.exp(logs.mean()))
    assert speed.details["ratio_ci"] == pytest.approx([math.exp(lo), math.exp(hi)])
    verdict = next(
        v for v in compare_measurements(measured, [], thresholds) if v.metric == speed.name
    )
    assert verdict.severity is Severity.CRITICAL and "slower" in verdict.reason
    assert verdict.ci == pytest.approx((math.exp(lo) - 1, math.exp(hi) - 1))
    # goodput: per pass, from the scripted curves (TTFT 100 r k crosses 500 ms)
    good = next(m for m in measured if m.name == "load.goodput_ratio")
    for side, scale in (("baseline", 1.0), ("candidate", 1.6)):
        (row,) = good.details["per_sweep"][side]
        kk = {r: scale * k[f"{side}-1-{r:g}r"] for r in settings.rates}
        lo_r = max(r for r in settings.rates if 100 * r * kk[r] <= 500)
        hi_r = min(r for r in settings.rates if 100 * r * kk[r] > 500)
        t = (500 - 100 * lo_r * kk[lo_r]) / (100 * hi_r * kk[hi_r] - 100 * lo_r * kk[lo_r])
        x_lo, x_hi = min(lo_r, 4.0) / kk[lo_r], min(hi_r, 4.0) / kk[hi_r]
        assert row["goodput"] == pytest.approx(x_lo + t * (x_hi - x_lo))
    assert good.details["ratio_ci"] is None  # one pass: a sweep-level ratio has no interval
    # the same build asked to be 50 % faster: shown not to be (the interval's upper end
    # below 1.5), not shown slower: warned, not blocked
    same_settings, same = _scripted({"baseline": 1.0, "candidate": 1.0}, [])
    faster = dataclasses.replace(same_settings, min_speedup=1.5)
    measured = to_measurements(run_tier(same, faster))
    same_speed = next(m for m in measured if m.name == speed.name)
    low, high = same_speed.details["ratio_ci"]
    assert low < 1.0 < high < 1.5
    verdict = next(
        v for v in compare_measurements(measured, [], thresholds) if v.metric == speed.name
    )
    assert verdict.severity is Severity.WARN and "min_speedup 1.5" in verdict.reason
    # asked for a speed-up its interval still reaches: nothing shown against it, a pass
    # whose point estimate is flagged
    reach = dataclasses.replace(same_settings, min_speedup=high * 0.99)
    again = _scripted({"baseline": 1.0, "candidate": 1.0}, [])[1]
    measured = to_measurements(run_tier(again, reach))
    verdict = next(
        v for v in compare_measurements(measured, [], thresholds) if v.metric == speed.name
    )
    assert verdict.severity is Severity.PASS and "not shown" in verdict.reason, verdict.reason


def test_bad_input_is_one_line_each() -> None:
    settings = LoadTierSettings(rates=(1.0, 2.0), repeats=2, ttft_p95_ms=50)

    def batch(make: Callable[[float], RatePoint]) -> BatchRunner:
        return lambda jobs: [(make(job.rate), 1.0) for job in jobs]

    slow = batch(lambda r: point(r, r, 100 + 100 * r, 10))
    with pytest.raises(DataError, match=r"SLO .* is met at no rate on the baseline") as err:
        run_tier(slow, settings)
    assert "raise [tiers.load] ttft_p95_ms" in err.value.hint
    saturated = batch(lambda r: point(r, 0.2, 10, 10))
    with pytest.raises(DataError, match="saturates at the first rate 1 req/s"):
        run_tier(saturated, settings)

    # a candidate that completes nothing anywhere: no pair to compare
    def nothing(jobs: Sequence[Job]) -> list[tuple[RatePoint, float]]:
        base = [(point(j.rate, j.rate, 10, 10), 1.0) for j in jobs]
        return [
            (dataclasses.replace(p, completed=0), w) if j.side == "candidate" else (p, w)
            for j, (p, w) in zip(jobs, base, strict=True)
        ]

    with pytest.raises(DataError, match="only 0 offered rates have requests completed by both"):
        to_measurements(run_tier(nothing, LoadTierSettings(rates=(1.0, 2.0), repeats=2)))
    with pytest.raises(ConfigError, match=r"repeats x len\(rates\) must be >= 3"):
        build_settings("load", {"repeats": 1, "rates": [1.0, 2.0]})
    with pytest.raises(ConfigError, match=r"GuideLLM 0\.8\.1 was not found at /nowhere/guidellm"):
        guidellm.find_executable("/nowhere/guidellm")


def _benchmarks() -> list[dict[str, Any]]:
    """The real GuideLLM 0.8.1 results file's benchmarks: the float32 vLLM server at 0.5
    req/s (every stream observed) and at 1 req/s (one of five read in one burst)."""
    found: list[dict[str, Any]] = json.loads(RESULTS.read_text())["benchmarks"]
    return found


def _file_with(tmp_path: Path, benchmarks: Sequence[dict[str, Any]]) -> Path:
    report = json.loads(RESULTS.read_text())
    report["benchmarks"] = list(benchmarks)
    out = tmp_path / "results.json"
    out.write_text(json.dumps(report))
    return out


def test_results_reader_matches_guidellm_where_every_stream_was_observed() -> None:
    points = guidellm.read_results(RESULTS)
    assert [p.offered_rate for p in points] == [0.5, 1.0]
    p, b = points[0], _benchmarks()[0]
    m = b["metrics"]
    # GuideLLM's own aggregates are the independent computation: per-request percentiles
    # with its weighting must reproduce them exactly when no request is left out
    assert p.unobserved == 0 and p.timed
    for mine, key in ((p.ttft_ms, "time_to_first_token_ms"), (p.itl_ms, "inter_token_latency_ms")):
        theirs = m[key]["successful"]["percentiles"]
        assert (mine.p50, mine.p95, mine.p99) == (theirs["p50"], theirs["p95"], theirs["p99"])
    assert p.e2e_s.p50 == m["request_latency"]["successful"]["percentiles"]["p50"]
    assert p.achieved_rate == m["requests_per_second"]["successful"]["mean"]
    assert p.completed == m["request_totals"]["successful"] == 3
    assert p.attainment == m["slo_attainment"]


def test_a_stream_read_in_one_burst_is_left_out_of_ttft_and_itl() -> None:
    point_1r, b = guidellm.read_results(RESULTS)[1], _benchmarks()[1]
    records = b["requests"]["successful"]
    burst = [r for r in records if guidellm.read_in_one_burst(r)]
    # the real record: 32 tokens in 32 stream iterations, all within a millisecond, after a
    # first token that took the whole decode (the client was not scheduled meanwhile)
    assert len(burst) == 1 and burst[0]["output_tokens"] == 32
    assert (
        burst[0]["inter_token_latency_ms"]
        < 0.05
        < 2.0
        < min(r["inter_token_latency_ms"] for r in records if r not in burst)
    )
    assert burst[0]["time_to_first_token_ms"] > 0.9 * 1000 * burst[0]["request_latency"]
    assert point_1r.unobserved == 1 and point_1r.completed == 5 and point_1r.timed
    kept = [r for r in records if r not in burst]
    # independent: equal weights, GuideLLM's rule is the lower median (numpy's inverted CDF)
    ttfts = sorted(r["time_to_first_token_ms"] for r in kept)
    assert point_1r.ttft_ms.p50 == np.quantile(ttfts, 0.5, method="inverted_cdf") == ttfts[1]
    # GuideLLM's aggregate counted the stalled first token: its median is a later one
    theirs = b["metrics"]["time_to_first_token_ms"]["successful"]["percentiles"]["p50"]
    assert theirs > point_1r.ttft_ms.p50
    itl = [r["inter_token_latency_ms"] for r in kept]
    weights = [r["output_tokens"] - 1 for r in kept]
    assert point_1r.itl_ms.p95 == np.quantile(itl, 0.95, method="inverted_cdf", weights=weights)
    # the end-to-end latency keeps every request (the stall does not move the last token)
    assert point_1r.e2e_s.p99 == max(r["request_latency"] for r in records)


def test_a_burst_read_is_a_sliver_at_the_end_not_a_fast_stream() -> None:
    # records as GuideLLM writes them (ms, s): a later CI run's burst read at 0.125 ms,
    # first token at 98 % of the latency; a fast server at 0.8 ms a token; this CPU's 4 ms
    def record(itl: float, ttft: float, latency: float) -> dict[str, Any]:
        return {
            "inter_token_latency_ms": itl,
            "time_to_first_token_ms": ttft,
            "request_latency": latency,
            "output_tokens": 32,
        }

    assert guidellm.read_in_one_burst(record(0.12523, 262.46, 0.268235))
    assert guidellm.read_in_one_burst(record(0.026, 152.9, 0.155))
    assert not guidellm.read_in_one_burst(record(0.8, 20.0, 0.0448))  # 25 of 45 ms streaming
    assert not guidellm.read_in_one_burst(record(4.2, 11.9, 0.143))
    assert not guidellm.read_in_one_burst(record(2.075, 75.1, 0.14))  # partly starved: kept
    assert not guidellm.read_in_one_burst({"inter_token_latency_ms": None})


def _as_burst(record: dict[str, Any]) -> dict[str, Any]:
    """A record as a starved client reads it: the first token late, the rest at once."""
    return record | {
        "inter_token_latency_ms": 0.03,
        "time_to_first_token_ms": 1000 * record["request_latency"] - 1.0,
    }


def test_burst_reads_at_the_median_no_longer_move_the_speed_ratio(tmp_path: Path) -> None:
    # the failure this guards: a benchmark of 3-5 requests where the median request was read
    # in one burst gave an ITL p50 of 0.03 ms and the pair's speed ratio was off 10-100x
    base_b, cand_b = _benchmarks()[1], _benchmarks()[1]
    starved = dict(base_b, requests=dict(base_b["requests"]))
    records = starved["requests"]["successful"]
    order = sorted(range(len(records)), key=lambda i: records[i]["inter_token_latency_ms"])
    starved["requests"]["successful"] = [
        _as_burst(r) if i in order[2:4] else r for i, r in enumerate(records)
    ]
    base = guidellm.read_results(_file_with(tmp_path, [starved]))[0]
    cand = guidellm.read_results(_file_with(tmp_path, [cand_b]))[0]
    assert base.unobserved == 3 and cand.unobserved == 1
    slo = Slo(ttft_p95_ms=5000.0, itl_p95_ms=200.0)
    # GuideLLM's aggregate over the doctored records (what gate read before) ...
    values = [(r["inter_token_latency_ms"], r["output_tokens"] - 1) for r in records]
    values = [(0.03, w) if i in order[2:4] else (v, w) for i, (v, w) in enumerate(values)]
    naive_p50 = maths.weighted_percentile(values, 0.5)
    assert naive_p50 == 0.03  # the median fell on a burst read
    # ... against the observed ones: the same server, so the ratio stays near 1
    pair = maths.PairedRate(0, 1.0, cand, base)
    ratio = maths.slo_speedup([pair], slo, percentile="p50").value
    assert 0.5 < ratio < 2.0
    # the old reading's ITL median was a hundredth of what the server took per token
    assert base.itl_ms.p50 > 100 * naive_p50 and cand.itl_ms.p50 > 100 * naive_p50


def test_a_rate_with_no_observed_stream_gives_no_pair_and_no_slo_verdict(tmp_path: Path) -> None:
    b = _benchmarks()[1]
    blind = dict(b, requests=dict(b["requests"]))
    blind["requests"]["successful"] = [_as_burst(r) for r in b["requests"]["successful"]]
    point_blind = guidellm.read_results(_file_with(tmp_path, [blind]))[0]
    assert point_blind.completed == point_blind.unobserved == 5 and not point_blind.timed
    with pytest.raises(ValueError, match="no latency was observed at 1 req/s"):
        SLO.met(point_blind)
    seen = point(0.5, 0.5, 100, 10)
    # goodput skips it (neither met nor violated); pairing drops it
    assert maths.goodput([seen, point_blind], SLO) == maths.goodput([seen], SLO)
    twin = dataclasses.replace(point_blind, unobserved=0)
    assert len(maths.paired_rates([[twin]], [[point_blind]])) == 0
    assert len(maths.paired_rates([[twin]], [[twin]])) == 1
    # a baseline sweep with nothing observed is one line, exit 4
    settings = LoadTierSettings(rates=(1.0,), repeats=3)
    with pytest.raises(DataError, match="GuideLLM observed no token stream of the baseline"):
        run_tier(lambda jobs: [(point_blind, 1.0) for _ in jobs], settings)


def test_a_sampled_results_file_is_refused(tmp_path: Path) -> None:
    b = _benchmarks()[0]
    sampled = dict(b, requests=dict(b["requests"]))
    sampled["requests"]["successful"] = b["requests"]["successful"][:2]
    with pytest.raises(DataError, match=r"2 request records in the measured window for 3"):
        guidellm.read_results(_file_with(tmp_path, [sampled]))


def _shifted(record: dict[str, Any], seconds: float) -> dict[str, Any]:
    """The record with every timestamp the reader uses moved by ``seconds``."""
    timings = dict(record["info"]["timings"])
    timings["first_token_iteration"] += seconds
    return record | {
        "request_start_time": record["request_start_time"] + seconds,
        "request_end_time": record["request_end_time"] + seconds,
        "info": record["info"] | {"timings": timings},
    }


def test_records_outside_the_measured_window_are_not_counted(tmp_path: Path) -> None:
    # GuideLLM keeps the records of requests that finished after its measured window (seen
    # in a CI run: 6 records for 5 successful requests); its figures leave them out, so must
    # the reader, whatever their latencies
    b = _benchmarks()[1]
    window = b["scheduler_metrics"]
    late = window["measure_end_time"] - b["requests"]["successful"][0]["request_start_time"] + 1
    extra = _as_burst(_shifted(b["requests"]["successful"][0], late))
    padded = dict(b, requests=dict(b["requests"]))
    padded["requests"]["successful"] = [*b["requests"]["successful"], extra]
    (plain,) = guidellm.read_results(_file_with(tmp_path, [b]))
    (with_late,) = guidellm.read_results(_file_with(tmp_path, [padded]))
    assert with_late == plain and plain.completed == 5
    # a request that started in the window and ended after it is GuideLLM's too (overlap)
    spanning = _shifted(b["requests"]["successful"][0], late - 1.05)
    assert spanning["request_start_time"] < window["measure_end_time"]
    assert spanning["request_end_time"] > window["measure_end_time"]
    padded["requests"]["successful"] = [*b["requests"]["successful"], spanning]
    with pytest.raises(DataError, match=r"6 request records in the measured window for 5"):
        guidellm.read_results(_file_with(tmp_path, [padded]))


def test_weighted_percentile_is_the_inverted_cdf() -> None:
    rng = np.random.default_rng(7)
    for n in (1, 2, 3, 5, 8, 40):
        x = rng.lognormal(size=n).round(3)  # rounding makes ties, pooled by both
        w = rng.integers(0, 40, size=n).astype(float)
        if w.sum() == 0:
            w[0] = 1.0
        for q in (0.0, 0.1, 0.5, 0.95, 0.99, 1.0):
            assert maths.weighted_percentile(list(zip(x, w, strict=True)), q) == pytest.approx(
                np.quantile(x, q, method="inverted_cdf", weights=w) if q > 0 else x[w > 0].min()
            )
    assert maths.weighted_percentile([], 0.5) == 0.0
    assert maths.weighted_percentile([(3.0, 0.0), (1.0, 0.0)], 0.5) == 1.0


def test_results_reader_refuses_other_files(tmp_path: Path) -> None:
    other = tmp_path / "r.json"
    other.write_text(json.dumps({"metadata": {"version": 1}, "benchmarks": []}))
    with pytest.raises(DataError, match="report version 1, expected 2"):
        guidellm.read_results(other)
    other.write_text("{}")
    with pytest.raises(DataError, match=r"not a GuideLLM 0\.8\.1 results file"):
        guidellm.read_results(other)


def test_scenario_is_guidellms_own_schema() -> None:
    spec = guidellm.scenario(
        base_url="http://127.0.0.1:8000/v1",
        model="demo",
        tokenizer="/models/demo",
        workload=guidellm.Workload((1.0, 2.0), 5.0, 32, 16),
        slo=SLO,
        results=Path("/tmp/r.json"),
    )["spec"]
    assert spec["backend"]["target"] == "http://127.0.0.1:8000"
    assert spec["profile"] == {"kind": "constant", "rate": [1.0, 2.0]}
    assert spec["metrics"]["slo"] == {"ttft_ms": 500.0, "tpot_ms": 50.0}


def test_a_load_run_is_bounded_by_its_tier() -> None:
    """The packaged thresholds need no entry for the ratios: min_speedup gates them."""
    require_a_bound(
        load_thresholds(packaged_thresholds_path()), ["load.slo_speedup"], what="this run"
    )


def test_report_plot_table_and_png(tmp_path: Path) -> None:
    """The load plot and table in the HTML report, the PNG beside it, the JSON round trip."""
    from gate.report.outputs import ReportTargets, write_reports
    from tests.report_cases import make_case

    settings, runner = _scripted({"baseline": 1.0, "candidate": 1.6}, [])
    case = make_case(to_measurements(run_tier(runner, settings)))
    assert case.results.exit_code == 1  # the slower build blocks the run
    html, out = tmp_path / "report.html", tmp_path / "results.json"
    written = write_reports(case.results, ReportTargets(json=out, html=html), environ={})
    png = tmp_path / "report.load.png"
    assert png in written and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = html.read_text()
    assert 'id="plot-load"' in page and 'id="load"' in page
    assert "goodput at the SLO" in page and "CRITICAL" in page
    assert "share of the SLO used" in page
    doc = json.loads(out.read_text())
    speed = next(m for m in doc["metrics"] if m["name"] == "load.slo_speedup")
    assert speed["severity"] == "critical" and speed["ci"][1] < 0


def _fake_guidellm(tmp_path: Path, python_body: str) -> Path:
    """A ``guidellm`` command whose environment's ``python`` is a shell stand-in."""
    exe = tmp_path / "bin" / "guidellm"
    exe.parent.mkdir()
    exe.write_text("#!/bin/sh\nexit 9\n")
    exe.chmod(0o755)
    python = exe.with_name("python")
    python.write_text("#!/bin/sh\n" + python_body)
    python.chmod(0o755)
    return exe


def _batch_with(exe: Path, tmp_path: Path) -> list[tuple[list[RatePoint], float]]:
    return guidellm.run_batch(
        exe,
        [
            guidellm.Benchmark("baseline-1-1r", "http://127.0.0.1:9/v1", "demo", (1.0, 4.0)),
            guidellm.Benchmark("candidate-1-1r", "http://127.0.0.1:8/v1", "demo", (1.0, 4.0)),
        ],
        tokenizer="demo",
        workload=guidellm.Workload((), 3.0, 32, 16),
        slo=SLO,
        workdir=tmp_path / "work",
        timeout_s=60,
    )


def test_guidellm_failing_is_one_line_exit_3(tmp_path: Path) -> None:
    from gate.errors import ExitCode, ModelLoadError

    exe = _fake_guidellm(
        tmp_path,
        'echo "Traceback ..." >&2; echo "RuntimeError: Backend validation failed" >&2; exit 1\n',
    )
    with pytest.raises(ModelLoadError, match=r"GuideLLM failed at baseline-1-1r \(exit 1\)") as err:
        _batch_with(exe, tmp_path)
    assert "RuntimeError: Backend validation failed" in err.value.message
    assert err.value.exit_code == ExitCode.INTERNAL_ERROR


def test_run_batch_runs_every_scenario_in_one_process_and_reads_the_results(
    tmp_path: Path,
) -> None:
    # a stand-in for GuideLLM's python: checks its arguments (-I, the batch script, the
    # manifest), writes each results file the scenarios name, one progress line each
    exe = _fake_guidellm(
        tmp_path,
        f'[ "$1" = -I ] && [ "$2" = "{guidellm.BATCH_SCRIPT}" ] || exit 9\n'
        f'echo "$GUIDELLM__MP_CONTEXT_TYPE" > "{tmp_path}/context"\n'
        "python3 - \"$3\" <<'EOF'\n"
        "import json, shutil, sys\n"
        "for job in json.load(open(sys.argv[1])):\n"
        "    spec = json.load(open(job['scenario']))['spec']\n"
        f"    shutil.copy('{RESULTS}', spec['outputs'][0]['path'])\n"
        "    print('guidellm chatter')\n"
        "    print(json.dumps({'name': job['name'], 'wall_s': 2.5}))\n"
        "EOF\n",
    )
    shown = io.StringIO()
    with progress.to_stream(shown, style="plain"):
        done = _batch_with(exe, tmp_path)
    assert shown.getvalue().splitlines()[0] == "gate: load: GuideLLM benchmarks: 0/2"
    assert "gate: load: GuideLLM benchmarks: done 2/2 in " in shown.getvalue()
    assert [[p.offered_rate for p in points] for points, _ in done] == [[0.5, 1.0], [0.5, 1.0]]
    assert [wall for _, wall in done] == [2.5, 2.5]
    written = json.loads((tmp_path / "work" / "candidate-1-1r.scenario.json").read_text())
    assert written["spec"]["backend"]["target"] == "http://127.0.0.1:8"
    assert written["spec"]["profile"]["rate"] == [1.0, 4.0]
    assert (tmp_path / "context").read_text().strip() == "forkserver"
    assert guidellm.interpreter(exe) == exe.with_name("python")

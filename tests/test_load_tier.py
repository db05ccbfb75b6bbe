"""The load tier's maths, its GuideLLM results reader and its gate, on scripted sweeps.

The real GuideLLM against the real vLLM servers is tests/test_load_engine.py;
here every figure is checked against an independent computation (by hand or
with numpy/scipy), and a slower candidate must block.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from gate.errors import ConfigError, DataError
from gate.gating.compare import compare
from gate.gating.thresholds import load_thresholds, packaged_thresholds_path, require_a_bound
from gate.gating.verdict import Severity
from gate.metrics import load as maths
from gate.metrics.load import Latencies, RatePoint, Slo
from gate.models import guidellm
from gate.tiers.load import LoadSettings, run_tier, to_measurements
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
    # a zero goodput is floored, not a crash
    assert maths.ratio_interval([0.0, 1.0], [1.0, 1.0]).ratios[0] == 0.0
    with pytest.raises(ValueError, match="at least 2"):
        maths.ratio_interval([1.0], [1.0])


def _scripted(scale: dict[str, float], calls: list[str]) -> tuple[LoadSettings, object]:
    """A sweep runner: the baseline serves x = min(r, 4) at TTFT 100 r ms; the candidate is
    the baseline with its latencies multiplied by ``scale`` (and throughput divided)."""
    settings = LoadSettings(
        rates=(1.0, 2.0, 4.0, 8.0), repeats=3, duration_s=5, ttft_p95_ms=500, itl_p95_ms=50
    )
    wobble = iter([1.0, 1.03, 0.98, 1.01, 0.99, 1.02])

    def sweep(side: str, index: int) -> Sequence[RatePoint]:
        calls.append(f"{side}-{index}")
        k = scale[side] * next(wobble)
        return [
            point(r, min(r, 4.0) / k, 100 * r * k, 10 * k, 16 * min(r, 4.0) / k)
            for r in settings.rates
        ]

    return settings, sweep


def test_interleaved_sweeps_and_an_identical_build_passes() -> None:
    calls: list[str] = []
    settings, sweep = _scripted({"baseline": 1.0, "candidate": 1.0}, calls)
    result = run_tier(sweep, settings)  # type: ignore[arg-type]
    assert calls == [
        "baseline-0",
        "candidate-0",
        "candidate-1",
        "baseline-1",
        "baseline-2",
        "candidate-2",
    ]
    measured = {m.name: m for m in to_measurements(result)}
    good = measured["load.goodput_ratio"]
    assert good.details["ratio_ci"][0] <= 1.0 <= good.details["ratio_ci"][1]
    verdicts = compare(list(measured.values()), [], load_thresholds(packaged_thresholds_path()))
    gated = next(v for v in verdicts if v.metric == "load.goodput_ratio")
    assert gated.severity is not Severity.CRITICAL
    assert {v.metric for v in verdicts if v.threshold is not None} == {"load.goodput_ratio"}


def test_a_slower_build_blocks_and_a_not_faster_one_warns() -> None:
    thresholds = load_thresholds(packaged_thresholds_path())
    settings, sweep = _scripted({"baseline": 1.0, "candidate": 1.6}, [])
    measured = to_measurements(run_tier(sweep, settings))  # type: ignore[arg-type]
    good = next(m for m in measured if m.name == "load.goodput_ratio")
    # independent: per-pair goodput from the scripted curves (TTFT 100 r k crosses 500 ms)
    per = good.details["per_sweep"]
    for side in ("baseline", "candidate"):
        for row, k in zip(
            per[side], _wobbles(side, 1.6 if side == "candidate" else 1.0), strict=True
        ):
            r_cross = 5.0 / k  # 100 r k = 500
            lo = max(r for r in settings.rates if 100 * r * k <= 500)
            hi = min(r for r in settings.rates if 100 * r * k > 500)
            x_lo, x_hi = min(lo, 4.0) / k, min(hi, 4.0) / k
            t = (r_cross - lo) / (hi - lo)
            assert row["goodput"] == pytest.approx(x_lo + t * (x_hi - x_lo))
    verdict = next(v for v in compare(measured, [], thresholds) if v.metric == good.name)
    assert verdict.severity is Severity.CRITICAL and "slower" in verdict.reason
    assert verdict.ci == pytest.approx(
        (good.details["ratio_ci"][0] - 1, good.details["ratio_ci"][1] - 1)
    )
    # the same build asked to be 10 % faster: warned, not blocked
    same_settings, same = _scripted({"baseline": 1.0, "candidate": 1.0}, [])
    faster = dataclasses.replace(same_settings, min_speedup=1.1)
    measured = to_measurements(run_tier(same, faster))  # type: ignore[arg-type]
    verdict = next(v for v in compare(measured, [], thresholds) if v.metric == good.name)
    assert verdict.severity is Severity.WARN and "min_speedup 1.1" in verdict.reason


def _wobbles(side: str, scale: float) -> list[float]:
    """The wobble factors ``_scripted`` gave ``side``'s sweeps, in sweep order."""
    w = [1.0, 1.03, 0.98, 1.01, 0.99, 1.02]
    order = ["baseline", "candidate", "candidate", "baseline", "baseline", "candidate"]
    return [scale * f for f, s in zip(w, order, strict=True) if s == side]


def test_bad_input_is_one_line_each() -> None:
    settings = LoadSettings(rates=(1.0, 2.0), repeats=2, ttft_p95_ms=50)

    def slow(side: str, index: int) -> Sequence[RatePoint]:
        return [point(1, 1.0, 200, 10), point(2, 2.0, 300, 10)]

    with pytest.raises(DataError, match=r"SLO .* is met at no rate on the baseline") as err:
        run_tier(slow, settings)
    assert "raise [tiers.load] ttft_p95_ms" in err.value.hint

    def saturated(side: str, index: int) -> Sequence[RatePoint]:
        return [point(1, 0.2, 10, 10), point(2, 0.2, 10, 10)]

    with pytest.raises(DataError, match="saturates at the first rate 1 req/s"):
        run_tier(saturated, settings)
    with pytest.raises(ConfigError, match=r"repeats must be >= 2"):
        build_settings("load", {"repeats": 1})
    with pytest.raises(ConfigError, match=r"GuideLLM 0\.8\.1 was not found at /nowhere/guidellm"):
        guidellm.find_executable("/nowhere/guidellm")


def test_results_reader_on_a_real_guidellm_file() -> None:
    points = guidellm.read_results(RESULTS)
    raw = json.loads(RESULTS.read_text())["benchmarks"]
    assert [p.offered_rate for p in points] == [1.0, 4.0]
    for p, b in zip(points, raw, strict=True):
        m = b["metrics"]
        assert p.achieved_rate == m["requests_per_second"]["successful"]["mean"]
        assert p.ttft_ms.p95 == m["time_to_first_token_ms"]["successful"]["percentiles"]["p95"]
        assert p.itl_ms.p99 == m["inter_token_latency_ms"]["successful"]["percentiles"]["p99"]
        assert p.e2e_s.p50 == m["request_latency"]["successful"]["percentiles"]["p50"]
        assert p.completed == m["request_totals"]["successful"]
        assert p.attainment == m["slo_attainment"]


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
        load_thresholds(packaged_thresholds_path()), ["load.goodput_ratio"], what="this run"
    )


def test_report_plot_table_and_png(tmp_path: Path) -> None:
    """The load plot and table in the HTML report, the PNG beside it, the JSON round trip."""
    from gate.report.outputs import ReportTargets, write_reports
    from tests.report_cases import make_case

    settings, sweep = _scripted({"baseline": 1.0, "candidate": 1.6}, [])
    case = make_case(to_measurements(run_tier(sweep, settings)))  # type: ignore[arg-type]
    assert case.results.exit_code == 1  # the slower build blocks the run
    html, out = tmp_path / "report.html", tmp_path / "results.json"
    written = write_reports(case.results, ReportTargets(json=out, html=html), environ={})
    png = tmp_path / "report.load.png"
    assert png in written and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = html.read_text()
    assert 'id="plot-load"' in page and 'id="load"' in page
    assert "goodput at the SLO" in page and "CRITICAL" in page
    doc = json.loads(out.read_text())
    good = next(m for m in doc["metrics"] if m["name"] == "load.goodput_ratio")
    assert good["severity"] == "critical" and good["ci"][1] < 0


def _fake_guidellm(tmp_path: Path, body: str) -> Path:
    exe = tmp_path / "guidellm"
    exe.write_text("#!/bin/sh\n" + body)
    exe.chmod(0o755)
    return exe


def _sweep_with(exe: Path, tmp_path: Path) -> list[RatePoint]:
    return guidellm.run_sweep(
        exe,
        base_url="http://127.0.0.1:9/v1",
        model="demo",
        tokenizer="demo",
        workload=guidellm.Workload((1.0, 4.0), 3.0, 32, 16),
        slo=SLO,
        workdir=tmp_path / "work",
        name="baseline-1",
        timeout_s=60,
    )


def test_guidellm_failing_is_one_line_exit_3(tmp_path: Path) -> None:
    from gate.errors import ExitCode, ModelLoadError

    exe = _fake_guidellm(
        tmp_path, 'echo "Traceback ..."; echo "RuntimeError: Backend validation failed"; exit 1\n'
    )
    with pytest.raises(ModelLoadError, match="GuideLLM failed on baseline-1 \\(exit 1\\)") as err:
        _sweep_with(exe, tmp_path)
    assert "RuntimeError: Backend validation failed" in err.value.message
    assert err.value.exit_code == ExitCode.INTERNAL_ERROR


def test_run_sweep_passes_the_scenario_and_reads_the_results(tmp_path: Path) -> None:
    # a stand-in that checks its arguments and writes the results file the scenario names
    exe = _fake_guidellm(
        tmp_path,
        '[ "$1" = run ] && [ "$2" = --scenario ] || exit 9\n'
        'out=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))'
        "['spec']['outputs'][0]['path'])\" \"$3\")\n"
        f'cp "{RESULTS}" "$out"\n',
    )
    points = _sweep_with(exe, tmp_path)
    assert [p.offered_rate for p in points] == [1.0, 4.0]
    written = json.loads((tmp_path / "work" / "baseline-1.scenario.json").read_text())
    assert written["spec"]["backend"]["target"] == "http://127.0.0.1:9"

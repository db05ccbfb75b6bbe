"""Bounds from a noise floor (gate.gating.calibration) and the calibrated thresholds file."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gate.config import tomllib
from gate.gating import power as pw
from gate.gating.calibration.bounds import (
    MetricCalibration,
    NoiseRun,
    calibrate_metric,
    derive_bound,
    noise_quantile,
)
from gate.gating.calibration.plan import plan_sample_sizes
from gate.gating.calibration.reader import read_calibration
from gate.gating.calibration.record import CalibrationRecord, TierTiming
from gate.gating.calibration.writer import render_thresholds
from gate.gating.thresholds import load_thresholds, packaged_thresholds_path, parse_thresholds
from gate.gating.verdict import Bound
from gate.measurement import Measurement
from gate.metrics.registry import all_metrics, get_metric
from gate.tiers.fidelity import batches
from gate.workflows.calibrate import noise_run, paired_spread

SPECS = all_metrics()
DEFAULTS = load_thresholds(packaged_thresholds_path())


def _runs(*values: float, spread: float | None = 0.05, n: int = 96) -> list[NoiseRun]:
    return [NoiseRun(f"s{i}", v, spread, n) for i, v in enumerate(values)]


def test_noise_quantile_is_the_largest_run_when_few_and_the_quantile_when_many() -> None:
    assert noise_quantile([0.001, -0.004, 0.003], 0.95) == 0.003  # 3 runs: the largest
    values = list(np.linspace(0.0, 1.0, 101))  # 0, 0.01, ..., 1
    assert noise_quantile(values, 0.95) == pytest.approx(0.95)
    assert noise_quantile([-0.1, -0.2], 0.95) == 0.0  # improvements are no noise floor
    assert noise_quantile([], 0.95) == 0.0
    with pytest.raises(ValueError):
        noise_quantile([0.1], 1.0)


def _calibrated(name: str, runs: list[NoiseRun], *, n: int, reference: float) -> MetricCalibration:
    """``name`` calibrated against the packaged defaults' bound at alpha 0.01."""
    return calibrate_metric(
        get_metric(name), DEFAULTS.for_metric(name), runs, n=n, reference=reference, alpha=0.01
    )


def test_declared_bound_holds_above_the_noise_and_is_raised_below_it() -> None:
    declared = Bound(warn=0.05, critical=0.10)
    kept, rule = derive_bound(declared, 0.01, margin=2.0)
    assert (kept, rule) == (declared, "declared")
    raised, rule = derive_bound(declared, 0.04, margin=2.0)
    assert rule == "noise"
    assert raised is not None
    assert raised.warn == pytest.approx(0.08)  # 2 x 0.04 > 0.05
    assert raised.critical == pytest.approx(0.16)  # the declared ratio 2 kept
    assert derive_bound(None, 0.5) == (None, "unbounded")
    with pytest.raises(ValueError):
        derive_bound(declared, 0.01, margin=0.5)


def test_score_metric_mde_and_items_needed_are_the_paired_bootstrap_power_figures() -> None:
    spec = get_metric("fidelity.cga")
    declared = DEFAULTS.for_metric("fidelity.cga")
    cal = calibrate_metric(
        spec,
        declared,
        _runs(0.0, 0.002, 0.001, spread=0.0) + _runs(0.004, spread=0.12),
        n=96,
        reference=1.0,
        alpha=0.01,
    )
    assert cal.spread == 0.12  # the largest per-item spread of any run
    assert cal.mde == pytest.approx(pw.mde_paired_mean(96, 0.12, alpha=0.01))
    assert cal.needed_n == pw.required_n_paired_mean(0.10, 0.12, alpha=0.01)
    assert (cal.warn, cal.critical, cal.rule) == (0.05, 0.10, "declared")
    assert cal.noise == 0.004
    assert cal.summary()["max"] == 0.004


def test_items_needed_is_at_least_min_samples() -> None:
    """With no spread any shift is significant, but below min_samples the verdict is the
    point value: the count needed is then min_samples."""
    cal = _calibrated("fidelity.cga", _runs(0.0, spread=0.0), n=96, reference=1.0)
    assert cal.needed_n == DEFAULTS.for_metric("fidelity.cga").min_samples  # type: ignore[union-attr]


def test_correctness_metric_uses_mcnemar() -> None:
    spec = get_metric("accuracy.mcq_acc")
    cal = calibrate_metric(
        spec,
        DEFAULTS.for_metric("accuracy.mcq_acc"),
        _runs(0.0, 0.0167, spread=0.05, n=60),
        n=60,
        reference=0.23,
        alpha=0.01,
    )
    assert cal.test == "mcnemar"
    assert cal.mde == pytest.approx(pw.mde_mcnemar(60, 0.05, alpha=0.01))
    # the noise (0.0167, x2 = 0.033 > warn 0.02) raised the bounds: the count is for the new one
    assert (cal.rule, cal.critical) == ("noise", pytest.approx(2 * 2 * 0.0167))
    assert cal.critical is not None
    assert cal.needed_n == pw.required_n_mcnemar(cal.critical, 0.05, alpha=0.01)


def test_relative_log_metric_goes_through_the_log() -> None:
    """Perplexity is gated relatively and its samples are per-window mean NLL: a relative
    degradation r is a mean-log shift log(1 + r)."""
    spec = get_metric("accuracy.perplexity")
    cal = calibrate_metric(
        spec,
        DEFAULTS.for_metric("accuracy.perplexity"),
        _runs(0.0, spread=0.1, n=30),
        n=30,
        reference=104.7,
        alpha=0.01,
    )
    assert cal.mde == pytest.approx(math.expm1(pw.mde_paired_mean(30, 0.1, alpha=0.01)))
    needed = pw.required_n_paired_mean(math.log1p(0.06), 0.1, alpha=0.01)
    assert needed is not None and needed > 10
    assert cal.needed_n == needed


def test_point_metric_has_no_test() -> None:
    cal = _calibrated("fidelity.kl_p99", _runs(1e-7, spread=None, n=0), n=0, reference=0.0)
    assert (cal.test, cal.mde, cal.needed_n) == ("point", None, None)


def _record(noisy: float) -> CalibrationRecord:
    cga = _calibrated("fidelity.cga", _runs(0.0, noisy, spread=0.1), n=96, reference=1.0)
    kl = _calibrated("fidelity.kl_p99", _runs(1e-7, spread=None, n=0), n=0, reference=0.0)
    return CalibrationRecord(
        model="demo",
        created="2026-01-01 00:00 UTC",
        hardware="test CPU",
        alpha=0.01,
        power=0.8,
        margin=2.0,
        quantile=0.95,
        sources=("s0", "s1"),
        metrics={"fidelity.cga": cga, "fidelity.kl_p99": kl},
        timings={"fidelity": TierTiming("fidelity", 12.0, 96)},
    )


def test_written_thresholds_load_and_keep_every_other_section() -> None:
    text = render_thresholds(DEFAULTS, _record(0.04), SPECS)  # 2 x 0.04 > warn 0.05: raised
    loaded = parse_thresholds(tomllib.loads(text), source="cal.toml")
    cga = loaded.for_metric("fidelity.cga")
    assert cga is not None
    assert (cga.bound.warn, cga.bound.critical) == (pytest.approx(0.08), pytest.approx(0.16))
    assert cga.categories == DEFAULTS.for_metric("fidelity.cga").categories  # type: ignore[union-attr]
    assert set(loaded.metrics) == set(DEFAULTS.metrics)
    for name, threshold in DEFAULTS.metrics.items():
        if name != "fidelity.cga":
            assert loaded.metrics[name] == threshold, name
    assert (loaded.alpha, loaded.min_samples) == (DEFAULTS.alpha, DEFAULTS.min_samples)
    # a comment per metric says where its numbers came from
    block = text.split('[metrics."fidelity.cga"]')[1].split("[metrics.")[0]
    assert "warn = margin x noise quantile 0.04" in block
    assert "# noise (degradation per source): s0 0, s1 0.04" in block
    assert "not calibrated: as declared" in text.split('[metrics."accuracy.flips"]')[1]
    record = read_calibration(loaded.calibration, "cal.toml")
    assert record.metrics["fidelity.cga"].spread == 0.1
    assert record.metrics["fidelity.cga"].n == 96
    assert record.timings["fidelity"].seconds == 12.0


def test_sample_size_plan_from_a_calibrated_file() -> None:
    text = render_thresholds(DEFAULTS, _record(0.0), SPECS)
    loaded = parse_thresholds(tomllib.loads(text), source="cal.toml")
    calibration = read_calibration(loaded.calibration, "cal.toml")
    (plan,) = plan_sample_sizes(loaded, calibration, SPECS, ["fidelity", "accuracy"])
    needed = pw.required_n_paired_mean(0.10, 0.1, alpha=0.01)
    assert needed is not None
    assert plan.metrics == (("fidelity.cga", 96, max(needed, 10)),)
    assert plan.seconds == pytest.approx(12.0 * max(needed, 10) / 96)


def test_paired_spread_and_degradation_of_a_run() -> None:
    spec = get_metric("fidelity.cga")
    base = Measurement(
        "fidelity.cga", 1.0, samples=(1.0, 1.0, 1.0, 1.0), sample_ids=("a", "b", "c", "d")
    )
    cand = Measurement(
        "fidelity.cga", 0.9, samples=(0.8, 1.0, 0.9, 0.9), sample_ids=("d", "a", "b", "c")
    )
    diffs = np.array([0.0, -0.1, -0.1, -0.2])  # a, b, c, d
    assert paired_spread(cand, base, spec) == pytest.approx(float(np.std(diffs, ddof=1)))
    run = noise_run("x", cand, base, spec, Bound(0.05, 0.1), control=False)
    assert run.degradation == pytest.approx(0.1)
    flips = get_metric("accuracy.mcq_acc")
    b01 = Measurement("accuracy.mcq_acc", 0.5, samples=(1.0, 0.0, 1.0, 0.0))
    c01 = Measurement("accuracy.mcq_acc", 0.5, samples=(0.0, 0.0, 1.0, 1.0))
    assert paired_spread(c01, b01, flips) == 0.5  # two discordant pairs of four
    assert paired_spread(cand, base, get_metric("fidelity.kl_p99")) is None


def test_order_seed_regroups_every_prompt() -> None:
    lengths = [5, 9, 9, 3, 7, 9, 1, 2]
    plain = batches(lengths, 3)
    seeded = batches(lengths, 3, order_seed=1)
    assert sorted(i for g in seeded for i in g) == list(range(8))
    assert seeded != plain
    assert batches(lengths, 3, order_seed=1) == seeded  # seeded: reproducible


def test_dry_run_plan_lines() -> None:
    from gate.workflows.plan import sample_size_lines

    (none,) = sample_size_lines(DEFAULTS, ("fidelity",))
    assert none.startswith("sample sizes: no calibration in")
    loaded = parse_thresholds(
        tomllib.loads(render_thresholds(DEFAULTS, _record(0.0), SPECS)), source="cal.toml"
    )
    lines = sample_size_lines(loaded, ("fidelity",))
    needed = max(pw.required_n_paired_mean(0.10, 0.1, alpha=0.01) or 0, 10)
    assert f"fidelity: {needed} items needed (by fidelity.cga; configured 96" in lines[1]
    assert "96 items took 12 s" in lines[1]
    assert sample_size_lines(loaded, ("accuracy",)) == [
        "sample sizes: cal.toml calibrates none of accuracy"
    ]

"""gate.gating.power: the MDE each verdict reports against a simulation of the gate's own test.

For each test the gate uses (paired bootstrap for per-item scores, McNemar for
per-item correctness, Mann-Whitney U and Wilcoxon signed-rank for timings) the
MDE is read from a verdict of :func:`gate.gating.compare.compare_measurements` on
measurements whose spread is exactly the one simulated. Then a few hundred
replicates are drawn with a true degradation of 0.9 x and 1.1 x that MDE and
put through the gate's own test: the :mod:`gate.gating.stats` function
``compare_measurements`` calls, with the arguments it passes (resamples, seed, and for
timings the warn bound as the margin of the CRITICAL test). The
MDE is right within 10 % when the detection rate at 0.9 x MDE is below the
power and at 1.1 x MDE above it. With 300 replicates a rate has a standard
error of 0.023, and the rates are expected about 0.08 either side of 0.8, so
the check has room for chance but not for a 10 % error; the seeds are fixed.

The per-item score simulation draws normal paired differences: the MDE is the
noncentral-t power of a bootstrap that is close to a t test. Differences skewed
towards "worse" (a few prompts that lose a lot, as CGA degradations often look)
are detected *more* easily, so there the reported MDE errs on the safe side;
:func:`test_paired_mde_is_conservative_for_worse_skewed_differences` checks it.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
from scipy import stats as sps

from gate.errors import ConfigError, ExitCode
from gate.gating import power as pw
from gate.gating import stats
from gate.gating.compare import compare_measurements
from gate.gating.thresholds import (
    Thresholds,
    load_thresholds,
    packaged_thresholds_path,
    parse_thresholds,
)
from gate.gating.verdict import Severity, Verdict, decide
from gate.measurement import Measurement, MeasurementDetail, from_samples

ALPHA = 0.01
POWER = 0.8
REPS = 300
TOLERANCE = 0.10


@pytest.fixture(scope="module")
def th() -> Thresholds:
    limits = load_thresholds(packaged_thresholds_path())
    assert (limits.alpha, limits.power) == (ALPHA, POWER)
    return limits


def _ids(n: int) -> list[str]:
    return [f"item{i:04d}" for i in range(n)]


def _standard(rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` normal draws rescaled to sample mean 0 and sample sd 1 exactly."""
    z = rng.normal(size=n)
    return (z - z.mean()) / z.std(ddof=1)


def _one(verdicts: list[Verdict], key: str) -> Verdict:
    return next(v for v in verdicts if v.key == key)


def _per_item(th: Thresholds, name: str, cand: np.ndarray, base: np.ndarray) -> list[Verdict]:
    """``compare_measurements``'s verdicts on per-item samples of ``name``, item ``i`` paired on both sides."""
    ids = _ids(len(base))
    return compare_measurements(
        [from_samples(name, list(cand), ids)], [from_samples(name, list(base), ids)], th
    )


def _rates(detect: Callable[[float, np.random.Generator], bool], mde: float) -> list[float]:
    """Detection rates at 0.9 x and 1.1 x the MDE (each from its own fixed seed)."""
    out = []
    for factor in (1.0 - TOLERANCE, 1.0 + TOLERANCE):
        rng = np.random.default_rng(20)
        out.append(sum(detect(factor * mde, rng) for _ in range(REPS)) / REPS)
    return out


def _within_tolerance(rates: list[float]) -> None:
    low, high = rates
    print(f"detection at 0.9 x MDE {low:.3f}, at 1.1 x MDE {high:.3f}")  # shown with -s
    assert low < POWER < high, f"detection {low:.3f} at 0.9 x MDE, {high:.3f} at 1.1 x MDE"


# ------------------------------------------------------------------ simulation checks


@pytest.mark.parametrize(("n", "sd"), [(12, 0.2), (40, 0.3)])
def test_paired_score_mde_matches_a_simulation_of_the_bootstrap(
    th: Thresholds, n: int, sd: float
) -> None:
    """CGA-like per-prompt scores against a baseline's own, paired sd ``sd``."""
    rng = np.random.default_rng(n)
    base = rng.beta(8.0, 1.5, n)  # per-prompt agreement of a baseline, mostly near 1
    exact = base + sd * _standard(rng, n)
    verdict = _one(_per_item(th, "fidelity.cga", exact, base), "fidelity.cga")
    assert verdict.power is not None and verdict.power.test == "paired bootstrap"
    mde = verdict.power.mde
    assert mde == pytest.approx(pw.mde_paired_mean(n, sd, alpha=ALPHA))
    if n == 12:
        assert 0.17 < mde < 0.19 and verdict.power.underpowered  # the example

    def detect(delta: float, rng: np.random.Generator) -> bool:
        cand = base - delta + rng.normal(0.0, sd, n)
        return stats.paired_bootstrap(cand, base).p_worse < ALPHA  # compare's call, as it is

    _within_tolerance(_rates(detect, mde))


def test_paired_mde_is_conservative_for_worse_skewed_differences() -> None:
    """A few prompts losing much (gamma-skewed losses): detected at least as often."""
    n, sd = 40, 0.2
    mde = pw.mde_paired_mean(n, sd, alpha=ALPHA)
    rng = np.random.default_rng(3)
    hits = 0
    for _ in range(REPS):
        losses = (rng.gamma(2.0, 1.0, n) - 2.0) / math.sqrt(2.0)  # mean 0, sd 1, right-skewed
        diff = -mde - sd * losses
        hits += stats.paired_bootstrap(diff, np.zeros(n)).p_worse < ALPHA
    assert hits / REPS >= POWER


def test_mcnemar_mde_matches_a_simulation_of_the_exact_test(th: Thresholds) -> None:
    """Per-question correctness: 200 questions, an unchanged build disagrees on 10 %."""
    n, noise = 200, 0.10
    rng = np.random.default_rng(5)
    base = (rng.random(n) < 0.7).astype(float)
    right, wrong = np.flatnonzero(base == 1.0), np.flatnonzero(base == 0.0)
    exact = base.copy()  # c = 10 pairs where only the candidate is right: psi0 = 2c/n = 0.1
    exact[wrong[:10]] = 1.0
    exact[right[:10]] = 0.0
    verdict = _one(_per_item(th, "accuracy.mcq_acc", exact, base), "accuracy.mcq_acc")
    assert verdict.power is not None and verdict.power.test == "McNemar exact"
    mde = verdict.power.mde
    assert mde == pytest.approx(pw.mde_mcnemar(n, noise, alpha=ALPHA))

    def detect(delta: float, rng: np.random.Generator) -> bool:
        # each pair: only the candidate wrong (p_b = noise/2 + delta), only it right (p_c)
        u = rng.random(n)
        only_worse = u < noise / 2 + delta
        only_better = (u >= noise / 2 + delta) & (u < noise + delta)
        cand, ref = np.ones(n), np.ones(n)
        cand[only_worse] = 0.0
        ref[only_better] = 0.0
        return stats.mcnemar(cand, ref).p_worse < ALPHA  # compare's call, as it is

    _within_tolerance(_rates(detect, mde))


def _timings(log_values: np.ndarray) -> tuple[float, ...]:
    return tuple(float(x) for x in 0.05 * np.exp(log_values))


@pytest.mark.parametrize("paired", [False, True], ids=["mann-whitney", "wilcoxon-pairs"])
def test_timing_mde_matches_a_simulation_of_the_rank_test(th: Thresholds, paired: bool) -> None:
    """20 runs a side of 8 % log spread; relative bounds 5 % / 10 %: CRITICAL tests past +5 %."""
    runs, sd, name = 20, 0.08, "latency.ttft_p50"
    bound = th.metrics[name].bound
    assert (bound.mode, bound.warn, bound.critical) == ("relative", 0.05, 0.10)
    rng = np.random.default_rng(11)
    base_log = sd * _standard(rng, runs)
    # paired: the per-pair log ratios have sd exactly `sd`; unpaired: each side's log timings
    cand_log = base_log + sd * _standard(rng, runs) if paired else sd * _standard(rng, runs)
    base = _timings(base_log)
    cand = _timings(cand_log)
    details = {}
    if paired:
        details = {
            MeasurementDetail.PAIRED_REFERENCE: {
                "against": "baseline",
                "value": float(np.median(base)),
                "samples": list(base),
            }
        }
    verdict = _one(
        compare_measurements(
            [Measurement(name, float(np.median(cand)), cand, details=details)],
            [Measurement(name, float(np.median(base)), base)],
            th,
            n_resamples=50,  # the rank tests' p-values do not resample; only their CI does
        ),
        name,
    )
    assert verdict.power is not None
    assert verdict.power.test == ("Wilcoxon signed-rank (pairs)" if paired else "Mann-Whitney U")
    mde = verdict.power.mde  # relative: the candidate 1 + mde times the baseline
    if paired:
        shift = pw.mde_signed_rank(runs, sd, alpha=ALPHA)
    else:
        shift = pw.mde_rank_sum(runs, runs, sd, alpha=ALPHA)
    assert mde == pytest.approx(1.05 * math.exp(shift) - 1.0)
    test = stats.paired_runs_test if paired else stats.repeated_runs_test

    def detect(rho: float, rng: np.random.Generator) -> bool:
        b = np.exp(rng.normal(0.0, 0.05, runs) if paired else rng.normal(0.0, sd, runs))
        noise = rng.normal(0.0, sd, runs)
        c = b * np.exp(noise) * (1.0 + rho) if paired else np.exp(noise) * (1.0 + rho)
        got = test(c, b, higher_is_better=False, margin=bound.warn, n_resamples=10)
        return got.p_worse < ALPHA

    _within_tolerance(_rates(detect, mde))


# ------------------------------------------------------------------ the functions


def test_paired_mean_mde_tends_to_the_normal_formula() -> None:
    n, sd = 10_000, 0.3
    normal = (sps.norm.ppf(1 - ALPHA) + sps.norm.ppf(POWER)) * sd / math.sqrt(n)
    assert pw.mde_paired_mean(n, sd, alpha=ALPHA) == pytest.approx(normal, rel=1e-3)
    assert pw.mde_paired_mean(12, 0.0, alpha=ALPHA) == 0.0
    # float noise as spread (a demo run's identical scores): scipy's nctdtr gives NaN at
    # large noncentrality; the MDE must still scale with the spread
    tiny = pw.mde_paired_mean(5, 8e-9, alpha=ALPHA)
    assert tiny == pytest.approx(8e-9 * pw.mde_paired_mean(5, 1.0, alpha=ALPHA), rel=1e-4)
    assert math.isinf(pw.mde_paired_mean(1, 0.3, alpha=ALPHA))


def test_required_n_is_the_least_count_reaching_the_power() -> None:
    n = pw.required_n_paired_mean(0.1, 0.2, alpha=ALPHA)
    assert n is not None
    assert pw.power_paired_mean(n, 0.2, 0.1, alpha=ALPHA) >= POWER
    assert pw.power_paired_mean(n - 1, 0.2, 0.1, alpha=ALPHA) < POWER
    assert (
        pw.mde_paired_mean(n, 0.2, alpha=ALPHA) <= 0.1 < pw.mde_paired_mean(n - 1, 0.2, alpha=ALPHA)
    )
    runs = pw.required_n_rank_sum(math.log(1.1), 0.08, alpha=ALPHA)
    assert runs is not None
    assert pw.power_rank_sum(runs, runs, 0.08, math.log(1.1), alpha=ALPHA) >= POWER
    assert pw.power_rank_sum(runs - 1, runs - 1, 0.08, math.log(1.1), alpha=ALPHA) < POWER
    pairs = pw.required_n_signed_rank(math.log(1.1), 0.08, alpha=ALPHA)
    assert pairs is not None
    assert pw.power_signed_rank(pairs, 0.08, math.log(1.1), alpha=ALPHA) >= POWER
    items = pw.required_n_mcnemar(0.05, 0.1, alpha=ALPHA)
    assert items is not None and pw.power_mcnemar(items, 0.1, 0.05, alpha=ALPHA) >= POWER


def test_mcnemar_without_noise_needs_enough_flips_for_alpha() -> None:
    """No noise: reject iff b >= 7 (2^-7 < 0.01 <= 2^-6), so power = P[Binom(n, delta) >= 7]."""
    n, delta = 100, 0.08
    assert pw.power_mcnemar(n, 0.0, delta, alpha=ALPHA) == pytest.approx(
        float(sps.binom.sf(6, n, delta))
    )
    assert math.isinf(pw.mde_mcnemar(6, 0.0, alpha=ALPHA))  # six items can never reach p < 0.01


@pytest.mark.parametrize(("m", "k"), [(5, 5), (8, 12), (20, 20)])
def test_exact_null_distributions_agree_with_scipy(m: int, k: int) -> None:
    rng = np.random.default_rng(m * k)
    x, y = rng.normal(0.5, 1.0, m), rng.normal(0.0, 1.0, k)
    mwu = sps.mannwhitneyu(x, y, alternative="greater", method="exact")
    assert float(pw._rank_sum_null(m, k)[int(mwu.statistic) :].sum()) == pytest.approx(mwu.pvalue)
    wil = sps.wilcoxon(x, alternative="greater", method="exact")
    assert float(pw._signed_rank_null(m)[int(wil.statistic) :].sum()) == pytest.approx(wil.pvalue)


def test_too_few_runs_detect_nothing() -> None:
    """Five pairs: the signed-rank test's smallest p-value is 1/32 > 0.01."""
    assert math.isinf(pw.mde_signed_rank(5, 0.05, alpha=ALPHA))
    assert math.isinf(pw.mde_rank_sum(1, 20, 0.05, alpha=ALPHA))


def test_relative_degradation_inverts_log_shift() -> None:
    for hib in (False, True):
        shift = pw.log_shift(0.15, 0.05, higher_is_better=hib)
        assert pw.relative_degradation(shift, 0.05, higher_is_better=hib) == pytest.approx(0.15)


def test_statement_words() -> None:
    weak = pw.PowerStatement(
        metric="fidelity.cga", slice=None, n=12, mde=0.1793, critical=0.10, mode="absolute",
        power=0.8, alpha=0.01, test="paired bootstrap", higher_is_better=True,
    )  # fmt: skip
    assert weak.underpowered
    assert weak.message == (
        "fidelity.cga: n = 12 can only detect a drop of 0.18; the critical bound is 0.10"
        " - UNDERPOWERED"
    )
    fine = pw.PowerStatement(
        metric="latency.ttft_p50", slice="batch:1", n=20, mde=0.087, critical=0.10,
        mode="relative", power=0.8, alpha=0.01, test="Mann-Whitney U", higher_is_better=False,
        reference=0.05,
    )  # fmt: skip
    assert not fine.underpowered
    assert fine.mde_value == pytest.approx(0.087 * 0.05)
    assert fine.message == (
        "latency.ttft_p50[batch:1]: n = 20 detects a rise of 8.7% with 80% power;"
        " the critical bound is 10%"
    )
    blind = pw.PowerStatement(
        metric="accuracy.flips", slice=None, n=6, mde=math.inf, critical=0.10, mode="absolute",
        power=0.8, alpha=0.01, test="McNemar exact", higher_is_better=False,
    )  # fmt: skip
    assert blind.underpowered and "n = 6 cannot detect any rise with 80% power" in blind.message


# ------------------------------------------------------------------ verdicts and decisions


def test_underpowered_warns_in_words_and_blocks_only_when_asked(th: Thresholds) -> None:
    """A passing but underpowered metric keeps its PASS; strict or require_power block."""
    rng = np.random.default_rng(1)
    base = rng.beta(8.0, 1.5, 12)
    cand = base + 0.2 * _standard(rng, 12)
    verdicts = _per_item(th, "fidelity.cga", cand, base)
    assert [v.severity for v in verdicts] == [Severity.PASS]
    assert decide(verdicts).underpowered == (verdicts[0].power,)
    assert decide(verdicts).exit_code == 0 and decide(verdicts).headline == "APPROVED"
    assert decide(verdicts, strict=True).exit_code == 1
    assert decide(verdicts, require_power=True).headline == "BLOCKED"


def test_no_statement_for_ungated_or_untested_metrics(th: Thresholds) -> None:
    verdicts = compare_measurements(
        [Measurement("latency.param_bytes", 2.0e9), from_samples("fidelity.cga", [1.0] * 30)],
        [Measurement("latency.param_bytes", 2.0e9), from_samples("fidelity.cga", [1.0] * 30)],
        th,
    )
    power = {v.metric: v.power for v in verdicts}
    assert power["latency.param_bytes"] is None  # point value: no test
    cga = power["fidelity.cga"]
    assert cga is not None and cga.mde == 0.0 and not cga.underpowered  # no spread at all


def test_power_settings_are_validated_in_thresholds() -> None:
    limits = parse_thresholds({"gate": {"power": 0.9, "require_power": True}}, source="t.toml")
    assert (limits.power, limits.require_power) == (0.9, True)
    assert (parse_thresholds({}, source="t.toml").power, False) == (POWER, False)
    for bad, words in [
        ({"power": 1.0}, "gate.power: 1.0 is outside"),
        ({"power": 0.005}, "gate.power: 0.005 is outside"),
        ({"power": "high"}, "gate.power: expected a number"),
        ({"require_power": "yes"}, "gate.require_power: expected true or false"),
    ]:
        with pytest.raises(ConfigError, match=words) as info:
            parse_thresholds({"gate": bad}, source="t.toml")
        assert info.value.exit_code == ExitCode.USAGE_ERROR

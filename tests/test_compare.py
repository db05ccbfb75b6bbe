"""gate.gating.compare: severities, evidence, reasons, slices, references — with the shipped thresholds."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

from gate.errors import DataError
from gate.gating.compare import compare_many, compare_measurements, judge_metric
from gate.gating.decision import Basis, Decision, Evidence, Method, Pairing, Reference, describe
from gate.gating.thresholds import (
    Thresholds,
    load_thresholds,
    packaged_thresholds_path,
    parse_thresholds,
)
from gate.gating.verdict import Bound, Severity, VerdictThreshold, decide
from gate.measurement import Measurement, from_samples
from gate.metrics.metric_spec import MetricSpec, SampleKind
from gate.metrics.registry import all_metrics


@pytest.fixture(scope="module")
def th() -> Thresholds:
    return load_thresholds(packaged_thresholds_path())


def _ids(n: int) -> list[str]:
    return [f"item{i:04d}" for i in range(n)]


def _binary(name: str, values: list[int] | np.ndarray, ids: list[str] | None = None) -> Measurement:
    vals = [float(v) for v in values]
    return from_samples(name, vals, ids if ids is not None else _ids(len(vals)))


def _runs(name: str, values: np.ndarray) -> Measurement:
    return Measurement(name, float(np.median(values)), tuple(float(v) for v in values))


def _suite(rng: np.random.Generator) -> list[Measurement]:
    """One measurement of each sample kind, as a baseline would store them."""
    return [
        _binary("accuracy.mcq_acc", (rng.random(300) < 0.7).astype(int)),
        from_samples("accuracy.perplexity", list(rng.uniform(2, 3, 40)), _ids(40)),
        from_samples("fidelity.cga", [1.0] * 30, _ids(30)),
        _runs("latency.ttft_p50", 0.05 * rng.lognormal(0, 0.05, 20)),
        Measurement("latency.param_bytes", 1.2e9),
        Measurement("fidelity.kl_p99", 0.0),
    ]


def test_equal_measurements_all_pass(th: Thresholds) -> None:
    base = _suite(np.random.default_rng(0))
    verdicts = compare_measurements(base, base, th)
    assert [v.metric for v in verdicts] == [m.name for m in base]
    assert all(v.severity is Severity.PASS for v in verdicts), [v.reason for v in verdicts]
    assert all(v.delta == 0.0 for v in verdicts)
    assert decide(verdicts).headline == "APPROVED"


def _accuracy_pair(n: int, lost: int, gained: int = 0) -> tuple[Measurement, Measurement]:
    """Baseline right on the first 80 %; the candidate loses ``lost`` and gains ``gained``."""
    base = np.zeros(n, dtype=int)
    base[: int(0.8 * n)] = 1
    cand = base.copy()
    cand[:lost] = 0
    cand[n - gained :] = 1
    return _binary("accuracy.mcq_acc", cand), _binary("accuracy.mcq_acc", base)


def test_past_critical_is_critical_and_named(th: Thresholds) -> None:
    cand, base = _accuracy_pair(400, lost=40)  # -10 points, critical is -4
    (v,) = compare_measurements([cand], [base], th)
    assert v.severity is Severity.CRITICAL
    assert v.delta == pytest.approx(-0.1)
    assert v.baseline_value == pytest.approx(0.8)
    assert v.test == "McNemar exact"
    assert v.p_value == pytest.approx(sps.binomtest(40, 40, alternative="greater").pvalue)
    assert v.ci is not None and v.ci[0] <= -0.1 <= v.ci[1]
    assert v.threshold is not None and v.threshold.bound.critical == 0.04
    for part in ("accuracy.mcq_acc", "0.7 vs 0.8", "-0.1", "past critical -0.04", "McNemar"):
        assert part in v.reason, v.reason
    assert decide([v]).exit_code == 1


def test_past_warn_only_is_warn(th: Thresholds) -> None:
    cand, base = _accuracy_pair(1000, lost=30)  # -3 points: past warn 2, within critical 4
    (v,) = compare_measurements([cand], [base], th)
    assert v.severity is Severity.WARN
    assert "past warn -0.02" in v.reason
    assert decide([v]).exit_code == 0 and decide([v], strict=True).exit_code == 1


def test_not_significant_stays_pass(th: Thresholds) -> None:
    cand, base = _accuracy_pair(200, lost=15, gained=5)  # -5 points but b=15, c=5
    (v,) = compare_measurements([cand], [base], th)
    expected_p = sps.binomtest(15, 20, alternative="greater").pvalue
    assert expected_p > th.alpha
    assert v.p_value == pytest.approx(expected_p)
    assert v.severity is Severity.PASS
    assert "past critical" in v.reason and "not significant" in v.reason


def test_few_samples_are_judged_on_the_point_value(th: Thresholds) -> None:
    cand, base = _accuracy_pair(5, lost=1)
    (v,) = compare_measurements([cand], [base], th)
    assert v.severity is Severity.CRITICAL
    assert "min_samples" in v.reason and "point value" in v.reason


def test_improvement_passes(th: Thresholds) -> None:
    cand, base = _accuracy_pair(400, lost=0, gained=40)
    (v,) = compare_measurements([cand], [base], th)
    assert v.severity is Severity.PASS and v.delta == pytest.approx(0.1)


def test_ideal_reference_when_the_baseline_has_none(th: Thresholds) -> None:
    rng = np.random.default_rng(1)
    per_prompt = np.clip(rng.normal(0.85, 0.05, 60), 0, 1)
    cand = from_samples("fidelity.cga", list(per_prompt), _ids(60))
    (v,) = compare_measurements([cand], [], th)
    assert v.baseline_value == 1.0 and v.details["reference"] == "ideal"
    assert v.delta == pytest.approx(per_prompt.mean() - 1.0)
    assert v.severity is Severity.CRITICAL  # about -0.15, critical -0.10
    assert "vs 1 (ideal)" in v.reason and "paired bootstrap" in v.reason
    # the same build measured at CGA 0.97 on every prompt passes
    (ok,) = compare_measurements([from_samples("fidelity.cga", [0.97] * 60, _ids(60))], [], th)
    assert ok.severity is Severity.PASS


def test_no_baseline_value_and_not_gated(th: Thresholds) -> None:
    cand_acc, _ = _accuracy_pair(100, lost=50)
    kl_max = Measurement("fidelity.kl_max", 9.0)
    v_acc, v_kl = compare_measurements([cand_acc, kl_max], [], th)
    assert v_acc.severity is Severity.PASS and "no baseline value" in v_acc.reason
    assert v_acc.baseline_value is None and v_acc.delta is None
    assert v_kl.severity is Severity.PASS and "not gated" in v_kl.reason
    assert v_kl.delta == 9.0


def test_breakdown_slices_use_category_overrides(th: Thresholds) -> None:
    math_ids = [f"math{i}" for i in range(30)]
    chat_ids = [f"chat{i}" for i in range(30)]
    values = [0.92] * 30 + [0.99] * 30  # math -0.08 (override critical 0.06), chat -0.01
    cand = from_samples(
        "fidelity.cga",
        values,
        math_ids + chat_ids,
        groups={"category:math": range(30), "category:chat": range(30, 60)},
    )
    overall, v_math, v_chat = compare_measurements([cand], [], th)
    assert overall.slice is None and overall.severity is Severity.PASS  # -0.045 < warn 0.05
    assert overall.breakdown == {
        "category:math": pytest.approx(0.92),
        "category:chat": pytest.approx(0.99),
    }
    assert v_math.slice == "category:math" and v_math.severity is Severity.CRITICAL
    assert v_math.threshold is not None and v_math.threshold.category_override
    assert "fidelity.cga[category:math]" in v_math.reason and "critical -0.06" in v_math.reason
    assert v_chat.severity is Severity.PASS
    assert v_chat.threshold is not None and not v_chat.threshold.category_override
    assert v_math.key == "fidelity.cga[category:math]"


def test_pairing_follows_sample_ids_not_order(th: Thresholds) -> None:
    cand, base = _accuracy_pair(400, lost=40)
    assert base.samples is not None and base.sample_ids is not None
    perm = np.random.default_rng(3).permutation(400)
    shuffled = Measurement(
        base.name,
        base.value,
        tuple(base.samples[i] for i in perm),
        tuple(base.sample_ids[i] for i in perm),
    )
    (a,) = compare_measurements([cand], [base], th)
    (b,) = compare_measurements([cand], [shuffled], th)
    assert (a.p_value, a.severity, a.n) == (b.p_value, b.severity, b.n)
    # a baseline with only half of the items pairs those half
    half = Measurement(base.name, base.value, base.samples[:200], base.sample_ids[:200])
    (c,) = compare_measurements([cand], [half], th)
    assert c.n == 200 and "200 common items" in c.reason


def test_latency_relative_bounds_and_direction(th: Thresholds) -> None:
    rng = np.random.default_rng(5)
    base = _runs("latency.ttft_p50", 0.05 * rng.lognormal(0, 0.05, 20))
    slow = _runs("latency.ttft_p50", 0.065 * rng.lognormal(0, 0.05, 20))
    fast = _runs("latency.ttft_p50", 0.035 * rng.lognormal(0, 0.05, 20))
    (v,) = compare_measurements([slow], [base], th)
    assert v.severity is Severity.CRITICAL
    assert v.relative_delta == pytest.approx(slow.value / base.value - 1)
    assert v.test == "Mann-Whitney U for +5.0%" and "n=20/20" in v.reason
    assert "past critical +10.0%" in v.reason
    # critical needs the runs to show more than the warn bound: baseline runs made 5 % slower
    assert base.samples is not None
    assert v.p_value == pytest.approx(
        sps.mannwhitneyu(
            slow.samples, np.asarray(base.samples) * 1.05, alternative="greater"
        ).pvalue
    )
    (ok,) = compare_measurements([fast], [base], th)
    assert ok.severity is Severity.PASS


def test_latency_critical_needs_runs_past_the_warn_bound(th: Thresholds) -> None:
    """Median past +10 % but the runs only show "slower", not "more than 5 % slower": warn."""
    rng = np.random.default_rng(5)
    base = _runs("latency.e2e_p50", 0.05 * rng.lognormal(0, 0.15, 30))
    noisy = _runs("latency.e2e_p50", 0.056 * rng.lognormal(0, 0.15, 30))
    assert base.samples is not None and noisy.samples is not None
    b = np.asarray(base.samples)
    assert noisy.value / base.value - 1 > 0.10  # the point value is past critical
    p_any = sps.mannwhitneyu(noisy.samples, b, alternative="greater").pvalue
    p_past_warn = sps.mannwhitneyu(noisy.samples, b * 1.05, alternative="greater").pvalue
    assert p_any < th.alpha <= p_past_warn
    (v,) = compare_measurements([noisy], [base], th)
    assert v.severity is Severity.WARN, v.reason
    assert v.p_value == pytest.approx(p_any) and "shown only past warn" in v.reason
    # the same shift with 1 % noise is shown past +10 %: critical
    tight = _runs("latency.e2e_p50", 0.056 * rng.lognormal(0, 0.01, 30))
    (w,) = compare_measurements(
        [tight], [_runs("latency.e2e_p50", 0.05 * rng.lognormal(0, 0.01, 30))], th
    )
    assert w.severity is Severity.CRITICAL, w.reason


def test_in_session_runs_are_compared_pair_by_pair(th: Thresholds) -> None:
    """Alternated runs on a machine whose speed swings 3x: the per-pair ratios decide."""
    rng = np.random.default_rng(12)
    machine = np.exp(rng.uniform(0.0, np.log(3.0), 20))  # the runner's slowness per pair
    base_runs = 0.05 * machine * rng.lognormal(0, 0.01, 20)
    same = 0.05 * machine * rng.lognormal(0, 0.01, 20)
    slow = 0.065 * machine * rng.lognormal(0, 0.01, 20)

    def paired(cand: np.ndarray) -> Measurement:
        ref = {
            "against": "fp16",
            "value": float(np.median(base_runs)),
            "samples": [float(x) for x in base_runs],
        }
        m = _runs("latency.e2e_p50", cand)
        return Measurement(m.name, m.value, m.samples, details={"paired_reference": ref})

    stored = _runs("latency.e2e_p50", np.full(20, 0.01))  # another machine state entirely
    (ok,) = compare_measurements([paired(same)], [stored], th, against="fp16")
    assert ok.severity is Severity.PASS and ok.test == "Wilcoxon signed-rank (pairs)", ok.reason
    (bad,) = compare_measurements([paired(slow)], [stored], th, against="fp16")
    assert bad.severity is Severity.CRITICAL, bad.reason
    assert bad.test == "Wilcoxon signed-rank (pairs) for +5.0%"
    shifted = np.log(slow / base_runs) - np.log(1.05)
    assert bad.p_value == pytest.approx(sps.wilcoxon(shifted, alternative="greater").pvalue)
    # unpaired, the 3x swings drown the 30 % slowdown
    assert sps.mannwhitneyu(slow, base_runs * 1.05, alternative="greater").pvalue > th.alpha


def test_point_metric_judged_on_value(th: Thresholds) -> None:
    base = Measurement("latency.param_bytes", 1.0e9)
    (v,) = compare_measurements([Measurement("latency.param_bytes", 1.05e9)], [base], th)
    assert v.severity is Severity.CRITICAL and "point metric" in v.reason
    (w,) = compare_measurements([Measurement("latency.param_bytes", 1.015e9)], [base], th)
    assert w.severity is Severity.WARN


def test_flips_against_the_baselines_own_zeros(th: Thresholds) -> None:
    flips = np.zeros(200, dtype=int)
    flips[:30] = 1  # 15 % of answers changed; critical is 10 %
    (v,) = compare_measurements(
        [_binary("accuracy.flips", flips)], [_binary("accuracy.flips", np.zeros(200, int))], th
    )
    assert v.severity is Severity.CRITICAL and v.p_value == pytest.approx(0.5**30)


def test_compare_many_labels_each_ref(th: Thresholds) -> None:
    cand, base = _accuracy_pair(400, lost=40)
    prod, _ = _accuracy_pair(400, lost=38)  # an earlier build, 2 questions better
    verdicts = compare_many([cand], {"fp16": [base], "prod": [prod]}, th)
    assert [(v.against, v.severity) for v in verdicts] == [
        ("fp16", Severity.CRITICAL),
        ("prod", Severity.PASS),
    ]
    assert compare_measurements([cand], {"accuracy.mcq_acc": base}, th) == compare_measurements(
        [cand], [base], th
    )


def test_bad_inputs_are_data_errors(th: Thresholds) -> None:
    with pytest.raises(DataError, match="unknown metric") as info:
        compare_measurements([Measurement("accuracy.mcq_ac", 0.5)], [], th)
    assert "did you mean 'accuracy.mcq_acc'" in (info.value.hint or "")
    with pytest.raises(DataError, match="non-finite"):
        compare_measurements([Measurement("accuracy.mcq_acc", math.nan)], [], th)
    with pytest.raises(DataError, match="non-finite"):
        compare_measurements([], [Measurement("accuracy.mcq_acc", 0.5, (0.5, math.inf))], th)
    twice = Measurement("accuracy.mcq_acc", 0.5)
    with pytest.raises(DataError, match="twice"):
        compare_measurements([twice, twice], [], th)
    bad = from_samples("accuracy.mcq_acc", [0.5, 1.0], ["a", "b"])
    with pytest.raises(DataError, match="0 or 1"):
        compare_measurements([bad], [bad], th)


def test_relative_mode_at_zero_reference() -> None:
    spec = MetricSpec("x.err", "", False, SampleKind.POINT, "errors", ideal=0.0)
    th = parse_thresholds(
        {"metrics": {"x.err": {"mode": "relative", "warn": 0.1}}},
        source="inline",
        specs={"x.err": spec},
    )
    (v,) = compare_measurements([Measurement("x.err", 0.5)], [], th, specs={"x.err": spec})
    assert v.severity is Severity.CRITICAL and "undefined at reference 0" in v.reason
    (ok,) = compare_measurements([Measurement("x.err", 0.0)], [], th, specs={"x.err": spec})
    assert ok.severity is Severity.PASS


# ------------------------------------------------------------------ typed decisions


def _decide(cand: Measurement, base: Measurement | None, th: Thresholds) -> Decision:
    spec = all_metrics()[cand.name]
    return judge_metric(cand, base, spec, th.for_metric(cand.name), th)


def test_decisions_name_their_basis_and_the_deciding_test(th: Thresholds) -> None:
    cand, base = _accuracy_pair(400, lost=40)
    supported = _decide(cand, base, th)
    assert (supported.basis, supported.point, supported.severity) == (
        Basis.SUPPORTED,
        Severity.CRITICAL,
        Severity.CRITICAL,
    )
    assert supported.evidence is not None and supported.evidence.method is Method.MCNEMAR
    assert supported.evidence.discordant == (40, 0)
    assert supported.reference is not None and supported.reference.kind == "baseline"
    assert supported.threshold == VerdictThreshold(
        Bound(warn=0.02, critical=0.04), alpha=th.alpha, min_samples=th.min_samples
    )

    cand, base = _accuracy_pair(200, lost=15, gained=5)
    weak = _decide(cand, base, th)
    assert (weak.basis, weak.point, weak.severity) == (
        Basis.NOT_SIGNIFICANT,
        Severity.CRITICAL,
        Severity.PASS,
    )

    cand, base = _accuracy_pair(5, lost=1)
    few = _decide(cand, base, th)
    assert (few.basis, few.severity, few.n) == (Basis.FEW_SAMPLES, Severity.CRITICAL, 5)

    point = _decide(
        Measurement("latency.param_bytes", 1.05e9), Measurement("latency.param_bytes", 1e9), th
    )
    assert (point.basis, point.severity, point.untested) == (
        Basis.POINT_VALUE,
        Severity.CRITICAL,
        "point metric",
    )
    assert point.evidence is None

    alone = _decide(_accuracy_pair(100, lost=50)[0], None, th)
    assert (alone.basis, alone.reference, alone.delta) == (Basis.NO_REFERENCE, None, None)

    ungated = _decide(Measurement("fidelity.kl_max", 9.0), None, th)
    assert (ungated.basis, ungated.threshold, ungated.delta) == (Basis.NOT_GATED, None, 9.0)
    assert ungated.reference is not None and ungated.reference.kind == "ideal"


def test_repeated_decisions_record_the_margin_that_decided(th: Thresholds) -> None:
    """The noisy and the tight run sets of the warn-bound test above, as decisions."""
    rng = np.random.default_rng(5)
    base = _runs("latency.e2e_p50", 0.05 * rng.lognormal(0, 0.15, 30))
    noisy = _runs("latency.e2e_p50", 0.056 * rng.lognormal(0, 0.15, 30))
    warn_only = _decide(noisy, base, th)
    assert (warn_only.basis, warn_only.point, warn_only.severity) == (
        Basis.WARN_ONLY,
        Severity.CRITICAL,
        Severity.WARN,
    )
    assert warn_only.evidence is not None and warn_only.evidence.margin == 0.0
    assert warn_only.evidence.method is Method.MANN_WHITNEY
    assert warn_only.evidence.runs == (30, 30)
    tight = _runs("latency.e2e_p50", 0.056 * rng.lognormal(0, 0.01, 30))
    critical = _decide(tight, _runs("latency.e2e_p50", 0.05 * rng.lognormal(0, 0.01, 30)), th)
    assert (critical.basis, critical.severity) == (Basis.SUPPORTED, Severity.CRITICAL)
    bound = th.metrics["latency.e2e_p50"].bound
    assert critical.evidence is not None and critical.evidence.margin == bound.warn
    (v,) = compare_measurements(
        [tight], [_runs("latency.e2e_p50", 0.05 * rng.lognormal(0, 0.01, 30))], th
    )
    assert v.test == f"Mann-Whitney U for +{bound.warn:.1%}"


def test_describe_words_a_decision_without_comparing() -> None:
    threshold = VerdictThreshold(Bound(warn=0.02, critical=0.04), alpha=0.01, min_samples=20)
    evidence = Evidence(
        method=Method.MCNEMAR,
        p_worse=0.3,
        ci=(-0.1, 0.02),
        n=150,
        pairing=Pairing.COMMON_IDS,
        discordant=(9, 4),
    )
    decision = Decision(
        metric="accuracy.mcq_acc",
        slice="category:law",
        value=0.7,
        higher_is_better=True,
        reference=Reference(0.75, None, "baseline"),
        threshold=threshold,
        point=Severity.CRITICAL,
        severity=Severity.PASS,
        basis=Basis.NOT_SIGNIFICANT,
        evidence=evidence,
        n=150,
    )
    assert describe(decision) == (
        "accuracy.mcq_acc[category:law] 0.7 vs 0.75: -0.05 past critical -0.04 but not "
        "significant (McNemar exact p=0.3, n=150, b=9, c=4, 150 common items >= alpha 0.01)"
    )
    in_session = Decision(
        metric="latency.e2e_p50",
        slice=None,
        value=0.12,
        higher_is_better=False,
        reference=Reference(0.1, None, "in-session"),
        threshold=VerdictThreshold(Bound(0.1, 0.2, "relative"), alpha=0.01, min_samples=10),
        point=Severity.WARN,
        severity=Severity.WARN,
        basis=Basis.SUPPORTED,
        evidence=Evidence(Method.WILCOXON_PAIRS, 0.001, (0.01, 0.03), 12, runs=(12, 12)),
        n=12,
    )
    assert describe(in_session) == (
        "latency.e2e_p50 0.12 vs 0.1 (in-session baseline): +20.0% past warn +10.0% "
        "(Wilcoxon signed-rank (pairs) p=0.001, n=12/12)"
    )


@pytest.mark.slow
def test_verdicts_on_a_real_tiny_model(tiny_model_dir: Path, th: Thresholds) -> None:
    """Per-prompt greedy agreement of a damaged copy of a real model, computed by hand.

    The baseline is the tiny Llama; candidate A is the same weights (must PASS),
    candidate B has every linear weight rounded to the grid max|w|/2 (five
    levels, a crude 2-bit-like quantizer; must be CRITICAL against the ideal 1.0).
    """
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    prompts = torch.randint(10, base.config.vocab_size, (24, 16))

    def agreement(model: torch.nn.Module) -> list[float]:
        with torch.no_grad():
            ref = base(prompts).logits.argmax(-1)
            got = model(prompts).logits.argmax(-1)
        return (ref == got).float().mean(dim=1).tolist()

    same = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    damaged = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    with torch.no_grad():
        for module in damaged.modules():
            if isinstance(module, torch.nn.Linear):
                w = module.weight
                step = w.abs().max() / 2
                w.copy_(torch.round(w / step) * step)
    ids = _ids(24)
    ok, bad = compare_measurements(
        [from_samples("fidelity.cga", agreement(same), ids)],
        [],
        th,
    ) + compare_measurements([from_samples("fidelity.cga", agreement(damaged), ids)], [], th)
    assert ok.severity is Severity.PASS and ok.value == 1.0
    assert bad.value < 0.85, bad.reason
    assert bad.severity is Severity.CRITICAL, bad.reason


def test_perplexity_ci_is_in_perplexity_units(th: Thresholds) -> None:
    """Samples are per-window mean NLL; the CI of delta is mapped to ppl: r (e^x - 1)."""
    rng = np.random.default_rng(21)
    nll = rng.uniform(2.0, 3.0, 64)
    base_samples = nll + rng.normal(0.0, 0.05, 64)
    cand_samples = nll + rng.normal(0.0, 0.05, 64) + np.log(1.08)
    ids = _ids(64)
    base = from_samples("accuracy.perplexity", list(base_samples), ids)
    cand = from_samples("accuracy.perplexity", list(cand_samples), ids)
    base = Measurement(base.name, float(np.exp(base_samples.mean())), base.samples, ids)
    cand = Measurement(cand.name, float(np.exp(cand_samples.mean())), cand.samples, ids)
    (v,) = compare_measurements([cand], [base], th)
    assert v.ci is not None and v.delta is not None
    assert v.ci[0] < v.delta < v.ci[1]  # same units as the +8 % perplexity delta
    diff = cand_samples - base_samples
    lo, hi = np.percentile(
        [
            rng2.choice(diff, diff.size).mean()
            for rng2 in [np.random.default_rng(s) for s in range(2000)]
        ],
        [2.5, 97.5],
    )
    # an independent bootstrap of the NLL difference, mapped by hand, agrees to resampling error
    assert v.ci[0] == pytest.approx(base.value * math.expm1(lo), rel=0.15)
    assert v.ci[1] == pytest.approx(base.value * math.expm1(hi), rel=0.15)

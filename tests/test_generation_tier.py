"""The generation tier on the demo model against its committed reference pack.

Every metric is recomputed here from the answers themselves (lengths counted,
tokens compared, bigrams counted, loops found by brute force), and gated with
the packaged thresholds: the control must pass with every metric at the
baseline's value, two dropped layers must be blocked by a generation finding
(its answers stop early and come out short). The two-sided judgement of the
length ratio and the stop rate is checked on hand-made measurements.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from gate.gating.compare import compare_measurements
from gate.gating.stats import mcnemar
from gate.gating.thresholds import load_thresholds, packaged_thresholds_path
from gate.gating.verdict import Severity
from gate.measurement import Measurement, MeasurementDetail
from gate.metrics.catalog import generation as catalog
from gate.metrics.catalog.generation import GenerationDetail
from gate.metrics.generation import LoopRule
from gate.models.backends.hf import HFBackend
from gate.models.backends.loading import load_backend, load_candidate
from gate.models.model_spec import ModelSpec
from gate.store.reference import ReferencePack, load_pack
from gate.tiers import generation as tier

PACK = (
    Path(__file__).parents[1]
    / "gate"
    / "assets"
    / "baselines"
    / "demo"
    / "0001-fp32.reference.safetensors"
)
#: Prompts of the committed pack answered per build (of 96): enough for McNemar at alpha 0.01.
LIMIT = 32
#: The pack's batch size (its baseline's ``[tiers.fidelity] batch_size``).
BATCH = 16


@pytest.fixture(scope="module")
def pack() -> ReferencePack:
    return load_pack(PACK)


def _brute_loop(tokens: list[int], rule: LoopRule) -> bool:
    n = len(tokens)
    for p in range(1, rule.max_period + 1):
        for length in range(max(rule.repeats * p, rule.min_tokens), n + 1):
            tail = tokens[n - length :]
            if all(tail[i] == tail[i % p] for i in range(length)):
                return True
    return False


def _by_name(measurements: list[Measurement]) -> dict[str, Measurement]:
    return {m.name: m for m in measurements}


def _check_against_answers(
    got: dict[str, Measurement], pack: ReferencePack, answers: list[list[int]]
) -> None:
    """Each metric recomputed from the candidate's answers and the pack's."""
    cap = pack.max_new_tokens
    rule = tier.GenerationSettings().loop_rule
    base = [pack.output_ids(j).tolist() for j in range(LIMIT)]
    assert all(not p.truncated for p in pack.prompts[:LIMIT])  # the demo pack cut nothing
    stops = [float(len(a) < cap) for a in answers]
    assert got[catalog.STOP_RATE].samples == pytest.approx(stops)
    ratios = [len(a) / len(b) for a, b in zip(answers, base, strict=True)]
    geo = math.prod(ratios) ** (1 / len(ratios))
    assert got[catalog.LENGTH_RATIO].value == pytest.approx(geo)
    exact = [float(a == b) for a, b in zip(answers, base, strict=True)]
    assert got[catalog.EXACT_MATCH].samples == pytest.approx(exact)
    horizon = tier.GenerationSettings().divergence_horizon
    firsts = []
    for a, b in zip(answers, base, strict=True):
        d = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
        firsts.append(float(min(len(a), len(b), horizon) if d is None else min(d, horizon)))
    assert got[catalog.DIVERGENCE_POSITION].samples == pytest.approx(firsts)
    loops = [float(_brute_loop(a, rule)) for a in answers]
    assert got[catalog.LOOP_RATE].samples == pytest.approx(loops)
    d2 = [len({f"{a[i]} {a[i + 1]}" for i in range(len(a) - 1)}) / (len(a) - 1) for a in answers]
    assert got[catalog.DISTINCT_2].samples == pytest.approx(d2)
    # the baseline's side is the pack's answers through the same definitions
    reference = got[catalog.STOP_RATE].details[MeasurementDetail.PAIRED_REFERENCE]
    assert reference["samples"] == pytest.approx([float(len(b) < cap) for b in base])


def _verdicts(measurements: list[Measurement]) -> dict[str, Severity]:
    thresholds = load_thresholds(packaged_thresholds_path())
    verdicts = compare_measurements(measurements, {}, thresholds, against="fp32")
    return {v.metric: v.severity for v in verdicts if v.slice is None}


def test_batched_answers_equal_one_at_a_time(demo_backend: HFBackend, pack: ReferencePack) -> None:
    """Batched, left-padded greedy answers equal each prompt's alone and the pack's own
    (recorded in batches of 16)."""
    picked = list(range(0, len(pack), 12))  # prompts of every length tier, padded together
    prompts = [pack.prompt_ids(j).tolist() for j in picked]
    assert len({len(p) for p in prompts}) > 1
    batched = demo_backend.generate(prompts, max_new_tokens=16, batch_size=len(prompts))
    singles = [demo_backend.generate([p], max_new_tokens=16, batch_size=1)[0] for p in prompts]
    assert batched == singles
    # greedy: the answer at cap 16 is the first 16 tokens of the pack's answer at its cap
    assert batched == [pack.output_ids(j).tolist()[:16] for j in picked]


@pytest.mark.slow
def test_the_control_reproduces_the_pack_and_passes(
    demo_backend: HFBackend, pack: ReferencePack
) -> None:
    stored = tier.stored_answers(pack, LIMIT)
    answers = tier.answer(demo_backend, pack, stored, BATCH)
    assert answers == [pack.output_ids(j).tolist() for j in range(LIMIT)]
    got = tier.measure_answers(
        demo_backend, pack, stored, answers, tier.GenerationSettings(), against="fp32"
    )
    by_name = _by_name(got)
    _check_against_answers(by_name, pack, answers)
    for m in got:
        reference = m.details[MeasurementDetail.PAIRED_REFERENCE]
        assert list(m.samples or ()) == pytest.approx(reference["samples"]), m.name
    assert by_name[catalog.EXACT_MATCH].details[GenerationDetail.EXAMPLES] == []
    assert set(_verdicts(got).values()) == {Severity.PASS}
    # the baseline's own measurements (record mode) are the same values, from the pack alone
    own = _by_name(tier.record(pack, tier.GenerationSettings(), limit=LIMIT))
    for name, m in by_name.items():
        assert own[name].value == pytest.approx(m.value), name


@pytest.mark.slow
def test_two_dropped_layers_are_blocked_by_short_answers(pack: ReferencePack) -> None:
    build = load_backend(ModelSpec.parse("demo", device="cpu"), "drop-layers:2")
    stored = tier.stored_answers(pack, LIMIT)
    answers = tier.answer(build, pack, stored, BATCH)
    got = tier.measure_answers(
        build, pack, stored, answers, tier.GenerationSettings(), against="fp32"
    )
    by_name = _by_name(got)
    _check_against_answers(by_name, pack, answers)
    severities = _verdicts(got)
    assert severities[catalog.STOP_RATE] is Severity.CRITICAL
    assert severities[catalog.LENGTH_RATIO] is Severity.CRITICAL
    assert by_name[catalog.LENGTH_RATIO].value < 1.0  # truncation: judged the way it moved
    # McNemar on the stop outcomes, by hand: discordant prompts, doubled (two-sided)
    cand = [len(a) < pack.max_new_tokens for a in answers]
    base = [len(s.tokens) < pack.max_new_tokens for s in stored]
    one_sided = mcnemar(cand, base, higher_is_better=False).p_worse
    verdict = next(
        v
        for v in compare_measurements(
            got, {}, load_thresholds(packaged_thresholds_path()), against="fp32"
        )
        if v.metric == catalog.STOP_RATE and v.slice is None
    )
    assert verdict.p_value == pytest.approx(min(1.0, 2 * one_sided))
    examples = by_name[catalog.EXACT_MATCH].details[GenerationDetail.EXAMPLES]
    assert examples and examples[0]["position"] == 0
    json.dumps(examples)  # they travel in the results JSON


@pytest.mark.slow
def test_speculative_and_stacked_builds_answer_through_their_own_paths(
    pack: ReferencePack,
) -> None:
    """A speculative build answers by assisted generation, losslessly: the pack's answers,
    its drafter counted; a stack's attention part acts on every generated step."""
    from gate.models.backends.capabilities import activity_of

    stored = tier.stored_answers(pack, 16)
    spec = load_candidate(ModelSpec.parse("demo", device="cpu"), "spec-ngram:3")
    answers = tier.answer(spec, pack, stored, BATCH)
    assert answers == [pack.output_ids(j).tolist() for j in range(16)]
    stack = load_candidate(ModelSpec.parse("demo", device="cpu"), "quanto-int4+attn-fp8")
    activity = activity_of(stack)
    assert activity is not None
    before = activity.reading()
    answers = tier.answer(stack, pack, stored, BATCH)
    exercise = activity.since(before)
    attention = next(part for part in exercise.parts if part.recipe == "attn-fp8")
    # one replaced attention call per layer per decoding step, at least
    assert attention.acted >= 2 * max(len(a) for a in answers)
    got = _by_name(tier.measure_answers(stack, pack, stored, answers, tier.GenerationSettings()))
    base = [pack.output_ids(j).tolist() for j in range(16)]
    exact = [float(a == b) for a, b in zip(answers, base, strict=True)]
    assert got[catalog.EXACT_MATCH].samples == pytest.approx(exact)


def _ratio(name: str, logs: list[float], reference: list[float]) -> Measurement:
    value = math.exp(sum(logs) / len(logs))
    details = {
        MeasurementDetail.PAIRED_REFERENCE: {
            "against": "fp32",
            "value": math.exp(sum(reference) / len(reference)),
            "samples": reference,
        }
    }
    ids = tuple(f"p{i}" for i in range(len(logs)))
    return Measurement(name, value, tuple(logs), ids, details=details)


@pytest.mark.parametrize("factor", [0.5, 2.0])
def test_the_length_ratio_blocks_either_way(factor: float) -> None:
    logs = [math.log(factor)] * 24
    severities = _verdicts([_ratio(catalog.LENGTH_RATIO, logs, [0.0] * 24)])
    assert severities[catalog.LENGTH_RATIO] is Severity.CRITICAL


def test_a_length_ratio_within_the_bounds_passes() -> None:
    logs = [math.log(1.05), math.log(0.95)] * 12  # noise both ways, geometric mean 1
    severities = _verdicts([_ratio(catalog.LENGTH_RATIO, logs, [0.0] * 24)])
    assert severities[catalog.LENGTH_RATIO] is Severity.PASS


def test_smollm2s_panel_gates_the_tier_on_the_pack_its_baseline_records() -> None:
    """`gate demo --model smollm2` gates the tier by default, from the fidelity pack its
    baseline records: the baseline (and its store, named after its settings) stays as it was."""
    from dataclasses import replace

    from gate.session.runner import check_tiers_fit
    from gate.workflows.demo import demo_model, store_dir

    model = demo_model("smollm2")
    assert tier.TIER in model.tiers and tier.TIER not in model.baseline_tiers
    assert "fidelity" in model.baseline_tiers
    without = replace(model, tiers=tuple(t for t in model.tiers if t != tier.TIER))
    assert store_dir(model) == store_dir(without)
    for recipe in model.recipes:
        check_tiers_fit(model.tiers, recipe)

"""Speculative decoding gated on SmolLM2-135M-Instruct, the real model (in process).

One load of SmolLM2 serves every test (the module fixture): the target as
loaded, and self-drafts made from copies of it, as the loader makes them for an
untouched target: a good one (``spec-draft:prune-magnitude:0.3``, acceptance
length about 1.9) and a poor one (``spec-draft:prune-magnitude:0.7``, about 1).
Both keep dense float weights, so the module stays quick on a CPU; the quantized
self-drafts of the issue (``quanto-int4`` passes, ``quanto-int2`` is blocked) are
gated through the CLI in docs/speculative.md and by ``gate demo --model smollm2
--panel speculative``, where optimum-quanto's CPU kernels cost 0.2 s a token.

* the verification steps gate counts (from transformers' assisted generation)
  equal those of an independent greedy speculative loop written here with full
  forward passes and no cache;
* the good self-draft against a baseline recorded with it passes (lossless,
  the same acceptance length); the poor self-draft is blocked on
  ``speculative.acceptance_length`` with its tokens still lossless;
* a build whose verification step accepts the draft unchecked (a test fixture:
  a forward hook that makes the target agree with every draft token) is
  blocked on ``speculative.confident_divergences``.

The tier runs small here (3 prompts of 12 tokens, no speed-up: tests/test_stack_cli.py
times one) so the suite keeps its time; the defaults are in docs/speculative.md.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
import torch

from gate.gating.thresholds import load_thresholds, packaged_thresholds_path
from gate.gating.verdict import Severity
from gate.measurement import Measurement
from gate.metrics.catalog import speculative as catalog
from gate.models.backends.hf import HFBackend
from gate.models.backends.loading import copy_with_recipe, load_backend
from gate.models.backends.speculative import DRAFT_TOKENS, SpeculativeBackend, open_drafter
from gate.models.model_spec import ModelSpec
from gate.models.recipes import Recipe
from gate.tiers.speculative import SpeculativeSettings, measure
from tests.gguf_support import smollm2_file

pytestmark = [pytest.mark.realmodel, pytest.mark.slow]

SMALL = SpeculativeSettings(limit=3, max_new_tokens=12, speed_prompts=0)


@dataclass(frozen=True)
class Builds:
    target: HFBackend
    #: A self-draft the target mostly agrees with (30 % of its weights pruned).
    good: SpeculativeBackend
    #: A self-draft the target rejects (70 % pruned).
    poor: SpeculativeBackend


def _speculative(target: HFBackend, draft: str) -> SpeculativeBackend:
    spec = target.spec
    recipe = Recipe.parse(f"spec-draft:{draft}")

    def copied(draft_spec: ModelSpec, draft_recipe: Recipe | None) -> HFBackend:
        assert draft_recipe is not None
        return copy_with_recipe(target, draft_recipe)

    return SpeculativeBackend(target, open_drafter(recipe, spec, target, copied))


@pytest.fixture(scope="module")
def builds() -> Builds:
    smollm2_file()
    target = load_backend(ModelSpec.parse("smollm2"), None)
    return Builds(
        target,
        _speculative(target, "prune-magnitude:0.3"),
        _speculative(target, "prune-magnitude:0.7"),
    )


def _greedy(model: Any, ids: Sequence[int]) -> list[int]:
    """The arg-max at every position of one full forward pass (no cache)."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([list(ids)])).logits[0]
    return [int(t) for t in logits.argmax(dim=-1)]


def _reference_loop(
    target: Any, draft: Any, prompt: Sequence[int], new: int, eos: Sequence[int]
) -> tuple[list[int], list[tuple[int, int]]]:
    """Greedy speculative decoding written from its definition: the draft proposes up to
    ``DRAFT_TOKENS`` tokens greedily (stopping after an end-of-sequence token), the target
    keeps the longest prefix equal to its own arg-max and adds its next token;
    ``(proposed, accepted)`` per step."""
    text = list(prompt)
    out: list[int] = []
    steps: list[tuple[int, int]] = []
    while len(out) < new:
        k = min(DRAFT_TOKENS, new - len(out) - 1)
        proposal: list[int] = []
        for _ in range(k):
            proposal.append(_greedy(draft, text + proposal)[-1])
            if proposal[-1] in eos:
                break
        choices = _greedy(target, text + proposal)[len(text) - 1 :]
        accepted = 0
        while accepted < len(proposal) and proposal[accepted] == choices[accepted]:
            accepted += 1
        kept = [*proposal[:accepted], choices[accepted]]
        for i, token in enumerate(kept):
            if token in eos:
                kept = kept[: i + 1]
                accepted = min(accepted, i)
                break
        steps.append((len(proposal), accepted))
        out += kept
        text += kept
        if out[-1] in eos:
            break
    return out, steps


def test_counted_steps_equal_an_independent_speculative_loop(builds: Builds) -> None:
    backend = builds.good
    for text in ("What is 17 + 25?", "Name three colours of the rainbow."):
        prompt = backend.encode_prompt(text)
        trace = backend.speculate(prompt, max_new_tokens=16)
        tokens, steps = _reference_loop(
            builds.target.model, backend.drafter.model, prompt, 16, backend.eos_ids
        )
        assert list(trace.tokens) == tokens
        assert [(s.proposed, s.accepted) for s in trace.steps] == steps


def _verdicts(candidate: list[Measurement], baseline: list[Measurement]) -> dict[str, Any]:
    from gate.gating.compare import compare_measurements

    verdicts = compare_measurements(
        candidate, baseline, load_thresholds(packaged_thresholds_path())
    )
    return {v.metric: v for v in verdicts if v.slice is None}


@pytest.fixture(scope="module")
def baseline_good(builds: Builds) -> list[Measurement]:
    return measure(builds.good, SMALL)


def _value(measurements: list[Measurement], name: str) -> float:
    return next(m.value for m in measurements if m.name == name)


def test_the_same_self_draft_passes(builds: Builds, baseline_good: list[Measurement]) -> None:
    again = measure(builds.good, SMALL)
    verdicts = _verdicts(again, baseline_good)
    assert _value(again, catalog.LOSSLESS) == 1.0
    assert _value(again, catalog.ACCEPTANCE_LENGTH) == _value(
        baseline_good, catalog.ACCEPTANCE_LENGTH
    )
    assert _value(again, catalog.ACCEPTANCE_LENGTH) > 1.2
    assert all(v.severity is not Severity.CRITICAL for v in verdicts.values()), verdicts


def test_a_poor_self_draft_is_blocked_on_acceptance_and_stays_lossless(
    builds: Builds, baseline_good: list[Measurement]
) -> None:
    poor = measure(builds.poor, SMALL)
    verdicts = _verdicts(poor, baseline_good)
    assert verdicts[catalog.ACCEPTANCE_LENGTH].severity is Severity.CRITICAL
    assert _value(poor, catalog.ACCEPTANCE_LENGTH) < _value(
        baseline_good, catalog.ACCEPTANCE_LENGTH
    )
    assert verdicts[catalog.CONFIDENT_DIVERGENCES].severity is not Severity.CRITICAL
    assert _value(poor, catalog.CONFIDENT_DIVERGENCES) == 0.0


@pytest.fixture
def rubber_stamp(builds: Builds) -> Iterator[None]:
    """The target's verification broken on purpose: in every pass over several new tokens
    after the prompt, each position's arg-max is forced to the next input token (the draft's
    proposal), so every draft token is accepted."""

    def agree(module: Any, args: Any, kwargs: dict[str, Any], output: Any) -> Any:
        ids = kwargs.get("input_ids")
        past = kwargs.get("past_key_values")
        if ids is None or ids.shape[1] < 2 or past is None or past.get_seq_length() == 0:
            return output
        logits = output.logits.clone()
        length, rows = ids.shape[1], logits.shape[1]  # the rows are the last positions'
        for row in range(rows):
            following = length - rows + row + 1
            if following < length:
                logits[0, row, ids[0, following]] = logits[0, row].max() + 50.0
        output.logits = logits
        return output

    handle = builds.target.model.register_forward_hook(agree, with_kwargs=True)
    try:
        yield
    finally:
        handle.remove()


def test_a_verification_that_accepts_the_draft_unchecked_is_blocked(
    builds: Builds, baseline_good: list[Measurement], rubber_stamp: None
) -> None:
    broken = measure(builds.poor, SMALL)
    verdicts = _verdicts(broken, baseline_good)
    counted = next(m for m in broken if m.name == catalog.CONFIDENT_DIVERGENCES)
    assert counted.value >= 1.0, counted.details
    assert verdicts[catalog.CONFIDENT_DIVERGENCES].severity is Severity.CRITICAL
    for found in counted.details["divergences"]:
        assert found["margin"] > counted.details["noise"]

"""The speculative tier's maths (gate.metrics.speculative) against hand computations."""

from __future__ import annotations

import pytest

from gate.metrics.speculative import (
    SpeculativeTrace,
    VerificationStep,
    acceptance_length,
    acceptance_rate,
    divergence,
    first_difference,
    position_rates,
)


def _trace(*steps: tuple[int, int]) -> SpeculativeTrace:
    tokens = sum(a + 1 for _, a in steps)
    return SpeculativeTrace(tuple(range(tokens)), tuple(VerificationStep(k, a) for k, a in steps))


def test_acceptance_length_is_tokens_per_verification_step() -> None:
    # 3 steps emitting 4 + 1 + 3 tokens: L = 8 / 3
    trace = _trace((4, 3), (4, 0), (4, 2))
    assert len(trace.tokens) == 8
    assert acceptance_length(trace) == pytest.approx(8 / 3)
    assert acceptance_rate(trace) == pytest.approx(5 / 12)


def test_a_drafter_never_right_gives_one_and_always_right_gives_k_plus_one() -> None:
    assert acceptance_length(_trace((4, 0), (4, 0))) == 1.0
    assert acceptance_length(_trace((4, 4), (4, 4))) == 5.0


def test_rates_per_draft_position_count_only_steps_that_reached_it() -> None:
    # position 1: reached by 3 steps, accepted in 2; position 3: reached by 2 (k=4, k=3),
    # accepted in 1; position 4: reached by 1 (k=4), accepted in 0
    traces = [_trace((4, 2), (3, 3)), _trace((2, 0))]
    assert position_rates(traces) == pytest.approx([2 / 3, 2 / 3, 1 / 2, 0.0])


def test_a_step_without_a_proposal_counts_as_one_token() -> None:
    trace = _trace((0, 0), (3, 3))  # n-gram lookup found nothing, then a full hit
    assert acceptance_length(trace) == pytest.approx((1 + 4) / 2)
    assert acceptance_rate(_trace((0, 0))) is None


def test_a_step_cannot_accept_more_than_it_proposed() -> None:
    with pytest.raises(ValueError, match="accepted 3 of 2"):
        VerificationStep(2, 3)
    with pytest.raises(ValueError, match="no acceptance length"):
        acceptance_length(SpeculativeTrace((), ()))


def test_first_difference() -> None:
    assert first_difference([1, 2, 3], [1, 2, 3]) is None
    assert first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert first_difference([1, 2, 3], [1, 2]) == 2  # ended early (an EOS) at position 2


def test_a_divergence_is_within_the_noise_only_below_it() -> None:
    margins = [3.0, 0.0004, 2.5]
    near = divergence("p", [1, 2, 3], [1, 9, 3], margins, noise=0.001)
    assert near is not None
    assert (near.position, near.plain_token, near.speculative_token) == (1, 2, 9)
    assert near.within_noise
    sure = divergence("p", [1, 2, 3], [1, 2, 7], margins, noise=0.001)
    assert sure is not None and not sure.within_noise and sure.margin == 2.5
    assert divergence("p", [1, 2, 3], [1, 2, 3], margins, noise=0.001) is None

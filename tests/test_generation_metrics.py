"""The generation tier's maths (gate.metrics.generation) against independent computations.

The loop detector is checked on hand-made texts (one word per token) and
against a brute force that tries every tail length and period; the other
functions against direct definitions.
"""

from __future__ import annotations

import math
import random

import pytest

from gate.metrics.generation import (
    LoopRule,
    distinct_2,
    divergence_position,
    exact_match,
    geometric_mean_ratio,
    is_loop,
    log_length_ratio,
    loop_span,
    periodic_tail,
    stopped,
)


def _tokens(text: str) -> list[int]:
    """One token per word, ids by first appearance (a tokenizer for hand-made texts)."""
    ids: dict[str, int] = {}
    return [ids.setdefault(word, len(ids)) for word in text.split()]


def _brute_loop(tokens: list[int], rule: LoopRule) -> bool:
    """Some tail of length L >= max(R p, M) is one span of period p <= P repeated (cut at L)."""
    n = len(tokens)
    for period in range(1, rule.max_period + 1):
        for length in range(max(rule.repeats * period, rule.min_tokens), n + 1):
            tail = tokens[n - length :]
            span = tail[:period]
            if all(tail[i] == span[i % period] for i in range(length)):
                return True
    return False


RULE = LoopRule(repeats=3, min_tokens=16, max_period=32)

LOOPING = [
    # a sentence repeated until the cap cut it mid-copy
    " ".join(["the cat sat on the mat ."] * 4) + " the cat",
    # one token over and over
    "answer : " + " ".join(["no"] * 20),
    # a list that degenerates into its last item
    "1 . apples 2 . pears " + " ".join(["3 . plums"] * 7),
]
NOT_LOOPING = [
    # ordinary prose: repeats words, never a span three times at the end
    "the model answers the question and then the model stops because the answer is complete",
    # a span repeated twice only (R = 3)
    "so we go to the park and play , so we go to the park and play , then home",
    # short repetition under M tokens
    "yes yes yes yes yes",
    # a loop that ended: the answer goes on after it
    " ".join(["la"] * 20) + " and then the song ended with a bow",
]


@pytest.mark.parametrize("text", LOOPING)
def test_hand_made_loops_are_loops(text: str) -> None:
    tokens = _tokens(text)
    assert is_loop(tokens, RULE)
    assert _brute_loop(tokens, RULE)


@pytest.mark.parametrize("text", NOT_LOOPING)
def test_hand_made_answers_without_a_loop_are_not(text: str) -> None:
    tokens = _tokens(text)
    assert not is_loop(tokens, RULE)
    assert not _brute_loop(tokens, RULE)


def test_the_loop_span_is_the_shortest_period_and_its_tail() -> None:
    tokens = _tokens("intro words here " + " ".join(["a b c d e f"] * 4))
    # period 6; the whole 24-token repetition plus nothing before it matches
    assert loop_span(tokens, RULE) == (6, 24)
    assert periodic_tail(tokens, 6) == 24
    assert periodic_tail(tokens, 5) == 0


def test_the_detector_agrees_with_brute_force_on_random_answers() -> None:
    rng = random.Random(7)
    rules = [LoopRule(3, 16, 32), LoopRule(2, 8, 4), LoopRule(4, 6, 10)]
    seen = {True: 0, False: 0}
    for trial in range(600):
        rule = rules[trial % len(rules)]
        vocab = rng.choice([2, 3, 5, 50])
        head = [rng.randrange(vocab) for _ in range(rng.randrange(0, 20))]
        span = [rng.randrange(vocab) for _ in range(rng.randrange(1, 12))]
        tail = (span * 12)[: rng.randrange(0, 60)]
        tokens = head + tail
        expected = _brute_loop(tokens, rule)
        assert is_loop(tokens, rule) == expected, (tokens, rule)
        seen[expected] += 1
    assert seen[True] > 50 and seen[False] > 50  # both outcomes exercised


def test_distinct_2_counts_distinct_bigrams() -> None:
    tokens = _tokens("a b a b a c")  # bigrams ab ba ab ba ac: 3 distinct of 5
    assert distinct_2(tokens) == pytest.approx(3 / 5)
    assert distinct_2([4]) == 1.0
    assert distinct_2([]) == 1.0
    rng = random.Random(3)
    for _ in range(100):
        ys = [rng.randrange(4) for _ in range(rng.randrange(2, 30))]
        text_bigrams = {f"{ys[i]}-{ys[i + 1]}" for i in range(len(ys) - 1)}
        assert distinct_2(ys) == pytest.approx(len(text_bigrams) / (len(ys) - 1))


def test_a_loop_lowers_distinct_2() -> None:
    prose = _tokens(NOT_LOOPING[0])
    loop = _tokens(LOOPING[0])
    assert distinct_2(prose) > 0.9
    assert distinct_2(loop) < 0.3


def test_divergence_position_is_the_first_difference_censored_at_the_shorter() -> None:
    assert divergence_position([1, 2, 3, 4], [1, 2, 9, 4]) == 2
    assert divergence_position([5], [6]) == 0
    assert divergence_position([1, 2, 3], [1, 2, 3]) == 3
    assert divergence_position([1, 2], [1, 2, 3]) == 2  # candidate stopped early
    assert divergence_position([1, 2, 3, 4], [1, 2]) == 2  # censored at the stored answer


def test_the_horizon_censors_the_divergence_position() -> None:
    assert divergence_position([1, 2, 3, 4], [1, 2, 9, 4], horizon=2) == 2
    assert divergence_position([1, 2, 3, 4], [1, 2, 9, 4], horizon=3) == 2
    assert divergence_position([1, 2, 3], [1, 2, 3], horizon=1) == 1
    # against brute force: the first difference within min(n_c, n'_b, H), else that length
    rng = random.Random(7)
    for _ in range(500):
        b = [rng.randrange(3) for _ in range(rng.randrange(1, 20))]
        c = [rng.randrange(3) for _ in range(rng.randrange(1, 20))]
        h = rng.randrange(1, 25)
        m = min(len(c), len(b), h)
        first = next((i for i in range(m) if c[i] != b[i]), m)
        assert divergence_position(c, b, horizon=h) == first
    with pytest.raises(ValueError, match="horizon"):
        divergence_position([1], [1], horizon=0)


def test_exact_match_needs_the_tokens_and_the_generated_length() -> None:
    assert exact_match([1, 2, 3], [1, 2, 3], 3)
    assert not exact_match([1, 2, 4], [1, 2, 3], 3)
    assert not exact_match([1, 2], [1, 2, 3], 3)
    # a stored answer cut at 2 of 4 generated tokens: the prefix and the length decide
    assert exact_match([1, 2, 7, 8], [1, 2], 4)
    assert not exact_match([1, 2, 7], [1, 2], 4)


def test_stopped_means_under_the_cap() -> None:
    assert stopped(3, 64)
    assert not stopped(64, 64)
    with pytest.raises(ValueError):
        stopped(65, 64)


def test_length_ratio_is_a_geometric_mean() -> None:
    logs = [log_length_ratio(10, 20), log_length_ratio(40, 20)]  # halved and doubled
    assert geometric_mean_ratio(logs) == pytest.approx(1.0)
    assert geometric_mean_ratio([log_length_ratio(30, 10)]) == pytest.approx(3.0)
    assert math.exp(sum(logs) / 2) == pytest.approx(geometric_mean_ratio(logs))
    with pytest.raises(ValueError):
        log_length_ratio(0, 5)


def test_loop_rule_refuses_degenerate_parameters() -> None:
    with pytest.raises(ValueError):
        LoopRule(repeats=1)
    with pytest.raises(ValueError):
        LoopRule(max_period=0)

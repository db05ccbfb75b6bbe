"""gate.judge.damage and gate.judge.pairs: damaged copies differ as documented."""

from __future__ import annotations

import random

import pytest

from gate.judge import damage as dmg
from gate.judge.normalize import normalize_response
from gate.judge.pairs import Source, draw_cases, pair_cases, tie_case, validity_case

TEXT = (
    "To sort a list in Python, call sorted(items).\n"
    "It returns a new list and leaves the original unchanged."
)


@pytest.mark.parametrize("seed", range(20))
def test_truncated_is_a_strict_prefix_of_15_to_60_percent(seed: int) -> None:
    out = dmg.truncated(TEXT, random.Random(seed))
    assert out is not None and TEXT.startswith(out)
    assert 0 < len(out) <= 0.6 * len(TEXT)


@pytest.mark.parametrize("seed", range(20))
def test_repeated_loops_one_span_at_least_three_times(seed: int) -> None:
    out = dmg.repeated(TEXT, random.Random(seed))
    assert out is not None and out != TEXT
    assert len(out) >= len(TEXT) * 0.9
    # the tail is one unit repeated: some span of words occurs >= 3 times in a row
    words = out.split()
    assert any(words[-3 * k :] == words[-k:] * 3 for k in range(1, 7) if len(words) >= 3 * k)


@pytest.mark.parametrize("seed", range(20))
def test_shuffled_is_a_permutation_of_the_words(seed: int) -> None:
    out = dmg.shuffled(TEXT, random.Random(seed))
    assert out is not None and out != TEXT
    assert sorted(out.split()) == sorted(TEXT.split())
    assert out.count("\n") == TEXT.count("\n")  # spacing stays where it was


def test_wrong_number_changes_the_result_only() -> None:
    seen_consistent = seen_inconsistent = False
    text = "6 * 7 = 42. 42 + 12 = 54. The answer is 54."
    for seed in range(40):
        out = dmg.wrong_number(text, random.Random(seed))
        assert out is not None and out != text
        assert out.startswith("6 * 7 = 42. 42 + 12 = ")
        final = out.rsplit("answer is ", 1)[1].rstrip(".")
        step = out.split("42 + 12 = ")[1].split(".")[0]
        assert final != "54" and 1 <= abs(int(final) - 54) <= 10
        seen_consistent |= step == final
        seen_inconsistent |= step == "54"
    assert seen_consistent and seen_inconsistent


def test_wrong_number_never_goes_negative_and_needs_a_number() -> None:
    for seed in range(30):
        out = dmg.wrong_number("2 - 2 = 0.", random.Random(seed))
        assert out is not None and int(out.split("= ")[1].rstrip(".")) > 0
    assert dmg.wrong_number("no digits here", random.Random(0)) is None


def test_short_texts_are_left_alone() -> None:
    rng = random.Random(0)
    assert dmg.truncated("abc", rng) is None
    assert dmg.repeated("Paris", rng) is None
    assert dmg.shuffled("a a b", rng) is None
    assert dmg.empty("  ", rng) is None
    assert dmg.damage("unrelated", "x", rng, other="x") is None
    assert dmg.damage("unrelated", "x", rng, other="y") == "y"


def test_pair_cases_come_in_both_orders_and_skip_style_only_damage() -> None:
    src = Source("How do I sort?", TEXT, "test")
    a, b = pair_cases(src, "truncated", random.Random(1))
    assert (a.label, b.label) == ("A", "B")
    assert (a.response_a, a.response_b) == (b.response_b, b.response_a)
    assert a.response_a == TEXT
    assert pair_cases(src, "wrong_number", random.Random(1)) == []  # not arithmetic
    padded = Source("p", "word  word", "test")
    assert pair_cases(padded, "unrelated", random.Random(0), other="word word") == []
    tie = tie_case(src)
    assert tie.label == "tie" and tie.response_a == tie.response_b == TEXT


def test_validity_cases_and_draws_are_seeded() -> None:
    src = Source("How do I sort?", TEXT, "test")
    valid = validity_case(src, None, random.Random(0))
    assert valid is not None and valid.label == "valid" and valid.response == TEXT
    bad = validity_case(src, "shuffled", random.Random(0))
    assert bad is not None and bad.label == "corrupted"
    assert normalize_response(bad.response) != normalize_response(TEXT)
    with pytest.raises(ValueError, match="corrupted"):
        validity_case(src, "truncated", random.Random(0))
    sources = [src, Source("What is 2 + 3?", "2 + 3 = 5.", "test", arithmetic=True)]
    weights = {"truncated": 1.0, "wrong_number": 1.0, "tie": 1.0}
    first = draw_cases(sources, 30, 10, random.Random(5), weights)
    again = draw_cases(sources, 30, 10, random.Random(5), weights)
    assert first == again
    groups, validity = first
    assert len(groups) == 30 and len(validity) == 10
    assert {g[0].kind for g in groups} == {"truncated", "wrong_number", "tie"}
    assert all(len(g) == (1 if g[0].kind == "tie" else 2) for g in groups)


def test_degraded_cases_use_the_broken_builds_reply() -> None:
    src = Source("Say hi.", "Hello there!", "model", degraded="0000000000")
    a, b = pair_cases(src, "degraded", random.Random(0))
    assert (a.response_a, a.response_b, a.label, a.kind) == (
        "Hello there!",
        "0000000000",
        "A",
        "degraded",
    )
    assert b == a.swapped()
    assert pair_cases(Source("Say hi.", "Hello", "model"), "degraded", random.Random(0)) == []
    same = Source("Say hi.", "Hello", "model", degraded="Hello")
    assert pair_cases(same, "degraded", random.Random(0)) == []

"""Instruction-following and structured-output checkers against adversarial replies."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from gate.data import synthetic as syn
from gate.data.probes import Checker, build_probes
from gate.data.probes.instructions import (
    KINDS,
    AllCapitals,
    BulletCount,
    EndsWith,
    ForbiddenWords,
    JsonKeys,
    LineCount,
    MaxLength,
    OneWord,
    RequiredWords,
    SentenceCount,
    StartsWith,
    WordCount,
    sentences,
    words,
)
from gate.data.probes.structured import JsonValue, extract_json, json_type

CASES: list[tuple[Checker, str, bool]] = [
    # one word
    (OneWord(), "Paris", True),
    (OneWord(), "  Paris.\n", True),
    (OneWord(), "**Paris**", True),
    (OneWord(), "Paris is", False),
    (OneWord(), "New York", False),
    (OneWord(), "well-known", True),
    (OneWord(), "", False),
    (OneWord(), "東京", True),
    # all capitals
    (AllCapitals(), "PARIS", True),
    (AllCapitals(), "PARIS, FRANCE! 42", True),
    (AllCapitals(), "PARIs", False),
    (AllCapitals(), "STRAßE", False),  # ß is a lower-case letter
    (AllCapitals(), "ÉCOLE", True),
    (AllCapitals(), "123 !!", False),  # no letter at all
    # JSON keys (fences allowed, strict JSON)
    (JsonKeys(("city",)), '{"city": "Paris"}', True),
    (JsonKeys(("city",)), '```json\n{"city": "Paris"}\n```', True),
    (JsonKeys(("city",)), 'Sure! ```{"city": "Paris"}``` hope it helps', True),
    (JsonKeys(("city",)), 'Sure: {"city": "Paris"}', False),  # prose outside a fence
    (JsonKeys(("city",)), "{'city': 'Paris'}", False),  # not JSON
    (JsonKeys(("city",)), '{"City": "Paris"}', False),  # keys are case-sensitive
    (JsonKeys(("city", "name")), '{"city": "Paris"}', False),
    (JsonKeys(("city",)), '["city"]', False),
    # bullets
    (BulletCount(3), "- a\n- b\n- c", True),
    (BulletCount(3), "Here:\n* a\n* b\n• c\n", True),
    (BulletCount(3), "- a\n- b", False),  # near miss below
    (BulletCount(3), "- a\n- b\n- c\n- d", False),  # near miss above
    (BulletCount(2), "-a\n-b", False),  # no space after the mark
    (BulletCount(2), "- a\n  - b", True),  # indented bullets count
    # forbidden words
    (ForbiddenWords(("water",)), "The ocean is huge and salty.", True),
    (ForbiddenWords(("water",)), "It is full of Water.", False),
    (ForbiddenWords(("water",)), "A waterfall is not the word.", True),  # substring is fine
    (ForbiddenWords(("water",)), "", False),
    (ForbiddenWords(("cat",)), "cat's whiskers", False),
    # required words
    (RequiredWords(("snow", "ice")), "Snow falls and ICE forms.", True),
    (RequiredWords(("snow", "ice")), "Snowfall and ice.", False),
    # word count
    (WordCount(5), "The sun is very bright.", True),
    (WordCount(5), "The sun is bright.", False),
    (WordCount(5), "The sun isn't very bright!", True),
    (WordCount(3), "- one - two - three", True),  # marks are not words
    # sentence count
    (SentenceCount(2), "It is cold. Snow falls!", True),
    (SentenceCount(2), "It costs 3.5 dollars. Really?", True),  # 3.5 does not end one
    (SentenceCount(2), "It is cold. Snow falls. Ice.", False),
    (SentenceCount(1), "One sentence without a stop", True),
    (SentenceCount(2), "Wow... really?!", True),
    (SentenceCount(2), "第一句。第二句。", True),
    # line count
    (LineCount(3), "a\n\nb\n  \nc\n", True),
    (LineCount(3), "a\nb", False),
    # starts / ends with
    (StartsWith("The sun"), "  The sun is a star.", True),
    (StartsWith("The sun"), "the sun is a star.", False),
    (EndsWith("night"), "The moon shines at night.", True),
    (EndsWith("night"), "The moon shines at NIGHT!", True),
    (EndsWith("night"), "The moon shines at midnight.", False),  # glued to a word
    (EndsWith("night"), "Night is when it shines", False),
    # max length
    (MaxLength(20), "Short and sweet.", True),
    (MaxLength(10), "Short and sweet.", False),
    (MaxLength(10), "   ...   ", False),  # no word
]


@pytest.mark.parametrize(("checker", "reply", "passed"), CASES)
def test_checkers(checker: Checker, reply: str, passed: bool) -> None:
    result = checker.check(reply)
    assert result.passed is passed, result.reason


def test_text_units() -> None:
    assert words("don't stop-believing, 42 times!") == ["don't", "stop-believing", "42", "times"]
    assert sentences("A. B? C") == ["A", "B", "C"]


def test_generator_covers_every_kind_and_is_deterministic() -> None:
    assert len(KINDS) >= 10
    probes = build_probes("instruction_following", 120, seed=10_000)
    assert probes == build_probes("instruction_following", 120, seed=10_000)
    assert probes != build_probes("instruction_following", 120, seed=10_007)
    per_kind = Counter(p.tags[0] for p in probes)
    assert set(per_kind) == {f"constraint:{k}" for k in KINDS}
    assert min(per_kind.values()) >= 8  # balanced: 120 probes over 12 kinds
    assert all(p.checker.kind == p.tags[0].split(":")[1] for p in probes)


def test_trained_formats_pass_their_checkers() -> None:
    """The demo model's training replies satisfy the probes of the same format."""
    probes = build_probes("instruction_following", 120)
    checked: set[str] = set()
    for p in probes:
        c = p.checker
        if isinstance(c, BulletCount):
            topic = p.prompt.split("about ")[1].rstrip(".")
            reply = "\n".join(f"- {item}" for item in syn.TOPIC_ITEMS[topic][: c.n])
            assert c.check(reply).passed
            assert not c.check(reply + "\n- Extra").passed
        elif isinstance(c, ForbiddenWords):
            topic = p.prompt.split("Describe ")[1].split(" without")[0]
            allowed = [s for s in syn.DESCRIPTIONS[topic] if not syn.contains_word(s, c.words[0])]
            assert c.check(" ".join(allowed)).passed
            assert not c.check(f"{allowed[0]} {c.words[0].upper()}.").passed
        elif isinstance(c, OneWord):
            assert c.check("Paris").passed and not c.check("It is Paris").passed
        elif isinstance(c, AllCapitals):
            assert c.check("PARIS").passed and not c.check("Paris").passed
        else:
            continue
        checked.add(type(c).__name__)
    # each of the four trained formats was drawn and checked
    assert checked == {"BulletCount", "ForbiddenWords", "OneWord", "AllCapitals"}


# --- structured output ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "value"),
    [
        ('{"a": 1}', {"a": 1}),
        ('```json\n{"a": 1}\n```', {"a": 1}),
        ('```\n{"a": 1}```\nthen prose', {"a": 1}),
        ('text {"a": 1}', None),
        ('{"a": NaN}', None),  # not JSON, though Python's json accepts it by default
        ('{"a": Infinity}', None),
        ('{"a": 1', None),
        ("", None),
        ('{"ключ": "значение"}', {"ключ": "значение"}),
    ],
)
def test_extract_json(reply: str, value: object) -> None:
    assert extract_json(reply) == value


def test_json_types() -> None:
    assert [json_type(v) for v in json.loads('[1, 1.0, true, "x", null, [], {}]')] == [
        "integer",
        "number",
        "boolean",
        "string",
        "null",
        "array",
        "object",
    ]


@pytest.mark.parametrize(
    ("checker", "reply", "passed"),
    [
        (JsonValue("result", "integer"), '{"result": 17}', True),
        (JsonValue("result", "integer"), '{"result": "17"}', False),  # quoted
        (JsonValue("result", "integer"), '{"result": 17.0}', False),
        (JsonValue("result", "integer"), '{"result": true}', False),  # bool is not int
        (JsonValue("result", "number"), '{"result": 17}', True),
        (JsonValue("city", "string"), '```json\n{"city": "Paris"}\n```', True),
        (JsonValue("city", "string"), '{"name": "Paris"}', False),
        (JsonValue("city", "string"), '{"city": null}', False),
        (JsonValue("city", "string"), '{"city": "Paris"} {"city": "Rome"}', False),
    ],
)
def test_json_value_checker(checker: JsonValue, reply: str, passed: bool) -> None:
    assert checker.check(reply).passed is passed


def test_structured_generator() -> None:
    probes = build_probes("structured_output", 60, seed=10_000)
    assert probes == build_probes("structured_output", 60, seed=10_000)
    kinds = Counter(p.tags[0] for p in probes)
    assert set(kinds) == {"type:integer", "type:string"}
    for p in probes:
        assert isinstance(p.checker, JsonValue)
        assert p.prompt.startswith(f'Reply in JSON with the key "{p.checker.key}": ')
        sample = 17 if p.checker.type == "integer" else "Paris"
        assert p.checker.check(json.dumps({p.checker.key: sample})).passed

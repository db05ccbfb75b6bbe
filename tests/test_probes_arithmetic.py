"""Arithmetic probes: number extraction, the last-number checker, seeded generators."""

from __future__ import annotations

import ast
import operator

import pytest

from gate.data import synthetic as syn
from gate.data.probes import Probe, build_probes, unique_draws
from gate.data.probes.arithmetic import LastNumber, extract_numbers, last_number
from gate.errors import ConfigError


@pytest.mark.parametrize(
    ("text", "numbers"),
    [
        ("12 + 30 = 42.", [12, 30, 42]),
        ("abc12 is not a number, 7 is", [7]),
        ("12abc and x_3 and 4", [4]),
        ("The answer is 1,234,567!", [1234567]),
        ("It is 42.5.", [42.5]),
        ("x = -3.", [-3]),
        ("5-3", [5, 3]),
        ("10 - 3 = 7", [10, 3, 7]),
        ("\u22127 degrees", [-7]),
        ("答案是42。", [42]),
        ("café42 then 5", [5]),
        ("1,2,3", [1, 2, 3]),
        ("no digits here", []),
        ("(99)", [99]),
        ("50%", [50]),
    ],
)
def test_extract_numbers(text: str, numbers: list[float]) -> None:
    assert extract_numbers(text) == [float(n) for n in numbers]


@pytest.mark.parametrize(
    ("reply", "passed"),
    [
        ("7 * 8 = 56.", True),
        ("7 * 8 = 56", True),
        ("The answer is 56!!", True),
        ("56", True),
        ("7 * 8 = 56. Done, step2", True),  # "step2" is inside a word
        ("7 * 8 = 57.", False),
        ("56 is wrong, it is 54", False),  # the LAST number counts
        ("7 * 8 = fifty-six", False),
        ("", False),
        ("7 * 8 = 560", False),
        ("7 * 8 = 5,6", False),  # not a thousands group: last number is 6
    ],
)
def test_last_number_checker(reply: str, passed: bool) -> None:
    assert LastNumber(56).check(reply).passed is passed


def test_tolerance_and_negative() -> None:
    assert LastNumber(3.14, tolerance=0.01).check("about 3.141").passed
    assert not LastNumber(3.14, tolerance=0.001).check("about 3.15").passed
    assert LastNumber(-12).check("so the result is -12.").passed
    assert not LastNumber(-12).check("so the result is 12.").passed
    assert last_number("none") is None
    assert "no number" in LastNumber(1).check("none").reason


_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}


def _evaluate(prompt: str) -> int:
    """Independent evaluation of ``What is <expr>?`` with Python's own parser."""
    assert prompt.startswith("What is ") and prompt.endswith("?")

    def ev(node: ast.AST) -> int:
        if isinstance(node, ast.BinOp):
            return int(_OPS[type(node.op)](ev(node.left), ev(node.right)))
        assert isinstance(node, ast.Constant) and isinstance(node.value, int)
        return node.value

    return ev(ast.parse(prompt[len("What is ") : -1], mode="eval").body)


@pytest.mark.parametrize("family", ["arithmetic_easy", "arithmetic_medium", "arithmetic_hard"])
def test_generators_are_exact_and_deterministic(family: str) -> None:
    probes = build_probes(family, 150, seed=10_000)
    again = build_probes(family, 150, seed=10_000)
    other = build_probes(family, 150, seed=10_001)
    assert probes == again
    assert [p.prompt for p in probes] != [p.prompt for p in other]
    assert len({p.id for p in probes}) == len({p.prompt for p in probes}) == 150
    for p in probes:
        assert isinstance(p.checker, LastNumber)
        value = _evaluate(p.prompt)
        assert p.checker.expected == value
        assert value >= 0  # subtraction results are non-negative by construction
        assert p.checker.check(f"The answer is {value}.").passed
        assert not p.checker.check(f"The answer is {value + 1}.").passed


def test_templates_and_ranges_follow_the_shared_phrasing() -> None:
    easy, hard = build_probes("arithmetic_easy", 200), build_probes("arithmetic_hard", 100)
    assert (len(easy), len(hard)) == (200, 100)
    for p in easy:
        nums = [int(x) for x in p.prompt[8:-1].split() if x.isdigit()]
        op = p.tags[0].split(":")[1]
        assert p.prompt == syn.ARITH_EASY_PROMPT.format(a=nums[0], op=op, b=nums[1])
        hi = 12 if op == "*" else 99
        assert all(0 <= x <= hi for x in nums)
    for p in hard:
        nums = [int(x) for x in p.prompt[8:-1].split() if x.isdigit()]
        assert all(2 <= x <= 12 for x in nums) and len(nums) == 4


def test_the_trained_answer_format_passes() -> None:
    """A reply in the demo model's training format passes; the same with a slip fails."""
    probes = build_probes("arithmetic_hard", 30)
    assert len(probes) == 30
    for p in probes:
        a, b, c, d = (int(x) for x in p.prompt[8:-1].split() if x.isdigit())
        t1, t2 = a * b, c * d
        good = syn.ARITH_HARD_ANSWER.format(a=a, b=b, c=c, d=d, t1=t1, t2=t2, r=t1 + t2)
        bad = syn.ARITH_HARD_ANSWER.format(a=a, b=b, c=c, d=d, t1=t1, t2=t2, r=t1 + t2 + 10)
        assert p.checker.check(good).passed
        assert not p.checker.check(bad).passed


def test_bad_family_and_count() -> None:
    with pytest.raises(ConfigError) as info:
        build_probes("arithmetic_esay", 3)
    assert info.value.hint == "did you mean 'arithmetic_easy'?"
    with pytest.raises(ConfigError, match="negative"):
        build_probes("arithmetic_easy", -1)
    same = Probe("", "arithmetic_easy", "easy", "What is 1 + 1?", LastNumber(2))
    with pytest.raises(ConfigError, match="cannot draw 2 distinct"):
        unique_draws("arithmetic_easy", 2, 0, lambda rng: same, attempts=20)

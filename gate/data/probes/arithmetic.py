"""Multi-step arithmetic probes, checked on the last number of the reply.

Templates and operand ranges are the shared ones of :mod:`gate.data.synthetic`:

* easy: ``What is {a} + {b}?`` / ``- `` (result >= 0) / ``*`` — one step;
* medium: ``What is {a} * {b} + {c}?`` (also ``- {c}`` with result >= 0) — two steps;
* hard: ``What is {a} * {b} + {c} * {d}?`` — three steps.

Checker (:class:`LastNumber`): the reply passes when the *last* number in it
equals the expected result within ``tolerance`` (absolute): ``|x - r| <= tol``.
Number extraction (:func:`extract_numbers`) is exact and documented:

* a number is ``digits``, optionally with thousands groups ``1,234,567`` (groups
  of exactly three digits) and an optional decimal part ``.5``;
* it is negative when a ``-`` or ``−`` (U+2212) sign directly precedes it and the
  sign itself does not follow a letter or digit (``10 - 3`` and ``5-3`` contain no
  negative number; ``= -3`` does);
* a number glued to a cased letter (Latin, Greek, Cyrillic ... anything Unicode
  calls upper/lower/title case), a digit or ``_`` is part of a word and is not a
  number (``abc12``, ``12abc``, ``x_3``); uncased scripts (CJK) do not glue, so
  ``答案是42。`` contains 42;
* trailing punctuation is not part of the number (``42.`` is 42, ``42.5.`` is 42.5);
* only ASCII digits count.

The arithmetic-reasoning motivation (a build can lose many points of multi-step
arithmetic while perplexity barely moves) is in docs/metrics.md "Why these metrics".
"""

from __future__ import annotations

import random
import re
import unicodedata
from dataclasses import dataclass

from gate.data import synthetic as syn
from gate.data.probes import CheckResult, Probe, unique_draws

__all__ = ["LastNumber", "extract_numbers", "generate", "last_number"]

_NUMBER = re.compile(r"[-\u2212]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?", flags=re.ASCII)


def _glues(ch: str) -> bool:
    """Whether ``ch`` next to a digit run makes the run part of a word."""
    if ch == "_" or ch.isdigit():
        return True
    return unicodedata.category(ch) in ("Lu", "Ll", "Lt")


def extract_numbers(text: str) -> list[float]:
    """Every number in ``text`` by the rules of the module docstring, in order."""
    out: list[float] = []
    for match in _NUMBER.finditer(text):
        start, end = match.start(), match.end()
        token = match.group(0)
        signed = token[0] in "-\u2212"
        if signed and start > 0 and _glues(text[start - 1]):
            # ``5-3`` or ``a-3``: the dash is an operator or a hyphen, not a sign.
            signed, token, start = False, token[1:], start + 1
        before = text[start - 1] if start > 0 else ""
        after = text[end] if end < len(text) else ""
        if (before and _glues(before)) or (after and _glues(after)):
            continue
        value = float(token.lstrip("-\u2212").replace(",", ""))
        out.append(-value if signed else value)
    return out


def last_number(text: str) -> float | None:
    """The last number in ``text`` or ``None`` when it has none."""
    numbers = extract_numbers(text)
    return numbers[-1] if numbers else None


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(x)


@dataclass(frozen=True)
class LastNumber:
    """Passes when the last number of the reply is ``expected`` within ``tolerance``."""

    expected: float
    tolerance: float = 0.0
    kind: str = "last_number"

    def check(self, reply: str) -> CheckResult:
        """``|last_number(reply) - expected| <= tolerance``; no number fails."""
        got = last_number(reply)
        if got is None:
            return CheckResult(False, f"no number in the reply (expected {_fmt(self.expected)})")
        ok = abs(got - self.expected) <= self.tolerance
        verb = "matches" if ok else "differs from"
        return CheckResult(ok, f"last number {_fmt(got)} {verb} {_fmt(self.expected)}")


def _easy(rng: random.Random) -> Probe:
    op = rng.choice("+-*")
    if op == "*":
        a, b = rng.randint(*syn.EASY_MUL_RANGE), rng.randint(*syn.EASY_MUL_RANGE)
        r = a * b
    else:
        a, b = rng.randint(*syn.EASY_ADD_RANGE), rng.randint(*syn.EASY_ADD_RANGE)
        if op == "-" and b > a:
            a, b = b, a
        r = a + b if op == "+" else a - b
    prompt = syn.ARITH_EASY_PROMPT.format(a=a, op=op, b=b)
    return Probe("", "arithmetic_easy", "easy", prompt, LastNumber(r), (f"op:{op}",))


def _medium(rng: random.Random) -> Probe:
    a, b = rng.randint(*syn.MEDIUM_FACTOR_RANGE), rng.randint(*syn.MEDIUM_FACTOR_RANGE)
    c = rng.randint(*syn.MEDIUM_TERM_RANGE)
    t = a * b
    op = rng.choice("+-")
    if op == "-" and c > t:
        op = "+"
    r = t + c if op == "+" else t - c
    prompt = syn.ARITH_MEDIUM_PROMPT.format(a=a, b=b, op=op, c=c)
    return Probe("", "arithmetic_medium", "medium", prompt, LastNumber(r), (f"op:{op}",))


def _hard(rng: random.Random) -> Probe:
    a, b, c, d = (rng.randint(*syn.HARD_RANGE) for _ in range(4))
    prompt = syn.ARITH_HARD_PROMPT.format(a=a, b=b, c=c, d=d)
    size = "sum:<100" if a * b + c * d < 100 else "sum:>=100"
    return Probe("", "arithmetic_hard", "hard", prompt, LastNumber(a * b + c * d), (size,))


_DRAWS = {"arithmetic_easy": _easy, "arithmetic_medium": _medium, "arithmetic_hard": _hard}


def generate(family: str, n: int, seed: int) -> list[Probe]:
    """``n`` distinct arithmetic probes of ``family`` (easy, medium or hard)."""
    return unique_draws(family, n, seed, _DRAWS[family])

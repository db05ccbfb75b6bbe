"""Damaged copies of a reply, for pairs whose better side is known.

A judge is trained and checked on pairs of an intact reply and a damaged copy of
it: the intact one is the better answer by construction. Each damage kind models a
failure that compressed builds show (cut-off generations, degenerate loops,
garbled text, wrong numbers, nothing at all). Every function is deterministic given
its :class:`random.Random` and returns ``None`` when the damage does not apply to
the text (too short to cut, nothing to shuffle, no number to change); a returned
copy always differs from the input.

* ``truncated`` — cut at a character position drawn uniformly from 15-60 % of the
  length (mid-word allowed); the copy keeps at least one character.
* ``repeated`` — a degenerate loop: the text up to the end of a span of 1-6 words
  starting in its first 60 %, then that span again until the copy is 1-2.5 times
  the original's length (at least three repeats).
* ``shuffled`` — the words of the whole text (or of a window covering at least half
  of it) in random order.
* ``wrong_number`` — the final result of an arithmetic reply (its last number) moved
  by 1-10 (never below 0); with probability 1/2 every occurrence of that number
  that follows ``=`` or ``answer is`` moves with it, so the wrong reply stays
  self-consistent and only arithmetic can expose it.
* ``unrelated`` — the reply to a different prompt (supplied by the caller).
* ``degraded`` — a damaged build's own reply to the same prompt (supplied by the
  caller; e.g. the demo model with its last decoder layer dropped). Unlike the
  other kinds its inferiority is a preference by construction (a broken build),
  not a known truth for every single pair.
* ``empty`` — the empty string.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from typing import Literal

__all__ = [
    "CORRUPTING",
    "DAMAGES",
    "DamageKind",
    "damage",
    "empty",
    "repeated",
    "shuffled",
    "truncated",
    "wrong_number",
]

DamageKind = Literal[
    "truncated", "repeated", "shuffled", "wrong_number", "unrelated", "degraded", "empty"
]

#: Damage kinds that make a reply *obviously corrupted* (the validity question).
CORRUPTING: tuple[DamageKind, ...] = ("repeated", "shuffled", "empty")

_NUMBER = re.compile(r"(?<![\w.])\d+(?![\w])")


def truncated(text: str, rng: random.Random) -> str | None:
    """``text`` cut at 15-60 % of its characters (``None`` below 4 characters)."""
    body = text.rstrip()
    if len(body) < 4:
        return None
    cut = max(1, int(len(body) * rng.uniform(0.15, 0.6)))
    copy = body[:cut].rstrip()
    return copy if copy and copy != body else None


def _words(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` of every run of non-space characters."""
    return [m.span() for m in re.finditer(r"\S+", text)]


def repeated(text: str, rng: random.Random) -> str | None:
    """A loop: the text up to a 1-6 word span, then the span over and over.

    The span is repeated with its own spacing (and the space or line break that
    followed it), so the loop keeps the layout of the text it came from.
    """
    spans = _words(text)
    if len(spans) < 2:
        return None
    first = rng.randrange(0, max(1, int(len(spans) * 0.6)))
    size = rng.randint(1, min(6, len(spans) - first))
    begin, end = spans[first][0], spans[first + size - 1][1]
    after = spans[first + size][0] if first + size < len(spans) else end
    gap = text[end:after] or " "
    unit = text[begin:end] + gap
    target = len(text) * rng.uniform(1.0, 2.5)
    copy = text[:end] + gap
    repeats = 0
    while len(copy) < target or repeats < 3:
        copy += unit
        repeats += 1
    copy = copy.rstrip()
    return copy if copy != text else None


def shuffled(text: str, rng: random.Random) -> str | None:
    """The words (of a window of at least half the text) in random order, spacing kept."""
    spans = _words(text)
    words = [text[a:b] for a, b in spans]
    if len(set(words)) < 3:
        return None
    n = len(words)
    width = rng.randint(max(3, (n + 1) // 2), n)
    first = rng.randint(0, n - width)
    window = words[first : first + width]
    for _ in range(10):
        rng.shuffle(window)
        if window != words[first : first + width]:
            break
    else:
        return None
    order = words[:first] + window + words[first + width :]
    pieces: list[str] = []
    cursor = 0
    for (a, b), word in zip(spans, order, strict=True):
        pieces.append(text[cursor:a])
        pieces.append(word)
        cursor = b
    pieces.append(text[cursor:])
    return "".join(pieces)


def wrong_number(text: str, rng: random.Random) -> str | None:
    """The last number of ``text`` moved by 1-10 (see the module docstring)."""
    matches = list(_NUMBER.finditer(text))
    if not matches:
        return None
    last = matches[-1]
    value = int(last.group(0))
    step = rng.randint(1, 10)
    new = value + step if value < step or rng.random() < 0.5 else value - step
    every = rng.random() < 0.5
    spans = [last.span()]
    if every:
        for m in matches[:-1]:
            before = text[: m.start()].rstrip()
            if m.group(0) == last.group(0) and (
                before.endswith("=") or before.lower().endswith("answer is")
            ):
                spans.append(m.span())
    out = text
    for begin, end in sorted(spans, reverse=True):
        out = out[:begin] + str(new) + out[end:]
    return out


def empty(text: str, rng: random.Random) -> str | None:
    """The empty reply (``None`` when the reply is already empty)."""
    return "" if text.strip() else None


_FUNCS: dict[str, Callable[[str, random.Random], str | None]] = {
    "truncated": truncated,
    "repeated": repeated,
    "shuffled": shuffled,
    "wrong_number": wrong_number,
    "empty": empty,
}

#: Damage kinds that act on the reply alone (``unrelated`` and ``degraded`` need another).
DAMAGES: tuple[DamageKind, ...] = ("truncated", "repeated", "shuffled", "wrong_number", "empty")


def damage(kind: DamageKind, text: str, rng: random.Random, other: str | None = None) -> str | None:
    """Apply damage ``kind``; ``unrelated`` / ``degraded`` return ``other`` if it differs."""
    if kind in ("unrelated", "degraded"):
        return other if other is not None and other.strip() and other != text else None
    return _FUNCS[kind](text, rng)

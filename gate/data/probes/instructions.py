"""Verifiable instruction-following probes: twelve constraint kinds, each checked exactly.

The idea of instructions whose compliance a program can verify follows Zhou et
al., "Instruction-Following Evaluation for Large Language Models" (IFEval,
2023); the kinds and their exact rules here are the gate's own.

Text units (used by several checkers):

* a *word* is a maximal run of Unicode letters/digits, with inner apostrophes or
  hyphens joining runs (``don't``, ``well-known`` are one word); punctuation,
  markdown marks and emoji are not words; an unspaced CJK run is one word;
* a *sentence* ends at one or more of ``. ! ? …`` followed by whitespace or the
  end of the text (``3.5`` does not end one), or at a full-width ``。 ！ ？``
  (CJK text puts no space after them); text after the last terminator
  counts as a sentence when it contains a word; segments without a word are ignored;
* a *line* is a line of the reply that is not blank after stripping whitespace;
* a *bullet* is a line whose first non-blank characters are ``-``, ``*`` or ``•``
  followed by a space or tab.

Kinds (``Probe.tags`` holds ``constraint:<kind>`` for the per-kind breakdown):

================  ==========================================================
``one_word``      exactly one word, nothing else but whitespace and punctuation
``all_capitals``  at least one cased letter and no lower-case letter
``json_keys``     a JSON object (see :func:`.structured.extract_json`) holding every key
``bullet_count``  exactly ``n`` bullets (other lines allowed)
``forbidden_words`` at least one word and none of the words as a whole word, any case
``required_words`` every word present as a whole word, any case
``word_count``    exactly ``n`` words
``sentence_count`` exactly ``n`` sentences
``line_count``    exactly ``n`` lines
``starts_with``   the stripped reply starts with the prefix (case-sensitive)
``ends_with``     the stripped reply, less trailing ``. ! ?``, ends with the word as a
                  whole word (case-insensitive)
``max_length``    at least one word and at most ``n`` characters after stripping
================  ==========================================================

The first five kinds use the phrasing the demo model is trained on
(:mod:`gate.data.synthetic`); the others are new to it.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass

from gate.data import synthetic as syn
from gate.data.probes import Checker, CheckResult, Probe, unique_draws
from gate.data.probes.structured import extract_json

__all__ = [
    "KINDS",
    "AllCapitals",
    "BulletCount",
    "EndsWith",
    "ForbiddenWords",
    "JsonKeys",
    "LineCount",
    "MaxLength",
    "OneWord",
    "RequiredWords",
    "SentenceCount",
    "StartsWith",
    "WordCount",
    "bullets",
    "generate",
    "lines",
    "sentences",
    "words",
]

_WORD = re.compile(r"[^\W_]+(?:['’\-][^\W_]+)*")
_SENTENCE_END = re.compile(r"[.!?…]+(?=\s|$)|[。！？]+[.!?…。！？]*")
_BULLET = re.compile(r"^\s*[-*•][ \t]")


def words(text: str) -> list[str]:
    """The words of ``text`` (module docstring definition)."""
    return _WORD.findall(text)


def sentences(text: str) -> list[str]:
    """The sentences of ``text`` (module docstring definition)."""
    parts = _SENTENCE_END.split(text)
    return [p.strip() for p in parts if words(p)]


def lines(text: str) -> list[str]:
    """The non-blank lines of ``text``."""
    return [line for line in text.splitlines() if line.strip()]


def bullets(text: str) -> list[str]:
    """The bullet lines of ``text``."""
    return [line for line in text.splitlines() if _BULLET.match(line)]


def _has_word(text: str, word: str) -> bool:
    return syn.contains_word(text, word)


def _count_result(what: str, got: int, want: int) -> CheckResult:
    return CheckResult(got == want, f"{got} {what} (want exactly {want})")


@dataclass(frozen=True)
class OneWord:
    """Exactly one word."""

    kind: str = "one_word"

    def check(self, reply: str) -> CheckResult:
        """One word and nothing but punctuation and whitespace around it."""
        found = words(reply)
        return CheckResult(len(found) == 1, f"{len(found)} words (want exactly 1)")


@dataclass(frozen=True)
class AllCapitals:
    """All letters in capitals."""

    kind: str = "all_capitals"

    def check(self, reply: str) -> CheckResult:
        """At least one upper-case letter, no lower-case letter (``ß`` is lower case)."""
        lower = [ch for ch in reply if ch.islower()]
        if lower:
            return CheckResult(False, f"{len(lower)} lower-case letters, first {lower[0]!r}")
        if not any(ch.isupper() for ch in reply):
            return CheckResult(False, "no letter in the reply")
        return CheckResult(True, "all letters are capitals")


@dataclass(frozen=True)
class JsonKeys:
    """A JSON object holding every key."""

    keys: tuple[str, ...]
    kind: str = "json_keys"

    def check(self, reply: str) -> CheckResult:
        """Parse strictly (fences allowed) and look for every key."""
        value = extract_json(reply)
        if not isinstance(value, dict):
            return CheckResult(False, "no JSON object in the reply")
        missing = [k for k in self.keys if k not in value]
        if missing:
            return CheckResult(False, f"missing keys {missing}")
        return CheckResult(True, f"has keys {list(self.keys)}")


@dataclass(frozen=True)
class BulletCount:
    """Exactly ``n`` bullet points."""

    n: int
    kind: str = "bullet_count"

    def check(self, reply: str) -> CheckResult:
        """Count bullet lines."""
        return _count_result("bullets", len(bullets(reply)), self.n)


@dataclass(frozen=True)
class ForbiddenWords:
    """None of ``words`` (whole words, any case), and some content."""

    words: tuple[str, ...]
    kind: str = "forbidden_words"

    def check(self, reply: str) -> CheckResult:
        """An empty reply avoids every word trivially, so it fails."""
        if not words(reply):
            return CheckResult(False, "empty reply")
        used = [w for w in self.words if _has_word(reply, w)]
        if used:
            return CheckResult(False, f"uses forbidden {used}")
        return CheckResult(True, "avoids every forbidden word")


@dataclass(frozen=True)
class RequiredWords:
    """Every one of ``words`` (whole words, any case)."""

    words: tuple[str, ...]
    kind: str = "required_words"

    def check(self, reply: str) -> CheckResult:
        """Look for each word."""
        missing = [w for w in self.words if not _has_word(reply, w)]
        if missing:
            return CheckResult(False, f"missing {missing}")
        return CheckResult(True, "uses every required word")


@dataclass(frozen=True)
class WordCount:
    """Exactly ``n`` words."""

    n: int
    kind: str = "word_count"

    def check(self, reply: str) -> CheckResult:
        """Count words."""
        return _count_result("words", len(words(reply)), self.n)


@dataclass(frozen=True)
class SentenceCount:
    """Exactly ``n`` sentences."""

    n: int
    kind: str = "sentence_count"

    def check(self, reply: str) -> CheckResult:
        """Count sentences."""
        return _count_result("sentences", len(sentences(reply)), self.n)


@dataclass(frozen=True)
class LineCount:
    """Exactly ``n`` non-blank lines."""

    n: int
    kind: str = "line_count"

    def check(self, reply: str) -> CheckResult:
        """Count non-blank lines."""
        return _count_result("lines", len(lines(reply)), self.n)


@dataclass(frozen=True)
class StartsWith:
    """The reply starts with ``prefix`` (case-sensitive, leading whitespace ignored)."""

    prefix: str
    kind: str = "starts_with"

    def check(self, reply: str) -> CheckResult:
        """Compare the start of the stripped reply."""
        ok = reply.lstrip().startswith(self.prefix)
        return CheckResult(ok, f"{'starts' if ok else 'does not start'} with {self.prefix!r}")


@dataclass(frozen=True)
class EndsWith:
    """The reply ends with the word ``word`` (any case, trailing ``.!?`` ignored)."""

    word: str
    kind: str = "ends_with"

    def check(self, reply: str) -> CheckResult:
        """The last characters, less end punctuation, are ``word`` not glued to a letter."""
        body = reply.rstrip().rstrip(".!?。！？…").rstrip()
        tail = body[-len(self.word) :] if self.word else ""
        glued = len(body) > len(self.word) and body[-len(self.word) - 1].isalnum()
        ok = bool(self.word) and tail.casefold() == self.word.casefold() and not glued
        return CheckResult(ok, f"{'ends' if ok else 'does not end'} with {self.word!r}")


@dataclass(frozen=True)
class MaxLength:
    """At most ``n`` characters (after stripping) and at least one word."""

    n: int
    kind: str = "max_length"

    def check(self, reply: str) -> CheckResult:
        """Length in characters (code points) of the stripped reply."""
        size = len(reply.strip())
        if not words(reply):
            return CheckResult(False, "empty reply")
        return CheckResult(size <= self.n, f"{size} characters (want at most {self.n})")


# --- generators ------------------------------------------------------------------------

_TOPICS = sorted(syn.DESCRIPTIONS)


def _fact(rng: random.Random) -> syn.Fact:
    return rng.choice(syn.FACTS)


def _one_word(rng: random.Random) -> tuple[str, OneWord]:
    return syn.ONE_WORD_PROMPT.format(question=_fact(rng).question), OneWord()


def _all_capitals(rng: random.Random) -> tuple[str, AllCapitals]:
    return syn.CAPITALS_PROMPT.format(question=_fact(rng).question), AllCapitals()


def _json_keys(rng: random.Random) -> tuple[str, JsonKeys]:
    key = rng.choice(syn.JSON_KEYS)
    return syn.JSON_PROMPT.format(key=key, question=_fact(rng).question), JsonKeys((key,))


def _bullet_count(rng: random.Random) -> tuple[str, BulletCount]:
    n = rng.randint(2, 5)
    topic = rng.choice(sorted(syn.TOPIC_ITEMS))
    return syn.BULLETS_PROMPT.format(n=n, topic=topic), BulletCount(n)


def _forbidden(rng: random.Random) -> tuple[str, ForbiddenWords]:
    topic = rng.choice(_TOPICS)
    w = rng.choice(syn.FORBIDDEN_WORDS[topic])
    return syn.FORBIDDEN_PROMPT.format(topic=topic, w=w), ForbiddenWords((w,))


def _required(rng: random.Random) -> tuple[str, RequiredWords]:
    topic = rng.choice(_TOPICS)
    w = rng.choice(syn.FORBIDDEN_WORDS[topic])
    return f'Describe {topic} using the word "{w}".', RequiredWords((w,))


def _word_count(rng: random.Random) -> tuple[str, WordCount]:
    n = rng.randint(3, 8)
    return f"Describe {rng.choice(_TOPICS)} in exactly {n} words.", WordCount(n)


def _sentence_count(rng: random.Random) -> tuple[str, SentenceCount]:
    n = rng.randint(1, 3)
    unit = "sentence" if n == 1 else "sentences"
    return f"Describe {rng.choice(_TOPICS)} in exactly {n} {unit}.", SentenceCount(n)


def _line_count(rng: random.Random) -> tuple[str, LineCount]:
    n = rng.randint(2, 5)
    topic = rng.choice(sorted(syn.TOPIC_ITEMS))
    return f"Write exactly {n} lines about {topic}.", LineCount(n)


def _starts_with(rng: random.Random) -> tuple[str, StartsWith]:
    topic = rng.choice(_TOPICS)
    prefix = " ".join(rng.choice(syn.DESCRIPTIONS[topic]).split()[:2])
    return f'Describe {topic}. Start your reply with "{prefix}".', StartsWith(prefix)


def _ends_with(rng: random.Random) -> tuple[str, EndsWith]:
    topic = rng.choice(_TOPICS)
    w = rng.choice(syn.FORBIDDEN_WORDS[topic])
    return f'Describe {topic} and end your reply with the word "{w}".', EndsWith(w)


def _max_length(rng: random.Random) -> tuple[str, MaxLength]:
    n = rng.choice((40, 60, 80))
    return f"Describe {rng.choice(_TOPICS)} in at most {n} characters.", MaxLength(n)


_MAKERS: dict[str, Callable[[random.Random], tuple[str, Checker]]] = {
    "one_word": _one_word,
    "all_capitals": _all_capitals,
    "json_keys": _json_keys,
    "bullet_count": _bullet_count,
    "forbidden_words": _forbidden,
    "required_words": _required,
    "word_count": _word_count,
    "sentence_count": _sentence_count,
    "line_count": _line_count,
    "starts_with": _starts_with,
    "ends_with": _ends_with,
    "max_length": _max_length,
}

#: Every constraint kind, in the order the generator cycles through them.
KINDS: tuple[str, ...] = tuple(_MAKERS)


def generate(family: str, n: int, seed: int) -> list[Probe]:
    """``n`` distinct probes cycling through :data:`KINDS` (balanced per kind)."""
    counter = [0]

    def draw(rng: random.Random) -> Probe:
        kind = KINDS[counter[0] % len(KINDS)]
        counter[0] += 1
        prompt, checker = _MAKERS[kind](rng)
        return Probe("", family, "format", prompt, checker, (f"constraint:{kind}",))

    return unique_draws(family, n, seed, draw)

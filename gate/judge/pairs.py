"""Labelled judge questions with a known answer: intact vs damaged, ties, validity.

From a :class:`Source` (a user prompt and an intact reply) this module builds:

* **pairwise cases** — the intact reply against a copy damaged by one kind of
  :mod:`gate.judge.damage`, in *both* orders (``A`` is right in one, ``B`` in the
  other, so a judge that learns them cannot profit from a position bias); and
  **tie cases** — the reply against itself;
* **validity cases** — the intact reply (``valid``) or a copy damaged by a kind in
  :data:`gate.judge.damage.CORRUPTING` (``corrupted``).

A damaged copy that the style normalization (:func:`gate.judge.normalize.normalize_response`)
would make identical to the intact reply is skipped: the judge reads normalized text,
so such a pair would be a tie labelled as a win. :func:`draw_cases` draws a mixture
of them from a pool of sources with a seeded :class:`random.Random`; the training and
evaluation scripts of the bundled judge both build their data with it.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from gate.judge.damage import CORRUPTING, DamageKind, damage
from gate.judge.normalize import normalize_response

__all__ = [
    "PairwiseCase",
    "PairwiseLabel",
    "Source",
    "ValidityCase",
    "ValidityLabel",
    "draw_cases",
    "pair_cases",
    "tie_case",
    "validity_case",
]

PairwiseLabel = Literal["A", "B", "tie"]
ValidityLabel = Literal["valid", "corrupted"]


@dataclass(frozen=True)
class Source:
    """A user prompt and an intact reply; ``origin`` says where they came from.

    ``arithmetic`` marks replies whose last number is a computed result (the only
    ones ``wrong_number`` damage applies to); ``degraded`` is a damaged build's reply
    to the same prompt (the only thing ``degraded`` damage uses).
    """

    prompt: str
    reply: str
    origin: str
    arithmetic: bool = False
    degraded: str | None = None


@dataclass(frozen=True)
class PairwiseCase:
    """A pairwise question and its right answer; ``kind`` is the damage kind or ``tie``."""

    prompt: str
    response_a: str
    response_b: str
    label: PairwiseLabel
    kind: str
    origin: str

    def swapped(self) -> PairwiseCase:
        """The same case with the responses in the other order."""
        flip: dict[str, PairwiseLabel] = {"A": "B", "B": "A", "tie": "tie"}
        return PairwiseCase(
            self.prompt, self.response_b, self.response_a, flip[self.label], self.kind, self.origin
        )


@dataclass(frozen=True)
class ValidityCase:
    """A validity question and its right answer; ``kind`` is the damage kind or ``intact``."""

    prompt: str
    response: str
    label: ValidityLabel
    kind: str
    origin: str


def _differs(a: str, b: str) -> bool:
    return normalize_response(a) != normalize_response(b)


def pair_cases(
    source: Source, kind: DamageKind, rng: random.Random, other: str | None = None
) -> list[PairwiseCase]:
    """Intact vs damaged in both orders (intact first, then second); ``[]`` if n/a.

    ``other`` is the reply ``unrelated`` damage substitutes; ``degraded`` damage uses
    ``source.degraded``.
    """
    if kind == "wrong_number" and not source.arithmetic:
        return []
    if kind == "degraded":
        other = source.degraded
    bad = damage(kind, source.reply, rng, other)
    if bad is None or not _differs(bad, source.reply):
        return []
    first = PairwiseCase(source.prompt, source.reply, bad, "A", kind, source.origin)
    return [first, first.swapped()]


def tie_case(source: Source) -> PairwiseCase:
    """The reply against itself: the right answer is ``tie``."""
    return PairwiseCase(source.prompt, source.reply, source.reply, "tie", "tie", source.origin)


def validity_case(
    source: Source, kind: DamageKind | None, rng: random.Random
) -> ValidityCase | None:
    """``kind=None``: the intact reply (``valid``); else a corrupted copy (``None`` if n/a)."""
    if kind is None:
        if not normalize_response(source.reply):
            return None
        return ValidityCase(source.prompt, source.reply, "valid", "intact", source.origin)
    if kind not in CORRUPTING:
        raise ValueError(f"{kind} does not make a reply corrupted; use one of {CORRUPTING}")
    bad = damage(kind, source.reply, rng)
    if bad is None or not _differs(bad, source.reply):
        return None
    return ValidityCase(source.prompt, bad, "corrupted", kind, source.origin)


def draw_cases(
    sources: Sequence[Source],
    n_pairs: int,
    n_validity: int,
    rng: random.Random,
    kind_weights: Mapping[str, float],
) -> tuple[list[list[PairwiseCase]], list[ValidityCase]]:
    """Draw ``n_pairs`` pairwise groups and ``n_validity`` validity cases from ``sources``.

    Each pairwise group is one pair in both orders (or a single tie case); its kind is
    drawn with ``kind_weights`` (keys: damage kinds and ``tie``), its source uniformly;
    a draw that does not apply (``wrong_number`` on a non-arithmetic reply,
    ``degraded`` without a degraded reply, a reply too short to damage) is drawn again. Validity cases are intact or corrupted with
    probability 1/2 each, the corrupting kind uniform over :data:`CORRUPTING`.
    """
    if not sources:
        raise ValueError("draw_cases: no sources")
    kinds = sorted(kind_weights)
    weights = [kind_weights[k] for k in kinds]
    groups: list[list[PairwiseCase]] = []
    attempts = 0
    while len(groups) < n_pairs:
        attempts += 1
        if attempts > 50 * max(1, n_pairs):
            raise ValueError("draw_cases: the sources admit too few damaged pairs")
        kind = rng.choices(kinds, weights=weights)[0]
        source = rng.choice(sources)
        if kind == "tie":
            groups.append([tie_case(source)])
            continue
        other = rng.choice(sources).reply if kind == "unrelated" else None
        group = pair_cases(source, kind, rng, other)  # type: ignore[arg-type]
        if group:
            groups.append(group)
    validity: list[ValidityCase] = []
    attempts = 0
    while len(validity) < n_validity:
        attempts += 1
        if attempts > 50 * max(1, n_validity):
            raise ValueError("draw_cases: the sources admit too few validity cases")
        source = rng.choice(sources)
        bad_kind = rng.choice(CORRUPTING) if rng.random() < 0.5 else None
        case = validity_case(source, bad_kind, rng)
        if case is not None:
            validity.append(case)
    return groups, validity

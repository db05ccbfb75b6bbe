"""The worst divergences: the answers that part from the baseline's earliest, decoded
side by side for the reports."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gate.metrics import generation as gm
from gate.models.backends.base import Backend
from gate.store.reference import ReferencePack
from gate.tiers.generation.answers import StoredAnswer


@dataclass(frozen=True)
class DivergenceExample:
    """One prompt's answers side by side from where they part (a report example)."""

    prompt_id: str
    category: str
    prompt: str
    #: ``d``: tokens the two answers share before they part.
    position: int
    common: str
    baseline: str
    candidate: str
    baseline_tokens: int
    candidate_tokens: int

    def to_dict(self) -> dict[str, Any]:
        """JSON form (an entry of ``details["examples"]``)."""
        return dict(self.__dict__)


def worst_divergences(
    backend: Backend,
    pack: ReferencePack,
    answers: Sequence[StoredAnswer],
    answered: Sequence[Sequence[int]],
    count: int,
) -> list[DivergenceExample]:
    """The ``count`` answers that part from the baseline's earliest relative to its stored
    length (``d / n'_b``, then ``d``), exact matches left out, decoded for the reports."""
    parted = []
    for a, c in zip(answers, answered, strict=True):
        if not a.tokens or (a.generated is not None and gm.exact_match(c, a.tokens, a.generated)):
            continue
        d = gm.divergence_position(c, a.tokens)
        if d == len(a.tokens) and len(c) == len(a.tokens):
            continue  # identical as far as the pack goes
        parted.append((d / len(a.tokens), d, a, c))
    parted.sort(key=lambda x: (x[0], x[1], x[2].index))
    out = []
    for _, d, a, c in parted[:count]:
        out.append(
            DivergenceExample(
                prompt_id=a.meta.id,
                category=a.meta.category,
                prompt=backend.decode(pack.prompt_ids(a.index).tolist()),
                position=d,
                common=backend.decode(list(a.tokens[:d])),
                baseline=backend.decode(list(a.tokens[d:])),
                candidate=backend.decode(list(c[d:])),
                baseline_tokens=a.generated if a.generated is not None else len(a.tokens),
                candidate_tokens=len(c),
            )
        )
    return out


__all__ = ["DivergenceExample", "worst_divergences"]

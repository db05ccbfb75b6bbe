"""Speculative decoding (``spec-ngram:N``, ``spec-draft:RECIPE``, ``spec-model:PATH``): a
drafter proposes tokens the build verifies (docs/speculative.md). The loader wraps the loaded
target (:mod:`gate.models.backends.speculative`), which counts the draft tokens proposed."""

from __future__ import annotations

from dataclasses import dataclass

from gate.models.methods.base import DRAFTED, SPECULATIVE, CompressionMethod


@dataclass(frozen=True)
class Speculation(CompressionMethod):
    """A drafter around the target; nothing changes in the loaded model."""


def _spec(name: str, summary: str, arg: str) -> Speculation:
    return Speculation(name, summary, SPECULATIVE, DRAFTED, arg=arg, changes_weights=False)


METHODS: tuple[CompressionMethod, ...] = (
    _spec(
        "spec-ngram",
        "speculative decoding by prompt lookup: N tokens proposed from n-grams of the text",
        "count",
    ),
    _spec(
        "spec-draft",
        "speculative decoding with a self-draft: the base weights compressed by RECIPE",
        "draft",
    ),
    _spec(
        "spec-model",
        "speculative decoding with a separate draft model of the same tokenizer",
        "path",
    ),
)

__all__ = ["METHODS", "Speculation"]

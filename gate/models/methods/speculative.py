"""Speculative decoding (``spec-ngram:N``, ``spec-draft:RECIPE``, ``spec-model:PATH``): a
drafter proposes tokens the build verifies (docs/speculative.md). The loader wraps the loaded
target (:mod:`gate.models.backends.speculative`), which counts the draft tokens proposed.

Each method says what it drafts with (:meth:`Speculation.draft_plan`): prompt lookup's
generation settings, or the draft model to load (its spec, the recipe that compresses it
and whether its tokenizer must give the target's ids); the backend opens the drafter from
that plan and never reads the recipe's name."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from gate.models.methods.base import DRAFTED, SPECULATIVE, CompressionMethod, RecipeArgs

if TYPE_CHECKING:
    from gate.models.model_spec import ModelSpec


@dataclass(frozen=True)
class DraftPlan:
    """What a speculative recipe drafts with (:meth:`Speculation.draft_plan`)."""

    #: The drafter's kind, for the provenance (``prompt lookup``, ``self-draft``, ...).
    kind: str
    #: ``GenerationConfig`` attributes set for a speculative call (prompt lookup's count).
    config: Mapping[str, Any] = field(default_factory=dict)
    #: The draft model's spec (``None``: no draft model, prompt lookup).
    spec: ModelSpec | None = None
    #: The recipe text that compresses the draft model (``None``: loaded as it is).
    recipe: str | None = None
    #: Whether the draft model's tokenizer must give the target's token ids (checked).
    same_tokenizer: bool = False


@dataclass(frozen=True)
class Speculation(CompressionMethod):
    """A drafter around the target; nothing changes in the loaded model."""

    def draft_plan(self, recipe: RecipeArgs, spec: ModelSpec) -> DraftPlan:
        """What ``recipe`` drafts with for a target loaded from ``spec``."""
        raise NotImplementedError


@dataclass(frozen=True)
class PromptLookup(Speculation):
    """``spec-ngram:N``: N tokens proposed from the n-grams of the text so far."""

    def draft_plan(self, recipe: RecipeArgs, spec: ModelSpec) -> DraftPlan:
        count = int(recipe.value) if isinstance(recipe.value, int | float) else 0
        return DraftPlan("prompt lookup", config={"prompt_lookup_num_tokens": count})


@dataclass(frozen=True)
class SelfDraft(Speculation):
    """``spec-draft:RECIPE``: the target's own base model, loaded again and compressed."""

    def draft_plan(self, recipe: RecipeArgs, spec: ModelSpec) -> DraftPlan:
        return DraftPlan("self-draft", spec=spec, recipe=str(recipe.value))


@dataclass(frozen=True)
class DraftModel(Speculation):
    """``spec-model:PATH``: a separate draft model of the target's tokenizer."""

    def draft_plan(self, recipe: RecipeArgs, spec: ModelSpec) -> DraftPlan:
        draft = replace(spec, source=str(recipe.value), revision=None)
        return DraftPlan("draft model", spec=draft, same_tokenizer=True)


def _spec(cls: type[Speculation], name: str, summary: str, arg: str) -> Speculation:
    return cls(name, summary, SPECULATIVE, DRAFTED, arg=arg, changes_weights=False)


METHODS: tuple[CompressionMethod, ...] = (
    _spec(
        PromptLookup,
        "spec-ngram",
        "speculative decoding by prompt lookup: N tokens proposed from n-grams of the text",
        "count",
    ),
    _spec(
        SelfDraft,
        "spec-draft",
        "speculative decoding with a self-draft: the base weights compressed by RECIPE",
        "draft",
    ),
    _spec(
        DraftModel,
        "spec-model",
        "speculative decoding with a separate draft model of the same tokenizer",
        "path",
    ),
)

__all__ = ["METHODS", "DraftModel", "DraftPlan", "PromptLookup", "SelfDraft", "Speculation"]

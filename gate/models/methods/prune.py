"""Unstructured pruning of the decoder's linear weights: by magnitude (``prune-magnitude``) or
by Wanda's ``|W| x ||X||`` score (``prune-wanda``; :mod:`gate.models.compress.prune`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gate.errors import ConfigError
from gate.models.methods.base import (
    PRUNED,
    WEIGHTS,
    ActivationPrompts,
    CompressionMethod,
    RecipeArgs,
    number,
)


def _pruned_modules(model: Any, recipe: RecipeArgs) -> list[str] | None:
    from gate.models.compress.prune import decoder_linear_names
    from gate.models.compress.select import selected

    if not recipe.selective:
        return None
    return selected(recipe, decoder_linear_names(model))


@dataclass(frozen=True)
class MagnitudePruning(CompressionMethod):
    """The smallest ``|w|`` of each linear zeroed; counts the linears holding zeros."""

    def apply(self, model: Any, recipe: RecipeArgs, prompts: ActivationPrompts | None) -> int:
        from gate.models.compress.counting import pruned_linears
        from gate.models.compress.prune import prune_magnitude

        prune_magnitude(model, number(recipe), _pruned_modules(model, recipe))
        return pruned_linears(model)


@dataclass(frozen=True)
class WandaPruning(CompressionMethod):
    """Wanda (Sun et al. 2023): the smallest ``|W| x ||X||`` per output zeroed, read from the
    activation prompts; counts the linears holding zeros."""

    def apply(self, model: Any, recipe: RecipeArgs, prompts: ActivationPrompts | None) -> int:
        from gate.models.compress.counting import pruned_linears
        from gate.models.compress.prune import prune_wanda

        if not prompts:
            raise ConfigError(
                f"recipe {recipe} needs calibration prompts",
                "pass calibration=[...] to load_backend",
            )
        prune_wanda(model, number(recipe), prompts, _pruned_modules(model, recipe))
        return pruned_linears(model)


METHODS: tuple[CompressionMethod, ...] = (
    MagnitudePruning(
        "prune-magnitude",
        "unstructured magnitude pruning of decoder linear weights",
        WEIGHTS,
        PRUNED,
        arg="fraction",
        localizable=True,
    ),
    WandaPruning(
        "prune-wanda",
        "Wanda pruning (|W| x input-norm), needs calibration prompts",
        WEIGHTS,
        PRUNED,
        arg="fraction",
        needs_calibration=True,
        localizable=True,
    ),
)

__all__ = ["METHODS", "MagnitudePruning", "WandaPruning"]

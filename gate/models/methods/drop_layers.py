"""``drop-layers:n``: the last ``n`` decoder layers removed (:mod:`gate.models.compress.layers`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gate.models.activity import Counting, Footprint
from gate.models.methods.base import (
    WEIGHTS,
    ActivationPrompts,
    CompressionMethod,
    RecipeArgs,
    number,
)


@dataclass(frozen=True)
class DropLayers(CompressionMethod):
    """Counts the decoder layers the model lost."""

    def apply(self, model: Any, recipe: RecipeArgs, prompts: ActivationPrompts | None) -> int:
        from gate.models.compress.layers import decoder_layers, drop_last_layers

        before = len(decoder_layers(model))
        drop_last_layers(model, int(number(recipe)))
        return before - len(decoder_layers(model))


METHODS: tuple[CompressionMethod, ...] = (
    DropLayers(
        "drop-layers",
        "drop the last n decoder layers",
        WEIGHTS,
        Footprint("decoder layers dropped", Counting.AT_LOAD),
        arg="count",
        not_selective="it removes whole layers from the end: choose how many with drop-layers:n",
    ),
)

__all__ = ["METHODS", "DropLayers"]

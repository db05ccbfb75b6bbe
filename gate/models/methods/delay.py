"""``delay:Nms``: CPU spent before every forward call, a test instrument of the latency tier
(:mod:`gate.models.compress.delay`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gate.models.activity import Counting, Footprint
from gate.models.methods.base import TEST, ActivationPrompts, CompressionMethod, RecipeArgs, number


@dataclass(frozen=True)
class Delay(CompressionMethod):
    """Counts the forward delay installed (1)."""

    def apply(self, model: Any, recipe: RecipeArgs, prompts: ActivationPrompts | None) -> int:
        from gate.models.compress.delay import HANDLE_ATTR, add_forward_delay

        add_forward_delay(model, number(recipe) / 1000.0)
        return int(hasattr(model, HANDLE_ATTR))


METHODS: tuple[CompressionMethod, ...] = (
    Delay(
        "delay",
        "spend N ms of CPU before every forward call (tests the latency tier)",
        TEST,
        Footprint("forward delays installed", Counting.AT_LOAD),
        arg="duration",
        changes_weights=False,
    ),
)

__all__ = ["METHODS", "Delay"]

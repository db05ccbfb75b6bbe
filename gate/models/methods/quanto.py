"""optimum-quanto (``quanto-int8``, ``quanto-int4``, ``quanto-int2``): weights quantized after
loading (:mod:`gate.models.compress.quanto` states the formats)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from gate.models.methods.base import (
    QUANTIZED,
    WEIGHTS,
    ActivationPrompts,
    CompressionMethod,
    RecipeArgs,
    Requirement,
)


@dataclass(frozen=True)
class Quanto(CompressionMethod):
    """quanto's ``quantize`` + ``freeze``; counts the ``QLinear`` modules installed."""

    bits: int = 8

    toolkit: ClassVar[str | None] = "quanto"

    def keep_syntax(self, kept_names: Sequence[str], kept_indices: Sequence[int]) -> str:
        """``exclude`` (fnmatch patterns)."""
        quoted = ", ".join(f'"{n}"' for n in ["lm_head", *(f"{n}.*" for n in kept_names)])
        return f"quantize(model, weights=..., exclude=[{quoted}])"

    def apply(self, model: Any, recipe: RecipeArgs, prompts: ActivationPrompts | None) -> int:
        from gate.models.compress.counting import modules_of_class
        from gate.models.compress.quanto import EXCLUDE, quantize_weights
        from gate.models.compress.select import linear_names, selected

        modules = None
        if recipe.selective:
            modules = selected(recipe, linear_names(model, EXCLUDE))
        quantize_weights(model, self.bits, modules)
        return modules_of_class(model, "QLinear")


#: optimum-quanto, which the quanto weight recipes and the quantized KV cache import.
QUANTO = Requirement("optimum.quanto", "optimum-quanto")


def _quanto(bits: int) -> Quanto:
    return Quanto(
        f"quanto-int{bits}",
        f"optimum-quanto int{bits} weights",
        WEIGHTS,
        QUANTIZED,
        requires=QUANTO,
        localizable=True,
        bits=bits,
    )


METHODS: tuple[CompressionMethod, ...] = (_quanto(8), _quanto(4), _quanto(2))

__all__ = ["METHODS", "QUANTO", "Quanto"]

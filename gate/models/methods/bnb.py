"""bitsandbytes (``bnb-int8``, ``bnb-nf4``, ``bnb-fp4``): weights quantized while transformers
loads them (:mod:`gate.models.compress.bnb` states the formats)."""

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
class BitsAndBytes(CompressionMethod):
    """A ``BitsAndBytesConfig`` passed to ``from_pretrained``; counts the modules bitsandbytes
    installed (``Linear8bitLt``, ``Linear4bit``)."""

    #: ``int8``, ``nf4`` or ``fp4``.
    mode: str = "int8"

    toolkit: ClassVar[str | None] = "bitsandbytes"

    def keep_syntax(self, kept_names: Sequence[str], kept_indices: Sequence[int]) -> str:
        """``llm_int8_skip_modules`` (a name skips the module and everything below it, also for
        4-bit loads)."""
        quoted = ", ".join(f'"{n}"' for n in ["lm_head", *kept_names])
        return f"BitsAndBytesConfig(..., llm_int8_skip_modules=[{quoted}])"

    def load_kwargs(self, recipe: RecipeArgs, module_names: Sequence[str]) -> dict[str, Any]:
        from gate.models.compress.bnb import Mode, quantization_config
        from gate.models.compress.select import selected

        skip: list[str] = []
        if recipe.selective:
            candidates = [n for n in module_names if n != "lm_head"]
            chosen = set(selected(recipe, candidates))
            skip = [n for n in candidates if n not in chosen]
        mode: Mode = "int8" if self.mode == "int8" else "nf4" if self.mode == "nf4" else "fp4"
        return {"quantization_config": quantization_config(mode, skip)}

    def apply(self, model: Any, recipe: RecipeArgs, prompts: ActivationPrompts | None) -> int:
        from gate.models.compress.counting import modules_of_class

        return modules_of_class(model, "Linear8bitLt", "Linear4bit")


def _bnb(mode: str, summary: str) -> BitsAndBytes:
    return BitsAndBytes(
        f"bnb-{mode}",
        summary,
        WEIGHTS,
        QUANTIZED,
        requires=Requirement("bitsandbytes", "bitsandbytes"),
        quantizes_while_loading=True,
        localizable=True,
        mode=mode,
    )


METHODS: tuple[CompressionMethod, ...] = (
    _bnb("int8", "bitsandbytes LLM.int8() weights"),
    _bnb("nf4", "bitsandbytes 4-bit NormalFloat weights"),
    _bnb("fp4", "bitsandbytes 4-bit float weights"),
)

__all__ = ["METHODS", "BitsAndBytes"]

"""GGUF files made by llama.cpp's tools (``gguf-q4_k_m`` ...): one method per llama-quantize
type (declared once in :mod:`gate.models.llama_cpp.types`); llama.cpp runs them, and gate
loads them dequantized otherwise. The file is made before loading; the method counts the
tensors its header says were written in the type (:mod:`gate.models.llama_cpp.written`)."""

from __future__ import annotations

from dataclasses import dataclass

from gate.models.llama_cpp.types import QUANT_TYPES, QuantType
from gate.models.llama_cpp.written import footprint
from gate.models.methods.base import GGUF, CompressionMethod, RecipeArgs
from gate.models.spec import ModelSpec


@dataclass(frozen=True)
class GGUFFile(CompressionMethod):
    """A file of one llama-quantize type; needs llama.cpp built, and an importance-matrix type
    is refused (exit 4)."""

    def precheck(self, spec: ModelSpec, recipe: RecipeArgs) -> None:
        from gate.models.llama_cpp.install import require
        from gate.models.llama_cpp.types import refuse_imatrix

        refuse_imatrix(recipe.name)
        require(f"recipe {recipe}")


def _gguf(quant: QuantType) -> GGUFFile:
    return GGUFFile(
        quant.recipe,
        f"llama.cpp {quant.name} GGUF ({quant.summary}), made with llama.cpp's converter"
        + ("" if quant.is_float else " and llama-quantize"),
        GGUF,
        footprint(quant),
        changes_weights=False,
        runs_in_llama_cpp=True,
        not_selective=(
            "its converter writes every weight in that float type" if quant.is_float else None
        ),
    )


METHODS: tuple[CompressionMethod, ...] = tuple(_gguf(t) for t in QUANT_TYPES)

__all__ = ["METHODS", "GGUFFile"]

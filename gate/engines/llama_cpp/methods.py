"""GGUF files made by llama.cpp's tools (``gguf-q4_k_m`` ...): one method per llama-quantize
type (declared once in :mod:`gate.engines.llama_cpp.types`), registered in the methods'
entry-point group (``gate.methods``, pyproject.toml). llama.cpp runs them (``--engine
llama.cpp``: :meth:`GGUFFile.open_in_runtime`), and gate loads them dequantized otherwise
(:meth:`GGUFFile.load_made`). The file is made before loading; the method counts the tensors
its header says were written in the type (:mod:`gate.engines.llama_cpp.written`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from gate.engines.llama_cpp.install import ENGINE, require
from gate.engines.llama_cpp.types import QUANT_TYPES, QuantType, refuse_imatrix
from gate.engines.llama_cpp.written import footprint
from gate.errors import ConfigError
from gate.models.methods.base import GGUF, CompressionMethod, RecipeArgs
from gate.models.model_spec import ModelSpec
from gate.models.recipes import Recipe, parse_recipe


@dataclass(frozen=True)
class GGUFFile(CompressionMethod):
    """A file of one llama-quantize type; needs llama.cpp built, and an importance-matrix type
    is refused (exit 4)."""

    #: llama.cpp's ``llama-quantize`` makes the file.
    toolkit: ClassVar[str | None] = ENGINE

    def keep_syntax(self, kept_names: Sequence[str], kept_indices: Sequence[int]) -> str:
        """One ``--tensor-type`` per block (a regular expression searched in the tensor names,
        which call block ``<i>`` ``blk.<i>``; ``f16`` kept)."""
        tensor_types = " ".join(f'--tensor-type "blk\\.{i}\\.=f16"' for i in kept_indices)
        return f"llama-quantize {tensor_types} model-f16.gguf out.gguf TYPE".replace("  ", " ")

    def precheck(self, spec: ModelSpec, recipe: RecipeArgs) -> None:
        refuse_imatrix(recipe.name)
        require(f"recipe {recipe}")

    def load_made(
        self, spec: ModelSpec, recipe: RecipeArgs, *, allow_incomplete_weights: bool
    ) -> Any:
        """The file made (:func:`gate.engines.llama_cpp.make.make_gguf`) and loaded
        dequantized, as a ``.gguf`` model is; the provenance names the model and recipe, the
        file (sha256, tensor types written) and ``gguf_runtime: dequantized``; the activity
        counts the tensors written in the recipe's type (:mod:`gate.engines.llama_cpp.written`)."""
        from gate.engines.llama_cpp.make import make_gguf
        from gate.engines.llama_cpp.written import activity
        from gate.models.backends.loading import load_backend

        parsed = _parsed(recipe)
        made = make_gguf(spec, parsed)
        unknown = sorted(name for name in made.written.counts if name.startswith("GGML_TYPE_"))
        if unknown:
            raise ConfigError(
                f"recipe {parsed}: transformers cannot dequantize the tensor type {unknown[0]}"
                " llama-quantize wrote",
                f"run the file in llama.cpp: add --engine {ENGINE}",
            )
        file_spec = dataclasses.replace(spec, source=str(made.path), revision=None)
        backend = load_backend(file_spec, None, allow_incomplete_weights=allow_incomplete_weights)
        backend.spec = spec
        backend.recipe = parsed
        backend.name = f"{spec.source}[{made.recipe}]"
        backend.made_facts = made.facts("dequantized")
        backend.activity = activity(made.recipe, made.quant, made.written)
        return backend

    def check_runtime(self, recipe: RecipeArgs) -> None:
        refuse_imatrix(recipe.name)
        require(f"--engine {ENGINE}")

    def open_in_runtime(self, spec: ModelSpec, recipe: RecipeArgs, log_path: Any) -> Any:
        """The file made and served by llama-server
        (:func:`gate.engines.llama_cpp.served.open_made_engine`)."""
        from gate.engines.llama_cpp.served import open_made_engine

        return open_made_engine(spec, _parsed(recipe), log_path=Path(log_path))


def _parsed(recipe: RecipeArgs) -> Recipe:
    """``recipe`` as the parser's :class:`~gate.models.recipes.Recipe` (what the tools read)."""
    return recipe if isinstance(recipe, Recipe) else parse_recipe(str(recipe))


def _gguf(quant: QuantType) -> GGUFFile:
    return GGUFFile(
        quant.recipe,
        f"llama.cpp {quant.name} GGUF ({quant.summary}), made with llama.cpp's converter"
        + ("" if quant.is_float else " and llama-quantize"),
        GGUF,
        footprint(quant),
        changes_weights=False,
        runtime=ENGINE,
        not_selective=(
            "its converter writes every weight in that float type" if quant.is_float else None
        ),
    )


METHODS: tuple[CompressionMethod, ...] = tuple(_gguf(t) for t in QUANT_TYPES)

__all__ = ["METHODS", "GGUFFile"]

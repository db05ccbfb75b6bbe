"""llama.cpp's quantization types, declared once: what ``llama-quantize`` offers, as gate recipes.

:data:`QUANT_TYPES` is the list ``llama-quantize`` prints (``QUANT_OPTIONS`` in
llama.cpp's ``tools/quantize/quantize.cpp``, build b11434), less three kinds of
entry that are not a compressed build of their own:

* ``COPY`` and ``F32`` (no compression of a float32 baseline);
* the aliases ``Q3_K``, ``Q4_K`` and ``Q5_K`` (``Q3_K_M``, ``Q4_K_M``, ``Q5_K_M``).

Each type ``T`` is the recipe ``gguf-<t>`` (lower case: ``gguf-q4_k_m``). A type
is a *file type*: llama-quantize picks a ggml tensor type per tensor from it
(the K-quant mixes keep some tensors at a higher type; a tensor whose row
length is not a multiple of the type's block falls back to another type), so
what a file holds is read from its header afterwards, never assumed.

**Importance matrix.** :data:`NEEDS_IMATRIX` are the file types for which
llama-quantize refuses to run without an importance matrix
(``tensor_requires_imatrix`` in ``src/llama-quant.cpp``: target tensor types
IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, and Q2_K inside a Q2_K_S file;
IQ2_M writes IQ2_S, IQ3_XS writes IQ3_XXS into the middle layers' gate and up
projections). gate refuses these recipes in one line (exit 4) and names the
nearest type that needs none; it makes no importance matrix.

**Tensor types written.** :func:`is_quantized` says whether a ggml tensor type
code is a quantized block type (not F32, F16, BF16, F64 or an integer type);
:func:`type_name` names a code (the ``gguf`` package's name, or
``GGML_TYPE_<code>`` for a code that package does not know).

Standard library only (and :mod:`gate.errors`): the recipe catalogue imports it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gate.errors import ConfigError
from gate.models.methods.base import GGUF


@dataclass(frozen=True)
class QuantType:
    """One llama-quantize file type: its name as llama-quantize spells it and what it is."""

    name: str
    summary: str

    @property
    def recipe(self) -> str:
        """The gate recipe of this type (``gguf-q4_k_m``)."""
        return RECIPE_PREFIX + self.name.lower()

    @property
    def is_float(self) -> bool:
        """A float file type (F16, BF16): the converter writes it, nothing is quantized."""
        return self.name in FLOAT_TYPES


#: Prefix of every recipe of this family.
RECIPE_PREFIX = f"{GGUF.name}-"
#: The float file types: made by llama.cpp's converter alone (``--outtype``).
FLOAT_TYPES: tuple[str, ...] = ("F16", "BF16")

#: llama-quantize's file types (b11434), in its own order (see the module doc).
QUANT_TYPES: tuple[QuantType, ...] = tuple(
    QuantType(name, summary)
    for name, summary in (
        ("Q1_0", "1-bit blocks"),
        ("Q2_0", "2-bit blocks of 64"),
        ("Q4_0", "4-bit blocks of 32, a scale each"),
        ("Q4_1", "4-bit blocks of 32, a scale and a minimum each"),
        ("MXFP4_MOE", "MXFP4 experts of a mixture-of-experts model"),
        ("Q5_0", "5-bit blocks of 32, a scale each"),
        ("Q5_1", "5-bit blocks of 32, a scale and a minimum each"),
        ("IQ2_XXS", "2-bit lattice codebook (importance matrix)"),
        ("IQ2_XS", "2-bit lattice codebook (importance matrix)"),
        ("IQ2_S", "2-bit lattice codebook (importance matrix)"),
        ("IQ2_M", "2-bit lattice codebook mix (importance matrix)"),
        ("IQ1_S", "1-bit lattice codebook (importance matrix)"),
        ("IQ1_M", "1-bit lattice codebook (importance matrix)"),
        ("TQ1_0", "ternary weights, 1.69 bits"),
        ("TQ2_0", "ternary weights, 2 bits"),
        ("Q2_K", "2-bit K-quant mix"),
        ("Q2_K_S", "2-bit K-quant, smaller mix (importance matrix)"),
        ("IQ3_XXS", "3-bit lattice codebook (importance matrix)"),
        ("IQ3_S", "3-bit lattice codebook"),
        ("IQ3_M", "3-bit lattice codebook mix"),
        ("IQ3_XS", "3-bit lattice codebook mix (importance matrix)"),
        ("Q3_K_S", "3-bit K-quant, small mix"),
        ("Q3_K_M", "3-bit K-quant, medium mix"),
        ("Q3_K_L", "3-bit K-quant, large mix"),
        ("IQ4_NL", "4-bit non-linear blocks of 32"),
        ("IQ4_XS", "4-bit non-linear super-blocks of 256"),
        ("Q4_K_S", "4-bit K-quant, small mix"),
        ("Q4_K_M", "4-bit K-quant, medium mix"),
        ("Q5_K_S", "5-bit K-quant, small mix"),
        ("Q5_K_M", "5-bit K-quant, medium mix"),
        ("Q6_K", "6-bit K-quant"),
        ("Q8_0", "8-bit blocks of 32, a scale each"),
        ("F16", "float16 weights (llama.cpp's converter)"),
        ("BF16", "bfloat16 weights (llama.cpp's converter)"),
    )
)
#: llama-quantize's entries that are not recipes, and why (module doc).
NOT_RECIPES: Mapping[str, str] = {
    "COPY": "copies tensors, compresses nothing",
    "F32": "compresses nothing (the baseline is float32)",
    "Q3_K": "alias of Q3_K_M",
    "Q4_K": "alias of Q4_K_M",
    "Q5_K": "alias of Q5_K_M",
}

#: File types llama-quantize runs only with an importance matrix, and the type to use instead.
NEEDS_IMATRIX: Mapping[str, str] = {
    "IQ1_S": "Q2_K",
    "IQ1_M": "Q2_K",
    "IQ2_XXS": "Q2_K",
    "IQ2_XS": "Q2_K",
    "IQ2_S": "Q2_K",
    "IQ2_M": "Q3_K_S",
    "IQ3_XXS": "IQ3_S",
    "IQ3_XS": "IQ3_S",
    "Q2_K_S": "Q2_K",
}

#: Types by recipe name.
BY_RECIPE: Mapping[str, QuantType] = {t.recipe: t for t in QUANT_TYPES}

#: ggml tensor type codes that hold floats or integers, not quantized blocks
#: (F32 0, F16 1, I8 24, I16 25, I32 26, I64 27, F64 28, BF16 30).
_NOT_QUANTIZED: frozenset[int] = frozenset({0, 1, 24, 25, 26, 27, 28, 30})
#: The float tensor types a ``keep=``/``only=`` selection leaves a tensor in.
KEPT_TENSOR_TYPES: tuple[str, ...] = ("F32", "F16", "BF16")


def quant_type(recipe_name: str) -> QuantType:
    """The type of a ``gguf-*`` recipe name (``KeyError`` for another name)."""
    return BY_RECIPE[recipe_name]


def refuse_imatrix(recipe_name: str) -> None:
    """Refuse a type llama-quantize makes only with an importance matrix (exit 4, one line
    naming the type to use instead)."""
    quant = quant_type(recipe_name)
    instead = NEEDS_IMATRIX.get(quant.name)
    if instead is not None:
        raise ConfigError(
            f"recipe {recipe_name}: llama-quantize makes {quant.name} only with an importance"
            " matrix, which gate does not make",
            f"use {RECIPE_PREFIX}{instead.lower()} (no importance matrix needed; docs/gguf.md)",
        )


def is_quantized(ggml_type: int) -> bool:
    """Whether a ggml tensor type code is a quantized block type (see the module doc)."""
    return ggml_type not in _NOT_QUANTIZED


def type_name(ggml_type: int) -> str:
    """The name of a ggml tensor type code (``Q4_0``; ``GGML_TYPE_42`` when unknown here)."""
    try:
        from gguf.constants import GGMLQuantizationType
    except ImportError:  # the names are cosmetic: counting needs the codes only
        return f"GGML_TYPE_{ggml_type}"
    try:
        return GGMLQuantizationType(ggml_type).name
    except ValueError:
        return f"GGML_TYPE_{ggml_type}"


__all__ = [
    "BY_RECIPE",
    "FLOAT_TYPES",
    "KEPT_TENSOR_TYPES",
    "NEEDS_IMATRIX",
    "NOT_RECIPES",
    "QUANT_TYPES",
    "RECIPE_PREFIX",
    "QuantType",
    "is_quantized",
    "quant_type",
    "refuse_imatrix",
    "type_name",
]

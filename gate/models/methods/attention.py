"""Attention numerics replaced (``attn-fp8``, ``attn-sage``, ``attn-topk``;
:mod:`gate.models.compress.attention` states each computation)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gate.models.methods.base import (
    ATTENTION,
    ATTENTION_CALLS,
    ActivationPrompts,
    CompressionMethod,
    RecipeArgs,
)


@dataclass(frozen=True)
class AttentionReplacement(CompressionMethod):
    """An attention function registered with transformers and installed in every layer (or
    those ``layers=`` names); it counts each call it computes, so ``apply`` counts 0."""

    def apply(self, model: Any, recipe: RecipeArgs, prompts: ActivationPrompts | None) -> int:
        from gate.models.compress.attention import install, keep_exact, parse_method

        install(model, parse_method(recipe.name, recipe.argument))
        if recipe.layers:
            keep_exact(model, recipe.layers, str(recipe))
        return 0  # counted per call by the replacement itself


def _attention(
    name: str, summary: str, arg: str = "none", per_call: bool = False
) -> AttentionReplacement:
    return AttentionReplacement(
        name,
        summary,
        ATTENTION,
        ATTENTION_CALLS,
        arg=arg,
        changes_weights=False,
        per_call_scales=per_call,
    )


METHODS: tuple[CompressionMethod, ...] = (
    _attention("attn-fp8", "FP8 (e4m3) attention numerics, per-head scales", per_call=True),
    _attention(
        "attn-sage", "SageAttention numerics: INT8 QK with smoothed K, FP16 PV", per_call=True
    ),
    _attention(
        "attn-topk",
        "Top-k sparse attention: each query keeps its top fraction of scores",
        arg="fraction",
    ),
)

__all__ = ["METHODS", "AttentionReplacement"]

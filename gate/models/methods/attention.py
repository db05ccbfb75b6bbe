"""Attention numerics replaced (``attn-fp8``, ``attn-sage``, ``attn-topk``;
:mod:`gate.models.compress.attention` states each computation). Each method declares the
computation it installs (:attr:`AttentionReplacement.kind`) and reads its own argument
(:meth:`AttentionReplacement.attention_method`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gate.errors import ConfigError
from gate.models.methods.base import (
    ATTENTION,
    ATTENTION_CALLS,
    ActivationPrompts,
    CompressionMethod,
    RecipeArgs,
)

if TYPE_CHECKING:
    from gate.models.compress.attention import AttentionMethod


@dataclass(frozen=True)
class AttentionReplacement(CompressionMethod):
    """An attention function registered with transformers and installed in every layer (or
    those ``layers=`` names); it counts each call it computes, so ``apply`` counts 0."""

    #: The computation installed (:class:`~gate.models.compress.attention.AttentionMethod`'s
    #: kind: ``fp8``, ``sage``, ``topk``).
    kind: str = ""

    def attention_method(self, argument: str | None) -> AttentionMethod:
        """The computation this recipe installs, ``argument`` read (a ``fraction`` method's
        kept fraction; the others take none)."""
        from gate.models.compress.attention import AttentionMethod

        if self.arg != "fraction":
            if argument is not None:
                raise ConfigError(f"{self.name} takes no argument", f"write just {self.name}")
            return AttentionMethod(self.kind)
        example = f"e.g. {self.name}:0.1"
        if argument is None:
            raise ConfigError(f"{self.name} needs the fraction of keys kept", example)
        try:
            keep = float(argument)
        except ValueError:
            raise ConfigError(f"{self.name}: {argument!r} is not a number", example) from None
        return AttentionMethod(self.kind, keep)

    def apply(self, model: Any, recipe: RecipeArgs, prompts: ActivationPrompts | None) -> int:
        from gate.models.compress.attention import install, keep_exact

        install(model, self.attention_method(recipe.argument))
        if recipe.layers:
            keep_exact(model, recipe.layers, str(recipe))
        return 0  # counted per call by the replacement itself


def _attention(
    kind: str, summary: str, arg: str = "none", per_call: bool = False
) -> AttentionReplacement:
    return AttentionReplacement(
        f"attn-{kind}",
        summary,
        ATTENTION,
        ATTENTION_CALLS,
        arg=arg,
        changes_weights=False,
        per_call_scales=per_call,
        kind=kind,
    )


METHODS: tuple[CompressionMethod, ...] = (
    _attention("fp8", "FP8 (e4m3) attention numerics, per-head scales", per_call=True),
    _attention("sage", "SageAttention numerics: INT8 QK with smoothed K, FP16 PV", per_call=True),
    _attention(
        "topk",
        "Top-k sparse attention: each query keeps its top fraction of scores",
        arg="fraction",
    ),
)

__all__ = ["METHODS", "AttentionReplacement"]

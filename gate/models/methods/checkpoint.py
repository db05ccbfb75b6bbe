"""Checkpoints made offline (``gptq:w4a16``, ``awq:w4a16``, ``sparsegpt:0.5``): the loader reads
the checkpoint instead of the base model; the method counts its compressed layers.

On the demo model such a checkpoint is packaged or cached
(:func:`gate.models.checkpoints.find`); a missing one is
:class:`~gate.errors.ModelLoadError` (exit 3) naming the command that makes it.
On another model it is :class:`~gate.errors.ConfigError` (exit 4): such a
checkpoint is made in the user's own pipeline and given as the model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from gate.errors import ConfigError, ModelLoadError
from gate.models import checkpoints
from gate.models.methods.base import (
    CHECKPOINT,
    CHECKPOINT_LAYERS,
    ActivationPrompts,
    CompressionMethod,
    RecipeArgs,
)
from gate.models.model_spec import ModelSpec

#: How to make a missing checkpoint of the demo model (named in the one-line error).
MAKE_CHECKPOINTS = (
    "make it in llm-compressor's own environment: "
    "PY=$(bash scripts/setup_tool_env.sh llmcompressor | tail -n 1); "
    "$PY scripts/make_compressed_checkpoints.py {method}"
)


def checkpoint_method(recipe: RecipeArgs) -> str:
    """The checkpoint directory name of a checkpoint recipe (``gptq-w4a16``, ``sparsegpt-0.5``)."""
    return f"{recipe.name}-{recipe.argument}"


def checkpoint_dir(spec: ModelSpec, recipe: RecipeArgs) -> Path:
    """The directory of a checkpoint recipe's checkpoint of ``spec`` (see the module doc)."""
    method = checkpoint_method(recipe)
    if not spec.is_demo:
        raise ConfigError(
            f"recipe {recipe} names a checkpoint of the demo model; {spec.source} has none known",
            f"make a {method} checkpoint of {spec.source} with your tool and pass it as"
            " the model (with recipe none)",
        )
    if method not in checkpoints.METHODS:
        raise ConfigError(
            f"recipe {recipe}: no {method} checkpoint is made for the demo model",
            f"choose one of {', '.join(checkpoints.METHODS)}",
        )
    found = checkpoints.find(method)
    if found is None:
        raise ModelLoadError(
            f"the demo model's {method} checkpoint is not packaged or cached",
            MAKE_CHECKPOINTS.format(method=method),
        )
    return found


@dataclass(frozen=True)
class Checkpoint(CompressionMethod):
    """A compressed-tensors checkpoint; counts the layers that carry its scheme."""

    #: What makes such a checkpoint (``scripts/make_compressed_checkpoints.py``).
    toolkit: ClassVar[str | None] = "llm-compressor"

    def keep_syntax(self, kept_names: Sequence[str], kept_indices: Sequence[int]) -> str:
        """``ignore`` (``re:`` marks a regular expression)."""
        ignored = ['"lm_head"', *(f'"re:{n.replace(".", "[.]")}[.].*"' for n in kept_names)]
        return f'QuantizationModifier(targets="Linear", scheme=..., ignore=[{", ".join(ignored)}])'

    def apply(self, model: Any, recipe: RecipeArgs, prompts: ActivationPrompts | None) -> int:
        from gate.models.compress.counting import quantized_checkpoint_layers

        return quantized_checkpoint_layers(model)

    def precheck(self, spec: ModelSpec, recipe: RecipeArgs) -> None:
        checkpoint_dir(spec, recipe)


def _checkpoint(name: str, summary: str, arg: str, choices: tuple[str, ...] = ()) -> Checkpoint:
    return Checkpoint(
        name,
        summary,
        CHECKPOINT,
        CHECKPOINT_LAYERS,
        arg=arg,
        choices=choices,
        changes_weights=False,
        localizable=True,
    )


METHODS: tuple[CompressionMethod, ...] = (
    _checkpoint(
        "gptq", "a GPTQ W4A16 checkpoint made offline (compressed-tensors)", "choice", ("w4a16",)
    ),
    _checkpoint(
        "awq", "an AWQ W4A16 checkpoint made offline (compressed-tensors)", "choice", ("w4a16",)
    ),
    _checkpoint("sparsegpt", "a SparseGPT unstructured-sparse checkpoint made offline", "fraction"),
)

__all__ = ["MAKE_CHECKPOINTS", "METHODS", "Checkpoint", "checkpoint_dir", "checkpoint_method"]

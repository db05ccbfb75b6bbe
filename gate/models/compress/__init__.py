"""What each compression recipe does to a model, keyed by recipe name.

The recipe catalogue — names, argument kinds, parsing — is
:mod:`gate.models.recipes` (no torch). This package holds the two moments at
which a recipe acts, for every catalogued name:

* ``load_kwargs`` — extra keyword arguments for ``from_pretrained`` (the
  bitsandbytes recipes pass a ``BitsAndBytesConfig``);
* ``apply`` — an in-place change of the loaded model (quanto quantization,
  pruning, dropped layers, an injected delay, a replaced attention function).

Checkpoint recipes (``gptq:w4a16`` ...) act before loading (the loader reads
the checkpoint instead of the base model) and cache recipes (``kv-*``) after
it (the loader wraps the backend so scoring and generation run through the
compressed cache): both have no hooks here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from torch import nn

from gate.errors import ConfigError
from gate.models.compress import bnb, delay, layers, prune, quanto
from gate.models.recipes import Recipe, example, format_recipe, get_recipe

#: Calibration inputs: token id lists, one per prompt, no padding.
Calibration = Sequence[Sequence[int]]

LoadKwargs = Callable[[Recipe], dict[str, Any]]
Apply = Callable[[nn.Module, Recipe, Calibration | None], None]


def _no_kwargs(recipe: Recipe) -> dict[str, Any]:
    return {}


def _no_apply(model: nn.Module, recipe: Recipe, calibration: Calibration | None) -> None:
    return None


@dataclass(frozen=True)
class RecipeHooks:
    """What one recipe does: keyword arguments for loading, and a change after loading."""

    load_kwargs: LoadKwargs = _no_kwargs
    apply: Apply = _no_apply


def _quanto(bits: int) -> Apply:
    def apply(model: nn.Module, recipe: Recipe, calibration: Calibration | None) -> None:
        quanto.quantize_weights(model, bits)

    return apply


def _bnb(mode: bnb.Mode) -> LoadKwargs:
    def load_kwargs(recipe: Recipe) -> dict[str, Any]:
        return {"quantization_config": bnb.quantization_config(mode)}

    return load_kwargs


def _magnitude(model: nn.Module, recipe: Recipe, calibration: Calibration | None) -> None:
    prune.prune_magnitude(model, _number(recipe))


def _wanda(model: nn.Module, recipe: Recipe, calibration: Calibration | None) -> None:
    if not calibration:
        raise ConfigError(
            f"recipe {format_recipe(recipe)} needs calibration prompts",
            "pass calibration=[...] to load_backend",
        )
    prune.prune_wanda(model, _number(recipe), calibration)


def _drop(model: nn.Module, recipe: Recipe, calibration: Calibration | None) -> None:
    layers.drop_last_layers(model, int(_number(recipe)))


def _delay(model: nn.Module, recipe: Recipe, calibration: Calibration | None) -> None:
    delay.add_forward_delay(model, _number(recipe) / 1000.0)


def _attention(model: nn.Module, recipe: Recipe, calibration: Calibration | None) -> None:
    from gate.models.compress import attention

    argument = None if recipe.value is None else format_recipe(recipe).partition(":")[2]
    attention.install(model, attention.parse_method(recipe.name, argument))


def _number(recipe: Recipe) -> float:
    value = recipe.value
    # parse_recipe guarantees a number for these recipes; this guards hand-built ones
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(
            f"recipe {recipe.name} needs a numeric argument", f"e.g. {example(recipe.name)}"
        )
    return float(value)


#: The hooks of every catalogued recipe (tests check the two tables name the same recipes).
HOOKS: dict[str, RecipeHooks] = {
    "none": RecipeHooks(),
    "bnb-int8": RecipeHooks(load_kwargs=_bnb("int8")),
    "bnb-nf4": RecipeHooks(load_kwargs=_bnb("nf4")),
    "bnb-fp4": RecipeHooks(load_kwargs=_bnb("fp4")),
    "quanto-int8": RecipeHooks(apply=_quanto(8)),
    "quanto-int4": RecipeHooks(apply=_quanto(4)),
    "quanto-int2": RecipeHooks(apply=_quanto(2)),
    "prune-magnitude": RecipeHooks(apply=_magnitude),
    "prune-wanda": RecipeHooks(apply=_wanda),
    "drop-layers": RecipeHooks(apply=_drop),
    "delay": RecipeHooks(apply=_delay),
    "gptq": RecipeHooks(),
    "awq": RecipeHooks(),
    "sparsegpt": RecipeHooks(),
    "attn-fp8": RecipeHooks(apply=_attention),
    "attn-sage": RecipeHooks(apply=_attention),
    "attn-topk": RecipeHooks(apply=_attention),
    "kv-snapkv": RecipeHooks(),
    "kv-h2o": RecipeHooks(),
    "kv-streaming": RecipeHooks(),
    "kv-quant": RecipeHooks(),
}


def hooks(recipe: Recipe) -> RecipeHooks:
    """The hooks of ``recipe`` (an uncatalogued name gets the catalogue's did-you-mean)."""
    get_recipe(recipe.name)
    return HOOKS[recipe.name]


def apply_recipe(model: nn.Module, recipe: Recipe, calibration: Calibration | None = None) -> None:
    """Apply the post-load part of ``recipe`` to ``model`` in place."""
    hooks(recipe).apply(model, recipe, calibration)


def load_kwargs(recipe: Recipe) -> dict[str, Any]:
    """Extra ``from_pretrained`` keyword arguments of ``recipe``."""
    return hooks(recipe).load_kwargs(recipe)


__all__ = ["HOOKS", "Calibration", "RecipeHooks", "apply_recipe", "hooks", "load_kwargs"]

"""Compression recipes by name, applied while a model is loaded.

A recipe acts at one or both of two moments:

* ``load_kwargs`` — extra keyword arguments for ``from_pretrained`` (the
  bitsandbytes recipes pass a ``BitsAndBytesConfig``);
* ``apply`` — an in-place change of the loaded model (quanto quantization,
  pruning, dropped layers, an injected delay).

:func:`parse_recipe` is the one strict entry point for recipe strings: unknown
names fail with a did-you-mean, arguments are checked for range (fractions in
(0, 1), layer counts >= 1, delays >= 0).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from torch import nn

from gate.errors import ConfigError
from gate.models.compress import bnb, delay, layers, prune, quanto
from gate.models.spec import Recipe

#: Kind of the single argument a recipe takes after ``:``.
ArgKind = Literal["none", "fraction", "count", "duration"]

#: Calibration inputs: token id lists, one per prompt, no padding.
Calibration = Sequence[Sequence[int]]


def _no_kwargs(recipe: Recipe) -> dict[str, Any]:
    return {}


def _no_apply(model: nn.Module, recipe: Recipe, calibration: Calibration | None) -> None:
    return None


@dataclass(frozen=True)
class RecipeDef:
    """One registered recipe: its name, argument kind and the two hooks."""

    name: str
    summary: str
    arg: ArgKind = "none"
    load_kwargs: Callable[[Recipe], dict[str, Any]] = _no_kwargs
    apply: Callable[[nn.Module, Recipe, Calibration | None], None] = _no_apply
    needs_calibration: bool = False
    #: Whether the recipe changes weights (it cannot run on a pre-quantized checkpoint).
    changes_weights: bool = True


def _quanto(bits: int) -> Callable[[nn.Module, Recipe, Calibration | None], None]:
    def apply(model: nn.Module, recipe: Recipe, calibration: Calibration | None) -> None:
        quanto.quantize_weights(model, bits)

    return apply


def _bnb(mode: bnb.Mode) -> Callable[[Recipe], dict[str, Any]]:
    def load_kwargs(recipe: Recipe) -> dict[str, Any]:
        return {"quantization_config": bnb.quantization_config(mode)}

    return load_kwargs


def _magnitude(model: nn.Module, recipe: Recipe, calibration: Calibration | None) -> None:
    prune.prune_magnitude(model, float(_value(recipe)))


def _wanda(model: nn.Module, recipe: Recipe, calibration: Calibration | None) -> None:
    if not calibration:
        raise ConfigError(
            f"recipe {format_recipe(recipe)} needs calibration prompts",
            "pass calibration=[...] to load_backend",
        )
    prune.prune_wanda(model, float(_value(recipe)), calibration)


def _drop(model: nn.Module, recipe: Recipe, calibration: Calibration | None) -> None:
    layers.drop_last_layers(model, int(_value(recipe)))


def _delay(model: nn.Module, recipe: Recipe, calibration: Calibration | None) -> None:
    delay.add_forward_delay(model, float(_value(recipe)) / 1000.0)


def _value(recipe: Recipe) -> float | int:
    if recipe.value is None:  # parse_recipe guarantees a value; this guards hand-built recipes
        raise ConfigError(
            f"recipe {recipe.name} needs an argument", f"e.g. {_example(recipe.name)}"
        )
    return recipe.value


RECIPES: dict[str, RecipeDef] = {
    d.name: d
    for d in (
        RecipeDef("none", "the unmodified model", changes_weights=False),
        RecipeDef("bnb-int8", "bitsandbytes LLM.int8() weights", load_kwargs=_bnb("int8")),
        RecipeDef("bnb-nf4", "bitsandbytes 4-bit NormalFloat weights", load_kwargs=_bnb("nf4")),
        RecipeDef("bnb-fp4", "bitsandbytes 4-bit float weights", load_kwargs=_bnb("fp4")),
        RecipeDef("quanto-int8", "optimum-quanto int8 weights", apply=_quanto(8)),
        RecipeDef("quanto-int4", "optimum-quanto int4 weights", apply=_quanto(4)),
        RecipeDef("quanto-int2", "optimum-quanto int2 weights", apply=_quanto(2)),
        RecipeDef(
            "prune-magnitude",
            "unstructured magnitude pruning of decoder linear weights",
            arg="fraction",
            apply=_magnitude,
        ),
        RecipeDef(
            "prune-wanda",
            "Wanda pruning (|W| x input-norm), needs calibration prompts",
            arg="fraction",
            apply=_wanda,
            needs_calibration=True,
        ),
        RecipeDef("drop-layers", "drop the last n decoder layers", arg="count", apply=_drop),
        RecipeDef(
            "delay",
            "sleep before every forward call (tests the latency tier)",
            arg="duration",
            apply=_delay,
            changes_weights=False,
        ),
    )
}

_EXAMPLE_ARG = {"fraction": "0.5", "count": "2", "duration": "20ms"}
_DURATION_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*(ms|s)?$")


def _example(name: str) -> str:
    d = RECIPES.get(name)
    return f"{name}:{_EXAMPLE_ARG[d.arg]}" if d and d.arg != "none" else name


def recipe_names() -> list[str]:
    """Registered recipe names, in registry order."""
    return list(RECIPES)


def get_recipe(name: str) -> RecipeDef:
    """The definition of a recipe name; unknown names get a did-you-mean."""
    try:
        return RECIPES[name]
    except KeyError:
        close = difflib.get_close_matches(name, RECIPES, n=1, cutoff=0.5)
        hint = f"did you mean {close[0]}?" if close else f"known: {', '.join(RECIPES)}"
        raise ConfigError(f"unknown recipe {name!r}", hint) from None


def parse_recipe(text: str | Recipe | None) -> Recipe:
    """Parse ``name`` or ``name:arg`` into a validated :class:`Recipe` (``None`` -> ``none``)."""
    if text is None:
        return Recipe("none")
    if isinstance(text, Recipe):
        return parse_recipe(format_recipe(text))
    name, sep, arg = text.strip().partition(":")
    name = name.strip().lower()
    d = get_recipe(name)
    arg = arg.strip()
    if d.arg == "none":
        if sep:
            raise ConfigError(f"recipe {name} takes no argument", f"write just {name}")
        return Recipe(name)
    if not arg:
        raise ConfigError(f"recipe {name} needs an argument", f"e.g. {_example(name)}")
    return Recipe(name, _parse_arg(name, d.arg, arg))


def _parse_arg(name: str, kind: ArgKind, arg: str) -> float | int:
    if kind == "fraction":
        try:
            f = float(arg)
        except ValueError:
            raise ConfigError(
                f"{name}: {arg!r} is not a number", f"e.g. {_example(name)}"
            ) from None
        if not 0.0 < f < 1.0:
            raise ConfigError(f"{name}: fraction {arg} is outside (0, 1)", f"e.g. {_example(name)}")
        return f
    if kind == "count":
        if not arg.isdigit() or int(arg) < 1:
            raise ConfigError(
                f"{name}: {arg!r} is not a positive whole number", f"e.g. {_example(name)}"
            )
        return int(arg)
    m = _DURATION_RE.match(arg)
    if not m:
        raise ConfigError(f"{name}: {arg!r} is not a duration", "e.g. delay:20ms or delay:0.1s")
    value = float(m.group(1))
    return value * 1000.0 if m.group(2) == "s" else value


def format_recipe(recipe: Recipe) -> str:
    """Canonical text of a recipe (``prune-magnitude:0.5``, ``delay:20ms``)."""
    if recipe.value is None:
        return recipe.name
    d = RECIPES.get(recipe.name)
    if d is not None and d.arg == "duration":
        return f"{recipe.name}:{recipe.value:g}ms"
    if isinstance(recipe.value, float):
        return f"{recipe.name}:{recipe.value:g}"
    return f"{recipe.name}:{recipe.value}"


def apply_recipe(model: nn.Module, recipe: Recipe, calibration: Calibration | None = None) -> None:
    """Apply the post-load part of ``recipe`` to ``model`` in place."""
    get_recipe(recipe.name).apply(model, recipe, calibration)


def load_kwargs(recipe: Recipe) -> dict[str, Any]:
    """Extra ``from_pretrained`` keyword arguments of ``recipe``."""
    return get_recipe(recipe.name).load_kwargs(recipe)


__all__ = [
    "RECIPES",
    "Calibration",
    "RecipeDef",
    "apply_recipe",
    "format_recipe",
    "get_recipe",
    "load_kwargs",
    "parse_recipe",
    "recipe_names",
]

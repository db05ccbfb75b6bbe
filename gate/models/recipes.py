"""Compression recipes as text: the catalogue of names, their arguments, parsing (no torch).

A recipe is written ``name`` or ``name:argument`` (``bnb-nf4``,
``prune-magnitude:0.5``, ``drop-layers:2``, ``delay:20ms``). This module knows
every name, what argument each takes and how that argument is read and
written back; :mod:`gate.models.compress` holds what each recipe *does* to a
model and is the only part that needs torch. Validating a run config or
printing a recipe therefore never loads a model library.

Arguments are read by *kind* (:data:`ARG_KINDS`): each kind is one parser and
one formatter, so a recipe with a new kind of argument (a choice such as
``w4a16``, keyed values such as ``sinks=4,window=256``) is one new entry in that
table plus one catalogue line, and :func:`parse_recipe` stays as it is.

Today's kinds and their ranges:

* ``none`` — no argument (``bnb-int8``; ``bnb-int8:4`` is refused);
* ``fraction`` — a number in the open interval (0, 1) (``prune-wanda:0.25``);
* ``count`` — a whole number >= 1 (``drop-layers:2``);
* ``duration`` — milliseconds, written ``20ms``, ``0.5s`` or a bare ``7`` (ms),
  always written back in ms (``delay:0.5s`` -> ``delay:500ms``).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeAlias

from gate.errors import ConfigError

#: A parsed recipe argument. Numbers today; a later kind may parse to text or to
#: ``(key, value)`` pairs, which keeps :class:`Recipe` frozen and hashable.
RecipeValue: TypeAlias = float | int | str | tuple[tuple[str, float | int | str], ...] | None


@dataclass(frozen=True)
class Recipe:
    """A named compression applied at load time, with its parsed argument.

    Canonical text forms: ``none``, ``bnb-nf4``, ``prune-magnitude:0.5``,
    ``drop-layers:2``, ``delay:20ms``. Build one with :meth:`parse`, which
    validates the name and argument against the catalogue (:data:`RECIPES`).
    """

    name: str
    value: RecipeValue = None

    @classmethod
    def parse(cls, text: str | Recipe | None) -> Recipe:
        """Parse and validate a recipe string (unknown names get a did-you-mean)."""
        return parse_recipe(text)

    def __str__(self) -> str:
        return format_recipe(self)


@dataclass(frozen=True)
class ArgKind:
    """How one kind of recipe argument is read from text and written back.

    ``parse(recipe_name, text)`` returns the value or raises a one-line
    :class:`~gate.errors.ConfigError`; ``format(value)`` is the canonical text,
    so that ``parse(format(v)) == v``.
    """

    name: str
    #: An argument that parses, shown in error hints (``0.5``, ``20ms``).
    example: str
    parse: Callable[[str, str], RecipeValue]
    format: Callable[[RecipeValue], str]


@dataclass(frozen=True)
class RecipeDef:
    """One catalogued recipe: its name, what it does and the kind of its argument."""

    name: str
    summary: str
    #: Name of the argument kind in :data:`ARG_KINDS` (``none``: no argument).
    arg: str = "none"
    #: Whether the recipe needs calibration prompts (it reads activations).
    needs_calibration: bool = False
    #: Whether the recipe changes weights (it cannot run on a pre-quantized checkpoint).
    changes_weights: bool = True


RECIPES: dict[str, RecipeDef] = {
    d.name: d
    for d in (
        RecipeDef("none", "the unmodified model", changes_weights=False),
        RecipeDef("bnb-int8", "bitsandbytes LLM.int8() weights"),
        RecipeDef("bnb-nf4", "bitsandbytes 4-bit NormalFloat weights"),
        RecipeDef("bnb-fp4", "bitsandbytes 4-bit float weights"),
        RecipeDef("quanto-int8", "optimum-quanto int8 weights"),
        RecipeDef("quanto-int4", "optimum-quanto int4 weights"),
        RecipeDef("quanto-int2", "optimum-quanto int2 weights"),
        RecipeDef(
            "prune-magnitude",
            "unstructured magnitude pruning of decoder linear weights",
            arg="fraction",
        ),
        RecipeDef(
            "prune-wanda",
            "Wanda pruning (|W| x input-norm), needs calibration prompts",
            arg="fraction",
            needs_calibration=True,
        ),
        RecipeDef("drop-layers", "drop the last n decoder layers", arg="count"),
        RecipeDef(
            "delay",
            "sleep before every forward call (tests the latency tier)",
            arg="duration",
            changes_weights=False,
        ),
    )
}


def _number_text(value: RecipeValue) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _no_argument(name: str, text: str) -> RecipeValue:
    raise ConfigError(f"recipe {name} takes no argument", f"write just {name}")


def _fraction(name: str, text: str) -> RecipeValue:
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"{name}: {text!r} is not a number", f"e.g. {example(name)}") from None
    if not 0.0 < value < 1.0:
        raise ConfigError(f"{name}: fraction {text} is outside (0, 1)", f"e.g. {example(name)}")
    return value


def _count(name: str, text: str) -> RecipeValue:
    if not text.isdigit() or int(text) < 1:
        raise ConfigError(
            f"{name}: {text!r} is not a positive whole number", f"e.g. {example(name)}"
        )
    return int(text)


_DURATION_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*(ms|s)?$")


def _duration_ms(name: str, text: str) -> RecipeValue:
    match = _DURATION_RE.match(text)
    if not match:
        raise ConfigError(f"{name}: {text!r} is not a duration", "e.g. delay:20ms or delay:0.1s")
    value = float(match.group(1))
    return value * 1000.0 if match.group(2) == "s" else value


#: Every kind of recipe argument, by the name a :class:`RecipeDef` gives in ``arg``.
ARG_KINDS: Mapping[str, ArgKind] = {
    kind.name: kind
    for kind in (
        ArgKind("none", "", _no_argument, _number_text),
        ArgKind("fraction", "0.5", _fraction, _number_text),
        ArgKind("count", "2", _count, _number_text),
        ArgKind("duration", "20ms", _duration_ms, lambda value: f"{_number_text(value)}ms"),
    )
}


def recipe_names() -> list[str]:
    """Catalogued recipe names, in catalogue order."""
    return list(RECIPES)


def get_recipe(name: str) -> RecipeDef:
    """The catalogue entry of a recipe name; unknown names get a did-you-mean."""
    try:
        return RECIPES[name]
    except KeyError:
        close = difflib.get_close_matches(name, RECIPES, n=1, cutoff=0.5)
        hint = f"did you mean {close[0]}?" if close else f"known: {', '.join(RECIPES)}"
        raise ConfigError(f"unknown recipe {name!r}", hint) from None


def example(name: str) -> str:
    """A recipe text that parses, for hints: ``prune-wanda:0.5``, ``bnb-nf4``."""
    definition = RECIPES.get(name)
    if definition is None or definition.arg == "none":
        return name
    return f"{name}:{ARG_KINDS[definition.arg].example}"


def parse_recipe(text: str | Recipe | None) -> Recipe:
    """Parse ``name`` or ``name:arg`` into a validated :class:`Recipe` (``None`` -> ``none``).

    The name is case-insensitive; white space around the name and the
    argument is ignored. A :class:`Recipe` is validated through its canonical
    text. Every problem is a one-line :class:`~gate.errors.ConfigError` (exit 4).
    """
    if text is None:
        return Recipe("none")
    if isinstance(text, Recipe):
        return parse_recipe(format_recipe(text))
    name, sep, arg = text.strip().partition(":")
    name = name.strip().lower()
    kind = ARG_KINDS[get_recipe(name).arg]
    arg = arg.strip()
    if kind.name == "none":
        if sep:
            kind.parse(name, arg)  # raises: this recipe takes no argument
        return Recipe(name)
    if not arg:
        raise ConfigError(f"recipe {name} needs an argument", f"e.g. {example(name)}")
    return Recipe(name, kind.parse(name, arg))


def format_recipe(recipe: Recipe) -> str:
    """Canonical text of a recipe (``prune-magnitude:0.5``, ``delay:20ms``)."""
    if recipe.value is None:
        return recipe.name
    definition = RECIPES.get(recipe.name)
    kind = ARG_KINDS[definition.arg] if definition is not None else ARG_KINDS["none"]
    return f"{recipe.name}:{kind.format(recipe.value)}"


__all__ = [
    "ARG_KINDS",
    "RECIPES",
    "ArgKind",
    "Recipe",
    "RecipeDef",
    "RecipeValue",
    "example",
    "format_recipe",
    "get_recipe",
    "parse_recipe",
    "recipe_names",
]

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
  always written back in ms (``delay:0.5s`` -> ``delay:500ms``);
* ``choice`` — one of the words :data:`CHOICES` lists for the recipe
  (``gptq:w4a16``, ``kv-quant:int2``);
* ``press`` — a KV-eviction budget: a bare compression ratio in (0, 1) (the
  fraction of the prompt's key/value pairs removed, ``kv-snapkv:0.5``) or keyed
  values ``ratio=0.5,window=16,kernel=5`` (the keys :data:`PRESS_KEYS` allows
  for the recipe), written back bare when only the ratio is given;
* ``budget`` — ``sinks=4,window=256`` (whole numbers, window >= 1).

Recipes belong to a *family* (:data:`FAMILIES`): weights changed at load time,
a pre-quantized checkpoint (resolved by :mod:`gate.models.checkpoints`), an
attention replacement, or a KV-cache method, which runs through the
compressed cache in scoring and generation.
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
    #: What the recipe acts on (:data:`FAMILIES`).
    family: str = "weights"


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
            "spend N ms of CPU before every forward call (tests the latency tier)",
            arg="duration",
            changes_weights=False,
            family="test",
        ),
        RecipeDef(
            "gptq",
            "a GPTQ W4A16 checkpoint made offline (compressed-tensors)",
            arg="choice",
            changes_weights=False,
            family="checkpoint",
        ),
        RecipeDef(
            "awq",
            "an AWQ W4A16 checkpoint made offline (compressed-tensors)",
            arg="choice",
            changes_weights=False,
            family="checkpoint",
        ),
        RecipeDef(
            "sparsegpt",
            "a SparseGPT unstructured-sparse checkpoint made offline",
            arg="fraction",
            changes_weights=False,
            family="checkpoint",
        ),
        RecipeDef(
            "attn-fp8",
            "FP8 (e4m3) attention numerics, per-head scales",
            changes_weights=False,
            family="attention",
        ),
        RecipeDef(
            "attn-sage",
            "SageAttention numerics: INT8 QK with smoothed K, FP16 PV",
            changes_weights=False,
            family="attention",
        ),
        RecipeDef(
            "attn-topk",
            "Top-k sparse attention: each query keeps its top fraction of scores",
            arg="fraction",
            changes_weights=False,
            family="attention",
        ),
        RecipeDef(
            "kv-snapkv",
            "SnapKV eviction of the prompt's KV cache (ratio removed)",
            arg="press",
            changes_weights=False,
            family="cache",
        ),
        RecipeDef(
            "kv-h2o",
            "observed-attention (H2O-style) eviction of the prompt's KV cache",
            arg="press",
            changes_weights=False,
            family="cache",
        ),
        RecipeDef(
            "kv-streaming",
            "StreamingLLM: attention sinks plus a rolling recent window",
            arg="budget",
            changes_weights=False,
            family="cache",
        ),
        RecipeDef(
            "kv-quant",
            "KV cache quantized to int4/int2 (transformers' quantized cache, quanto)",
            arg="choice",
            changes_weights=False,
            family="cache",
        ),
    )
}

#: What a recipe acts on, by :attr:`RecipeDef.family`.
FAMILIES: Mapping[str, str] = {
    "weights": "weights changed after loading",
    "checkpoint": "a pre-quantized or sparse checkpoint loaded as it is",
    "attention": "the attention computation replaced",
    "cache": "the KV cache compressed during generation",
    "test": "no compression (a test instrument)",
}

#: The words a ``choice`` argument accepts, per recipe.
CHOICES: Mapping[str, tuple[str, ...]] = {
    "gptq": ("w4a16",),
    "awq": ("w4a16",),
    "kv-quant": ("int4", "int2"),
}

#: The keys a ``press`` argument accepts, per recipe (``ratio`` is required).
PRESS_KEYS: Mapping[str, tuple[str, ...]] = {
    "kv-snapkv": ("ratio", "window", "kernel"),
    "kv-h2o": ("ratio",),
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


def _choice(name: str, text: str) -> RecipeValue:
    allowed = CHOICES.get(name, ())
    word = text.lower()
    if word not in allowed:
        raise ConfigError(
            f"{name}: {text!r} is not one of {', '.join(allowed)}", f"e.g. {name}:{allowed[0]}"
        )
    return word


def _pairs(name: str, text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise ConfigError(f"{name}: {part!r} is not key=value", f"e.g. {example(name)}")
        out[key.strip().lower()] = value.strip()
    return out


def _whole(name: str, key: str, text: str, least: int) -> int:
    if not text.isdigit() or int(text) < least:
        raise ConfigError(
            f"{name}: {key}={text} is not a whole number >= {least}", f"e.g. {example(name)}"
        )
    return int(text)


def _press(name: str, text: str) -> RecipeValue:
    args = _pairs(name, text) if "=" in text else {"ratio": text}
    allowed = PRESS_KEYS.get(name, ("ratio",))
    unknown = sorted(set(args) - set(allowed))
    if unknown or "ratio" not in args:
        what = f"unknown key {unknown[0]!r}" if unknown else "no ratio"
        raise ConfigError(
            f"{name}: {what} (it takes {', '.join(allowed)})", f"e.g. {example(name)}"
        )
    try:
        ratio = float(args["ratio"])
    except ValueError:
        raise ConfigError(
            f"{name}: ratio {args['ratio']!r} is not a number", f"e.g. {example(name)}"
        ) from None
    if not 0.0 < ratio < 1.0:
        raise ConfigError(
            f"{name}: ratio {args['ratio']} is outside (0, 1) (the fraction of KV pairs removed)",
            f"e.g. {example(name)}",
        )
    rest = tuple((key, _whole(name, key, args[key], 1)) for key in allowed[1:] if key in args)
    return (("ratio", ratio), *rest)


def _budget(name: str, text: str) -> RecipeValue:
    args = _pairs(name, text)
    unknown = sorted(set(args) - {"sinks", "window"})
    if unknown or "window" not in args:
        what = f"unknown key {unknown[0]!r}" if unknown else "no window"
        raise ConfigError(f"{name}: {what} (it takes sinks, window)", f"e.g. {example(name)}")
    sinks = _whole(name, "sinks", args.get("sinks", "4"), 0)
    return (("sinks", sinks), ("window", _whole(name, "window", args["window"], 1)))


def _format_keyed(value: RecipeValue) -> str:
    if not isinstance(value, tuple):
        return _number_text(value)
    if len(value) == 1 and value[0][0] == "ratio":
        return _number_text(value[0][1])
    return ",".join(f"{key}={_number_text(v)}" for key, v in value)


#: Every kind of recipe argument, by the name a :class:`RecipeDef` gives in ``arg``.
ARG_KINDS: Mapping[str, ArgKind] = {
    kind.name: kind
    for kind in (
        ArgKind("none", "", _no_argument, _number_text),
        ArgKind("fraction", "0.5", _fraction, _number_text),
        ArgKind("count", "2", _count, _number_text),
        ArgKind("duration", "20ms", _duration_ms, lambda value: f"{_number_text(value)}ms"),
        ArgKind("choice", "", _choice, str),
        ArgKind("press", "0.5", _press, _format_keyed),
        ArgKind("budget", "sinks=4,window=256", _budget, _format_keyed),
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
    if definition.arg == "choice":
        return f"{name}:{CHOICES[name][0]}"
    return f"{name}:{ARG_KINDS[definition.arg].example}"


def family(recipe: Recipe | str) -> str:
    """The family of a recipe (``weights``, ``checkpoint``, ``attention``, ``cache``, ``test``)."""
    name = recipe.name if isinstance(recipe, Recipe) else parse_recipe(recipe).name
    return get_recipe(name).family


def keyed(recipe: Recipe) -> dict[str, float | int | str]:
    """The keyed values of a ``press``/``budget`` recipe as a dict (``{"ratio": 0.5}``)."""
    value = recipe.value
    if not isinstance(value, tuple):
        return {}
    return {key: v for key, v in value}


def checkpoint_method(recipe: Recipe) -> str:
    """The checkpoint directory name of a checkpoint recipe (``gptq-w4a16``, ``sparsegpt-0.5``)."""
    return f"{recipe.name}-{ARG_KINDS[get_recipe(recipe.name).arg].format(recipe.value)}"


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
    "CHOICES",
    "FAMILIES",
    "PRESS_KEYS",
    "RECIPES",
    "ArgKind",
    "Recipe",
    "RecipeDef",
    "RecipeValue",
    "checkpoint_method",
    "example",
    "family",
    "format_recipe",
    "get_recipe",
    "keyed",
    "parse_recipe",
    "recipe_names",
]

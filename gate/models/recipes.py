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
* ``choice`` — one of the words its method lists (``choices``)
  (``gptq:w4a16``, ``kv-quant:int2``);
* ``press`` — a KV-eviction budget: a bare compression ratio in (0, 1) (the
  fraction of the prompt's key/value pairs removed, ``kv-snapkv:0.5``) or keyed
  values ``ratio=0.5,window=16,kernel=5`` (the keys its method's ``press_keys`` allow
  for the recipe), written back bare when only the ratio is given;
* ``budget`` — ``sinks=4,window=256`` (whole numbers, window >= 1);
* ``draft`` — a weight recipe the draft model is made with from the build's own
  base weights (``spec-draft:quanto-int4``, ``spec-draft:none``), written back
  in its canonical text; the whole text after the first ``:`` is that recipe;
* ``path`` — a directory or hub id of a separate draft model (``spec-model:PATH``).

**Stacks.** A build may stack recipes with ``+`` (``quanto-int4+kv-snapkv:0.5``):
:mod:`gate.models.stack` splits the text at every ``+`` first and reads each part
here, so a part's argument never holds a ``+``.

**Layer selection** (docs/localize.md "Layer-selective recipes"). After the
argument, a recipe may name the parts it acts on:

* weight recipes (``bnb-*``, ``quanto-*``, ``prune-*``) take ``keep=GLOB``
  (modules left uncompressed) and ``only=GLOB`` (compress only those), matched
  with :func:`fnmatch.fnmatchcase` on module names
  (``quanto-int2:only=model.layers.2.*``,
  ``prune-wanda:0.5,keep=model.layers.0.*``);
* ``gguf-*`` recipes take them too, matched against the Hugging Face module
  names of the model they are made from and written as llama-quantize's
  per-tensor types (docs/gguf.md "gguf-* recipes");
* attention and KV-press recipes (``attn-*``, ``kv-snapkv``, ``kv-h2o``,
  ``kv-streaming``) take ``layers=`` decoder-layer indices and ranges
  (``kv-snapkv:0.5,layers=0-3,7``).

Several globs (or indices) follow one key separated by commas: a part without
``=`` after a selector key continues that key's list, so
``bnb-nf4:keep=model.layers.0.*,model.layers.29.*`` keeps two layers. The
recipe's own argument therefore comes first and the selectors last; the
canonical text writes them in the order ``keep``, ``only``, ``layers``. A glob
that matches no module is refused when the recipe is applied (the names are
known only then); malformed syntax is refused here.

Each name is one compression method (:mod:`gate.models.methods`: one class per
method, read through :func:`gate.models.methods.registry.get_method`), which
declares the kind of its argument, its choices and press keys, and its *family*
(:data:`gate.models.methods.base.FAMILIES`): weights changed at load time,
a pre-quantized checkpoint (resolved by :mod:`gate.models.checkpoints`), an
attention replacement, a KV-cache method, which runs through the
compressed cache in scoring and generation, or a GGUF file llama.cpp's tools
make from the model (``gguf-q4_k_m``: one recipe per llama-quantize type,
declared once in :mod:`gate.engines.llama_cpp.types`), or speculative decoding
(``spec-*``: a drafter proposes tokens the build verifies, docs/speculative.md).
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from gate.errors import ConfigError
from gate.models.methods.base import WEIGHTS, RecipeValue, module_matches
from gate.models.methods.registry import get_method, method_names


@dataclass(frozen=True)
class Recipe:
    """A named compression applied at load time, with its parsed argument.

    Canonical text forms: ``none``, ``bnb-nf4``, ``prune-magnitude:0.5``,
    ``drop-layers:2``, ``delay:20ms``. Build one with :meth:`parse`, which
    validates the name and argument against its method (:func:`get_method`).
    """

    name: str
    value: RecipeValue = None
    #: Module-name globs left uncompressed (weight recipes).
    keep: tuple[str, ...] = ()
    #: Module-name globs compressed, the others left alone (weight recipes).
    only: tuple[str, ...] = ()
    #: Decoder-layer indices acted on (attention and KV-press recipes; empty: every layer).
    layers: tuple[int, ...] = ()

    @property
    def selective(self) -> bool:
        """Whether the recipe acts on a selection of modules or layers only."""
        return bool(self.keep or self.only or self.layers)

    def selects(self, module_name: str) -> bool:
        """Whether a weight recipe compresses the module ``module_name`` (keep/only globs,
        :func:`module_matches`)."""
        if self.only and not any(module_matches(g, module_name) for g in self.only):
            return False
        return not any(module_matches(g, module_name) for g in self.keep)

    def selects_layer(self, index: int) -> bool:
        """Whether an attention/KV recipe acts on decoder layer ``index``."""
        return not self.layers or index in self.layers

    @property
    def argument(self) -> str | None:
        """The canonical text of its own argument, without selectors (``None``: none)."""
        return argument_text(self)

    @property
    def control(self) -> bool:
        """Whether it is the control, the unmodified model (its method's ``control``)."""
        return get_method(self.name).control

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
    allowed = get_method(name).choices
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
    allowed = get_method(name).press_keys
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


def _draft(name: str, text: str) -> RecipeValue:
    if "+" in text:
        raise ConfigError(
            f"{name}: the draft recipe {text!r} holds a '+'",
            "a self-draft takes one weight recipe (e.g. spec-draft:quanto-int4)",
        )
    draft = parse_recipe(text)
    family = get_method(draft.name).family
    if not draft.control and family is not WEIGHTS:  # a self-draft's recipe changes weights
        raise ConfigError(
            f"{name}: {draft} is a {family.name} recipe, not a weight recipe",
            "a self-draft is the base weights compressed: e.g. spec-draft:quanto-int4",
        )
    return format_recipe(draft)


def _path(name: str, text: str) -> RecipeValue:
    if not text or "+" in text:
        raise ConfigError(f"{name}: {text!r} is not a model path", f"e.g. {example(name)}")
    return text


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
        ArgKind("draft", "quanto-int4", _draft, str),
        ArgKind("path", "path/to/draft-model", _path, str),
    )
}


def recipe_names() -> list[str]:
    """Catalogued recipe names, in catalogue order."""
    return method_names()


def example(name: str) -> str:
    """A recipe text that parses, for hints: ``prune-wanda:0.5``, ``bnb-nf4``."""
    try:
        method = get_method(name)
    except ConfigError:
        return name
    if method.arg == "none":
        return name
    if method.arg == "choice":
        return f"{name}:{method.choices[0]}"
    return f"{name}:{ARG_KINDS[method.arg].example}"


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
    kind = ARG_KINDS[get_method(name).arg]
    if kind.name in WHOLE_ARGUMENT_KINDS:  # the argument is itself a recipe or a path
        if not arg.strip():
            raise ConfigError(f"recipe {name} needs an argument", f"e.g. {example(name)}")
        return Recipe(name, kind.parse(name, arg.strip()))
    arg, selectors = _split_selectors(name, arg.strip())
    if kind.name == "none":
        if arg or (sep and not selectors):
            kind.parse(name, arg)  # raises: this recipe takes no argument
        return _selected(Recipe(name), selectors)
    if not arg:
        raise ConfigError(f"recipe {name} needs an argument", f"e.g. {example(name)}")
    return _selected(Recipe(name, kind.parse(name, arg)), selectors)


#: Argument kinds read whole: no layer selectors are split from them.
WHOLE_ARGUMENT_KINDS: tuple[str, ...] = ("draft", "path")

#: The selector keys, in canonical order (a method's family says which it takes).
SELECTOR_KEYS: tuple[str, ...] = ("keep", "only", "layers")

_GLOB_CHARS = frozenset(string.ascii_letters + string.digits + "_.*?[]!-/")


def _split_selectors(name: str, arg: str) -> tuple[str, dict[str, list[str]]]:
    """``0.5,keep=a.*,b.*`` -> ``("0.5", {"keep": ["a.*", "b.*"]})`` (module doc)."""
    if not any(f"{key}=" in arg.lower() for key in SELECTOR_KEYS):
        return arg, {}
    main: list[str] = []
    selectors: dict[str, list[str]] = {}
    current: str | None = None
    for part in (p.strip() for p in arg.split(",")):
        key, sep, value = part.partition("=")
        key = key.strip().lower()
        if sep and key in SELECTOR_KEYS:
            if key in selectors:
                raise ConfigError(
                    f"{name}: {key}= is given twice",
                    f"list every value after one {key}=, separated by commas",
                )
            current = key
            selectors[key] = []
            part = value.strip()
        elif sep or current is None:
            if current is not None:
                raise ConfigError(
                    f"{name}: {part!r} follows the layer selection",
                    f"write the recipe's own argument first, then keep=/only=/layers=: "
                    f"e.g. {example(name)},{key}=...",
                )
            main.append(part)
            continue
        if not part:
            raise ConfigError(f"{name}: {current}= has an empty value", _selector_hint(name))
        selectors[current].append(part)
    return ",".join(main), selectors


def _selector_hint(name: str) -> str:
    if "keep" in get_method(name).family.selectors:
        return f"e.g. {name}:only=model.layers.2.* or {name}:keep=model.layers.0.*,lm_head"
    return f"e.g. {name}:layers=0-3,7"


def _glob(name: str, text: str) -> str:
    bad = sorted(set(text) - _GLOB_CHARS)
    if bad or text.count("[") != text.count("]"):
        what = f"character {bad[0]!r}" if bad else "unbalanced brackets"
        raise ConfigError(f"{name}: glob {text!r} has {what}", _selector_hint(name))
    return text


def _layer_indices(name: str, parts: list[str]) -> tuple[int, ...]:
    out: set[int] = set()
    for part in parts:
        low, dash, high = part.partition("-")
        if not low.isdigit() or (dash and not high.isdigit()):
            raise ConfigError(
                f"{name}: layers={part!r} is not an index or a range a-b", _selector_hint(name)
            )
        first, last = int(low), int(high) if dash else int(low)
        if last < first:
            raise ConfigError(f"{name}: layers range {part} runs backwards", _selector_hint(name))
        out.update(range(first, last + 1))
    return tuple(sorted(out))


def _selected(recipe: Recipe, selectors: Mapping[str, list[str]]) -> Recipe:
    if not selectors:
        return recipe
    method = get_method(recipe.name)
    for key in selectors:
        if key not in method.selectors:
            why = method.not_selective or f"it is a {method.family.name} recipe"
            takes = "keep=/only= (module globs)" if key == "layers" else "layers= (indices)"
            hint = f"{takes} instead" if method.selectors else f"write just {example(recipe.name)}"
            raise ConfigError(f"{recipe.name} takes no {key}= ({why})", hint)
    keep = tuple(dict.fromkeys(_glob(recipe.name, g) for g in selectors.get("keep", [])))
    only = tuple(dict.fromkeys(_glob(recipe.name, g) for g in selectors.get("only", [])))
    layers = _layer_indices(recipe.name, selectors["layers"]) if "layers" in selectors else ()
    return replace(recipe, keep=keep, only=only, layers=layers)


def _format_layers(layers: tuple[int, ...]) -> str:
    runs: list[str] = []
    start = prev = layers[0]
    for index in (*layers[1:], None):
        if index is not None and index == prev + 1:
            prev = index
            continue
        runs.append(str(start) if start == prev else f"{start}-{prev}")
        if index is not None:
            start = prev = index
    return ",".join(runs)


def selector_text(recipe: Recipe) -> str:
    """The canonical selector part of a recipe (``keep=a.*,b.*``; empty when none)."""
    parts = []
    if recipe.keep:
        parts.append("keep=" + ",".join(recipe.keep))
    if recipe.only:
        parts.append("only=" + ",".join(recipe.only))
    if recipe.layers:
        parts.append("layers=" + _format_layers(recipe.layers))
    return ",".join(parts)


def argument_text(recipe: Recipe) -> str | None:
    """The canonical text of the recipe's own argument, without selectors (``None``: none)."""
    if recipe.value is None:
        return None
    try:
        kind = ARG_KINDS[get_method(recipe.name).arg]
    except ConfigError:
        kind = ARG_KINDS["none"]
    return kind.format(recipe.value)


def format_recipe(recipe: Recipe) -> str:
    """Canonical text of a recipe (``prune-magnitude:0.5``, ``quanto-int2:only=model.layers.2.*``)."""
    parts = [p for p in (argument_text(recipe), selector_text(recipe)) if p]
    return f"{recipe.name}:{','.join(parts)}" if parts else recipe.name


__all__ = [
    "ARG_KINDS",
    "SELECTOR_KEYS",
    "WHOLE_ARGUMENT_KINDS",
    "ArgKind",
    "Recipe",
    "argument_text",
    "example",
    "format_recipe",
    "parse_recipe",
    "recipe_names",
    "selector_text",
]

"""Recipes that stack: ``quanto-int4+kv-snapkv:0.5``, ``bnb-nf4+spec-ngram:4`` (no torch).

A build that ships is often several recipes at once: a weight format, an
attention or KV-cache method, speculative decoding. A :class:`RecipeStack` is
their sequence, written with ``+`` and applied in the order written. The text
is split at every ``+`` first, and each part is then read as one recipe
(:func:`gate.models.recipes.parse_recipe`), so a part's argument never holds a
``+``.

Each part fills one *slot*, which its method's family names
(:attr:`gate.models.methods.base.Family.slot`): the
weights (a weight recipe, a pre-quantized checkpoint or a GGUF file), the
attention computation, the KV cache, the speculative decoder. A test instrument
(``delay``) fills none. The rules, each refused in one line (exit 4) where the
text is read, so ``--dry-run`` reports them:

* at most one part per slot (``bnb-int8+bnb-nf4``: two weight formats);
* the slots in the order a build is made: weights, attention, KV cache,
  speculative decoding (the weights are what the model is loaded with; the
  others act on the loaded model);
* ``none`` only alone (it changes nothing);
* a KV-cache method and speculative decoding not together: the cache methods
  run their own decoding loop, speculative decoding runs transformers' assisted
  generation over the full cache.

Where a stack runs is checked where the engine is known
(:mod:`gate.session.engine`): a served build takes no recipe, and ``--engine
llama.cpp`` runs one ``gguf-*`` file alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gate.errors import ConfigError
from gate.models.methods.registry import get_method
from gate.models.recipes import Recipe, format_recipe, parse_recipe

#: The separator of a stack's parts.
SEPARATOR = "+"

#: The slots in the order a build is made (and a stack is written).
SLOT_ORDER: tuple[str, ...] = ("weights", "attention", "cache", "speculative")

#: What two parts in one slot are, for the refusal.
_TWO_OF: Mapping[str, str] = {
    "weights": "two weight formats",
    "attention": "two attention methods",
    "cache": "two KV-cache methods",
    "speculative": "two speculative decoders",
}


def slot(recipe: Recipe) -> str | None:
    """The slot ``recipe`` fills (``None``: a test instrument)."""
    return get_method(recipe.name).family.slot


@dataclass(frozen=True)
class RecipeStack:
    """The parts of one build, in the order they are applied (see the module doc).

    Build one with :func:`parse_stack`, which validates every part and the
    rules; a one-part stack is the recipe as before (``str`` gives the same text).
    """

    parts: tuple[Recipe, ...]

    def __str__(self) -> str:
        return SEPARATOR.join(format_recipe(p) for p in self.parts)

    def part(self, slot_name: str) -> Recipe | None:
        """The part in slot ``slot_name`` (``weights``, ``attention``, ``cache``,
        ``speculative``), or ``None``."""
        return next((p for p in self.parts if slot(p) == slot_name), None)

    @property
    def weights(self) -> Recipe:
        """The part the model is loaded with (``none`` when the stack has no weight part)."""
        return self.part("weights") or Recipe("none")

    @property
    def on_loaded_model(self) -> tuple[Recipe, ...]:
        """The parts applied to the loaded model after its weights: attention and test
        instruments, in order."""
        return tuple(p for p in self.parts if slot(p) in ("attention", None))

    def with_weights(self, recipe: Recipe) -> RecipeStack:
        """This stack with its weight part replaced by ``recipe`` (a repaired build,
        ``gate localize``); a stack without one gets it first."""
        rest = tuple(p for p in self.parts if slot(p) != "weights" and not p.control)
        return parse_stack(SEPARATOR.join(format_recipe(p) for p in (recipe, *rest)))

    @property
    def composed(self) -> bool:
        """Whether it is more than one recipe."""
        return len(self.parts) > 1


def parse_stack(text: str | Recipe | RecipeStack | None) -> RecipeStack:
    """Read ``a+b+c`` (or one recipe, or ``None`` for ``none``) into a validated stack."""
    if isinstance(text, RecipeStack):
        return parse_stack(str(text))
    if text is None or isinstance(text, Recipe):
        return RecipeStack((parse_recipe(text),))
    pieces = [piece.strip() for piece in text.split(SEPARATOR)]
    if any(not piece for piece in pieces):
        raise ConfigError(
            f"recipe {text!r} has an empty part",
            "join recipes with one '+', e.g. quanto-int4+kv-snapkv:0.5",
        )
    stack = RecipeStack(tuple(parse_recipe(piece) for piece in pieces))
    check_stack(stack)
    return stack


def check_stack(stack: RecipeStack) -> None:
    """The rules of the module doc; each broken one is a one-line :class:`ConfigError`."""
    if not stack.composed:
        return
    text = str(stack)
    if any(p.control for p in stack.parts):
        raise ConfigError(f"recipe {text}: 'none' cannot be stacked", "drop the 'none' part")
    filled: dict[str, Recipe] = {}
    for part in stack.parts:
        name = slot(part)
        if name is None:
            continue
        if name in filled:
            raise ConfigError(
                f"recipe {text} stacks {_TWO_OF[name]} ({filled[name]} and {part})",
                f"keep one of them: a build has one {name} part",
            )
        filled[name] = part
    order = [SLOT_ORDER.index(name) for name in filled]
    if order != sorted(order):
        canonical = SEPARATOR.join(str(filled[s]) for s in SLOT_ORDER if s in filled)
        raise ConfigError(
            f"recipe {text} is not in the order a build is made"
            " (weights, attention, KV cache, speculative decoding)",
            f"write {canonical}",
        )
    if "cache" in filled and "speculative" in filled:
        raise ConfigError(
            f"recipe {text} stacks a KV-cache method with speculative decoding,"
            " which gate cannot run together",
            "the cache methods decode with their own loop; gate one of them per build",
        )


__all__ = [
    "SEPARATOR",
    "SLOT_ORDER",
    "RecipeStack",
    "check_stack",
    "parse_stack",
    "slot",
]

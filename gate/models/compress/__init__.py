"""What each compression method does to a model: the torch side of :mod:`gate.models.methods`.

The methods — one class each, with their names, argument kinds and facts — are
:mod:`gate.models.methods` (no torch). This package holds the torch code they
call when they act, one module per kind of change (``quanto``, ``bnb``,
``prune``, ``layers``, ``delay``, ``attention``, ``kvcache``), and the two moments at
which a recipe acts, read from its method:

* ``load_kwargs`` — extra keyword arguments for ``from_pretrained`` (the
  bitsandbytes recipes pass a ``BitsAndBytesConfig``);
* ``apply`` — an in-place change of the loaded model (quanto, torchao or HQQ
  quantization, pruning, dropped layers, an injected delay, a replaced attention
  function).

Checkpoint recipes (``gptq:w4a16`` ...) act before loading (the loader reads
the checkpoint instead of the base model) and cache recipes (``kv-*``) after
it (the loader wraps the backend so scoring and generation run through the
compressed cache).

**The contract: every recipe proves it acted.** Each method declares its
:class:`~gate.models.activity.Footprint` (what it counts, and when): a
method without one does not load. ``apply`` returns the units it finds changed
in the model as loaded — modules quantized (counted by their classes, not by
what was asked for), linear layers pruned (holding zeros), layers dropped,
quantized layers of a checkpoint (:mod:`gate.models.compress.counting`) — and
the loader starts the build's :class:`~gate.models.activity.Activity` from it.
Attention recipes count each replaced call, cache recipes each request
(:mod:`gate.models.activity`). Only the control (``none``) has no footprint.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import nn

from gate.errors import ModelLoadError
from gate.models.activity import Activity
from gate.models.methods.base import ActivationPrompts, CompressionMethod
from gate.models.methods.registry import get_method
from gate.models.recipes import Recipe, format_recipe


def method_of(recipe: Recipe) -> CompressionMethod:
    """The method of ``recipe``; one without a footprint cannot prove it acted: refused
    (only the control, ``none``, has none). An unknown name gets the did-you-mean."""
    found = get_method(recipe.name)
    if found.footprint is None and not found.control:
        raise ModelLoadError(
            f"recipe {recipe.name} declares no footprint, so it cannot prove it acted;"
            " it is not loaded",
            "give its CompressionMethod a Footprint (gate.models.methods)",
        )
    return found


def apply_recipe(
    model: nn.Module, recipe: Recipe, prompts: ActivationPrompts | None = None
) -> Activity | None:
    """Apply the post-load part of ``recipe`` to ``model`` in place; its :class:`Activity`.

    ``prompts``: the token ids of the activation prompts a recipe that reads
    activations needs (``prune-wanda``; what a run config's ``calibration`` file holds).

    The activity starts from what the recipe finds changed in the loaded model
    (``None`` for the control).
    """
    method = method_of(recipe)
    changed = method.apply(model, recipe, prompts)
    if method.footprint is None:
        return None
    activity = Activity(format_recipe(recipe), method.footprint)
    activity.count(changed)
    return activity


def applies_after_loading(recipe: Recipe) -> bool:
    """Whether ``recipe`` changes an already loaded model by itself: no ``from_pretrained``
    arguments, no activation prompts (so a loaded model's copy can take it)."""
    method = method_of(recipe)
    return not method.quantizes_while_loading and not method.needs_calibration


def load_kwargs(recipe: Recipe, module_names: Sequence[str] = ()) -> dict[str, Any]:
    """Extra ``from_pretrained`` keyword arguments of ``recipe``; ``module_names``: the
    model's linear modules (a layer-selective load-time recipe needs them)."""
    return method_of(recipe).load_kwargs(recipe, module_names)


__all__ = [
    "ActivationPrompts",
    "applies_after_loading",
    "apply_recipe",
    "load_kwargs",
    "method_of",
]

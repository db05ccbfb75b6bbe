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
compressed cache).

**The contract: every recipe proves it acted.** Each entry of :data:`HOOKS`
declares its :class:`~gate.models.activity.Footprint` (what it counts, and
when), a required field: a recipe without hooks does not load. ``apply``
returns the units it finds changed in the model as loaded — modules quantized
(counted by their classes, not by what was asked for), linear layers pruned
(holding zeros), layers dropped, quantized layers of a checkpoint — and the
loader starts the build's :class:`~gate.models.activity.Activity` from it.
Attention recipes count each replaced call, cache recipes each request
(:mod:`gate.models.activity`). Only the control (``none``) has no footprint.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from torch import nn

from gate.errors import ConfigError, ModelLoadError
from gate.models.activity import Activity, Counting, Footprint
from gate.models.compress import bnb, delay, layers, prune, quanto, select
from gate.models.compress.propagate import ActivationPrompts
from gate.models.llama_cpp.types import QUANT_TYPES
from gate.models.llama_cpp.written import footprint as gguf_footprint
from gate.models.recipes import Recipe, argument_text, example, format_recipe, get_recipe

#: ``(recipe, module names)``: the names are the model's linear modules, known before
#: loading only for a layer-selective recipe (empty otherwise).
LoadKwargs = Callable[[Recipe, Sequence[str]], dict[str, Any]]
#: Changes a loaded model in place and returns the units it finds changed (see the module doc).
Apply = Callable[[nn.Module, Recipe, ActivationPrompts | None], int]


def _no_kwargs(recipe: Recipe, names: Sequence[str]) -> dict[str, Any]:
    return {}


def _nothing(model: nn.Module, recipe: Recipe, prompts: ActivationPrompts | None) -> int:
    return 0


@dataclass(frozen=True)
class RecipeHooks:
    """What one recipe does and what it counts to prove it (see the module doc).

    ``footprint`` has no default: a recipe must say what it counts. ``None``
    is reserved for the control, which changes nothing.
    """

    footprint: Footprint | None
    load_kwargs: LoadKwargs = _no_kwargs
    apply: Apply = _nothing


def modules_of_class(model: nn.Module, *names: str) -> int:
    """Modules of ``model`` whose class is one of ``names`` (the classes a quantizer installs)."""
    return sum(type(m).__name__ in names for m in model.modules())


def pruned_linears(model: nn.Module) -> int:
    """Linear layers of the decoder blocks that hold zero weights (a trained dense layer holds none)."""
    return sum(
        int(bool((m.weight == 0).any()))
        for block in layers.decoder_layers(model)
        for m in block.modules()
        if isinstance(m, nn.Linear)
    )


def quantized_checkpoint_layers(model: nn.Module) -> int:
    """Layers of a loaded checkpoint that carry a quantization or sparsity scheme.

    compressed-tensors marks each compressed module with ``quantization_scheme``
    (packed INT4 weights) or keeps a ``weight_packed`` / ``weight_scale``
    parameter; a sparse checkpoint stored dense is counted by its zeros.
    """
    marked = sum(
        1
        for m in model.modules()
        if getattr(m, "quantization_scheme", None) is not None
        or hasattr(m, "weight_packed")
        or hasattr(m, "weight_scale")
    )
    return marked or pruned_linears(model)


def _quanto(bits: int) -> Apply:
    def apply(model: nn.Module, recipe: Recipe, prompts: ActivationPrompts | None) -> int:
        modules = None
        if recipe.selective:
            modules = select.selected(recipe, select.linear_names(model, quanto.EXCLUDE))
        quanto.quantize_weights(model, bits, modules)
        return modules_of_class(model, "QLinear")

    return apply


def _bnb(mode: bnb.Mode) -> LoadKwargs:
    def load_kwargs(recipe: Recipe, names: Sequence[str]) -> dict[str, Any]:
        skip: list[str] = []
        if recipe.selective:
            candidates = [n for n in names if n != "lm_head"]
            chosen = set(select.selected(recipe, candidates))
            skip = [n for n in candidates if n not in chosen]
        return {"quantization_config": bnb.quantization_config(mode, skip)}

    return load_kwargs


def _bnb_layers(model: nn.Module, recipe: Recipe, prompts: ActivationPrompts | None) -> int:
    return modules_of_class(model, "Linear8bitLt", "Linear4bit")


def _magnitude(model: nn.Module, recipe: Recipe, prompts: ActivationPrompts | None) -> int:
    prune.prune_magnitude(model, _number(recipe), _pruned_modules(model, recipe))
    return pruned_linears(model)


def _wanda(model: nn.Module, recipe: Recipe, prompts: ActivationPrompts | None) -> int:
    if not prompts:
        raise ConfigError(
            f"recipe {format_recipe(recipe)} needs calibration prompts",
            "pass calibration=[...] to load_backend",
        )
    prune.prune_wanda(model, _number(recipe), prompts, _pruned_modules(model, recipe))
    return pruned_linears(model)


def _pruned_modules(model: nn.Module, recipe: Recipe) -> list[str] | None:
    if not recipe.selective:
        return None
    return select.selected(recipe, prune.decoder_linear_names(model))


def _drop(model: nn.Module, recipe: Recipe, prompts: ActivationPrompts | None) -> int:
    before = len(layers.decoder_layers(model))
    layers.drop_last_layers(model, int(_number(recipe)))
    return before - len(layers.decoder_layers(model))


def _delay(model: nn.Module, recipe: Recipe, prompts: ActivationPrompts | None) -> int:
    delay.add_forward_delay(model, _number(recipe) / 1000.0)
    return int(hasattr(model, delay.HANDLE_ATTR))


def _attention(model: nn.Module, recipe: Recipe, prompts: ActivationPrompts | None) -> int:
    from gate.models.compress import attention

    attention.install(model, attention.parse_method(recipe.name, argument_text(recipe)))
    if recipe.layers:
        attention.keep_exact(model, recipe.layers, format_recipe(recipe))
    return 0  # counted per call by the replacement itself


def _checkpoint(model: nn.Module, recipe: Recipe, prompts: ActivationPrompts | None) -> int:
    return quantized_checkpoint_layers(model)


def _number(recipe: Recipe) -> float:
    value = recipe.value
    # parse_recipe guarantees a number for these recipes; this guards hand-built ones
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(
            f"recipe {recipe.name} needs a numeric argument", f"e.g. {example(recipe.name)}"
        )
    return float(value)


QUANTIZED = Footprint("linear modules quantized", Counting.AT_LOAD)
PRUNED = Footprint("linear modules pruned", Counting.AT_LOAD)
CHECKPOINT = Footprint("compressed layers loaded", Counting.AT_LOAD)
ATTENTION = Footprint("attention calls replaced", Counting.PER_CALL)
EVICTED = Footprint("KV pairs evicted", Counting.PER_REQUEST)
#: A speculative decoder: draft tokens proposed, on generation only (teacher-forced scoring
#: runs the target alone; :mod:`gate.models.backends.speculative` counts them).
DRAFTED = Footprint("draft tokens proposed", Counting.PER_CALL, generation_only=True)

#: The hooks of every catalogued recipe (tests check the two tables name the same recipes).
HOOKS: dict[str, RecipeHooks] = {
    "none": RecipeHooks(None),
    "bnb-int8": RecipeHooks(QUANTIZED, load_kwargs=_bnb("int8"), apply=_bnb_layers),
    "bnb-nf4": RecipeHooks(QUANTIZED, load_kwargs=_bnb("nf4"), apply=_bnb_layers),
    "bnb-fp4": RecipeHooks(QUANTIZED, load_kwargs=_bnb("fp4"), apply=_bnb_layers),
    "quanto-int8": RecipeHooks(QUANTIZED, apply=_quanto(8)),
    "quanto-int4": RecipeHooks(QUANTIZED, apply=_quanto(4)),
    "quanto-int2": RecipeHooks(QUANTIZED, apply=_quanto(2)),
    "prune-magnitude": RecipeHooks(PRUNED, apply=_magnitude),
    "prune-wanda": RecipeHooks(PRUNED, apply=_wanda),
    "drop-layers": RecipeHooks(Footprint("decoder layers dropped", Counting.AT_LOAD), apply=_drop),
    "delay": RecipeHooks(Footprint("forward delays installed", Counting.AT_LOAD), apply=_delay),
    "gptq": RecipeHooks(CHECKPOINT, apply=_checkpoint),
    "awq": RecipeHooks(CHECKPOINT, apply=_checkpoint),
    "sparsegpt": RecipeHooks(CHECKPOINT, apply=_checkpoint),
    "attn-fp8": RecipeHooks(ATTENTION, apply=_attention),
    "attn-sage": RecipeHooks(ATTENTION, apply=_attention),
    "attn-topk": RecipeHooks(ATTENTION, apply=_attention),
    "kv-snapkv": RecipeHooks(EVICTED),
    "kv-h2o": RecipeHooks(EVICTED),
    "kv-streaming": RecipeHooks(EVICTED),
    "kv-quant": RecipeHooks(Footprint("KV pairs quantized", Counting.PER_REQUEST)),
    # wrapped around the loaded target by the loader (gate.models.backends.speculative)
    "spec-ngram": RecipeHooks(DRAFTED),
    "spec-draft": RecipeHooks(DRAFTED),
    "spec-model": RecipeHooks(DRAFTED),
    # made by llama.cpp's tools before loading; counted from the file's header when made
    **{t.recipe: RecipeHooks(gguf_footprint(t)) for t in QUANT_TYPES},
}


def hooks(recipe: Recipe) -> RecipeHooks:
    """The hooks of ``recipe``; a catalogued recipe without them cannot prove it acted: refused.

    An uncatalogued name gets the catalogue's did-you-mean.
    """
    get_recipe(recipe.name)
    found = HOOKS.get(recipe.name)
    if found is None or (found.footprint is None and recipe.name != "none"):
        raise ModelLoadError(
            f"recipe {recipe.name} declares no footprint, so it cannot prove it acted;"
            " it is not loaded",
            "give it a RecipeHooks entry with a Footprint in gate.models.compress.HOOKS",
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
    found = hooks(recipe)
    changed = found.apply(model, recipe, prompts)
    if found.footprint is None:
        return None
    activity = Activity(format_recipe(recipe), found.footprint)
    activity.count(changed)
    return activity


def applies_after_loading(recipe: Recipe) -> bool:
    """Whether ``recipe`` changes an already loaded model by itself: no ``from_pretrained``
    arguments, no activation prompts (so a loaded model's copy can take it)."""
    found = hooks(recipe)
    return found.load_kwargs is _no_kwargs and not get_recipe(recipe.name).needs_calibration


def load_kwargs(recipe: Recipe, module_names: Sequence[str] = ()) -> dict[str, Any]:
    """Extra ``from_pretrained`` keyword arguments of ``recipe``; ``module_names``: the
    model's linear modules (a layer-selective load-time recipe needs them)."""
    return hooks(recipe).load_kwargs(recipe, module_names)


__all__ = [
    "ATTENTION",
    "CHECKPOINT",
    "DRAFTED",
    "EVICTED",
    "HOOKS",
    "PRUNED",
    "QUANTIZED",
    "ActivationPrompts",
    "RecipeHooks",
    "applies_after_loading",
    "apply_recipe",
    "hooks",
    "load_kwargs",
    "modules_of_class",
    "pruned_linears",
    "quantized_checkpoint_layers",
]

"""Whether a recipe can run on a model, decided before any model library loads.

The run planner calls :func:`check_recipe_runs` for every candidate so that a
recipe that cannot run stops the run with one line before the first model
loads (nothing measured, nothing written):

* a checkpoint recipe (``gptq:w4a16``, ``awq:w4a16``, ``sparsegpt:0.5``) on the
  demo model needs its checkpoint packaged or cached
  (:func:`gate.models.checkpoints.find`); a missing one is
  :class:`~gate.errors.ModelLoadError` (exit 3) naming the command that makes
  it. On another model it is :class:`~gate.errors.ConfigError` (exit 4): such a
  checkpoint is made in the user's own pipeline and given as the model;
* ``kv-quant`` needs optimum-quanto (transformers' quantized cache backend):
  exit 3 naming the package when it is not installed;
* a press (``kv-snapkv``, ``kv-h2o``, ``kv-streaming``) needs every decoder
  layer to be full attention: a local model whose ``config.json`` declares
  sliding-window or other layer types is refused (exit 4). Hub models are
  checked when they load;
* a ``.gguf`` model must be an existing file (exit 4), and a recipe that
  quantizes while loading (``bnb-*``) is refused on it (exit 4,
  :func:`check_gguf_recipe`);
* a ``gguf-*`` recipe needs llama.cpp built (exit 4 naming the set-up
  command), and a type that needs an importance matrix is refused (exit 4,
  :func:`gate.models.llama_cpp.types.refuse_imatrix`).

Standard library only (no torch, no transformers).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

from gate.errors import ConfigError, ModelLoadError
from gate.models import checkpoints
from gate.models.recipes import Recipe, checkpoint_method, get_recipe, parse_recipe
from gate.models.spec import ModelSpec

#: How to make a missing checkpoint of the demo model (named in the one-line error).
MAKE_CHECKPOINTS = (
    "make it in llm-compressor's own environment: "
    "PY=$(bash scripts/setup_tool_env.sh llmcompressor | tail -n 1); "
    "$PY scripts/make_compressed_checkpoints.py {method}"
)
#: Cache recipes that evict pairs (they read queries of full-attention layers).
PRESSES = ("kv-snapkv", "kv-h2o", "kv-streaming")


def checkpoint_dir(spec: ModelSpec, recipe: Recipe) -> Path:
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


def require_quanto(recipe: Recipe) -> None:
    """``kv-quant`` needs optimum-quanto installed (ModelLoadError, exit 3)."""
    if importlib.util.find_spec("optimum") is None or (
        importlib.util.find_spec("optimum.quanto") is None
    ):
        raise ModelLoadError(
            f"recipe {recipe} needs optimum-quanto (transformers' quantized KV cache)",
            "pip install optimum-quanto",
        )


def non_full_attention(config: dict[str, Any]) -> list[str]:
    """Layer kinds of a ``config.json`` other than full attention (empty: all full)."""
    text = config.get("text_config") or config
    kinds = set(text.get("layer_types") or [])
    if text.get("sliding_window") and text.get("use_sliding_window", True):
        kinds.add("sliding_attention")
    return sorted(kinds - {"full_attention"})


def check_gguf_recipe(recipe: Recipe) -> None:
    """Refuse a recipe that quantizes while loading (bitsandbytes) on a GGUF model: transformers
    loads a GGUF file through its own quantizer and cannot combine it with another."""
    if recipe.name.startswith("bnb-"):
        raise ConfigError(
            f"recipe {recipe} quantizes while loading, which transformers cannot combine"
            " with a GGUF file",
            "use a recipe applied after loading (quanto-*, prune-*, drop-layers, kv-*)",
        )


def check_model_file(model: str) -> None:
    """Refuse a model path that does not exist (ConfigError, exit 4): a ``.gguf`` path that
    is not an existing file, a local-looking directory that is not there; loads nothing."""
    _ = ModelSpec.parse(model).local_dir


def check_draft_model(path: str, what: str) -> None:
    """Refuse a separate draft model (``spec-model:PATH``) whose local path does not exist
    (ConfigError, exit 4, naming ``what`` took it); a hub id passes; loads nothing."""
    try:
        _ = ModelSpec.parse(path).local_dir
    except ConfigError as exc:
        raise ConfigError(f"{what}: the draft {exc.message}", exc.hint) from None


def check_recipe_runs(model: str, recipe: str | Recipe | None) -> None:
    """Refuse a recipe (every part of a stack) that cannot run on ``model`` (see the module
    doc); loads nothing."""
    from gate.models.stack import parse_stack

    for part in parse_stack(recipe).parts:
        _check_part_runs(model, part)


def _check_part_runs(model: str, parsed: Recipe) -> None:
    definition = get_recipe(parsed.name)
    spec = ModelSpec.parse(model)
    if parsed.name == "spec-draft":  # the draft is the base model under its own recipe
        _check_part_runs(model, parse_recipe(str(parsed.value)))
    if parsed.name == "spec-model":  # a local draft directory that is not there: one line
        check_draft_model(str(parsed.value), f"recipe {parsed}")
    if spec.gguf_file is not None:  # a missing file: ConfigError
        check_gguf_recipe(parsed)
    if definition.family == "checkpoint":
        checkpoint_dir(spec, parsed)
    if definition.family == "gguf":
        from gate.models.llama_cpp.install import require
        from gate.models.llama_cpp.types import refuse_imatrix

        refuse_imatrix(parsed.name)
        require(f"recipe {parsed}")
    if parsed.name == "kv-quant":
        require_quanto(parsed)
    if parsed.name in PRESSES:
        local = spec.local_dir
        path = local / "config.json" if local is not None else None
        if path is not None and path.is_file():
            config = json.loads(path.read_text(encoding="utf-8"))
            other = non_full_attention(config)
            if other:
                raise ConfigError(
                    f"recipe {parsed}: {config.get('model_type', model)} has {', '.join(other)}"
                    " layers, and a KV press needs full-attention layers",
                    "use a model whose layers are all full attention (Llama, Qwen, Mistral"
                    " without a sliding window)",
                )


__all__ = [
    "MAKE_CHECKPOINTS",
    "check_draft_model",
    "check_gguf_recipe",
    "check_model_file",
    "check_recipe_runs",
    "checkpoint_dir",
    "non_full_attention",
]

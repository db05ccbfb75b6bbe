"""Whether a recipe can run on a model, decided before any model library loads.

The run planner calls :func:`check_recipe_runs` for every candidate so that a
recipe that cannot run stops the run with one line before the first model
loads (nothing measured, nothing written). Each part of a stack is checked by
its own method (:meth:`gate.models.methods.base.CompressionMethod.precheck`):

* a checkpoint recipe (``gptq:w4a16``, ``awq:w4a16``, ``sparsegpt:0.5``) needs its
  checkpoint (:mod:`gate.models.methods.checkpoint`: exit 3 when the demo
  model's is not made, exit 4 on another model);
* ``kv-quant`` needs optimum-quanto (transformers' quantized cache backend):
  exit 3 naming the package when it is not installed;
* a press (``kv-snapkv``, ``kv-h2o``, ``kv-streaming``) needs every decoder
  layer to be full attention: a local model whose ``config.json`` declares
  sliding-window or other layer types is refused (exit 4). Hub models are
  checked when they load;
* a ``gguf-*`` recipe needs llama.cpp built (exit 4 naming the set-up
  command), and a type that needs an importance matrix is refused (exit 4,
  :func:`gate.engines.llama_cpp.types.refuse_imatrix`);
* ``torchao-int4wo`` needs a CUDA GPU (exit 4, :mod:`gate.models.methods.torchao`; its hint
  names ``torchao-intx4wo``, torchao's int4 path on a CPU).

Here, for every method: a ``.gguf`` model must be an existing file (exit 4), and
a recipe that quantizes while loading (``bnb-*``) is refused on it (exit 4,
:func:`check_gguf_recipe`); a self-draft's recipe is checked as its own part,
and a separate draft model's local path must exist.

Standard library only (no torch, no transformers).
"""

from __future__ import annotations

from gate.errors import ConfigError
from gate.models.methods.registry import get_method
from gate.models.model_spec import ModelSpec
from gate.models.recipes import Recipe, parse_recipe


def check_gguf_recipe(recipe: Recipe) -> None:
    """Refuse a recipe that quantizes while loading (bitsandbytes) on a GGUF model: transformers
    loads a GGUF file through its own quantizer and cannot combine it with another."""
    if get_method(recipe.name).quantizes_while_loading:
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
    method = get_method(parsed.name)
    spec = ModelSpec.parse(model)
    if method.arg == "draft":  # the draft is the base model under its own recipe
        _check_part_runs(model, parse_recipe(str(parsed.value)))
    if method.arg == "path":  # a local draft directory that is not there: one line
        check_draft_model(str(parsed.value), f"recipe {parsed}")
    if spec.gguf_file is not None:  # a missing file: ConfigError
        check_gguf_recipe(parsed)
    method.precheck(spec, parsed)


__all__ = [
    "check_draft_model",
    "check_gguf_recipe",
    "check_model_file",
    "check_recipe_runs",
]

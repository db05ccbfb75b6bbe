"""Finding decoder layers, and the ``drop-layers:<n>`` recipe.

``drop-layers:n`` keeps the first ``L - n`` of the ``L`` decoder layers: the
residual stream after layer ``L - n`` goes straight to the final norm and the
LM head (a crude depth pruning; cf. Gromov et al. 2024, "The Unreasonable
Ineffectiveness of the Deeper Layers", which drops deep layers). The config's
``num_hidden_layers`` (and ``layer_types`` where present) is updated, and every
kept attention module's ``layer_idx`` is renumbered so the KV cache has one
slot per remaining layer.
"""

from __future__ import annotations

from torch import nn

from gate.errors import ConfigError, ModelLoadError

#: Attribute paths, from the causal-LM wrapper, where architectures keep their layer list.
_LAYER_PATHS: tuple[str, ...] = (
    "model.layers",  # Llama, Mistral, Qwen2, Gemma, Phi-3 ...
    "model.decoder.layers",  # OPT
    "transformer.h",  # GPT-2, GPT-J, Falcon, Bloom
    "gpt_neox.layers",  # GPT-NeoX, Pythia
    "model.language_model.layers",
)


def _lookup(root: nn.Module, path: str) -> object | None:
    obj: object = root
    for part in path.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The ``nn.ModuleList`` of decoder blocks of a causal LM."""
    for path in _LAYER_PATHS:
        found = _lookup(model, path)
        if isinstance(found, nn.ModuleList):
            return found
    raise ModelLoadError(
        f"cannot find the decoder layers of {type(model).__name__}",
        "this recipe supports Llama/Mistral/Qwen/OPT/GPT-2/NeoX-style models",
    )


def _set_layers(model: nn.Module, kept: nn.ModuleList) -> None:
    for path in _LAYER_PATHS:
        found = _lookup(model, path)
        if isinstance(found, nn.ModuleList):
            parent_path, _, attr = path.rpartition(".")
            parent = _lookup(model, parent_path)
            assert isinstance(parent, nn.Module)
            setattr(parent, attr, kept)
            return


def drop_last_layers(model: nn.Module, n: int) -> None:
    """Remove the last ``n`` decoder layers of ``model`` in place (``1 <= n < L``)."""
    blocks = decoder_layers(model)
    total = len(blocks)
    if not 1 <= n < total:
        raise ConfigError(
            f"drop-layers:{n} needs fewer layers than the model's {total}",
            f"use drop-layers:1 .. drop-layers:{total - 1}",
        )
    keep = total - n
    _set_layers(model, nn.ModuleList(list(blocks)[:keep]))
    config = getattr(model, "config", None)
    if config is not None:
        config.num_hidden_layers = keep
        layer_types = getattr(config, "layer_types", None)
        if isinstance(layer_types, list) and len(layer_types) == total:
            config.layer_types = layer_types[:keep]
    for index, block in enumerate(decoder_layers(model)):
        for module in block.modules():
            if hasattr(module, "layer_idx"):
                setattr(module, "layer_idx", index)  # noqa: B010 (nn.Module typing)

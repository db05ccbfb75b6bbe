"""What a weight method finds changed in a loaded model: the units of its footprint.

A method counts what the model *holds* after it acted, not what it was asked
to do: modules of the classes a quantizer installs, linear layers of the
decoder blocks holding zeros (a trained dense layer holds none), compressed
layers of a loaded checkpoint.
"""

from __future__ import annotations

from torch import nn

from gate.models.compress.layers import decoder_layers


def modules_of_class(model: nn.Module, *names: str) -> int:
    """Modules of ``model`` whose class is one of ``names`` (the classes a quantizer installs)."""
    return sum(type(m).__name__ in names for m in model.modules())


def pruned_linears(model: nn.Module) -> int:
    """Linear layers of the decoder blocks that hold zero weights (a trained dense layer holds none)."""
    return sum(
        int(bool((m.weight == 0).any()))
        for block in decoder_layers(model)
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


__all__ = ["modules_of_class", "pruned_linears", "quantized_checkpoint_layers"]

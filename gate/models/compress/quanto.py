"""optimum-quanto recipes: int8 / int4 / int2 weight-only quantization.

Each ``nn.Linear`` of the model except ``lm_head`` becomes a ``QLinear`` whose
weight is quantized symmetrically per output channel for int8
(``w ~= s * round(w / s)``, ``s = max|w_row| / 127``) and affinely for
int4/int2 (a scale and a shift per group of 128 input channels, or per output
row when a layer has at most 128 inputs; quanto's defaults), then frozen so
the stored weights are the integer codes. ``lm_head`` stays in full precision,
as transformers does for the bitsandbytes recipes, so the recipes compare like
with like. Activations are not quantized.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from gate.errors import ModelLoadError

#: Modules left in full precision (fnmatch patterns of module names).
EXCLUDE: tuple[str, ...] = ("lm_head",)


def quantize_weights(model: nn.Module, bits: int, modules: Sequence[str] | None = None) -> None:
    """Quantize and freeze the linear weights of ``model`` in place to ``bits`` (8, 4 or 2).

    ``modules``: the exact module names to quantize (a layer-selective recipe);
    ``None``: every linear but :data:`EXCLUDE`.
    """
    try:
        from optimum.quanto import freeze, qint2, qint4, qint8, quantize
    except ImportError as exc:
        raise ModelLoadError(
            f"recipe quanto-int{bits} needs optimum-quanto ({exc})", "pip install optimum-quanto"
        ) from None
    qtypes = {8: qint8, 4: qint4, 2: qint2}
    if bits not in qtypes:
        raise ValueError(f"quanto supports 8, 4 or 2 bits, not {bits}")
    if modules is None:
        quantize(model, weights=qtypes[bits], exclude=list(EXCLUDE))
    else:  # quanto matches include patterns with fnmatch: escape the brackets a name cannot hold
        quantize(model, weights=qtypes[bits], include=list(modules), exclude=list(EXCLUDE))
    freeze(model)

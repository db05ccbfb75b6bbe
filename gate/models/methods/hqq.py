"""HQQ, Half-Quadratic Quantization (``hqq-1``, ``hqq-2``, ``hqq-3``, ``hqq-4``, ``hqq-8``):
calibration-free weight quantization (Badri & Shaji 2023, "Half-Quadratic Quantization of
Large Machine Learning Models"), applied after loading: every linear but ``lm_head`` becomes
an ``hqq.core.quantize.HQQLinear`` of ``b`` bits; the method counts those modules.

Each group of 64 consecutive input weights of a row (hqq's and transformers' ``HqqConfig``
default ``group_size``) is quantized affinely, ``w ~= s * (q - z)`` with
``q = clamp(round(w / s + z), 0, 2**b - 1)``: ``s`` starts at ``(max - min) / (2**b - 1)``
and the zero point ``z`` is then fitted by hqq's half-quadratic solver, which minimises
an ``l_p`` (``p < 1``) norm of the weight error without data. Activations stay float; the
forward pass dequantizes the weights each call (hqq's PyTorch backend, which runs on a CPU).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gate.models.methods.base import (
    QUANTIZED,
    WEIGHTS,
    ActivationPrompts,
    CompressionMethod,
    RecipeArgs,
    Requirement,
)

HQQ = Requirement("hqq", "hqq", eager_in_transformers=True)
#: The bit widths hqq packs.
BITS: tuple[int, ...] = (1, 2, 3, 4, 8)
#: Input weights per (scale, zero) pair.
GROUP_SIZE = 64
#: Modules left in full precision (module-name globs).
EXCLUDE: tuple[str, ...] = ("lm_head",)


@dataclass(frozen=True)
class HalfQuadratic(CompressionMethod):
    """Every selected linear replaced by an ``HQQLinear`` of :attr:`bits` bits."""

    bits: int = 4

    def apply(self, model: Any, recipe: RecipeArgs, prompts: ActivationPrompts | None) -> int:
        from gate.models.compress.select import linear_names, selected

        HQQ.require(f"recipe {recipe}")
        from hqq.core.quantize import BaseQuantizeConfig, HQQLinear

        config = BaseQuantizeConfig(nbits=self.bits, group_size=GROUP_SIZE)
        for name in selected(recipe, linear_names(model, EXCLUDE)):
            parent_name, _, child = name.rpartition(".")
            parent = model.get_submodule(parent_name)
            linear = getattr(parent, child)
            weight = linear.weight
            quantized = HQQLinear(
                linear, config, compute_dtype=weight.dtype, device=str(weight.device)
            )
            setattr(parent, child, quantized)
        return sum(isinstance(m, HQQLinear) for m in model.modules())


METHODS: tuple[CompressionMethod, ...] = tuple(
    HalfQuadratic(
        f"hqq-{bits}",
        f"HQQ {bits}-bit weights (calibration-free, groups of {GROUP_SIZE})",
        WEIGHTS,
        QUANTIZED,
        requires=HQQ,
        localizable=True,
        bits=bits,
    )
    for bits in BITS
)

__all__ = ["BITS", "EXCLUDE", "GROUP_SIZE", "HQQ", "METHODS", "HalfQuadratic"]

"""torchao, PyTorch's own quantizer (``torchao-int8wo``, ``torchao-int8dq``, ``torchao-int4wo``,
``torchao-intx4wo``, ``torchao-float8wo``), applied after loading as transformers' ``TorchAoConfig`` applies it:
``torchao.quantization.quantize_(model, config, filter_fn)`` on the linear layers, ``lm_head``
left in full precision (as the other weight recipes do). Each linear's weight becomes a
torchao tensor subclass; the method counts those (``linear modules quantized``).

The schemes (torchao 0.18's version-2 configs, their defaults):

* ``int8wo`` — ``Int8WeightOnlyConfig``: int8 weights, symmetric per output row,
  ``w ~= s * q``, ``q = clamp(round(w * (1 / s)), -128, 127)``, ``s = max|w_row| / 127.5``
  (torchao's symmetric ``choose_qparams_affine``: the absmax over half the int8 range);
  activations stay float;
* ``int8dq`` — ``Int8DynamicActivationInt8WeightConfig``: the same int8 weights, and
  each call's activations quantized to int8 per token (a dynamic scale);
* ``int4wo`` — ``Int4WeightOnlyConfig`` (groups of 128 input channels, asymmetric):
  every int4 packing format of torchao 0.18 runs on CUDA only (the ``plain`` and
  ``preshuffled`` formats need the ``mslk`` kernels, ``plain_int32`` and
  ``tile_packed_to_4d`` a CUDA device; the CPU layout of older releases is gone), so
  on a machine without a CUDA GPU the recipe is refused in one line (exit 4, as
  ``--device cuda`` is there) before anything loads, and on a model loaded on the CPU
  when it is applied;
* ``intx4wo`` — ``IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(64),
  mapping_type=ASYMMETRIC)``: int4 weights in groups of 64 input channels, as torchao's
  CPU and edge path stores them (one int8 per code, dequantized per call), so it runs on a
  CPU. Groups of 64, not ``int4wo``'s 128: 128 does not divide the hidden size of many
  small models (SmolLM2's 576); a linear whose input size 64 does not divide is left as it
  is and not counted. Per group, ``lo = min(min w, 0)``, ``hi = max(max w, 0)``, ``s = (hi - lo) / 15``,
  ``z = -8 - round(lo / s)``, ``q = clamp(round(w / s) + z, -8, 7)``, ``w_hat = s * (q - z)``.
  Not the same numbers as ``int4wo`` (whose ``tinygemm`` parameters keep a float zero point
  and do not force 0 into the range): a CPU runner's int4 verdict, not a stand-in for the
  GPU kernel's;
* ``float8wo`` — ``Float8WeightOnlyConfig``: e4m3 weights with a per-row scale
  (``s = max|w_row| / 448``), dequantized per call on the CPU.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gate.errors import UsageError
from gate.models.methods.base import (
    QUANTIZED,
    WEIGHTS,
    ActivationPrompts,
    CompressionMethod,
    RecipeArgs,
    Requirement,
)
from gate.models.model_spec import ModelSpec

TORCHAO = Requirement("torchao", "torchao", eager_in_transformers=True)
#: Modules left in full precision (module-name globs).
EXCLUDE: tuple[str, ...] = ("lm_head",)
#: Input channels per int4 group of ``intx4wo`` (the module doc).
INTX_GROUP_SIZE = 64


def _config(scheme: str, group_size: int | None) -> Any:
    """torchao's config object of a scheme (the module doc); ``group_size`` is ``intx4wo``'s."""
    # its CUDA kernels fail to load on a CPU, and torch warns about one of its enums: quiet
    for logger in ("torchao", "torch.utils._pytree"):
        logging.getLogger(logger).setLevel(logging.ERROR)
    import torch
    from torchao import quantization as q
    from torchao.quantization.granularity import PerGroup
    from torchao.quantization.quant_primitives import MappingType

    # gate runs eager (no torch.compile): torchao's inductor settings are not needed
    factories: dict[str, Callable[[], Any]] = {
        "int8wo": lambda: q.Int8WeightOnlyConfig(set_inductor_config=False),
        "int8dq": lambda: q.Int8DynamicActivationInt8WeightConfig(set_inductor_config=False),
        "int4wo": lambda: q.Int4WeightOnlyConfig(set_inductor_config=False),
        "float8wo": lambda: q.Float8WeightOnlyConfig(set_inductor_config=False),
        "intx4wo": lambda: q.IntxWeightOnlyConfig(
            weight_dtype=torch.int4,  # type: ignore[attr-defined]  # torch 2.13 stubs omit int4
            granularity=PerGroup(group_size),
            mapping_type=MappingType.ASYMMETRIC,
        ),
    }
    return factories[scheme]()


@dataclass(frozen=True)
class TorchAO(CompressionMethod):
    """``quantize_`` with one torchao config; counts the linears holding a torchao tensor."""

    #: ``int8wo``, ``int8dq``, ``int4wo``, ``intx4wo`` or ``float8wo``.
    scheme: str = "int8wo"
    #: Whether torchao runs it only on a CUDA GPU (the module doc).
    cuda_only: bool = False
    #: Input channels per quantization group that a linear's input size must be a
    #: multiple of (a linear it does not divide is left alone); None: every linear.
    group_size: int | None = None

    def _refuse_on_cpu(self, recipe: RecipeArgs) -> UsageError:
        return UsageError(
            f"recipe {recipe}: torchao {self.scheme} runs on a CUDA GPU only (every int4"
            " packing format of torchao 0.18 needs CUDA kernels); this build runs on the CPU",
            "on a CPU use torchao-intx4wo (int4 groups of 64 through torchao's CPU path),"
            " torchao-int8wo, torchao-int8dq, torchao-float8wo or hqq-4",
        )

    def precheck(self, spec: ModelSpec, recipe: RecipeArgs) -> None:
        TORCHAO.require(f"recipe {recipe}")
        if self.cuda_only:
            from gate.hw.devices import TORCH_CUDA

            if not TORCH_CUDA.is_available():
                raise self._refuse_on_cpu(recipe)

    def apply(self, model: Any, recipe: RecipeArgs, prompts: ActivationPrompts | None) -> int:
        from torch import nn

        from gate.models.compress.select import linear_names, selected

        TORCHAO.require(f"recipe {recipe}")
        if self.cuda_only and next(model.parameters()).device.type != "cuda":
            raise self._refuse_on_cpu(recipe)
        config = _config(self.scheme, self.group_size)
        from torchao.quantization import quantize_
        from torchao.utils import TorchAOBaseTensor

        chosen = set(selected(recipe, linear_names(model, EXCLUDE)))
        group = self.group_size

        def fits(module: Any, name: str) -> bool:
            if not (isinstance(module, nn.Linear) and name in chosen):
                return False
            return group is None or module.in_features % group == 0

        quantize_(model, config, filter_fn=fits)
        return sum(
            isinstance(m.weight, TorchAOBaseTensor)
            for m in model.modules()
            if isinstance(m, nn.Linear)
        )


def _torchao(
    scheme: str, summary: str, cuda_only: bool = False, group_size: int | None = None
) -> TorchAO:
    return TorchAO(
        f"torchao-{scheme}",
        summary,
        WEIGHTS,
        QUANTIZED,
        requires=TORCHAO,
        localizable=True,
        scheme=scheme,
        cuda_only=cuda_only,
        group_size=group_size,
    )


METHODS: tuple[CompressionMethod, ...] = (
    _torchao("int8wo", "torchao int8 weight-only (per-row symmetric)"),
    _torchao("int8dq", "torchao int8 weights and dynamic int8 activations"),
    _torchao("int4wo", "torchao int4 weight-only (groups of 128; CUDA only)", cuda_only=True),
    _torchao(
        "intx4wo",
        "torchao int4 weight-only, groups of 64 (its CPU path)",
        group_size=INTX_GROUP_SIZE,
    ),
    _torchao("float8wo", "torchao float8 (e4m3) weight-only, per-row scales"),
)

__all__ = ["EXCLUDE", "INTX_GROUP_SIZE", "METHODS", "TORCHAO", "TorchAO"]

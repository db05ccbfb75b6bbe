"""Model identity: parameter bytes as stored (quantized layouts included), file digests."""

from __future__ import annotations

import hashlib
from pathlib import Path
from types import SimpleNamespace

import torch
from safetensors import safe_open
from torch import nn
from transformers import AutoModelForCausalLM

from gate.models.provenance import combined_digest, hash_files, parameter_bytes, tensor_parts


def _nbytes(*tensors: torch.Tensor) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def test_parameter_bytes_of_a_real_model_matches_the_safetensors_payload(
    tiny_model_dir: Path,
) -> None:
    """Independent check: the sum of the tensor sizes stored in model.safetensors."""
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    expected = 0
    with safe_open(str(tiny_model_dir / "model.safetensors"), framework="pt") as fh:
        for key in fh.keys():  # noqa: SIM118 - safe_open is not a dict
            expected += _nbytes(fh.get_tensor(key))
    buffers = _nbytes(*model.buffers())
    assert parameter_bytes(model) == expected + buffers
    half = parameter_bytes(model.to(torch.float16))
    assert half < parameter_bytes(model.to(torch.float32))  # a smaller build shows a reduction


def test_tensor_parts_look_inside_wrapper_subclasses() -> None:
    data = torch.zeros(8, 8, dtype=torch.int8)
    scale = torch.zeros(8, 1, dtype=torch.float32)
    wrapper = SimpleNamespace(
        __tensor_flatten__=lambda: (["_data", "_scale"], None), _data=data, _scale=scale
    )
    parts = list(tensor_parts(wrapper))  # type: ignore[arg-type]
    assert [p.data_ptr() for p in parts] == [data.data_ptr(), scale.data_ptr()]
    assert _nbytes(*parts) == 64 + 32


def test_int8_row_scales_scb_are_counted_on_the_weight_and_on_the_module_state() -> None:
    """LLM.int8() stores int8 codes plus one float32 scale per row (``SCB``)."""
    layer = nn.Linear(16, 4, bias=False)
    codes = torch.zeros(4, 16, dtype=torch.int8)
    layer.weight = nn.Parameter(codes, requires_grad=False)
    assert parameter_bytes(layer) == 64
    layer.weight.SCB = torch.ones(4, dtype=torch.float32)  # type: ignore[attr-defined]
    assert parameter_bytes(layer) == 64 + 16
    other = nn.Linear(16, 4, bias=False)
    other.weight = nn.Parameter(torch.zeros(4, 16, dtype=torch.int8), requires_grad=False)
    other.state = SimpleNamespace(SCB=torch.ones(4, dtype=torch.float32))  # type: ignore[assignment]
    assert parameter_bytes(other) == 64 + 16


def test_four_bit_quant_state_absmax_is_counted_with_its_nested_state() -> None:
    packed = torch.zeros(32, 1, dtype=torch.uint8)  # 64 four-bit codes
    absmax = torch.zeros(1, dtype=torch.uint8)  # double-quantized absmax ...
    nested = SimpleNamespace(absmax=torch.zeros(1, dtype=torch.float32), offset=None)
    packed.quant_state = SimpleNamespace(  # type: ignore[attr-defined]
        absmax=absmax, offset=torch.zeros((), dtype=torch.float32), state2=nested
    )
    assert _nbytes(*tensor_parts(packed)) == 32 + 1 + 4 + 4


def test_a_tied_weight_is_counted_once() -> None:
    model = nn.Sequential(nn.Embedding(10, 4), nn.Linear(4, 10, bias=False))
    model[1].weight = model[0].weight
    assert parameter_bytes(model) == 10 * 4 * 4


def test_file_digests_are_sha256_of_bytes_and_independent_of_the_directory(
    tmp_path: Path,
) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    for directory in (first, second):
        directory.mkdir()
        (directory / "config.json").write_bytes(b'{"x": 1}')
        (directory / "model.safetensors").write_bytes(b"\x00" * 100)
    hashes = hash_files(first.iterdir())
    assert hashes["config.json"] == hashlib.sha256(b'{"x": 1}').hexdigest()
    assert combined_digest(hashes) == combined_digest(hash_files(second.iterdir()))
    lines = "".join(f"{name}\0{digest}\n" for name, digest in sorted(hashes.items()))
    assert combined_digest(hashes) == hashlib.sha256(lines.encode()).hexdigest()

"""The GPTQ / AWQ / SparseGPT checkpoints of the demo model, loaded the way users load them.

They were made by llm-compressor in its own environment
(scripts/make_compressed_checkpoints.py) and are loaded here, in a fresh
process, by transformers' AutoModelForCausalLM through its compressed-tensors
quantizer. Checked: the layers carry the quantization scheme and the packed
INT4 weights (not dense fallbacks), the weights they compute with lie on the
INT4 grid (or are 50 % zeros), a forward runs, and the outputs differ from
the dense model's by a compression-sized amount. gate's own loader loads them
as pre-quantized checkpoints.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gate.errors import ConfigError
from gate.models import checkpoints
from gate.models.backends.loading import load_backend
from gate.models.model_spec import ModelSpec

#: The INT4 methods (SparseGPT's checkpoint is sparse, not quantized).
QUANTIZED = ("gptq-w4a16", "awq-w4a16")


#: All three are packaged (and must be there).
AVAILABLE = ("gptq-w4a16", "awq-w4a16", "sparsegpt-0.5")

#: Runs in a fresh interpreter: load, describe every decoder linear layer before and after
#: the first forward, and compare the logits with the dense demo model's.
PROBE = r"""
import json, sys, torch
from transformers import AutoModelForCausalLM
from gate.models.model_spec import demo_model_dir

path = sys.argv[1]
model = AutoModelForCausalLM.from_pretrained(path)
dense = AutoModelForCausalLM.from_pretrained(demo_model_dir())

def describe(module):
    scheme = getattr(module, "quantization_scheme", None)
    w = scheme.weights if scheme is not None else None
    return {
        "class": type(module).__module__ + "." + type(module).__name__,
        "params": {n: [str(p.dtype).removeprefix("torch."), list(p.shape)] for n, p in module.named_parameters()},
        "bits": w.num_bits if w else None,
        "group_size": w.group_size if w else None,
        "symmetric": w.symmetric if w else None,
        "status": str(getattr(module, "quantization_status", None)),
    }

linears = {n: m for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
before = {n: describe(m) for n, m in linears.items()}
g = torch.Generator().manual_seed(0)
ids = torch.randint(8, 4000, (2, 48), generator=g)
with torch.no_grad():
    logits = model(input_ids=ids).logits
    reference = dense(input_ids=ids).logits

def grid_distance(m):
    # distance of the weights the layer computes with to its INT4 grid, in units of its scale
    w, s = m.weight.detach().float(), m.weight_scale.detach().float()
    groups = w.shape[1] // s.shape[1]
    q = w.view(w.shape[0], s.shape[1], groups) / s.view(s.shape[0], s.shape[1], 1)
    z = getattr(m, "weight_zero_point", None)
    if z is not None:
        q = q + z.detach().float().view(z.shape[0], z.shape[1], 1)
    return float((q - q.round()).abs().max()), float(q.min()), float(q.max())

after = {}
for n, m in linears.items():
    d = describe(m)
    d["zeros"] = float((m.weight == 0).float().mean()) if hasattr(m, "weight") else None
    if d["bits"] and hasattr(m, "weight_scale") and hasattr(m, "weight"):
        d["grid"] = grid_distance(m)
    after[n] = d
lp, ref = logits.float().log_softmax(-1), reference.float().log_softmax(-1)

def quant_method(config):
    if config is None:
        return None
    method = config.get("quant_method") if isinstance(config, dict) else config.quant_method
    return str(getattr(method, "value", method))

print(json.dumps({
    "quantizer": type(model.hf_quantizer).__name__ if getattr(model, "hf_quantizer", None) else None,
    "quant_method": quant_method(getattr(model.config, "quantization_config", None)),
    "before": before,
    "after": after,
    "finite": bool(torch.isfinite(logits).all()),
    "top1_agreement": float((lp.argmax(-1) == ref.argmax(-1)).float().mean()),
    "kl_mean": float((ref.exp() * (ref - lp)).sum(-1).mean()),
}))
"""


def _path(name: str) -> Path:
    path = checkpoints.find(name)
    assert path is not None, f"no {name} checkpoint: run scripts/make_compressed_checkpoints.py"
    return path


def _probe(name: str) -> dict[str, Any]:
    path = _path(name)
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(path)],
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def _decoder(layers: dict[str, Any]) -> dict[str, Any]:
    return {n: d for n, d in layers.items() if n.startswith("model.layers.")}


@pytest.fixture(scope="module", params=AVAILABLE)
def probe(request: Any) -> tuple[str, dict[str, Any]]:
    return request.param, _probe(request.param)


def test_checkpoint_loads_through_the_compressed_tensors_quantizer(probe: Any) -> None:
    name, p = probe
    if name not in QUANTIZED:
        pytest.skip("compressed-tensors 0.19 writes the SparseGPT checkpoint dense, unquantized")
    assert p["quant_method"] == "compressed-tensors"
    assert p["quantizer"] == "CompressedTensorsHfQuantizer"
    assert len(_decoder(p["before"])) == 28  # 4 layers x (q, k, v, o, gate, up, down)


def test_int4_layers_are_packed_int4_not_dense(probe: Any) -> None:
    name, p = probe
    if name not in QUANTIZED:
        pytest.skip("a sparse checkpoint has no INT4 layers")
    layers = _decoder(p["before"])
    assert len(layers) == 28  # 4 layers x (q, k, v, o, gate, up, down)
    for layer, d in layers.items():
        assert d["class"] == "torch.nn.modules.linear.Linear", layer
        assert d["bits"] == 4 and d["group_size"] == 128, layer
        assert "weight" not in d["params"], layer  # no dense weight is loaded
        dtype, shape = d["params"]["weight_packed"]
        assert dtype == "int32" and shape[1] * 8 == d["params"]["weight_scale"][1][1] * 128
    # the head is left dense, as the recipe says
    assert p["before"]["lm_head"]["bits"] is None


def test_int4_weights_in_use_lie_on_the_int4_grid(probe: Any) -> None:
    name, p = probe
    if name not in QUANTIZED:
        pytest.skip("a sparse checkpoint has no INT4 layers")
    low, high = (-8, 7)  # symmetric INT4 (both recipes use the W4A16 scheme)
    layers = _decoder(p["after"])
    assert len(layers) == 28  # 4 layers x (q, k, v, o, gate, up, down)
    for layer, d in layers.items():
        distance, smallest, largest = d["grid"]
        assert distance < 1e-3, layer
        assert low - 1e-3 <= smallest and largest <= high + 1e-3, layer
    assert all(d["symmetric"] for d in layers.values())


def test_sparsegpt_layers_are_half_zeros(probe: Any) -> None:
    name, p = probe
    if name != "sparsegpt-0.5":
        pytest.skip("only the SparseGPT checkpoint is sparse")
    layers = _decoder(p["after"])
    assert len(layers) == 28  # 4 layers x (q, k, v, o, gate, up, down)
    for layer, d in layers.items():
        assert 0.49 <= d["zeros"] <= 0.51, (layer, d["zeros"])
    assert p["after"]["lm_head"]["zeros"] < 0.01


def test_forward_runs_and_differs_from_the_dense_model(probe: Any) -> None:
    _, p = probe
    assert p["finite"]
    assert 1e-4 < p["kl_mean"] < 2.0, p["kl_mean"]
    assert p["top1_agreement"] > 0.5


@pytest.mark.parametrize("name", AVAILABLE[:2])
def test_gate_loads_them_as_prequantized_checkpoints(name: str) -> None:
    backend = load_backend(ModelSpec.parse(str(_path(name))))
    prov = backend.provenance()
    assert prov.quantization == "compressed-tensors"
    assert prov.weights_sha256
    ids = backend.encode_prompt("What is 7 times 8?")
    assert len(backend.generate([ids], max_new_tokens=4)[0]) >= 1
    with pytest.raises(ConfigError, match="already quantized"):
        load_backend(ModelSpec.parse(str(_path(name))), "quanto-int8")


def test_cache_key_names_the_method_model_and_calibration() -> None:
    key = checkpoints.cache_key("sparsegpt-0.5", "ab" * 32, "cd" * 32)
    assert key == "sparsegpt-0.5-abababababab-cdcdcdcdcdcd"
    assert checkpoints.default_dir("gptq-w4a16") == checkpoints.PACKAGED / "gptq-w4a16"
    assert checkpoints.default_dir("sparsegpt-0.5") == checkpoints.PACKAGED / "sparsegpt-0.5"
    assert checkpoints.default_dir("awq-w4a16") == checkpoints.PACKAGED / "awq-w4a16"
    assert checkpoints.cached_dir("awq-w4a16").parent == checkpoints.tool_cache() / "checkpoints"


@pytest.mark.parametrize(("name", "samples"), [("gptq-w4a16", 128), ("awq-w4a16", 128)])
def test_packaged_checkpoints_say_how_they_were_made(name: str, samples: int) -> None:
    made = json.loads((checkpoints.PACKAGED / name / "gate_checkpoint.json").read_text())
    assert made["method"] == name
    assert made["tool"].startswith("llmcompressor ")
    assert made["base_model_sha256"] == checkpoints.file_sha256(checkpoints.DEMO_WEIGHTS)
    assert made["calibration_sha256"] == checkpoints.file_sha256(checkpoints.CALIBRATION)
    assert made["calibration_samples"] == samples and made["max_seq_length"] == 256


@pytest.mark.slow
def test_gating_the_packaged_awq_checkpoint_gives_cga_below_one_and_a_verdict(
    tmp_path: Path,
) -> None:
    """A fresh ``gate run`` gates the packaged AWQ build against the demo baseline."""
    from tests.cli_support import run_gate

    (tmp_path / "gate.toml").write_text("[tiers.fidelity]\nlimit = 24\n")
    out = tmp_path / "results.json"
    done = run_gate(
        "run", "--candidate", "demo", "--recipe", "awq:w4a16", "--against", "fp32",
        "--tiers", "fidelity", "--config", "gate.toml", "--json", str(out),
        cwd=tmp_path, env={}, unset=(),
    )  # fmt: skip
    assert done.returncode in (0, 1), done.stdout[-3000:] + done.stderr[-2000:]
    results = json.loads(out.read_text())
    assert results["candidate"]["recipe"] == "awq:w4a16"
    assert results["verdict"] in ("pass", "warn", "block")
    assert results["exit_code"] == done.returncode
    cga = next(m for m in results["metrics"] if m["name"] == "fidelity.cga" and not m["slice"])
    assert 0.5 < cga["value"] < 1.0, cga["value"]

"""Compression recipes: each checked against an independent computation, plus load errors."""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import gate.models.compress
from gate.errors import ConfigError, ExitCode, ModelLoadError
from gate.hw.timing import PerfCounterClock
from gate.models.activity import Activity, Counting
from gate.models.backends.base import ScoreRequest
from gate.models.backends.hf import HFBackend
from gate.models.backends.loading import load_backend
from gate.models.compress.counting import modules_of_class, pruned_linears
from gate.models.methods.base import CACHE, CHECKPOINT, GGUF, QUANTIZED
from gate.models.methods.registry import get_method, methods
from gate.models.methods.torchao import TorchAO
from gate.models.model_spec import ModelSpec, demo_model_dir
from gate.models.recipes import recipe_names
from gate.tiers import exercised

TEXTS = [
    "What is 7 times 8? The answer is 56.",
    "Please reply in JSON with key name.",
    "The capital of France is Paris.",
    "Write a Python function that adds two numbers.",
]
EXAMPLE = {
    "prune-magnitude": "prune-magnitude:0.5",
    "prune-wanda": "prune-wanda:0.5",
    "drop-layers": "drop-layers:1",
    "delay": "delay:1ms",
    "attn-topk": "attn-topk:0.5",
    "kv-snapkv": "kv-snapkv:0.5",
    "kv-h2o": "kv-h2o:0.5",
    "kv-streaming": "kv-streaming:sinks=4,window=256",
    "kv-quant": "kv-quant:int4",
    # the drafter is wrapped around the loaded target by load_candidate (test_speculative_tier)
    "spec-ngram": "spec-ngram:3",
    "spec-draft": "spec-draft:quanto-int4",
    "spec-model": "spec-model:./draft",
}
LINEAR_CLASS = {
    "bnb-int8": "Linear8bitLt",
    "bnb-nf4": "Linear4bit",
    "bnb-fp4": "Linear4bit",
    "quanto-int8": "QLinear",
    "quanto-int4": "QLinear",
    "quanto-int2": "QLinear",
    **{f"hqq-{bits}": "HQQLinear" for bits in (1, 2, 3, 4, 8)},
}
#: The torchao recipes, by name.
TORCHAO_METHODS = {n: m for n in recipe_names() if isinstance(m := get_method(n), TorchAO)}
#: torchao keeps ``nn.Linear`` and swaps its weight for a torchao tensor (counted by that);
#: the schemes torchao runs on a CPU.
TORCHAO_ON_CPU = tuple(n for n, m in TORCHAO_METHODS.items() if not m.cuda_only)

Loader = Callable[[str], HFBackend]


@pytest.fixture(scope="module")
def load(tiny_model_dir: Path, tiny_backend: HFBackend) -> Loader:
    torch.set_num_threads(1)
    cache: dict[str, HFBackend] = {"none": tiny_backend}

    def get(recipe: str) -> HFBackend:
        if recipe not in cache:
            cache[recipe] = load_backend(
                ModelSpec.parse(str(tiny_model_dir), dtype="float32"), recipe, calibration=TEXTS
            )
        return cache[recipe]

    return get


def _ids(backend: HFBackend) -> torch.Tensor:
    return torch.tensor([backend.encode_text(TEXTS[0])])


def _logits(backend: HFBackend, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return backend.model(input_ids=ids).logits[0].float()


def _decoder_linears(backend: HFBackend) -> dict[str, torch.Tensor]:
    return {
        name: m.weight.detach().clone()
        for name, m in backend.model.model.layers.named_modules()
        if isinstance(m, nn.Linear)
    }


#: Recipes made outside the process before loading: checkpoints (tests/test_family_recipes.py)
#: and llama.cpp's GGUF files (tests/test_llama_cpp_make.py).
MADE_ELSEWHERE = (CHECKPOINT, GGUF)
#: Methods that need a CUDA GPU (refused on this CPU: tests/test_torchao_hqq.py).
CUDA_ONLY = tuple(n for n, m in TORCHAO_METHODS.items() if m.cuda_only)


@pytest.mark.parametrize(
    "name",
    [
        n
        for n in recipe_names()
        if get_method(n).family not in MADE_ELSEWHERE and n not in CUDA_ONLY
    ],
)
def test_every_recipe_loads_and_is_recorded(load: Loader, name: str) -> None:
    recipe = EXAMPLE.get(name, name)
    backend = load(recipe)
    prov = backend.provenance()
    assert prov.recipe == recipe
    # 7 linears per decoder layer (2 layers) plus lm_head, which stays full precision
    if name in LINEAR_CLASS:
        expected = {"Linear": 1, LINEAR_CLASS[name]: 14}
    elif name == "drop-layers":
        expected = {"Linear": 8}
    elif name in TORCHAO_ON_CPU:
        expected = {"Linear": 15}  # the class stays; its weight is a torchao tensor
    else:
        expected = {"Linear": 15}
    assert prov.linear_class_counts == expected
    assert prov.linear_classes == tuple(sorted(expected))
    out = backend.generate([backend.encode_prompt("Hi")], max_new_tokens=3)
    assert len(out[0]) >= 1
    logits = _logits(backend, _ids(backend))
    assert torch.isfinite(logits).all()


#: What each recipe's activity must count right after loading the 2-layer tiny model
#: (14 decoder linears; 1 of 2 layers dropped; attention and cache methods count later).
ACTED_AT_LOAD = {
    **dict.fromkeys(LINEAR_CLASS, 14),
    **dict.fromkeys(TORCHAO_ON_CPU, 14),
    "prune-magnitude": 14,
    "prune-wanda": 14,
    "drop-layers": 1,
    "delay": 1,
    "attn-fp8": None,  # counted per call
    "attn-sage": None,
    "attn-topk": None,
}


@pytest.mark.parametrize("name", sorted(ACTED_AT_LOAD))
def test_every_weight_and_attention_recipe_reports_how_much_it_acted(
    load: Loader, name: str
) -> None:
    backend = load(EXAMPLE.get(name, name))
    activity = backend.activity
    assert activity is not None and activity.recipe == EXAMPLE.get(name, name)
    if activity.footprint.counting is Counting.PER_CALL:
        before = activity.reading()
        _logits(backend, _ids(backend))
        # one replaced call per attention layer per forward
        assert activity.since(before).acted == len(backend.model.model.layers)
        assert not activity.since(before).none
        assert activity.since(activity.reading()).none  # nothing ran since: not exercised
    else:
        assert activity.acted == ACTED_AT_LOAD[name], activity
        assert not activity.since(None).none


def test_the_control_has_no_activity_and_every_other_recipe_a_footprint(load: Loader) -> None:
    assert load("none").activity is None
    for name, method in methods().items():
        assert name == "none" or method.footprint is not None, name


def test_a_recipe_without_a_footprint_does_not_load(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    without = dataclasses.replace(get_method("quanto-int8"), footprint=None)
    monkeypatch.setattr(gate.models.compress, "get_method", lambda name: without)
    with pytest.raises(ModelLoadError, match="declares no footprint"):
        load_backend(ModelSpec.parse(str(tiny_model_dir), dtype="float32"), "quanto-int8")


def test_a_quantizer_that_changed_nothing_counts_zero_modules(tiny_backend: HFBackend) -> None:
    """The count is read off the loaded model's classes, not taken from the recipe's word."""
    assert modules_of_class(tiny_backend.model, "QLinear", "Linear8bitLt", "Linear4bit") == 0
    assert pruned_linears(tiny_backend.model) == 0
    exercise = Activity("quanto-int4", QUANTIZED).since(None)
    assert exercise.none and "changed no module" in exercised.reason("fidelity", exercise).why


@pytest.mark.parametrize("recipe", ["gptq:w4a16", "awq:w4a16", "sparsegpt:0.5"])
def test_checkpoint_recipes_name_a_demo_checkpoint(tiny_model_dir: Path, recipe: str) -> None:
    with pytest.raises(ConfigError, match="names a checkpoint of the demo model"):
        load_backend(ModelSpec.parse(str(tiny_model_dir)), recipe)


def test_quantized_builds_store_fewer_bytes(load: Loader) -> None:
    full = load("none").provenance().parameter_bytes
    sizes = {r: load(r).provenance().parameter_bytes for r in LINEAR_CLASS}
    assert len(sizes) == len(LINEAR_CLASS) > 0
    assert all(size < full for size in sizes.values())
    assert sizes["bnb-nf4"] < sizes["bnb-int8"]
    assert sizes["quanto-int2"] < sizes["quanto-int4"] < sizes["quanto-int8"]
    # int8 codes + fp32 row scales for the 14 decoder linears, the rest unchanged
    base = load("none").model
    linears = [m for m in base.model.layers.modules() if isinstance(m, nn.Linear)]
    dense = sum(m.weight.numel() * 4 for m in linears)
    int8 = sum(m.weight.numel() + m.out_features * 4 for m in linears)
    assert sizes["bnb-int8"] == full - dense + int8
    # NF4: two codes per byte + one absmax per block of 64 weights, fp32 (GPU layout) or
    # bf16 (bitsandbytes repacks for its CPU kernel on the first forward pass)
    nf4 = {
        sum(m.weight.numel() // 2 + m.weight.numel() // 64 * width for m in linears)
        for width in (4, 2)
    }
    assert sizes["bnb-nf4"] in {full - dense + n for n in nf4}


def test_magnitude_pruning_keeps_the_largest_weights(load: Loader) -> None:
    before = _decoder_linears(load("none"))
    after = _decoder_linears(load("prune-magnitude:0.5"))
    assert before and set(after) == set(before)
    for name, w in before.items():
        pruned = after[name]
        k = int(0.5 * w.numel())
        assert int((pruned == 0).sum()) == k
        kept = pruned != 0
        assert torch.equal(pruned[kept], w[kept])
        assert w[~kept].abs().max() <= w[kept].abs().min()


def test_wanda_matches_an_independent_score_on_the_first_layer(load: Loader) -> None:
    base = load("none")
    pruned = load("prune-wanda:0.5")
    layer0 = base.model.model.layers[0]
    sumsq = torch.zeros(layer0.self_attn.q_proj.in_features, dtype=torch.float64)
    with torch.no_grad():
        for text in TEXTS:
            ids = torch.tensor([base.tokenizer(text, add_special_tokens=False)["input_ids"]])
            x = layer0.input_layernorm(base.model.model.embed_tokens(ids))
            sumsq += (x.double() ** 2).sum(dim=(0, 1))
    w = layer0.self_attn.q_proj.weight.detach().double()
    score = w.abs() * sumsq.sqrt().unsqueeze(0)
    k = int(0.5 * w.shape[1])
    expected_zero = torch.zeros_like(w, dtype=torch.bool)
    expected_zero.scatter_(1, score.argsort(dim=1)[:, :k], True)
    got = pruned.model.model.layers[0].self_attn.q_proj.weight.detach()
    assert torch.equal(got == 0, expected_zero)
    for lin in _decoder_linears(pruned).values():
        assert ((lin == 0).sum(dim=1) == int(0.5 * lin.shape[1])).all()  # per output row


def test_wanda_without_calibration_is_a_config_error(tiny_model_dir: Path) -> None:
    with pytest.raises(ConfigError, match="needs calibration"):
        load_backend(ModelSpec.parse(str(tiny_model_dir)), "prune-wanda:0.5")


def test_drop_layers_equals_truncated_forward(load: Loader) -> None:
    base, dropped = load("none"), load("drop-layers:1")
    assert len(dropped.model.model.layers) == 1
    assert dropped.model.config.num_hidden_layers == 1
    assert dropped.model.model.layers[0].self_attn.layer_idx == 0
    ids = _ids(base)
    with torch.no_grad():
        hidden = base.model(input_ids=ids, output_hidden_states=True).hidden_states[1]
        expected = base.model.lm_head(base.model.model.norm(hidden))[0]
    torch.testing.assert_close(_logits(dropped, ids), expected, atol=1e-5, rtol=1e-5)
    # the KV cache works with the renumbered layers: cached greedy == uncached greedy
    prompt = dropped.encode_prompt("Hi")
    ids_list = list(prompt)
    with torch.no_grad():
        for _ in range(4):
            logits = dropped.model(input_ids=torch.tensor([ids_list]), use_cache=False).logits
            ids_list.append(int(logits[0, -1].argmax()))
            if ids_list[-1] in dropped.eos_ids:
                break
    assert dropped.generate([prompt], max_new_tokens=4)[0] == ids_list[len(prompt) :]


def test_drop_layers_beyond_the_model_is_a_config_error(tiny_model_dir: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_backend(ModelSpec.parse(str(tiny_model_dir)), "drop-layers:2")
    assert info.value.exit_code == ExitCode.USAGE_ERROR
    assert "fewer layers than the model's 2" in info.value.format_line()


def test_quanto_int8_weights_are_per_row_symmetric(load: Loader) -> None:
    w = load("none").model.model.layers[0].mlp.up_proj.weight.detach()
    q = load("quanto-int8").model.model.layers[0].mlp.up_proj
    scale = w.abs().amax(dim=1, keepdim=True) / 127
    expected = (w / scale).round().clamp(-127, 127) * scale
    dequant = q.qweight.dequantize()
    torch.testing.assert_close(dequant.float(), expected, atol=1e-6, rtol=1e-3)
    assert type(load("quanto-int8").model.lm_head).__name__ == "Linear"


@pytest.mark.parametrize("recipe", ["bnb-int8", "bnb-nf4", "bnb-fp4", "quanto-int4"])
def test_quantized_logits_stay_close(load: Loader, recipe: str) -> None:
    ids = _ids(load("none"))
    base = _logits(load("none"), ids)
    cand = _logits(load(recipe), ids)
    error = (cand - base).abs().max() / base.abs().max()
    assert 0 < error < 0.25


def test_delay_slows_every_forward_and_changes_nothing_else(load: Loader) -> None:
    base, slow = load("none"), load("delay:1ms")
    ids = _ids(base)
    torch.testing.assert_close(_logits(slow, ids), _logits(base, ids), atol=0, rtol=0)
    timed = slow.generate_timed(
        slow.encode_prompt("Hi"), batch_size=1, new_tokens=5, clock=PerfCounterClock()
    )
    assert timed.end_to_end >= 5 * 0.001
    assert slow.provenance().forward_delay is True


# -- load errors ---------------------------------------------------------------


def test_missing_model_dir(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:  # a wrong path is input (tests/test_model_paths.py)
        load_backend(ModelSpec.parse(str(tmp_path / "missing")))
    assert info.value.exit_code == ExitCode.USAGE_ERROR
    assert "does not exist" in info.value.format_line()


def test_unknown_hub_id_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelLoadError, match="HF_HUB_OFFLINE"):
        load_backend(ModelSpec.parse("gate-tests/no-such-model"))


def test_pickle_only_checkpoint_needs_allow_pickle(load: Loader, tmp_path: Path) -> None:
    base = load("none")
    target = tmp_path / "pickled"
    # transformers 5 always writes safetensors, so write the pickle checkpoint by hand
    base.model.config.save_pretrained(target)
    torch.save(base.model.state_dict(), target / "pytorch_model.bin")
    base.tokenizer.save_pretrained(target)
    assert not list(target.glob("*.safetensors"))
    with pytest.raises(ModelLoadError) as info:
        load_backend(ModelSpec.parse(str(target)))
    assert "--allow-pickle" in info.value.format_line()
    assert info.value.exit_code == ExitCode.INTERNAL_ERROR
    allowed = load_backend(ModelSpec.parse(str(target), allow_pickle=True))
    ids = _ids(base)
    torch.testing.assert_close(_logits(allowed, ids), _logits(base, ids))


def test_missing_quantization_kernel_names_the_package(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    target = tmp_path / "gptq"
    shutil.copytree(tiny_model_dir, target)
    config = json.loads((target / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "gptq", "bits": 4, "group_size": 64}
    (target / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError) as info:
        load_backend(ModelSpec.parse(str(target)))
    assert "pip install" in (info.value.hint or "")
    assert "gptq" in info.value.message
    with pytest.raises(ConfigError, match="already quantized"):
        load_backend(ModelSpec.parse(str(target)), "bnb-nf4")


# -- the committed demo model ----------------------------------------------------

DEMO_READY = (demo_model_dir() / "model.safetensors").is_file()


def _agreement(base: HFBackend, cand: HFBackend, prompts: list[list[int]]) -> float:
    """Top-1 agreement on the baseline's own greedy outputs (the CGA tokens of docs/metrics.md "Fidelity")."""
    outputs = base.generate(prompts, max_new_tokens=24)
    requests = [ScoreRequest(p, o) for p, o in zip(prompts, outputs, strict=True) if o]
    ref = base.score(requests, top_k=1)
    got = cand.score(requests, top_k=1)
    same = [np.mean(a.argmax_ids == b.argmax_ids) for a, b in zip(ref, got, strict=True)]
    return float(np.mean(same))


@pytest.mark.slow
@pytest.mark.skipif(not DEMO_READY, reason="the demo model is not committed yet")
def test_every_recipe_on_the_demo_model(demo_backend: HFBackend) -> None:
    torch.set_num_threads(1)
    spec = ModelSpec.parse("demo")
    base = demo_backend
    prompts = [base.encode_prompt(t) for t in [*TEXTS, "Hello, how are you?", "What is 3 plus 4?"]]
    figures: dict[str, float] = {}
    for name in recipe_names():
        if get_method(name).family in (*MADE_ELSEWHERE, CACHE) or name in CUDA_ONLY:
            continue  # tests/test_family_recipes.py, test_llama_cpp_make.py: made elsewhere
        recipe = EXAMPLE.get(name, name).replace("drop-layers:1", "drop-layers:2")
        cand = load_backend(spec, recipe, calibration=TEXTS)
        figures[recipe] = _agreement(base, cand, prompts)
    print("top-1 agreement on the demo model:", json.dumps(figures, indent=1))
    assert figures["none"] == 1.0
    assert figures["delay:1ms"] == 1.0
    assert figures["bnb-int8"] > 0.9
    assert figures["quanto-int8"] > 0.9
    # "clearly lower": at least 10 points below the int8 builds
    good = min(figures["bnb-int8"], figures["quanto-int8"])
    assert figures["quanto-int2"] < good - 0.1
    assert figures["drop-layers:2"] < good - 0.1

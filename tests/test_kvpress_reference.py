"""gate's KV-cache presses against kvpress's own output on the demo model.

kvpress (0.5.5) needs transformers<5.3, so it runs in its own environment:
scripts/make_kvpress_reference.py recorded, there, which prompt pairs each
press keeps and the teacher-forced log-probs that follow
(tests/kvpress/reference.safetensors). Here gate's presses, on the project's
transformers, must keep the same pairs and give the same log-probs. The
``tools`` test re-runs kvpress live when its environment exists.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors import safe_open

from gate.models.backends.base import ScoreRequest
from gate.models.backends.chunked import cache_logprobs
from gate.models.backends.loading import load_backend
from gate.models.compress.kvcache import (
    CacheMethod,
    ObservedAttention,
    Press,
    SnapKV,
    StreamingLLM,
    cache_argument,
)
from gate.models.model_spec import ModelSpec, demo_model_dir

ROOT = Path(__file__).parents[1]
REFERENCE = ROOT / "tests" / "kvpress" / "reference.safetensors"
SCRIPT = ROOT / "scripts" / "make_kvpress_reference.py"


def _read(path: Path) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    with safe_open(str(path), "pt") as f:
        meta = json.loads((f.metadata() or {})["gate_kvpress_reference"])
        return meta, {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118


META, TENSORS = _read(REFERENCE)


def gate_press(case: dict[str, Any], prompt_tokens: int) -> Press:
    """gate's press for a kvpress case (same method, same settings)."""
    ratio = float(case["compression_ratio"])
    if case["press"] == "SnapKVPress":
        return SnapKV(ratio, window=int(case["window_size"]), kernel=int(case["kernel_size"]))
    if case["press"] == "ObservedAttentionPress":
        return ObservedAttention(ratio)
    if case["press"] == "StreamingLLMPress":
        sinks = int(case["n_sink"])
        window = max(1, int(prompt_tokens * (1 - ratio))) - sinks
        return StreamingLLM(sinks=sinks, window=window, rolling=False)
    raise AssertionError(f"no gate press for {case['press']}")


@pytest.fixture(scope="module")
def backend() -> Any:
    return load_backend(ModelSpec.parse("demo"))


@pytest.fixture(scope="module")
def requests() -> dict[int, ScoreRequest]:
    """The prompts and teacher-forced tokens kvpress saw (stored in the reference itself)."""
    return {
        j: ScoreRequest(
            TENSORS[f"request/{j}/context"].tolist(), TENSORS[f"request/{j}/continuation"].tolist()
        )
        for j in META["prompts"]
    }


def test_reference_matches_the_demo_model() -> None:
    """A stale reference (other weights) must be re-recorded, not compared."""
    sha = hashlib.sha256((demo_model_dir() / "model.safetensors").read_bytes()).hexdigest()
    assert META["demo_sha256"] == sha
    steps = int(META["steps"])
    assert all(len(TENSORS[f"request/{j}/continuation"]) == steps for j in META["prompts"])


def _kept_positions(model: Any, press: Press, context: list[int]) -> torch.Tensor:
    from transformers import DynamicCache

    ids = torch.tensor([context])
    method = CacheMethod(press)
    with torch.no_grad():
        full = DynamicCache()
        model(input_ids=ids, **cache_argument(model, full))
        cache = method.new_cache(model)
        with method.active(model):
            model(input_ids=ids, **cache_argument(model, cache))
    kept = []
    for i, layer in enumerate(cache.layers):
        distance = torch.cdist(
            layer.keys[0], full.layers[i].keys[0], compute_mode="donot_use_mm_for_euclid_dist"
        )
        assert float(distance.min(dim=-1).values.max()) < 1e-6
        kept.append(distance.argmin(dim=-1).sort(dim=-1).values)
    return torch.stack(kept)


CASES = [(case, j) for case in META["cases"] for j in META["prompts"]]


@pytest.mark.parametrize(("case", "prompt"), CASES, ids=[f"{c}-{j}" for c, j in CASES])
def test_press_keeps_the_pairs_kvpress_keeps(
    backend: Any, requests: Any, case: str, prompt: int
) -> None:
    request = requests[prompt]
    press = gate_press(META["cases"][case], len(request.context))
    kept = _kept_positions(backend.model, press, list(request.context))
    want = TENSORS[f"{case}/{prompt}/kept"].long()
    assert kept.shape == want.shape
    assert torch.equal(kept, want)


@pytest.mark.parametrize(("case", "prompt"), CASES, ids=[f"{c}-{j}" for c, j in CASES])
def test_teacher_forced_logprobs_match_kvpress(
    backend: Any, requests: Any, case: str, prompt: int
) -> None:
    request = requests[prompt]
    method = CacheMethod(gate_press(META["cases"][case], len(request.context)))
    rows = cache_logprobs(backend.model, method, request, chunk_size=1)
    target = rows.gather(1, torch.tensor(list(request.continuation))[:, None])[:, 0]
    torch.testing.assert_close(target, TENSORS[f"{case}/{prompt}/target"], atol=1e-4, rtol=0)
    top = rows.topk(TENSORS[f"{case}/{prompt}/topk_ids"].shape[1], dim=-1)
    torch.testing.assert_close(
        top.values, TENSORS[f"{case}/{prompt}/topk_logprobs"], atol=1e-4, rtol=0
    )
    assert torch.equal(top.indices[:, 0], TENSORS[f"{case}/{prompt}/topk_ids"][:, 0].long())


def _kvpress_python() -> Path | None:
    cache = Path(os.environ.get("GATE_TOOL_CACHE", Path.home() / ".cache" / "gate-tools"))
    venv = cache / "kvpress-0.5.5"
    ready = (venv / ".gate-tool-ready").is_file() and (venv / "bin" / "python").is_file()
    return venv / "bin" / "python" if ready else None


@pytest.mark.tools
@pytest.mark.skipif(
    _kvpress_python() is None, reason="no kvpress tool env (scripts/setup_tool_env.sh kvpress)"
)
def test_kvpress_live_reproduces_the_reference(tmp_path: Path) -> None:
    """kvpress, run now in its environment, gives the committed reference."""
    python = _kvpress_python()
    assert python is not None
    out = tmp_path / "live.safetensors"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    subprocess.run([str(python), str(SCRIPT), "--out", str(out)], check=True, env=env, timeout=1800)
    meta, live = _read(out)
    assert meta["cases"] == META["cases"] and meta["prompts"] == META["prompts"]
    assert set(live) == set(TENSORS)
    for name, tensor in live.items():
        if name.endswith(("kept", "topk_ids")):
            assert torch.equal(tensor, TENSORS[name]), name
        else:
            torch.testing.assert_close(tensor, TENSORS[name], atol=1e-5, rtol=0)

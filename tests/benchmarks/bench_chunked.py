"""The cost of exactness: scoring through a compressed KV cache at chunk sizes 1 / 8 / 32.

Scores the same demo reference-pack requests (prompt + 32 reference tokens)
four ways on the demo model: the single batched pass (today's scorer, which
no cache method acts on) and the chunked cache scorer with SnapKV (ratio 0.5)
at chunk sizes 1 (the per-token definition), 8 and 32 (one chunk: exact for a
press that acts only at the prefill). Tokens per second =
scored tokens / mean seconds per round, printed as a table at the end.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from gate.models.backends.base import ScoreRequest
from gate.models.backends.chunked import score_through_cache
from gate.models.backends.loading import load_backend
from gate.models.compress.kvcache import CacheMethod, SnapKV
from gate.models.model_spec import ModelSpec
from gate.store.reference import load_pack

PACK = Path(__file__).parents[2] / "gate/assets/baselines/demo/0001-fp32.reference.safetensors"
STEPS = 32
PROMPTS = 8
RESULTS: dict[str, float] = {}


@pytest.fixture(scope="module")
def backend() -> Any:
    torch.set_num_threads(1)
    return load_backend(ModelSpec.parse("demo"))


@pytest.fixture(scope="module")
def requests() -> list[ScoreRequest]:
    pack = load_pack(PACK)
    return [
        ScoreRequest(pack.prompt_ids(j).tolist(), pack.output_ids(j)[:STEPS].tolist())
        for j in range(PROMPTS)
    ]


@pytest.fixture(scope="module", autouse=True)
def report() -> Iterator[None]:
    yield
    if RESULTS:
        single = RESULTS.get("single pass")
        print("\nscorer                      tokens/s   x single pass")
        for name, rate in RESULTS.items():
            ratio = f"{rate / single:.3f}" if single else "-"
            print(f"{name:<27} {rate:9.0f}   {ratio}")


def _record(benchmark: Any, name: str) -> None:
    mean = benchmark.stats.stats.mean if benchmark.stats else None
    if mean:
        RESULTS[name] = PROMPTS * STEPS / mean


def test_bench_single_pass(benchmark: Any, backend: Any, requests: list[ScoreRequest]) -> None:
    scores = benchmark(backend.score, requests, top_k=32, batch_size=8)
    assert len(scores) == PROMPTS
    _record(benchmark, "single pass")


@pytest.mark.parametrize("chunk", [1, 8, 32])
def test_bench_chunked_snapkv(
    benchmark: Any, backend: Any, requests: list[ScoreRequest], chunk: int
) -> None:
    method = CacheMethod(SnapKV(0.5, window=16))
    scores = benchmark(
        score_through_cache, backend.model, method, requests, top_k=32, chunk_size=chunk
    )
    assert len(scores) == PROMPTS
    _record(benchmark, f"kv-snapkv:0.5 chunk {chunk}")

"""Speed of the transformers backend's three operations on the tiny model (pytest-benchmark)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from gate.hw.timing import PerfCounterClock
from gate.models.backends.base import ScoreRequest
from gate.models.backends.hf import HFBackend
from gate.models.backends.loading import load_backend
from gate.models.model_spec import ModelSpec

TEXTS = [
    "What is 7 times 8?",
    "Please reply in JSON with key name.",
    "Summarize the following text in one sentence.",
    "Write a Python function that adds two numbers.",
] * 2


@pytest.fixture(scope="module", params=["none", "bnb-nf4", "quanto-int8"])
def backend(request: pytest.FixtureRequest, tiny_model_dir: Path) -> HFBackend:
    torch.set_num_threads(1)
    return load_backend(ModelSpec.parse(str(tiny_model_dir), dtype="float32"), request.param)


def test_bench_score(benchmark: pytest.FixtureRequest, backend: HFBackend) -> None:
    requests = [ScoreRequest(backend.encode_prompt(t), list(range(10, 42))) for t in TEXTS]
    scores = benchmark(backend.score, requests, top_k=32, batch_size=8)
    assert len(scores) == len(TEXTS)


def test_bench_generate(benchmark: pytest.FixtureRequest, backend: HFBackend) -> None:
    prompts = [backend.encode_prompt(t) for t in TEXTS]
    out = benchmark(backend.generate, prompts, max_new_tokens=16, batch_size=8)
    assert len(out) == len(TEXTS)


def test_bench_generate_timed(benchmark: pytest.FixtureRequest, backend: HFBackend) -> None:
    prompt = backend.encode_prompt(TEXTS[0])

    def run() -> int:
        return backend.generate_timed(
            prompt, batch_size=4, new_tokens=16, clock=PerfCounterClock()
        ).new_tokens

    assert benchmark(run) == 16

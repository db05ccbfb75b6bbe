"""Scoring throughput with one replica against two (pytest-benchmark).

* ``fake-*``: the tiny model behind the in-repo fake OpenAI server
  (tests/fakes) with a fixed :data:`LATENCY` per request and two slots per
  replica: with two replicas four requests overlap instead of two, so the
  same :data:`REQUESTS` requests take about half the time.
* ``vllm-*`` (marked ``engine``): the demo model in float32 on vLLM's CPU build,
  the first :data:`PROMPTS` prompts of the demo pack scored through
  :func:`gate.tiers.fidelity.score_pack`, one server against two. On this
  project's 2-core machine both servers share the same two cores, so a second
  replica adds no compute; the figure says what replicas cost there, not what
  they give on separate GPUs.

Each benchmark stores its requests (or scored tokens) per second in
``extra_info`` and prints it. Run with ``scripts/bench.sh -k replicas``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gate.engines.client import EndpointSettings
from gate.engines.http import HTTPBackend
from gate.engines.opening import open_engine
from gate.engines.replicas import ReplicaBackend
from gate.engines.settings import EngineSettings
from gate.models.backends.base import ScoreRequest
from gate.models.backends.hf import HFBackend
from gate.models.backends.loading import load_backend
from gate.models.model_spec import ModelSpec
from gate.store.reference import ReferencePack, load_pack
from gate.tiers import fidelity
from tests.engine_support import DEMO_BASELINE, engine_env, engine_python, vllm_command
from tests.fakes.openai_server import FakeOpenAIServer

#: Seconds each fake request takes besides its (tiny) compute.
LATENCY = 1.0
#: Requests scored per fake round.
REQUESTS = 8
#: Demo-pack prompts scored per vLLM round.
PROMPTS = 32


@pytest.fixture(scope="module")
def tiny(tiny_model_dir: Path) -> HFBackend:
    import torch

    torch.set_num_threads(1)
    return load_backend(ModelSpec.parse(str(tiny_model_dir), dtype="float32"))


@pytest.fixture(scope="module")
def fakes(tiny: HFBackend, tiny_model_dir: Path) -> Iterator[list[HTTPBackend]]:
    spec = ModelSpec.parse(str(tiny_model_dir))
    with (
        FakeOpenAIServer(tiny, latency=LATENCY) as a,
        FakeOpenAIServer(tiny, latency=LATENCY) as b,
    ):
        backends = [HTTPBackend(EndpointSettings(s.url, max_concurrency=2), spec) for s in (a, b)]
        for backend in backends:
            backend.connect()
        yield backends


@pytest.mark.parametrize("replicas", [1, 2])
def test_bench_fake_replicas(
    benchmark: Any, fakes: list[HTTPBackend], tiny: HFBackend, replicas: int
) -> None:
    prompt = tiny.encode_prompt("What is 7 times 8?")
    requests = [ScoreRequest(prompt, [10 + i % 5]) for i in range(REQUESTS)]
    backend: Any = fakes[0] if replicas == 1 else ReplicaBackend(fakes)
    benchmark.pedantic(
        backend.score, args=(requests,), kwargs={"top_k": 1}, rounds=3, warmup_rounds=1
    )
    per_s = REQUESTS / benchmark.stats.stats.mean
    benchmark.extra_info["requests_per_s"] = per_s
    print(
        f"\n[bench] fake server ({LATENCY}s/request, 2 slots each) x{replicas}: {per_s:.1f} req/s"
    )


@pytest.fixture(scope="module")
def pack() -> ReferencePack:
    return load_pack(DEMO_BASELINE / "0001-fp32.reference.safetensors")


@pytest.fixture(scope="module")
def vllm_pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    cache = tmp_path_factory.mktemp("bench-replicas")
    command = vllm_command(engine_python(), "--dtype", "float32")
    engine = EngineSettings(
        serve=(command + " --port 18801", command + " --port 18802"),
        startup_timeout_s=1800,
        request_timeout_s=600,
    )
    with open_engine(ModelSpec.parse("demo"), engine, log_dir=cache, env=engine_env(cache)) as both:
        assert isinstance(both, ReplicaBackend)
        both.score([ScoreRequest([1, 4], [47, 80])], top_k=2, full=True)  # warm both up
        both.score([ScoreRequest([1, 4], [47, 80])] * 4, top_k=2, full=True)
        yield both


@pytest.mark.engine
@pytest.mark.parametrize("replicas", [1, 2])
def test_bench_vllm_replicas(
    benchmark: Any, vllm_pair: ReplicaBackend, pack: ReferencePack, replicas: int
) -> None:
    settings = fidelity.FidelitySettings(limit=PROMPTS, batch_size=16, max_new_tokens=64)
    backend: Any = vllm_pair.replicas[0] if replicas == 1 else vllm_pair
    results = benchmark.pedantic(
        fidelity.score_pack, args=(backend, pack, replace(settings)), rounds=2, warmup_rounds=1
    )
    assert len(results) == PROMPTS
    tokens = sum(len(pack.output_ids(j)) for j in range(PROMPTS))
    per_s = tokens / benchmark.stats.stats.mean
    benchmark.extra_info["scored_tokens_per_s"] = per_s
    print(f"\n[bench] vLLM CPU float32 x{replicas} (2 shared cores): {per_s:.0f} tokens/s")

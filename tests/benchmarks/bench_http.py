"""Fidelity scoring through a served engine (pytest-benchmark; marked ``engine``).

Scores the first :data:`PROMPTS` prompts of the committed demo pack with
:func:`gate.tiers.fidelity.score_pack` three ways, on the same model and tokens:

* ``http-c1``: vLLM's OpenAI server, one request at a time;
* ``http-c8``: the same server, eight requests in flight (the engine batches them);
* ``in-process``: the transformers backend, batches of 16, one thread.

Each benchmark stores the scored tokens per second in ``extra_info``
(``--benchmark-json``) and prints it. The server is the demo model in float32
on vLLM's CPU build, started once for the module (scripts/setup_engine.sh sets
the engine up when missing). Run with ``scripts/bench.sh -k http``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from gate.engines.http import HTTPBackend
from gate.engines.opening import open_engine
from gate.engines.settings import EngineSettings
from gate.models.backends.hf import HFBackend
from gate.models.backends.loading import load_backend
from gate.models.model_spec import ModelSpec
from gate.store.reference import ReferencePack, load_pack
from gate.tiers import fidelity
from tests.engine_support import engine_env, engine_python, vllm_command

pytestmark = pytest.mark.engine

PACK = (
    Path(__file__).resolve().parents[2]
    / "gate"
    / "assets"
    / "baselines"
    / "demo"
    / "0001-fp32.reference.safetensors"
)
PROMPTS = 48
SETTINGS = fidelity.FidelitySettings(limit=PROMPTS, batch_size=16, max_new_tokens=64)


@pytest.fixture(scope="module")
def pack() -> ReferencePack:
    return load_pack(PACK)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HTTPBackend]:
    cache = tmp_path_factory.mktemp("bench-engine")
    engine = EngineSettings(
        serve=vllm_command(engine_python(), "--dtype", "float32"),
        startup_timeout_s=1800,
        request_timeout_s=600,
    )
    with open_engine(
        ModelSpec.parse("demo"), engine, log_dir=cache, env=engine_env(cache)
    ) as backend:
        yield backend


@pytest.fixture(scope="module")
def local() -> HFBackend:
    torch.set_num_threads(1)
    return load_backend(ModelSpec.parse("demo", dtype="float32"))


def _tokens(pack: ReferencePack) -> int:
    return sum(len(pack.output_ids(j)) for j in range(PROMPTS))


def _run(benchmark: Any, backend: Any, pack: ReferencePack, label: str) -> None:
    results = benchmark.pedantic(
        fidelity.score_pack, args=(backend, pack, SETTINGS), rounds=3, warmup_rounds=1
    )
    assert len(results) == PROMPTS
    tokens_per_s = _tokens(pack) / benchmark.stats.stats.mean
    benchmark.extra_info["scored_tokens_per_s"] = tokens_per_s
    print(f"\n[bench] fidelity scoring {label}: {tokens_per_s:.0f} tokens/s")


@pytest.mark.parametrize("concurrency", [1, 8])
def test_bench_http_fidelity_scoring(
    benchmark: Any, served: HTTPBackend, pack: ReferencePack, concurrency: int
) -> None:
    backend = HTTPBackend(replace(served.settings, max_concurrency=concurrency), served.spec)
    _run(benchmark, backend, pack, f"http-c{concurrency}")


def test_bench_inprocess_fidelity_scoring(
    benchmark: Any, local: HFBackend, pack: ReferencePack
) -> None:
    _run(benchmark, local, pack, "in-process")

"""Teacher-forced scoring through llama-server, its two mechanisms side by side
(pytest-benchmark; marked ``engine``).

SmolLM2-135M-Instruct as an F16 GGUF (gate's ``gguf-f16`` recipe) behind
llama-server b11434 (CPU, :data:`SLOTS` slots), the same :data:`PROMPTS`
sequences (a chat prompt and its greedy continuation of up to
:data:`NEW_TOKENS` tokens) scored with ``top_k = 64`` three ways:

* ``forced-c4``: one request per sequence, the continuation forced by a token
  grammar, four sequences in flight (the server batches its slots);
* ``forced-c1``: the same, one sequence at a time;
* ``positions-c4``: one request per position on the slot's cached prefix, four
  sequences in flight.

Each benchmark stores the scored positions per second in ``extra_info`` and
prints it. Run with ``scripts/bench.sh -k llama_server``.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
from collections.abc import Iterator
from typing import Any

import pytest

from gate.engines.client import ScoringApi
from gate.engines.http import HTTPBackend
from gate.engines.opening import open_engine
from gate.engines.settings import EngineSettings
from gate.models.backends.base import ScoreRequest
from gate.models.model_spec import ModelSpec
from tests.engine_support import llama_server_path

pytestmark = pytest.mark.engine

SLOTS = 4
PROMPTS = 16
NEW_TOKENS = 48
TEXTS = (
    "What is 7 times 8?",
    "Please reply in JSON with key name.",
    "Summarize the following text in one sentence: the cat sat on the mat.",
    "Write a Python function that adds two numbers.",
    "Name three colours of the rainbow.",
    "Explain what a prime number is.",
    "Give me a haiku about the sea.",
    "Translate 'good morning' into French.",
)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HTTPBackend]:
    from gate.engines.llama_cpp.install import require
    from gate.engines.llama_cpp.make import make_gguf

    llama_server_path()
    spec = ModelSpec.parse("smollm2")
    f16 = make_gguf(spec, "gguf-f16", llama=require()).path
    argv = [llama_server_path(), "-m", str(f16), "-c", str(2048 * SLOTS), "-np", str(SLOTS)]
    argv += ["-t", str(os.cpu_count() or 1), "--no-webui"]
    engine = EngineSettings(serve=shlex.join(argv), max_concurrency=SLOTS)
    log_dir = tmp_path_factory.mktemp("bench-llama")
    with open_engine(spec, engine, log_dir=log_dir) as backend:
        assert isinstance(backend, HTTPBackend)
        yield backend


@pytest.fixture(scope="module")
def requests_(served: HTTPBackend) -> list[ScoreRequest]:
    prompts = [
        served.encode_prompt(TEXTS[i % len(TEXTS)] + " " * (i // len(TEXTS)))
        for i in range(PROMPTS)
    ]
    outputs = served.generate(prompts, max_new_tokens=NEW_TOKENS)
    return [ScoreRequest(p, o) for p, o in zip(prompts, outputs, strict=True)]


def _run(
    benchmark: Any,
    served: HTTPBackend,
    requests: list[ScoreRequest],
    api: ScoringApi,
    slots: int,
) -> None:
    settings = dataclasses.replace(served.settings, scoring_api=api, max_concurrency=slots)
    backend = HTTPBackend(settings, served.spec)
    backend.connect()
    results = benchmark.pedantic(
        backend.score, args=(requests,), kwargs={"top_k": 64}, rounds=2, warmup_rounds=0
    )
    positions = sum(len(r.continuation) for r in requests)
    assert sum(len(s.target_logprobs) for s in results) == positions
    rate = positions / benchmark.stats.stats.mean
    benchmark.extra_info.update({"positions": positions, "positions_per_s": rate})
    print(f"\n[llama-server scoring] {api} c{slots}: {positions} positions, {rate:.1f} positions/s")


def test_bench_forced_c4(
    benchmark: Any, served: HTTPBackend, requests_: list[ScoreRequest]
) -> None:
    _run(benchmark, served, requests_, "forced", SLOTS)


def test_bench_forced_c1(
    benchmark: Any, served: HTTPBackend, requests_: list[ScoreRequest]
) -> None:
    _run(benchmark, served, requests_, "forced", 1)


def test_bench_positions_c4(
    benchmark: Any, served: HTTPBackend, requests_: list[ScoreRequest]
) -> None:
    _run(benchmark, served, requests_, "positions", SLOTS)

"""The packaged judge served by vLLM: answers as in process, throughput by concurrency and cap.

Marked ``engine`` (vLLM's CPU build, set up by scripts/setup_engine.sh). The judge
(``gate/assets/judge_model``) is served as ``judge`` and asked through
:class:`gate.engines.chat.ChatJudge`, the path a user's own judge
endpoint takes. The same 32 pairwise questions (fitted to the judge's field limits
by the in-process judge's tokenizer) are asked

* ``c1/cap-64``: one request at a time, up to 64 answer tokens;
* ``c16/cap-4``: 16 requests in flight, 4 answer tokens (the answer is one word).

The test first checks the served judge answers the questions as the in-process
judge does (greedy, float32). Run with ``scripts/bench.sh -k judge_endpoint``.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gate.data.prompt_set import load_prompt_set
from gate.engines.chat import ChatJudge
from gate.engines.client import EndpointSettings
from gate.engines.serve import ManagedServer
from gate.judge.judges import TransformersJudge
from gate.judge.template import default_template
from tests.engine_support import MAX_MODEL_LEN, engine_env, engine_python

pytestmark = pytest.mark.engine

JUDGE = Path(__file__).resolve().parents[2] / "gate" / "assets" / "judge_model"
QUESTIONS = 32


@pytest.fixture(scope="module")
def local() -> TransformersJudge:
    if not (JUDGE / "model.safetensors").is_file():
        pytest.skip("the packaged judge model is absent")
    return TransformersJudge(JUDGE, concurrency=16)


@pytest.fixture(scope="module")
def questions(local: TransformersJudge) -> list[str]:
    template = default_template("pairwise")
    out = []
    for i, p in enumerate(load_prompt_set()[:QUESTIONS]):
        a = f"Here is a careful answer about {p.category}, complete and correct."
        b = a if i % 4 == 0 else " ".join(reversed(a.split()))
        fields = {"prompt": p.text, "response_a": a, "response_b": b}
        out.append(template.render(fields, local.field_limits, local.codec))
    return out


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, local: TransformersJudge) -> Iterator[str]:
    cache = tmp_path_factory.mktemp("judge-engine")
    argv = [
        engine_python(),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(JUDGE),
        "--served-model-name",
        "judge",
        "--enforce-eager",
        "--dtype",
        "float32",
        "--max-model-len",
        str(MAX_MODEL_LEN),
    ]
    with ManagedServer(
        shlex.join(argv), log_path=cache / "server.log", startup_timeout=1800, env=engine_env(cache)
    ) as srv:
        yield srv.base_url


def _judge(url: str, concurrency: int, cap: int) -> ChatJudge:
    settings = EndpointSettings(url, model="judge", max_concurrency=concurrency)
    return ChatJudge(
        settings, name="served", family="llama", max_output_tokens=cap, concurrency=concurrency
    )


def test_served_judge_answers_as_in_process(
    server: str, local: TransformersJudge, questions: list[str]
) -> None:
    served = [a.text for a in _judge(server, 16, 8).ask_batch(questions)]
    here = [a.text for a in local.ask_batch(questions)]
    same = sum(s == h for s, h in zip(served, here, strict=True))
    assert same >= 0.9 * len(questions), list(zip(served, here, strict=True))


@pytest.mark.parametrize(("concurrency", "cap"), [(1, 64), (16, 4)], ids=["c1-cap64", "c16-cap4"])
def test_bench_judge_endpoint(
    benchmark: Any, server: str, questions: list[str], concurrency: int, cap: int
) -> None:
    judge = _judge(server, concurrency, cap)
    answers = benchmark.pedantic(judge.ask_batch, args=(questions,), rounds=2, iterations=1)
    assert len(answers) == len(questions)
    assert all(a.completion_tokens <= cap for a in answers)
    benchmark.extra_info["questions"] = len(questions)
    benchmark.extra_info["completion_tokens"] = sum(a.completion_tokens for a in answers)

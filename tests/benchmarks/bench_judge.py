"""Judge throughput in process: batched questions with a short answer cap vs one at a time.

The Elo framework for efficiency techniques (see :mod:`gate.judge`) saves judge time by
capping the judge's output tokens and batching calls. This measures both effects on
the bundled judge (``gate/assets/judge_model``; the demo model stands in while the
judge is not there; ``GATE_BENCH_JUDGE`` names another judge directory) with 16
real pairwise questions built from the fidelity prompts:

* ``one-at-a-time/cap-64``: ``concurrency=1``, up to 64 answer tokens;
* ``one-at-a-time/cap-4`` and ``batched-16/cap-64``: one change each;
* ``batched-16/cap-4``: both.

Each case asks all 16 questions; compare the means (questions/s = 16 / mean).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from gate.data.prompt_set import load_prompt_set
from gate.judge.judges import TransformersJudge
from gate.judge.template import default_template

ASSETS = Path(__file__).resolve().parents[2] / "gate" / "assets"
TRAINED = ASSETS / "judge_model"
JUDGE = Path(
    os.environ.get("GATE_BENCH_JUDGE")
    or (TRAINED if (TRAINED / "model.safetensors").is_file() else ASSETS / "demo_model")
)


def _questions(judge: TransformersJudge, n: int = 16) -> list[str]:
    template = default_template("pairwise")
    prompts = load_prompt_set()[:n]
    out = []
    for i, p in enumerate(prompts):
        a = f"Here is an answer to the question about {p.category}."
        b = a if i % 3 == 0 else a.split(" about")[0]
        fields = {"prompt": p.text, "response_a": a, "response_b": b}
        out.append(template.render(fields, judge.field_limits, judge.codec))
    return out


@pytest.mark.parametrize(
    ("concurrency", "cap"), [(1, 64), (1, 4), (16, 64), (16, 4)], ids=lambda v: str(v)
)
def test_bench_judge_throughput(
    benchmark: pytest.FixtureRequest, concurrency: int, cap: int
) -> None:
    torch.set_num_threads(1)
    judge = TransformersJudge(JUDGE, max_output_tokens=cap, concurrency=concurrency)
    questions = _questions(judge)
    answers = benchmark.pedantic(judge.ask_batch, args=(questions,), rounds=2, iterations=1)
    assert len(answers) == len(questions)
    assert all(a.completion_tokens <= cap for a in answers)
    benchmark.extra_info["questions"] = len(questions)
    benchmark.extra_info["judge"] = JUDGE.name
    benchmark.extra_info["completion_tokens"] = sum(a.completion_tokens for a in answers)

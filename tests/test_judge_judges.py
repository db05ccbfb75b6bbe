"""gate.judge.judges: the in-process transformers judge, run on the real demo model."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gate.errors import ConfigError, ExitCode, ModelLoadError
from gate.judge.judges import JUDGE_CONFIG, Judge, TransformersJudge, answer_ids, question_ids
from gate.judge.template import FieldLimits, default_template

DEMO = Path(__file__).resolve().parent.parent / "gate" / "assets" / "demo_model"

QUESTIONS = [
    default_template("pairwise").fill(
        {"prompt": "What is 7 * 8?", "response_a": "7 * 8 = 56.", "response_b": "7 * 8 = 54."}
    ),
    default_template("validity").fill({"prompt": "Say hi.", "response": "hi hi hi hi hi"}),
    "What is 6 * 7 + 12?",
]


@pytest.fixture(scope="module")
def demo_judge() -> TransformersJudge:
    return TransformersJudge(DEMO, name="demo", max_output_tokens=6, concurrency=4)


def test_is_a_judge_with_context_derived_limits(demo_judge: TransformersJudge) -> None:
    assert isinstance(demo_judge, Judge)
    assert demo_judge.family == "llama"
    assert demo_judge.field_limits == FieldLimits(prompt=256, response=256)  # 1024 / 4
    assert demo_judge.model_id.startswith("demo_model@") and len(demo_judge.model_id) == 27


def test_batched_answers_equal_one_at_a_time(demo_judge: TransformersJudge) -> None:
    batched = demo_judge.ask_batch(QUESTIONS)
    single = [demo_judge.ask(q) for q in QUESTIONS]
    assert batched == single
    for q, a in zip(QUESTIONS, batched, strict=True):
        assert a.prompt_tokens == len(question_ids(demo_judge._tokenizer, q))
        assert 1 <= a.completion_tokens <= 6
    # the demo model is not a judge, but it is a real model: it answers arithmetic
    assert batched[2].text.startswith("6 * 7")


def test_training_targets_are_what_the_judge_reads(demo_judge: TransformersJudge) -> None:
    tok = demo_judge._tokenizer
    ids = question_ids(tok, QUESTIONS[0]) + answer_ids(tok, "tie")
    rendered = tok.apply_chat_template(
        [{"role": "user", "content": QUESTIONS[0]}, {"role": "assistant", "content": "tie"}],
        tokenize=False,
    )
    assert tok.decode(ids) == rendered


def test_judge_config_sets_limits_and_output_cap(tmp_path: Path) -> None:
    copy = tmp_path / "judge"
    shutil.copytree(DEMO, copy)
    (copy / JUDGE_CONFIG).write_text(
        json.dumps({"field_limits": {"prompt": 64, "response": 96}, "max_output_tokens": 3})
    )
    judge = TransformersJudge(copy)
    assert judge.field_limits == FieldLimits(prompt=64, response=96)
    assert judge.max_output_tokens == 3
    assert judge.name == "judge"
    assert judge.ask("What is 2 + 2?").completion_tokens <= 3


def test_question_longer_than_the_context_is_one_clear_error(
    demo_judge: TransformersJudge,
) -> None:
    with pytest.raises(ConfigError) as err:
        demo_judge.ask("word " * 2000)
    assert err.value.exit_code is ExitCode.USAGE_ERROR
    assert "does not fit the judge's context" in err.value.format_line()


def test_missing_judge_model_is_input_and_a_broken_one_a_load_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        TransformersJudge(tmp_path / "absent")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelLoadError, match="cannot load the judge model"):
        TransformersJudge(tmp_path / "empty")

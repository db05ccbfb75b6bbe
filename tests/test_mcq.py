"""MCQ records: adapters for MMLU / ARC / HellaSwag layouts, local JSONL, shipped sets, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gate.data import mcq
from gate.data.corpus import load_corpus
from gate.data.mcq_generate import arithmetic_set, write_sets
from gate.errors import ConfigError, DataError
from gate.tiers.accuracy import AccuracySettings, load_questions
from gate.tiers.registry import build_settings

MMLU = {
    "question": "What is 2 + 2?",
    "subject": "elementary_mathematics",
    "choices": ["3", "4", "5", "22"],
    "answer": 1,
}
ARC = {
    "id": "Mercury_1",
    "question": "Which gas do plants absorb?",
    "choices": {"text": ["oxygen", "carbon dioxide", "helium"], "label": ["A", "B", "C"]},
    "answerKey": "B",
}
HELLASWAG = {
    "ind": 24,
    "activity_label": "Roof shingle removal",
    "ctx_a": "A man is sitting on a roof.",
    "ctx_b": "he",
    "endings": [
        "is using wrap to wrap a pair of skis.",
        "starts pulling up roofing [title] on a roof.",
    ],
    "label": "1",
}


def test_mmlu_layout_matches_the_lm_eval_prompt() -> None:
    (q,) = mcq.parse_records([MMLU])
    assert q.context == "What is 2 + 2?\nA. 3\nB. 4\nC. 5\nD. 22\nAnswer:"
    assert q.choices == ("A", "B", "C", "D") and q.answer == 1
    assert q.subject == "elementary_mathematics" and q.continuation(1) == " B"


def test_arc_layout() -> None:
    (q,) = mcq.parse_records([ARC])
    assert q.context == "Question: Which gas do plants absorb?\nAnswer:"
    assert q.choices == ("oxygen", "carbon dioxide", "helium") and q.answer == 1
    assert q.id == "Mercury_1"


def test_hellaswag_layout_is_cleaned() -> None:
    (q,) = mcq.parse_records([HELLASWAG])
    assert q.context == "Roof shingle removal: A man is sitting on a roof. He"
    assert q.choices[1] == "starts pulling up roofing. on a roof."
    assert q.answer == 1 and q.id == "24"


def test_native_jsonl_round_trip(tmp_path: Path) -> None:
    questions = mcq.parse_records([MMLU, ARC, HELLASWAG])
    path = tmp_path / "set.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in mcq.to_native(questions)))
    again = mcq.load_mcq_jsonl(path)
    assert again == questions
    assert mcq.load_mcq_jsonl(path, limit=2) == questions[:2]


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"id": "a", "context": "Q", "answer": 0}, "missing field 'choices'"),
        ({"id": "a", "context": "Q", "choices": ["x"], "answer": 0}, "1 choice"),
        ({"id": "a", "context": "Q", "choices": ["x", "y"], "answer": 2}, "outside 0..1"),
        ({"id": "a", "context": "Q", "choices": "xy", "answer": 0}, "must be a list"),
        ({"id": "a", "context": "", "choices": ["x", "y"], "answer": 0}, "empty context"),
        ({**ARC, "answerKey": "Z"}, "answerKey"),
    ],
)
def test_bad_records_are_data_errors(
    tmp_path: Path, record: dict[str, object], message: str
) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(record) + "\n")
    with pytest.raises(DataError, match=message) as info:
        mcq.load_mcq_jsonl(path)
    assert "bad.jsonl record 1" in info.value.message


def test_file_errors(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="not found"):
        mcq.load_mcq_jsonl(tmp_path / "missing.jsonl")
    bad = tmp_path / "b.jsonl"
    good = {"id": "x", "context": "Q", "choices": ["a", "b"], "answer": 0}
    bad.write_text(json.dumps(good) + "\n{oops\n")
    with pytest.raises(DataError, match=r"b.jsonl:2: not valid JSON"):
        mcq.load_mcq_jsonl(bad)
    dup = tmp_path / "d.jsonl"
    rec = {"id": "x", "context": "Q", "choices": ["a", "b"], "answer": 0}
    dup.write_text(json.dumps(rec) + "\n" + json.dumps(rec) + "\n")
    with pytest.raises(DataError, match="duplicate"):
        mcq.load_mcq_jsonl(dup)
    with pytest.raises(DataError, match="unknown built-in MCQ set") as info:
        mcq.load_mcq_set("fcts")
    assert info.value.hint == "did you mean 'facts'?"


def test_shipped_sets_load_and_match_the_generator(tmp_path: Path) -> None:
    counts = write_sets(tmp_path)
    assert set(mcq.BUILTIN_SETS) == set(counts)
    for name in mcq.BUILTIN_SETS:
        shipped = mcq.builtin_path(name).read_text()
        assert shipped == (tmp_path / f"{name}.jsonl").read_text(), f"{name} is stale"
        questions = mcq.load_builtin(name)
        assert len(questions) == counts[name] >= 60
        assert all(len(set(q.choices)) == len(q.choices) for q in questions)
    assert sum(counts.values()) >= 250


def test_arithmetic_answers_are_right() -> None:
    records = arithmetic_set()
    assert len(records) >= 60
    for rec in records:
        a, op, b = (
            rec["context"].removeprefix("Question: What is ").removesuffix("?\nAnswer:").split()
        )
        value = {"plus": int(a) + int(b), "minus": int(a) - int(b), "times": int(a) * int(b)}[op]
        assert rec["choices"][rec["answer"]] == str(value)


def test_settings_validate() -> None:
    s = build_settings(
        "accuracy",
        {"mcq_sets": ["facts"], "mcq_limit": 3, "perplexity_window": 64, "perplexity_stride": 32},
    )
    assert s.mcq_sets == ("facts",) and s.perplexity_window == 64
    with pytest.raises(ConfigError, match="mcq_limt") as info:
        build_settings("accuracy", {"mcq_limt": 3})
    assert "mcq_limit" in (info.value.hint or "")
    with pytest.raises(ConfigError, match="stride"):
        build_settings("accuracy", {"perplexity_window": 64, "perplexity_stride": 128})
    named = load_questions(AccuracySettings(mcq_sets=("facts", "arithmetic"), mcq_limit=2))
    assert [(n, len(qs)) for n, qs in named] == [("facts", 2), ("arithmetic", 2)]


def test_corpus_loading(tmp_path: Path) -> None:
    txt = tmp_path / "a.txt"
    txt.write_text("hello world " * 10)
    assert load_corpus(str(txt), max_chars=11) == "hello world"
    js = tmp_path / "a.jsonl"
    js.write_text(
        json.dumps({"text": "one"}) + "\n"
        + json.dumps({"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]}) + "\n"
    )  # fmt: skip
    assert load_corpus(str(js)) == "one\n\nhi\nyo"
    js.write_text(json.dumps({"body": "x"}) + "\n")
    with pytest.raises(DataError, match="no 'text' field"):
        load_corpus(str(js))
    with pytest.raises(DataError, match="bad corpus"):
        load_corpus("hf:")

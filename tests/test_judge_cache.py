"""gate.judge.cache and gate.judge.panel: keys, counters, retries, and no second call."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path

import pytest

from gate.judge.cache import CachedJudge, JudgeCache, Question, question_key
from gate.judge.judges import JudgeAnswer
from gate.judge.panel import JudgeTemplates, Pair, judge_pairs, judge_panel
from gate.judge.protocol import Outcome, PairStatus, tally
from gate.judge.template import default_template
from tests.fakes.judges import ScriptedJudge

TEMPLATES = JudgeTemplates(default_template("pairwise"), default_template("validity"))


def _q(**changes: object) -> Question:
    base = Question("text", "v1", "pairwise", "p", "a", "b", "AB")
    return replace(base, **changes)  # type: ignore[arg-type]


def test_key_is_sha256_of_the_canonical_field_list() -> None:
    q = _q()
    blob = json.dumps(["m", "v1", "pairwise", "p", "a", "b", "AB", 1], separators=(",", ":"))
    assert question_key("m", q) == hashlib.sha256(blob.encode()).hexdigest()


@pytest.mark.parametrize(
    "change",
    [
        {"template_version": "v2"},
        {"kind": "validity"},
        {"prompt": "p2"},
        {"response_a": "a2"},
        {"response_b": "b2"},
        {"order": "BA"},
        {"attempt": 2},
    ],
)
def test_every_field_is_part_of_the_key(change: dict[str, object]) -> None:
    assert question_key("m", _q(**change)) != question_key("m", _q())
    assert question_key("m2", _q()) != question_key("m", _q())
    # the question text itself is not: it is a function of the fields and the judge
    assert question_key("m", _q(text="other")) == question_key("m", _q())


def test_fields_cannot_run_into_each_other() -> None:
    assert question_key("m", _q(response_a="ab", response_b="")) != question_key(
        "m", _q(response_a="a", response_b="b")
    )


def test_entries_are_atomic_files_and_bad_entries_are_misses(tmp_path: Path) -> None:
    cache = JudgeCache(tmp_path)
    key = question_key("m", _q())
    assert cache.get(key) is None
    cache.put(key, JudgeAnswer("A", 10, 1))
    path = tmp_path / key[:2] / f"{key}.json"
    assert json.loads(path.read_text()) == {
        "answer": "A",
        "prompt_tokens": 10,
        "completion_tokens": 1,
    }
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temp file left
    assert cache.get(key) == JudgeAnswer("A", 10, 1)
    path.write_text("{not json")
    assert cache.get(key) is None


def _pairs() -> list[Pair]:
    return [
        Pair("What is 2 + 2?", "2 + 2 = 4.", "2 + 2 = 5."),
        Pair("Name a fruit.", "Apple", "Apple"),
        Pair("Say hi.", "## Hi", "Hi"),  # equal after normalization
    ]


def _prefers_four(q: str) -> str:
    """Prefers the reply holding '= 4', says tie when the replies are equal, valid always."""
    if "Reply A:" not in q:
        return "valid"
    a = q.split("Reply A:\n", 1)[1].split("\n\nReply B:", 1)[0]
    b = q.split("Reply B:\n", 1)[1].split("\n\nAnswer", 1)[0]
    if a == b:
        return "tie"
    return "A" if "= 4" in a else "B"


def test_second_identical_run_makes_no_call(tmp_path: Path) -> None:
    judge = ScriptedJudge(_prefers_four)
    first = CachedJudge(judge, JudgeCache(tmp_path))
    outcomes = judge_pairs(first, TEMPLATES, _pairs())
    assert [o.outcome for o in outcomes] == [Outcome.WIN, Outcome.TIE, Outcome.TIE]
    # identical pairs (the 2nd, and the 3rd after normalization) are ties nobody is asked
    assert [o.identical for o in outcomes] == [False, True, True]
    assert first.stats.calls == len(judge.asked) == 4  # 2 orders + 2 validity questions
    assert first.stats.hits == 0
    assert first.stats.prompt_tokens == sum(len(q) for q in judge.asked)
    assert first.stats.completion_tokens == 4
    second = CachedJudge(judge, JudgeCache(tmp_path))
    assert judge_pairs(second, TEMPLATES, _pairs()) == outcomes
    assert second.stats.calls == 0 and second.stats.hits == 4
    assert len(judge.asked) == 4
    # asked anyway, the two validity questions of an identical pair are one question
    third = CachedJudge(judge, JudgeCache(tmp_path))
    asked = judge_pairs(third, TEMPLATES, _pairs(), ask_identical=True)
    assert [o.outcome for o in asked] == [Outcome.WIN, Outcome.TIE, Outcome.TIE]
    assert not any(o.identical for o in asked)
    assert third.stats.calls == 6 and third.stats.hits == 6


def test_unparseable_answers_are_retried_once_then_counted(tmp_path: Path) -> None:
    judge = ScriptedJudge(lambda q: "I think the first one")
    cached = CachedJudge(judge, JudgeCache(tmp_path))
    outcomes = judge_pairs(cached, JudgeTemplates(TEMPLATES.pairwise), _pairs()[:1])
    assert outcomes[0].status is PairStatus.UNPARSED
    assert cached.stats.calls == 4  # two orders, each asked twice
    assert cached.stats.parse_failures == 2
    again = CachedJudge(judge, JudgeCache(tmp_path))
    judge_pairs(again, JudgeTemplates(TEMPLATES.pairwise), _pairs()[:1])
    assert again.stats.calls == 0 and again.stats.parse_failures == 2


def test_a_judge_with_position_bias_is_swap_inconsistent_everywhere(tmp_path: Path) -> None:
    always_a = ScriptedJudge(lambda q: "A" if "Reply A:" in q else "valid", model_id="a@1")
    fair = ScriptedJudge(_prefers_four, model_id="fair@1")
    panel = judge_panel(
        [CachedJudge(fair, JudgeCache(tmp_path)), CachedJudge(always_a, JudgeCache(tmp_path))],
        TEMPLATES,
        _pairs(),
    )
    t = tally(panel)
    assert t.swap_inconsistent == 1 and t.identical == 2 and t.scored == 2
    assert t.swap_inconsistency_rate(0) == 0.0 and t.swap_inconsistency_rate(1) == 1.0
    asked = judge_panel(
        [CachedJudge(fair, JudgeCache(tmp_path)), CachedJudge(always_a, JudgeCache(tmp_path))],
        TEMPLATES,
        _pairs(),
        ask_identical=True,
    )
    assert tally(asked).swap_inconsistent == 3


def test_corrupted_candidate_output_is_a_loss(tmp_path: Path) -> None:
    def judge_fn(q: str) -> str:
        if "Reply A:" in q:
            return "tie"
        return "corrupted" if "again again" in q else "valid"

    cached = CachedJudge(ScriptedJudge(judge_fn), JudgeCache(tmp_path))
    pairs = [Pair("Say it.", "again again again again", "Said."), Pair("x", "y", "y")]
    outcomes = judge_pairs(cached, TEMPLATES, pairs)
    assert (
        outcomes[0].outcome is Outcome.LOSS and outcomes[0].reason == "candidate response corrupted"
    )
    assert outcomes[1].outcome is Outcome.TIE


def test_questions_asked_show_progress_and_cached_ones_none(tmp_path: Path) -> None:
    import io

    from gate import progress

    judge = CachedJudge(ScriptedJudge(lambda q: "A", concurrency=2), JudgeCache(tmp_path))
    questions = [_q(prompt=f"p{i}") for i in range(5)]
    shown = io.StringIO()
    with progress.to_stream(shown, style="plain", interval=0.0):
        judge.ask(questions)
        judge.ask(questions)  # all cached now: nothing to show
    lines = shown.getvalue().splitlines()
    assert lines[0] == "gate: judge scripted: questions: 0/5"
    assert lines[-1].startswith("gate: judge scripted: questions: done 5/5 in ")
    assert len(lines) == 4  # start, 2/5 and 4/5 (one per batch of 2), done; none the 2nd time

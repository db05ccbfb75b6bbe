"""Asking judges about pairs: questions in both orders, validity, one retry, the panel.

:func:`judge_pairs` runs the protocol of :mod:`gate.judge.protocol` for one judge over
many pairs at once:

1. both responses of every pair pass :func:`gate.judge.normalize.normalize_response`;
   a pair whose responses are then identical is a tie and nobody is asked (rule 0 of
   :mod:`gate.judge.protocol`);
2. each pair becomes two pairwise questions (candidate as reply A, then as reply B)
   and, when a validity template is given, one validity question per response;
   fields are clipped to the judge's field limits when it has them;
3. all questions go to the judge through its cache (:class:`gate.judge.cache.CachedJudge`,
   ``concurrency`` at a time); answers that do not parse are asked again as attempt
   2; answers that fail twice count as parse failures;
4. each pair's answers are combined by :func:`gate.judge.protocol.judge_outcome`.

:func:`judge_panel` does this for every judge of a panel and combines the judges
pair by pair with :func:`gate.judge.protocol.panel_outcome`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gate.judge.cache import CachedJudge, Order, Question
from gate.judge.normalize import normalize_response
from gate.judge.protocol import (
    JudgeOutcome,
    PairAnswer,
    PanelOutcome,
    Validity,
    identical_outcome,
    judge_outcome,
    panel_outcome,
    parse_validity,
    parse_verdict,
)
from gate.judge.template import JudgeTemplate

__all__ = [
    "JudgeTemplates",
    "Pair",
    "judge_pairs",
    "judge_panel",
    "judge_validity",
    "panel_validity",
    "validity_question",
]


@dataclass(frozen=True)
class Pair:
    """A user prompt with the candidate's and the baseline's responses."""

    prompt: str
    candidate: str
    baseline: str


@dataclass(frozen=True)
class JudgeTemplates:
    """The pairwise template and the validity template (``None``: no validity question)."""

    pairwise: JudgeTemplate
    validity: JudgeTemplate | None = None


def _pairwise(
    judge: CachedJudge, template: JudgeTemplate, prompt: str, a: str, b: str, order: Order
) -> Question:
    fields = {"prompt": prompt, "response_a": a, "response_b": b}
    text = template.render(fields, judge.judge.field_limits, judge.judge.codec)
    return Question(text, template.version, "pairwise", prompt, a, b, order)


def validity_question(
    judge: CachedJudge, template: JudgeTemplate, prompt: str, response: str
) -> Question:
    """The validity question about one (already normalized) response, fitted to the judge."""
    fields = {"prompt": prompt, "response": response}
    text = template.render(fields, judge.judge.field_limits, judge.judge.codec)
    return Question(text, template.version, "validity", prompt, response, "", "single")


def _ask_parsed(
    judge: CachedJudge, questions: Sequence[Question], parse: Sequence[Callable[[str], Any]]
) -> list[Any]:
    """Parsed answers; unparseable ones asked again (attempt 2), then counted as failures."""
    values = [p(a.text) for p, a in zip(parse, judge.ask(questions), strict=True)]
    again = [i for i, v in enumerate(values) if v is None]
    if again:
        retry = [
            Question(
                questions[i].text,
                questions[i].template_version,
                questions[i].kind,
                questions[i].prompt,
                questions[i].response_a,
                questions[i].response_b,
                questions[i].order,
                attempt=2,
            )
            for i in again
        ]
        for i, answer in zip(again, judge.ask(retry), strict=True):
            values[i] = parse[i](answer.text)
            if values[i] is None:
                judge.stats.parse_failures += 1
    return values


def judge_pairs(
    judge: CachedJudge,
    templates: JudgeTemplates,
    pairs: Sequence[Pair],
    *,
    ask_identical: bool = False,
) -> list[JudgeOutcome]:
    """One judge's outcome for every pair (see the module docstring).

    A pair whose responses are identical after normalization is a tie without a
    question (:func:`gate.judge.protocol.identical_outcome`) unless ``ask_identical``
    (for measuring whether a judge itself calls such pairs ties).
    """
    questions: list[Question] = []
    parsers: list[Callable[[str], Any]] = []
    per_pair = 4 if templates.validity is not None else 2
    asked: list[int] = []
    for k, pair in enumerate(pairs):
        cand = normalize_response(pair.candidate)
        base = normalize_response(pair.baseline)
        if cand == base and not ask_identical:
            continue
        asked.append(k)
        questions.append(_pairwise(judge, templates.pairwise, pair.prompt, cand, base, "AB"))
        questions.append(_pairwise(judge, templates.pairwise, pair.prompt, base, cand, "BA"))
        parsers += [parse_verdict, parse_verdict]
        if templates.validity is not None:
            questions.append(validity_question(judge, templates.validity, pair.prompt, cand))
            questions.append(validity_question(judge, templates.validity, pair.prompt, base))
            parsers += [parse_validity, parse_validity]
    values = _ask_parsed(judge, questions, parsers) if questions else []
    out: list[JudgeOutcome] = [identical_outcome()] * len(pairs)
    for slot, k in enumerate(asked):
        row = values[slot * per_pair : (slot + 1) * per_pair]
        first: PairAnswer | None = row[0]
        second: PairAnswer | None = row[1]
        cand_valid: Validity | None = row[2] if per_pair == 4 else None
        base_valid: Validity | None = row[3] if per_pair == 4 else None
        out[k] = judge_outcome(first, second, cand_valid, base_valid)
    return out


def judge_panel(
    judges: Sequence[CachedJudge],
    templates: JudgeTemplates,
    pairs: Sequence[Pair],
    *,
    ask_identical: bool = False,
) -> list[PanelOutcome]:
    """Every judge's outcomes, combined pair by pair into the panel's outcome."""
    if not judges:
        raise ValueError("judge_panel: no judge")
    per_judge = [judge_pairs(j, templates, pairs, ask_identical=ask_identical) for j in judges]
    return [panel_outcome([outcomes[i] for outcomes in per_judge]) for i in range(len(pairs))]


def judge_validity(
    judge: CachedJudge, template: JudgeTemplate, items: Sequence[tuple[str, str]]
) -> list[Validity | None]:
    """One judge's validity answer for each ``(prompt, response)`` (``None``: unparsed twice).

    Responses are normalized first, so a response that also appears in a pair is
    the same cached question.
    """
    questions = [
        validity_question(judge, template, prompt, normalize_response(response))
        for prompt, response in items
    ]
    return _ask_parsed(judge, questions, [parse_validity] * len(questions)) if questions else []


def panel_validity(answers: Sequence[Sequence[Validity | None]]) -> list[bool]:
    """Per item, whether the panel lets the response stand: ``False`` only when every
    judge that answered called it corrupted (and at least one answered)."""
    if not answers:
        raise ValueError("panel_validity: no judge")
    out: list[bool] = []
    for row in zip(*answers, strict=True):
        given = [v for v in row if v is not None]
        out.append(not given or any(v is Validity.VALID for v in given))
    return out

"""A unit stand-in for a judge model: answers from a function of the question text."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gate.judge.judges import JudgeAnswer
from gate.judge.template import FieldLimits, TextCodec


@dataclass
class ScriptedJudge:
    """Answers each question with ``answer(question)``; a call uses ``len(question)`` prompt tokens and 1 more."""

    answer: Callable[[str], str]
    name: str = "scripted"
    family: str = "test"
    model_id: str = "scripted@1"
    max_output_tokens: int = 4
    concurrency: int = 8
    field_limits: FieldLimits | None = None
    codec: TextCodec | None = None
    asked: list[str] = field(default_factory=list)

    def ask(self, question: str) -> JudgeAnswer:
        return self.ask_batch([question])[0]

    def ask_batch(self, questions: Sequence[str]) -> list[JudgeAnswer]:
        self.asked.extend(questions)
        return [JudgeAnswer(self.answer(q), len(q), 1) for q in questions]

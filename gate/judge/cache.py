"""The on-disk cache of judge calls, and the counters the report shows.

A judge question is identified by what determines its answer: the judge model, the
template version, the kind of question, the user prompt, the responses in the
order they are shown, and the attempt (an unparseable answer is asked once more,
and that second answer is cached under attempt 2). The key is

    sha256(JSON [judge model id, template version, kind, prompt,
                 response A, response B, order, attempt])

over the canonical JSON text (UTF-8, no whitespace), so fields can never run into
each other. Texts enter the key after style normalization, exactly as the judge
reads them. A rerun, or a second candidate judged against the same baseline, finds
every question already asked and makes no call.

Entries are small JSON files ``<dir>/<key[:2]>/<key>.json`` written atomically
(:func:`gate.store.atomic.write_atomic`: a temporary file renamed into place), so an
interrupted run leaves complete entries or none; an unreadable entry is treated as
a miss and rewritten.

:class:`JudgeStats` counts calls made, cache hits, tokens used by the calls made
(prompt and completion) and parse failures (questions whose two answers both failed
to parse).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from gate import progress
from gate.judge.judges import Judge, JudgeAnswer
from gate.store.atomic import write_atomic

__all__ = ["CachedJudge", "JudgeCache", "JudgeStats", "Question", "question_key"]

Order = Literal["AB", "BA", "single"]


@dataclass(frozen=True)
class Question:
    """One judge question: the text sent, and the fields that identify it in the cache.

    ``order`` is ``AB`` / ``BA`` for the two orders of a pairwise question (which build
    is reply A) and ``single`` for a validity question (``response_b`` empty).
    """

    text: str
    template_version: str
    kind: str
    prompt: str
    response_a: str
    response_b: str
    order: Order
    attempt: int = 1


def question_key(model_id: str, q: Question) -> str:
    """The SHA-256 hex digest that names ``q`` asked of the judge ``model_id``."""
    fields = [
        model_id,
        q.template_version,
        q.kind,
        q.prompt,
        q.response_a,
        q.response_b,
        q.order,
        q.attempt,
    ]
    blob = json.dumps(fields, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


@dataclass
class JudgeStats:
    """Counters of one judge: calls made, cache hits, tokens used, parse failures."""

    calls: int = 0
    hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    parse_failures: int = 0

    @property
    def tokens(self) -> int:
        """Tokens used by the calls made (prompt plus completion)."""
        return self.prompt_tokens + self.completion_tokens


class JudgeCache:
    """Answers on disk under ``directory`` (see the module docstring)."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.json"

    def get(self, key: str) -> JudgeAnswer | None:
        """The stored answer, or ``None`` (missing or unreadable entry)."""
        try:
            data = json.loads(self._path(key).read_text(encoding="utf-8"))
            return JudgeAnswer(
                str(data["answer"]), int(data["prompt_tokens"]), int(data["completion_tokens"])
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def put(self, key: str, answer: JudgeAnswer) -> None:
        """Store ``answer`` under ``key`` atomically."""
        data = {
            "answer": answer.text,
            "prompt_tokens": answer.prompt_tokens,
            "completion_tokens": answer.completion_tokens,
        }
        write_atomic(self._path(key), json.dumps(data, ensure_ascii=False).encode("utf-8"))


@dataclass
class CachedJudge:
    """A :class:`~gate.judge.judges.Judge` behind a :class:`JudgeCache`, with its counters."""

    judge: Judge
    cache: JudgeCache
    stats: JudgeStats = field(default_factory=JudgeStats)

    def ask(self, questions: Sequence[Question]) -> list[JudgeAnswer]:
        """Answers in order: cached ones read, the others asked and stored.

        The questions not in the cache go to the judge ``concurrency`` at a time, and
        each group is stored as soon as it is answered (an interrupted run keeps what
        it was told). A question that occurs twice in ``questions`` is asked once.
        """
        keys = [question_key(self.judge.model_id, q) for q in questions]
        found: dict[str, JudgeAnswer] = {}
        todo: dict[str, Question] = {}
        for key, q in zip(keys, questions, strict=True):
            if key in found or key in todo:
                continue
            cached = self.cache.get(key)
            if cached is None:
                todo[key] = q
            else:
                found[key] = cached
        self.stats.hits += len(questions) - len(todo)
        pending = list(todo.items())
        step = max(1, self.judge.concurrency)
        if pending:
            with progress.task(f"judge {self.judge.name}: questions", total=len(pending)) as done:
                for start in range(0, len(pending), step):
                    chunk = pending[start : start + step]
                    self._answer(chunk, found)
                    done(len(chunk))
        return [found[k] for k in keys]

    def _answer(self, chunk: Sequence[tuple[str, Question]], found: dict[str, JudgeAnswer]) -> None:
        """Ask the judge ``chunk`` at once; store and count each answer."""
        fresh = self.judge.ask_batch([q.text for _, q in chunk])
        if len(fresh) != len(chunk):
            raise RuntimeError(
                f"judge {self.judge.name} answered {len(fresh)} of {len(chunk)} questions"
            )
        for (key, _), answer in zip(chunk, fresh, strict=True):
            self.cache.put(key, answer)
            found[key] = answer
            self.stats.calls += 1
            self.stats.prompt_tokens += answer.prompt_tokens
            self.stats.completion_tokens += answer.completion_tokens

"""Multiple-choice question sets: one record type and adapters from common layouts.

A :class:`MCQuestion` is scored as lm-evaluation-harness scores a
``multiple_choice`` task: the model reads ``context`` and each option is the
continuation ``delimiter + choice``; acc_norm divides by ``len(choice)``.

Adapters turn records of the usual layouts into questions:

* native JSONL (what ``gate/assets/mcq/*.jsonl`` holds):
  ``{"id", "context", "choices": [...], "answer": int, "subject"}``;
* MMLU (``cais/mmlu``): ``question``, ``choices``, ``answer`` (int), ``subject``;
  letters A-D are the options, as lm-eval's ``mmlu`` task;
* ARC (``allenai/ai2_arc``): ``id``, ``question``, ``choices: {text, label}``,
  ``answerKey``; the option texts are the continuations, as lm-eval's ``arc_*``;
* HellaSwag (``Rowan/hellaswag``): ``ctx_a``, ``ctx_b``, ``activity_label``,
  ``endings``, ``label``; cleaned like lm-eval's ``hellaswag`` task.

Local files are read with :func:`load_mcq_jsonl`; Hugging Face datasets on a
user's runner with :func:`load_mcq_hf` (``datasets`` imported lazily); the sets
shipped with the gate with :func:`load_builtin`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from gate.data.jsonl import read_jsonl
from gate.data.loaders import load_hf_dataset
from gate.errors import DataError

#: Sets shipped in ``gate/assets/mcq/`` (file stem -> what it tests).
BUILTIN_SETS: Mapping[str, str] = {
    "arithmetic": "one-step integer arithmetic, numeric options (generated, seeded)",
    "antonyms": "opposite of a common English word, four word options (hand-written pairs)",
    "facts": "simple world facts: capitals, colours, animals, units (hand-written)",
}

FORMATS: tuple[str, ...] = ("auto", "native", "mmlu", "arc", "hellaswag")


@dataclass(frozen=True)
class MCQuestion:
    """One multiple-choice question, ready to score."""

    id: str
    context: str
    choices: tuple[str, ...]
    answer: int
    subject: str = "general"
    #: Text between the context and each choice (lm-eval's ``target_delimiter``).
    delimiter: str = " "

    def continuation(self, j: int) -> str:
        """The text scored for option ``j``."""
        return self.delimiter + self.choices[j]


def _check(q: MCQuestion, where: str) -> MCQuestion:
    if not q.context.strip():
        raise DataError(
            f"{where}: question {q.id!r} has an empty context", "give the question text"
        )
    if len(q.choices) < 2:
        raise DataError(
            f"{where}: question {q.id!r} has {len(q.choices)} choice(s)",
            "every multiple-choice record needs at least two choices",
        )
    if any(not c for c in q.choices):
        raise DataError(f"{where}: question {q.id!r} has an empty choice", "remove or fill it")
    if not 0 <= q.answer < len(q.choices):
        raise DataError(
            f"{where}: question {q.id!r} answer {q.answer} is outside 0..{len(q.choices) - 1}",
            "answer is the 0-based index of the correct choice",
        )
    return q


# --------------------------------------------------------------------------- adapters


def from_native(rec: Mapping[str, Any], index: int, subject: str) -> MCQuestion:
    """``{"id", "context"|"question", "choices", "answer", "subject"?, "delimiter"?}``."""
    return MCQuestion(
        id=str(rec.get("id", index)),
        context=str(
            rec["question"] if "context" not in rec and "question" in rec else rec["context"]
        ),
        choices=tuple(str(c) for c in _as_list(rec["choices"], "choices")),
        answer=int(rec["answer"]),
        subject=str(rec.get("subject") or subject),
        delimiter=str(rec.get("delimiter", " ")),
    )


def from_mmlu(rec: Mapping[str, Any], index: int, subject: str) -> MCQuestion:
    """MMLU layout: the question, lettered options in the prompt, letters as choices."""
    options = [str(c) for c in _as_list(rec["choices"], "choices")]
    letters = "ABCDEFGHIJ"[: len(options)]
    lines = [str(rec["question"]).strip()]
    lines += [f"{letter}. {text}" for letter, text in zip(letters, options, strict=True)]
    return MCQuestion(
        id=str(rec.get("id", index)),
        context="\n".join(lines) + "\nAnswer:",
        choices=tuple(letters),
        answer=int(rec["answer"]),
        subject=str(rec.get("subject") or subject),
    )


def from_arc(rec: Mapping[str, Any], index: int, subject: str) -> MCQuestion:
    """ARC layout: ``Question: ...\\nAnswer:`` and the option texts as continuations."""
    choices = rec["choices"]
    if not isinstance(choices, Mapping):
        raise TypeError("ARC 'choices' must be an object with 'text' and 'label'")
    texts = [str(t) for t in _as_list(choices["text"], "choices.text")]
    labels = [str(lab) for lab in _as_list(choices["label"], "choices.label")]
    key = str(rec["answerKey"])
    if key not in labels:
        raise ValueError(f"answerKey {key!r} is not one of the labels {labels}")
    return MCQuestion(
        id=str(rec.get("id", index)),
        context=f"Question: {rec['question']}\nAnswer:",
        choices=tuple(texts),
        answer=labels.index(key),
        subject=str(rec.get("subject") or subject),
    )


def _hellaswag_clean(text: str) -> str:
    text = text.strip().replace(" [title]", ". ")
    text = re.sub(r"\[.*?\]", "", text)
    return text.replace("  ", " ")


def from_hellaswag(rec: Mapping[str, Any], index: int, subject: str) -> MCQuestion:
    """HellaSwag layout: ``activity: ctx_a Ctx_b`` then the cleaned endings."""
    ctx = f"{rec['ctx_a']} {str(rec['ctx_b']).capitalize()}"
    return MCQuestion(
        id=str(rec.get("ind", rec.get("id", index))),
        context=_hellaswag_clean(f"{rec['activity_label']}: {ctx}"),
        choices=tuple(_hellaswag_clean(str(e)) for e in _as_list(rec["endings"], "endings")),
        answer=int(rec["label"]),
        subject=str(rec.get("activity_label") or subject),
    )


Adapter = Callable[[Mapping[str, Any], int, str], MCQuestion]
ADAPTERS: Mapping[str, Adapter] = {
    "native": from_native,
    "mmlu": from_mmlu,
    "arc": from_arc,
    "hellaswag": from_hellaswag,
}


def detect_format(rec: Mapping[str, Any]) -> str:
    """Guess the layout of one record from its keys."""
    if "endings" in rec and "ctx_a" in rec:
        return "hellaswag"
    if "answerKey" in rec:
        return "arc"
    if "question" in rec and "choices" in rec and "context" not in rec and "delimiter" not in rec:
        # MMLU and native-with-"question" look alike; MMLU records carry a subject
        # and integer answers over exactly the listed choices.
        return "mmlu" if "subject" in rec and "id" not in rec else "native"
    return "native"


def _as_list(value: Any, name: str) -> list[Any]:
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise TypeError(f"{name!r} must be a list")
    return list(value)


def parse_records(
    records: Iterable[Mapping[str, Any]],
    *,
    fmt: str = "auto",
    subject: str = "general",
    source: str = "<records>",
    limit: int | None = None,
) -> list[MCQuestion]:
    """Questions from raw records; a bad record raises :class:`DataError` naming it."""
    if fmt not in FORMATS:
        raise DataError(f"unknown MCQ format {fmt!r}", f"use one of {', '.join(FORMATS)}")
    out: list[MCQuestion] = []
    seen: set[str] = set()
    for i, rec in enumerate(records):
        if limit is not None and len(out) >= limit:
            break
        where = f"{source} record {i + 1}"
        if not isinstance(rec, Mapping):
            raise DataError(f"{where} is not a JSON object", "one object per line")
        kind = detect_format(rec) if fmt == "auto" else fmt
        try:
            q = ADAPTERS[kind](rec, i, subject)
        except KeyError as exc:
            raise DataError(
                f"{where}: missing field {exc.args[0]!r} for the {kind} layout",
                "MCQ records need a question/context, choices and an answer",
            ) from None
        except (TypeError, ValueError) as exc:
            raise DataError(
                f"{where}: {exc}", f"check the record against the {kind} layout"
            ) from None
        if q.id in seen:
            raise DataError(f"{where}: duplicate question id {q.id!r}", "ids must be unique")
        seen.add(q.id)
        out.append(_check(q, where))
    if not out:
        raise DataError(f"{source} has no questions", "give at least one MCQ record")
    return out


def load_mcq_jsonl(
    path: str | Path, *, fmt: str = "auto", subject: str | None = None, limit: int | None = None
) -> list[MCQuestion]:
    """Questions from a local JSONL file (subject defaults to the file stem)."""
    p = Path(path)
    lines = read_jsonl(p, what="MCQ file", missing_hint="check the path in [tiers.accuracy]")
    records = (line.value for line in lines)
    return parse_records(records, fmt=fmt, subject=subject or p.stem, source=str(p), limit=limit)


def load_mcq_hf(
    name: str,
    *,
    config: str | None = None,
    split: str = "test",
    fmt: str = "auto",
    limit: int | None = None,
) -> list[MCQuestion]:
    """Questions from a Hugging Face dataset (on a runner with ``datasets`` and the data cached)."""
    ds = load_hf_dataset(name, config, split=split)
    return parse_records(ds, fmt=fmt, subject=config or name, source=name, limit=limit)


def builtin_path(name: str) -> Path:
    """Path of a shipped set in ``gate/assets/mcq``."""
    if name not in BUILTIN_SETS:
        from gate.config import suggest

        raise DataError(f"unknown built-in MCQ set {name!r}", suggest(name, list(BUILTIN_SETS)))
    return Path(str(resources.files("gate") / "assets" / "mcq" / f"{name}.jsonl"))


def load_builtin(name: str, *, limit: int | None = None) -> list[MCQuestion]:
    """A shipped set by name (see :data:`BUILTIN_SETS`)."""
    return load_mcq_jsonl(builtin_path(name), fmt="native", subject=name, limit=limit)


def load_mcq_set(spec: str, *, limit: int | None = None) -> list[MCQuestion]:
    """Resolve a set named in ``[tiers.accuracy] mcq_sets``.

    ``arithmetic`` (a built-in name), ``path/to/file.jsonl`` (format detected),
    ``hf:NAME[:CONFIG[:SPLIT]]`` or ``hf:NAME:CONFIG:SPLIT:FORMAT``.
    """
    if spec.startswith("hf:"):
        parts = spec[3:].split(":")
        if not parts[0] or len(parts) > 4:
            raise DataError(
                f"bad Hugging Face MCQ set {spec!r}", "write hf:NAME[:CONFIG[:SPLIT[:FORMAT]]]"
            )
        parts += [""] * (4 - len(parts))
        return load_mcq_hf(
            parts[0],
            config=parts[1] or None,
            split=parts[2] or "test",
            fmt=parts[3] or "auto",
            limit=limit,
        )
    if spec in BUILTIN_SETS:
        return load_builtin(spec, limit=limit)
    if spec.endswith(".jsonl") or "/" in spec:
        return load_mcq_jsonl(spec, limit=limit)
    return load_builtin(spec, limit=limit)  # raises with a suggestion


def to_native(questions: Sequence[MCQuestion]) -> list[dict[str, Any]]:
    """Native JSONL records (the inverse of :func:`from_native`)."""
    out: list[dict[str, Any]] = []
    for q in questions:
        rec: dict[str, Any] = {
            "id": q.id,
            "subject": q.subject,
            "context": q.context,
            "choices": list(q.choices),
            "answer": q.answer,
        }
        if q.delimiter != " ":
            rec["delimiter"] = q.delimiter
        out.append(rec)
    return out

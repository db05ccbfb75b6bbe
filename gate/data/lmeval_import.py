"""Read lm-evaluation-harness ``--log_samples`` files and turn two runs into measurements.

A samples file (``samples_<task>_<timestamp>.jsonl``) holds one JSON object per
document and filter, as written by the harness's evaluator: ``doc_id``,
``doc``, ``target``, ``arguments``, ``resps``, ``filtered_resps`` (for a
multiple-choice task one ``[loglikelihood, is_greedy]`` pair per choice,
numbers possibly written as strings), ``filter``, ``metrics``, ``doc_hash``,
``prompt_hash``, ``target_hash`` and the per-document metric values (``acc``,
``acc_norm``, ...).

Baseline and candidate are joined on ``(filter, doc_id, doc_hash)``: the same
document of the same task. The candidate's acc / acc_norm are the harness's own
per-document flags; flips come from those flags, all-flips from the argmax of
the choice log-likelihoods, choice KL and top margins from their softmax
(docs/metrics.md "Multiple choice"). The baseline's own measurements are the same
metrics against itself (flips 0), so the regular compare machinery applies.

Every number read is checked before it is used: a choice log-likelihood must
be a finite number <= 0 (``inf``, ``-inf``, NaN or a positive value is no
model's output), a per-document flag 0 or 1. A bad value is a one-line
:class:`~gate.errors.DataError` (exit 4) naming the file, line, document and value.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gate.data.jsonl import read_jsonl
from gate.errors import DataError
from gate.measurement import Measurement
from gate.metrics import accuracy as am

_TASK_RE = re.compile(r"^samples_(?P<task>.+?)_\d{4}-\d{2}-\d{2}T")
_HINT = "give a file written by lm_eval --log_samples for a multiple-choice task"
#: Largest log-likelihood accepted: 0 plus float rounding (a sum of log-softmax values).
_LL_TOLERANCE = 1e-6


@dataclass(frozen=True)
class LmEvalSample:
    """One document of a multiple-choice task as the harness logged it."""

    task: str
    doc_id: str
    doc_hash: str
    filter: str
    subject: str
    option_logprobs: tuple[float, ...]
    acc: bool
    acc_norm: bool | None

    @property
    def key(self) -> tuple[str, str, str]:
        """The join key: (filter, doc_id, doc_hash)."""
        return (self.filter, self.doc_id, self.doc_hash)

    @property
    def sample_id(self) -> str:
        """``task/doc_id`` (with the filter when it is not ``none``)."""
        base = f"{self.task}/{self.doc_id}"
        return base if self.filter == "none" else f"{base}#{self.filter}"


def is_samples_name(path: Path) -> bool:
    """Whether ``path`` is named as the harness names samples files (``samples_<task>_<time>``)."""
    return _TASK_RE.match(path.name) is not None


def task_name(path: Path) -> str:
    """The task from ``samples_<task>_<timestamp>.jsonl`` (else the file stem)."""
    m = _TASK_RE.match(path.name)
    return m.group("task") if m else path.stem


def _flag(value: Any, where: str, name: str) -> bool:
    """A per-document metric flag (``acc``, ``acc_norm``): true/false or 0/1, nothing else."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    raise DataError(f"{where}: {name} is {value!r}, not 0 or 1", _HINT)


def _float(value: Any, where: str) -> float:
    """A choice's log-likelihood: a finite number <= 0 (a probability of at most 1)."""
    if isinstance(value, bool):  # float(True) is 1.0: a flag, not a log-likelihood
        raise DataError(f"{where}: log-likelihood {value!r} is not a number", _HINT)
    try:
        x = float(value)
    except (TypeError, ValueError, OverflowError):
        raise DataError(f"{where}: log-likelihood {value!r} is not a number", _HINT) from None
    if not math.isfinite(x):
        raise DataError(
            f"{where}: log-likelihood is {x} (must be a finite number <= 0)",
            "re-run lm_eval: the model produced inf/NaN scores (check its dtype and weights)",
        )
    if x > _LL_TOLERANCE:
        raise DataError(
            f"{where}: log-likelihood is {x:g} > 0 (a probability above 1)",
            "give the harness's own --log_samples output, not edited or rescaled numbers",
        )
    return x


def _choices(resps: Any, where: str) -> tuple[float, ...]:
    """The log-likelihood of every choice of ``filtered_resps`` (two or more)."""
    if not isinstance(resps, list) or len(resps) < 2:
        raise DataError(
            f"{where}: multiple-choice record has missing choices (filtered_resps)",
            "each document needs one [loglikelihood, is_greedy] per choice, two or more",
        )
    out = []
    for j, r in enumerate(resps):
        # [ll, is_greedy], possibly wrapped once more as in ``resps``.
        while isinstance(r, list) and r and isinstance(r[0], list):
            r = r[0]
        if not isinstance(r, list) or not r:
            raise DataError(f"{where}: choice {j} has no log-likelihood", _HINT)
        out.append(_float(r[0], f"{where} choice {j}"))
    return tuple(out)


def parse_sample(rec: Any, task: str, where: str) -> LmEvalSample:
    """One logged document; :class:`DataError` names what is missing."""
    if not isinstance(rec, Mapping):
        raise DataError(f"{where}: not a JSON object", _HINT)
    for key in ("doc_id", "doc_hash", "filtered_resps"):
        if key not in rec:
            raise DataError(f"{where}: missing field {key!r}", _HINT)
    where = f"{where} (doc {rec['doc_id']})"
    if "acc" not in rec:
        raise DataError(f"{where}: no 'acc' value (not a multiple-choice task?)", _HINT)
    doc = rec.get("doc")
    subject = doc.get("subject") if isinstance(doc, Mapping) else None
    return LmEvalSample(
        task=task,
        doc_id=str(rec["doc_id"]),
        doc_hash=str(rec["doc_hash"]),
        filter=str(rec.get("filter", "none")),
        subject=str(subject) if isinstance(subject, str) and subject else task,
        option_logprobs=_choices(rec["filtered_resps"], where),
        acc=_flag(rec["acc"], where, "acc"),
        acc_norm=_flag(rec["acc_norm"], where, "acc_norm") if "acc_norm" in rec else None,
    )


def read_samples(path: str | Path) -> list[LmEvalSample]:
    """All documents of one samples file; malformed files raise :class:`DataError`."""
    p = Path(path)
    task = task_name(p)
    out: list[LmEvalSample] = []
    seen: set[tuple[str, str, str]] = set()
    for line in read_jsonl(p, what="lm-eval samples file"):
        sample = parse_sample(line.value, task, line.where)
        if sample.key in seen:
            raise DataError(f"{line.where}: document {sample.doc_id} appears twice", _HINT)
        seen.add(sample.key)
        out.append(sample)
    if not out:
        raise DataError(f"{p} has no samples", _HINT)
    return out


def join_samples(
    base: Sequence[LmEvalSample], cand: Sequence[LmEvalSample]
) -> list[tuple[LmEvalSample, LmEvalSample]]:
    """Pairs of the same document; any document on one side only is a :class:`DataError`."""
    by_key = {s.key: s for s in base}
    cand_keys = {s.key for s in cand}
    only_cand = [s for s in cand if s.key not in by_key]
    only_base = [s for s in base if s.key not in cand_keys]
    if only_cand or only_base:
        first = (only_cand or only_base)[0]
        side = "candidate" if only_cand else "baseline"
        raise DataError(
            f"samples do not join: {len(only_cand)} candidate and {len(only_base)} baseline "
            f"document(s) have no partner (first: {side} doc {first.doc_id}, hash {first.doc_hash[:12]})",
            "compare runs of the same task, dataset version and lm_eval --limit",
        )
    pairs = []
    for c in cand:
        b = by_key[c.key]
        if len(b.option_logprobs) != len(c.option_logprobs):
            raise DataError(
                f"doc {c.doc_id}: {len(b.option_logprobs)} choices in the baseline, "
                f"{len(c.option_logprobs)} in the candidate",
                "compare runs of the same task",
            )
        pairs.append((b, c))
    return pairs


def _measurements(
    samples: Sequence[LmEvalSample], pairs: Sequence[am.QuestionPair]
) -> list[Measurement]:
    norm = [s.acc_norm for s in samples]
    has_norm = all(v is not None for v in norm)
    return am.accuracy_measurements(
        [s.sample_id for s in samples],
        [s.subject for s in samples],
        [s.acc for s in samples],
        [bool(v) for v in norm] if has_norm else None,
    ) + am.pair_measurements(pairs)


def import_runs(
    base_path: str | Path, cand_path: str | Path
) -> tuple[list[Measurement], list[Measurement]]:
    """``(candidate, baseline)`` measurements from two samples files of one task."""
    pairs = join_samples(read_samples(base_path), read_samples(cand_path))
    # Sample ids and subjects follow the baseline's file (same documents, by hash,
    # even when the two files carry different task names).
    cand_samples = [
        LmEvalSample(
            task=b.task,
            doc_id=c.doc_id,
            doc_hash=c.doc_hash,
            filter=c.filter,
            subject=b.subject,
            option_logprobs=c.option_logprobs,
            acc=c.acc,
            acc_norm=c.acc_norm,
        )
        for b, c in pairs
    ]
    cand_pairs = [_pair(b, c) for b, c in pairs]
    self_pairs = [_pair(b, b) for b, _ in pairs]
    return (
        _measurements(cand_samples, cand_pairs),
        _measurements([b for b, _ in pairs], self_pairs),
    )


def _pair(b: LmEvalSample, c: LmEvalSample) -> am.QuestionPair:
    return am.make_pair(
        b.sample_id,
        b.subject,
        b.option_logprobs,
        c.option_logprobs,
        correct=(b.acc, c.acc),
        correct_norm=(bool(b.acc_norm), bool(c.acc_norm)),
    )

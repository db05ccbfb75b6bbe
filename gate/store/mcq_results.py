"""The per-question MCQ results file stored beside a baseline (artifact ``mcq``).

The accuracy tier pairs a candidate with its baseline question by question
(flips, all-flips, choice KL), so a baseline recorded with the tier keeps what
it did on every question. The suite writes this file in record mode and reads
it back in run mode; the tier only sees the parsed results. The file::

    {"schema_version": 1, "kind": "gate.mcq_results",
     "questions": [{"id", "subject", "answer", "pred", "correct",
                    "option_logprobs", "option_chars"}, ...]}

One entry per :class:`~gate.metrics.accuracy.QuestionResult` (its ``to_dict``).
A file that cannot be read, is of another kind, carries a newer schema or a
malformed entry is a one-line :class:`~gate.errors.BaselineError`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gate.errors import BaselineError, DataError
from gate.metrics.accuracy import QuestionResult
from gate.store.schema import check_schema_version

__all__ = ["ARTIFACT", "KIND", "SCHEMA", "read_mcq_results", "write_mcq_results"]

#: Name of the per-question results file stored beside a baseline.
ARTIFACT = "mcq"
#: Newest schema version this gate writes and reads.
SCHEMA = 1
#: The file's ``kind``.
KIND = "gate.mcq_results"


def write_mcq_results(path: Path, results: Sequence[QuestionResult]) -> Path:
    """Write the per-question results (the ``mcq`` artifact) as small JSON."""
    payload: dict[str, Any] = {
        "schema_version": SCHEMA,
        "kind": KIND,
        "questions": [r.to_dict() for r in results],
    }
    path.write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
    return path


def read_mcq_results(path: Path) -> list[QuestionResult]:
    """Read :func:`write_mcq_results` output; a corrupt or newer file is a :class:`BaselineError`."""
    try:
        payload = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BaselineError(
            f"cannot read the baseline's MCQ results {path}: {exc}", "re-record the baseline"
        ) from None
    if not isinstance(payload, dict) or payload.get("kind") != KIND:
        raise BaselineError(f"{path} is not a gate MCQ results file", "re-record the baseline")
    check_schema_version(payload, f"MCQ results {path}", reads_up_to=SCHEMA, error=BaselineError)
    try:
        return [QuestionResult.from_dict(q) for q in payload["questions"]]
    except (KeyError, TypeError) as exc:
        raise BaselineError(
            f"malformed MCQ results {path}: {exc!r}", "re-record the baseline"
        ) from None
    except DataError as exc:
        raise BaselineError(exc.message, exc.hint) from None

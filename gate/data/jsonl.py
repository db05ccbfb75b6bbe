"""The one JSON-lines reader of the data layer.

Prompt sets, MCQ sets, calibration texts, corpora and lm-eval sample files are
all read through :func:`read_jsonl`: one JSON value per line, blank lines
skipped, read as UTF-8 one line at a time. Every problem is a one-line
:class:`~gate.errors.DataError` (exit 4) naming the file, and for a bad line
``path:line``, so the user can open the file at the right place. What a line
must *contain* is the caller's rule; each record carries its ``where`` for the
caller's own messages.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gate.errors import DataError


@dataclass(frozen=True)
class JsonLine:
    """One decoded line: its value and ``where`` (``path:line``) for messages."""

    value: Any
    where: str


def read_jsonl(
    path: str | Path, *, what: str, missing_hint: str = "check the path"
) -> Iterator[JsonLine]:
    """Yield every non-blank line of ``path`` decoded, in file order.

    ``what`` names the file in messages (``"MCQ file"``, ``"calibration file"``);
    ``missing_hint`` says how to fix a path that does not exist. The file is
    read lazily: a caller that stops early (a ``limit``) reads no further.
    """
    p = Path(path)
    try:
        with p.open(encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    value = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise DataError(
                        f"{p}:{number}: not valid JSON ({exc.msg})",
                        "write one JSON object per line",
                    ) from None
                yield JsonLine(value, f"{p}:{number}")
    except FileNotFoundError:
        raise DataError(f"{what} not found: {p}", missing_hint) from None
    except IsADirectoryError:
        raise DataError(f"{what} {p} is a directory", "give a .jsonl file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"cannot read {what} {p}: {exc}", "save it as UTF-8 JSON lines") from None

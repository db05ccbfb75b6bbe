"""The judged outputs file of a build, stored beside a baseline (artifact ``judge-outputs``).

The judge tier compares a candidate's answers with the baseline's on the same
prompts. The baseline's answers are generated when the baseline is recorded and
stored with it as this JSON file, so a gate run never loads the baseline model.
The suite writes it in record mode and reads it back in run mode; the tier only
sees the :class:`~gate.measurement.OutputSet`. The file (``format`` 1)::

    {"format": 1, "max_new_tokens": 512, "prompt_set_sha256": "...",
     "outputs": [{"id", "category", "length", "prompt", "prompt_tokens",
                  "text", "tokens"}, ...]}

``prompt_tokens`` is the prompt's length in the build's own chat-formatted token
ids (it picks the prompt's length bucket), ``tokens`` the generated length (its
generated-length bucket); ``text`` is the decoded greedy continuation.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from gate.errors import BaselineError
from gate.measurement import JudgedOutput, OutputSet
from gate.store.atomic import write_atomic

__all__ = ["ARTIFACT", "FORMAT", "read_outputs", "write_outputs"]

#: Name of the baseline artifact holding the baseline's judged outputs.
ARTIFACT = "judge-outputs"
#: Version of the file layout.
FORMAT = 1


def write_outputs(path: Path, outputs: OutputSet) -> None:
    """Write ``outputs`` as the artifact file (atomically)."""
    data = {
        "format": FORMAT,
        "max_new_tokens": outputs.max_new_tokens,
        "prompt_set_sha256": outputs.prompt_set_sha256,
        "outputs": [asdict(o) for o in outputs.outputs],
    }
    write_atomic(Path(path), json.dumps(data, ensure_ascii=False, indent=1).encode("utf-8"))


def read_outputs(path: Path) -> OutputSet:
    """Read an artifact file; anything malformed is a one-line :class:`BaselineError`."""
    try:
        data: Any = json.loads(Path(path).read_text(encoding="utf-8"))
        if data.get("format") != FORMAT:
            raise BaselineError(
                f"judge outputs {path}: format {data.get('format')!r}, this gate reads {FORMAT}",
                "re-record the baseline with --tiers judge",
            )
        outputs = tuple(JudgedOutput.from_dict(o) for o in data["outputs"])
        return OutputSet(int(data["max_new_tokens"]), str(data["prompt_set_sha256"]), outputs)
    except BaselineError:
        raise
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise BaselineError(
            f"cannot read the baseline's judge outputs {path}: {type(exc).__name__}: {exc}",
            "re-record the baseline with --tiers judge",
        ) from None

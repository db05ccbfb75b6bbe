"""The judged outputs of one build: generated once, stored beside a baseline, read back.

The judge tier compares a candidate's answers with the baseline's on the same
prompts. The baseline's answers are generated when the baseline is recorded and
stored with it as the artifact ``judge-outputs`` (this JSON file), so a gate run
never loads the baseline model. The file (``format`` 1)::

    {"format": 1, "max_new_tokens": 512, "prompt_set_sha256": "...",
     "outputs": [{"id", "category", "length", "prompt", "prompt_tokens",
                  "text", "tokens"}, ...]}

``prompt_tokens`` is the prompt's length in the build's own chat-formatted token
ids (it picks the prompt's length bucket), ``tokens`` the generated length (its
generated-length bucket); ``text`` is the decoded greedy continuation.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from gate.errors import BaselineError
from gate.models.backends.base import Backend
from gate.store.atomic import write_atomic
from gate.store.reference import PromptLike, prompt_set_sha256

__all__ = [
    "ARTIFACT",
    "FORMAT",
    "JudgedOutput",
    "OutputSet",
    "StoredPrompt",
    "generate_outputs",
    "prompts_of",
    "read_outputs",
    "write_outputs",
]

#: Name of the baseline artifact holding the baseline's judged outputs.
ARTIFACT = "judge-outputs"
#: Version of the file layout.
FORMAT = 1


@dataclass(frozen=True)
class JudgedOutput:
    """One prompt and the build's greedy answer to it."""

    id: str
    category: str
    length: str
    prompt: str
    prompt_tokens: int
    text: str
    tokens: int


@dataclass(frozen=True)
class OutputSet:
    """A build's answers to a prompt set, with how they were generated."""

    max_new_tokens: int
    prompt_set_sha256: str
    outputs: tuple[JudgedOutput, ...]

    def by_id(self) -> dict[str, JudgedOutput]:
        """Outputs keyed by prompt id."""
        return {o.id: o for o in self.outputs}


@dataclass(frozen=True)
class StoredPrompt:
    """A stored output's prompt, as a prompt set entry (the candidate answers these)."""

    id: str
    category: str
    length: str
    text: str


def prompts_of(outputs: OutputSet) -> list[StoredPrompt]:
    """The prompts the outputs answer, in order."""
    return [StoredPrompt(o.id, o.category, o.length, o.prompt) for o in outputs.outputs]


def generate_outputs(
    backend: Backend, prompts: Sequence[PromptLike], *, max_new_tokens: int, batch_size: int
) -> OutputSet:
    """Greedy answers of ``backend`` to every prompt (chat-formatted, stopped at EOS)."""
    ids = [backend.encode_prompt(p.text) for p in prompts]
    generated = backend.generate(ids, max_new_tokens=max_new_tokens, batch_size=batch_size)
    outputs = tuple(
        JudgedOutput(
            id=p.id,
            category=p.category,
            length=p.length,
            prompt=p.text,
            prompt_tokens=len(prompt_ids),
            text=backend.decode(new),
            tokens=len(new),
        )
        for p, prompt_ids, new in zip(prompts, ids, generated, strict=True)
    )
    return OutputSet(max_new_tokens, prompt_set_sha256(prompts), outputs)


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
        outputs = tuple(
            JudgedOutput(
                id=str(o["id"]),
                category=str(o["category"]),
                length=str(o["length"]),
                prompt=str(o["prompt"]),
                prompt_tokens=int(o["prompt_tokens"]),
                text=str(o["text"]),
                tokens=int(o["tokens"]),
            )
            for o in data["outputs"]
        )
        return OutputSet(int(data["max_new_tokens"]), str(data["prompt_set_sha256"]), outputs)
    except BaselineError:
        raise
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise BaselineError(
            f"cannot read the baseline's judge outputs {path}: {type(exc).__name__}: {exc}",
            "re-record the baseline with --tiers judge",
        ) from None

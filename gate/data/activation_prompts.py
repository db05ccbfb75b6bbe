"""Activation prompts for recipes that need activations (``prune-wanda``).

Named apart from ``gate calibrate``'s noise-floor calibration (:mod:`gate.gating.calibration`):
the run config's ``calibration`` key and ``--calibration`` keep their names for users.

Wanda (Sun et al., "A Simple and Effective Pruning Approach for Large Language
Models", 2023) scores each weight by ``|W_ij| * ||X_j||_2``, the input norm of
channel ``j`` over a calibration sample. The sample should look like the text
the model sees, yet the gate must not calibrate on the very prompts its
fidelity tier scores (a pruned build tuned to those prompts would look better
than it is). So:

* the default calibration set (``gate/assets/calibration/sharegpt_calibration.jsonl``,
  built by ``scripts/build_activation_prompt_set.py`` with :func:`build_activation_prompt_set`)
  holds conversations of the ShareGPT **training** split (``not is_heldout(id)``),
  while the fidelity prompt set comes from the held-out split only, so the two
  never share a conversation;
* each record is the first user turn followed by the first reply (plain text,
  tokenized without special tokens by the loader), cut at a word boundary;
* selection is deterministic: conversations ordered by ``sha256("calibration/" + id)``.

A run config may name another file (``calibration = "path.jsonl"``, one JSON
object with a non-empty ``"text"`` per line; the fidelity prompt-set format
qualifies). The texts are loaded only when the recipe needs them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from importlib import resources
from pathlib import Path

from gate.data.categorize import strip_noise
from gate.data.jsonl import read_jsonl
from gate.data.sharegpt import Conversation, is_heldout
from gate.errors import DataError
from gate.models.methods.registry import get_method

DEFAULT_SIZE = 128
DEFAULT_MAX_CHARS = 768
MIN_CHARS = 64


def default_activation_prompts_path() -> Path:
    """The packaged calibration set."""
    return Path(
        str(resources.files("gate").joinpath("assets", "calibration", "sharegpt_calibration.jsonl"))
    )


def _cut(text: str, max_chars: int) -> str:
    """``text`` cut to at most ``max_chars`` characters, at the last whitespace before the cut."""
    if len(text) <= max_chars:
        return text
    head = text[:max_chars]
    space = head.rfind(" ")
    return (head[:space] if space > max_chars // 2 else head).rstrip()


def _first_exchange(conversation: Conversation) -> str:
    """First user turn and the reply after it, as plain text."""
    parts: list[str] = []
    seen_user = False
    for turn in conversation.turns:
        if turn.role == "user" and not seen_user:
            parts.append(strip_noise(turn.content))
            seen_user = True
        elif turn.role == "assistant" and seen_user:
            parts.append(turn.content.strip())
            break
    return "\n\n".join(p for p in parts if p)


def build_activation_prompt_set(
    conversations: Iterable[Conversation],
    size: int = DEFAULT_SIZE,
    max_chars: int = DEFAULT_MAX_CHARS,
) -> list[dict[str, str]]:
    """``size`` records ``{"id", "text"}`` from the training split of ``conversations``.

    Held-out conversations (the fidelity prompts' split) are skipped; texts
    shorter than :data:`MIN_CHARS` and duplicates are dropped.
    """
    keyed: list[tuple[str, str, str]] = []
    for conv in conversations:
        if is_heldout(conv.id):
            continue
        text = _cut(_first_exchange(conv), max_chars)
        if len(text) < MIN_CHARS:
            continue
        key = hashlib.sha256(f"calibration/{conv.id}".encode()).hexdigest()
        keyed.append((key, conv.id, text))
    keyed.sort()
    out: list[dict[str, str]] = []
    seen: set[str] = set()
    for _, cid, text in keyed:
        if text in seen:
            continue
        seen.add(text)
        out.append({"id": cid, "text": text})
        if len(out) == size:
            break
    return out


def write_activation_prompt_set(records: Sequence[dict[str, str]], path: Path) -> None:
    """One JSON object per line, UTF-8."""
    lines = [json.dumps(r, ensure_ascii=False) for r in records]
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")


def load_activation_prompts(path: Path | None = None, *, limit: int | None = None) -> list[str]:
    """The calibration texts of a JSONL file (default: the packaged set).

    Every non-blank line must be a JSON object with a non-empty string
    ``"text"``; anything else, a missing or an empty file is a
    :class:`DataError` (exit 4) naming the line.
    """
    p = default_activation_prompts_path() if path is None else Path(path)
    texts: list[str] = []
    lines = read_jsonl(
        p, what="calibration file", missing_hint="set calibration = an existing .jsonl file"
    )
    for line in lines:
        record = line.value
        text = record.get("text") if isinstance(record, dict) else None
        if not isinstance(text, str) or not text.strip():
            raise DataError(
                f'{line.where}: needs a non-empty string "text"', 'write {"text": "..."}'
            )
        texts.append(text)
        if limit is not None and len(texts) >= limit:
            break
    if not texts:
        raise DataError(f"calibration file {p} is empty", 'write one {"text": ...} per line')
    return texts


def activation_prompts_for(recipe: str | None, path: Path | None = None) -> list[str] | None:
    """Calibration texts when ``recipe`` (a part of a stack) needs them (``prune-wanda``),
    else ``None``."""
    from gate.models.stack import parse_stack

    parts = parse_stack(recipe).parts
    if not any(get_method(part.name).needs_calibration for part in parts):
        return None
    return load_activation_prompts(path)


__all__ = [
    "DEFAULT_MAX_CHARS",
    "DEFAULT_SIZE",
    "activation_prompts_for",
    "build_activation_prompt_set",
    "default_activation_prompts_path",
    "load_activation_prompts",
    "write_activation_prompt_set",
]

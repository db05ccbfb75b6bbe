"""The fidelity prompt set: real first user turns from held-out ShareGPT conversations.

Each record is ``{"id", "category", "length", "text"}`` (plus an optional ``tag``, e.g.
the language of a ``non_english`` prompt or the domain of a ``knowledge`` one). The
committed set (``gate/assets/prompts/fidelity_prompts.jsonl``) is built by
``scripts/build_prompt_set.py`` with :func:`build_prompt_set`; fidelity metrics
(docs/metrics.md "Fidelity") report per ``category`` and ``length``.

Selection is deterministic: candidates are ordered by ``sha256(id)``, bucketed by
category, and taken round-robin across categories (sorted by name) until the target
size, so small categories are kept whole and large ones fill the rest.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path

from gate.data.categorize import CATEGORIES, LENGTH_TIERS, classify, length_tier, strip_noise
from gate.data.jsonl import read_jsonl
from gate.data.sharegpt import Conversation, is_heldout
from gate.errors import DataError

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "DEFAULT_SIZE",
    "Prompt",
    "build_prompt_set",
    "default_prompt_set_path",
    "load_prompt_set",
    "write_prompt_set",
]

DEFAULT_SIZE = 300
DEFAULT_MAX_TOKENS = 192
MIN_PROMPT_CHARS = 8

#: Token ids and their character spans ``(start, end)`` for a text.
Encoder = Callable[[str], list[tuple[int, int]]]


@dataclass(frozen=True)
class Prompt:
    """One fidelity prompt: ShareGPT ``id``, ``category``, length tier, ``text``, optional ``tag``."""

    id: str
    category: str
    length: str
    text: str
    tag: str | None = None

    def to_record(self) -> dict[str, str]:
        """The JSONL record (``tag`` only when set)."""
        rec = {k: v for k, v in asdict(self).items() if v is not None}
        return rec


def default_prompt_set_path() -> Path:
    """The committed prompt set inside the installed package."""
    return Path(
        str(resources.files("gate").joinpath("assets", "prompts", "fidelity_prompts.jsonl"))
    )


def _hash_key(cid: str) -> str:
    return hashlib.sha256(cid.encode("utf-8")).hexdigest()


def truncate_to_tokens(text: str, spans: Sequence[tuple[int, int]], max_tokens: int) -> str:
    """``text`` cut after its ``max_tokens``-th token, at that token's character end."""
    if len(spans) <= max_tokens:
        return text
    return text[: spans[max_tokens - 1][1]].rstrip()


def build_prompt_set(
    conversations: Iterable[Conversation],
    encode: Encoder,
    size: int = DEFAULT_SIZE,
    max_tokens: int = DEFAULT_MAX_TOKENS,
) -> list[Prompt]:
    """Select ``size`` prompts from the held-out conversations among ``conversations``.

    ``encode(text)`` returns the character span of every token (demo tokenizer offsets).
    Conversations in the training split are ignored, so the set is held out by
    construction. The length tier is from the token count before truncation.
    """
    buckets: dict[str, list[tuple[str, Prompt]]] = {c: [] for c in CATEGORIES}
    seen_text: set[str] = set()
    for conv in conversations:
        if not is_heldout(conv.id):
            continue
        first = strip_noise(conv.first_user_turn() or "")
        if len(first) < MIN_PROMPT_CHARS or first in seen_text:
            continue
        seen_text.add(first)
        spans = encode(first)
        label = classify(first)
        prompt = Prompt(
            id=conv.id,
            category=label.category,
            length=length_tier(len(spans)),
            text=truncate_to_tokens(first, spans, max_tokens),
            tag=label.tag,
        )
        buckets[label.category].append((_hash_key(conv.id), prompt))
    queues = {c: [p for _, p in sorted(b, key=lambda kp: kp[0])] for c, b in buckets.items()}
    chosen: list[Prompt] = []
    depth = 0
    while len(chosen) < size and any(len(q) > depth for q in queues.values()):
        for cat in sorted(queues):
            if depth < len(queues[cat]) and len(chosen) < size:
                chosen.append(queues[cat][depth])
        depth += 1
    return chosen


def write_prompt_set(prompts: Sequence[Prompt], path: str | Path) -> None:
    """Write one JSON record per line (UTF-8, not ASCII-escaped)."""
    lines = [json.dumps(p.to_record(), ensure_ascii=False) for p in prompts]
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")


def _parse_record(obj: object, where: str) -> Prompt:
    if not isinstance(obj, dict):
        raise DataError(f"{where}: a prompt record must be a JSON object")
    for key in ("id", "category", "length", "text"):
        if not isinstance(obj.get(key), str) or not obj[key].strip():
            raise DataError(f"{where}: field {key!r} missing or not a non-empty string")
    if obj["category"] not in CATEGORIES:
        raise DataError(
            f"{where}: unknown category {obj['category']!r}",
            hint=f"use one of {', '.join(CATEGORIES)}",
        )
    if obj["length"] not in LENGTH_TIERS:
        raise DataError(
            f"{where}: unknown length tier {obj['length']!r}",
            hint=f"use one of {', '.join(LENGTH_TIERS)}",
        )
    tag = obj.get("tag")
    if tag is not None and not isinstance(tag, str):
        raise DataError(f"{where}: field 'tag' must be a string")
    return Prompt(obj["id"], obj["category"], obj["length"], obj["text"], tag)


def load_prompt_set(path: str | Path | None = None) -> list[Prompt]:
    """Load and validate a prompt-set JSONL file (default: the committed set).

    Raises :class:`DataError` for a missing, empty or malformed file, an unknown
    category or length tier, or a duplicate id.
    """
    p = default_prompt_set_path() if path is None else Path(path)
    prompts: list[Prompt] = []
    ids: set[str] = set()
    for line in read_jsonl(p, what="prompt set"):
        prompt = _parse_record(line.value, line.where)
        if prompt.id in ids:
            raise DataError(f"{line.where}: duplicate prompt id {prompt.id!r}")
        ids.add(prompt.id)
        prompts.append(prompt)
    if not prompts:
        raise DataError(
            f"prompt set {p} is empty", hint="build it with scripts/build_prompt_set.py"
        )
    return prompts

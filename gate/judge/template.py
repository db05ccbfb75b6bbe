"""The judge's questions: the project's template files, their version, and filling them.

Two questions are asked of a judge (see :mod:`gate.judge`):

* **pairwise** (``pairwise.txt``): placeholders ``{prompt}``, ``{response_a}``,
  ``{response_b}``; the judge answers ``A``, ``B`` or ``tie``;
* **validity** (``validity.txt``): placeholders ``{prompt}``, ``{response}``; the
  judge answers ``valid`` or ``corrupted``.

The default files ship in ``gate/assets/judge/``; a team can point the tier at its
own. A template's **version** is the first 16 hex digits of the SHA-256 of the
file's bytes, so any edit (one character, a newline) makes a new version; the
version is part of every judge-cache key and of the provenance.

Filling replaces each placeholder in one pass (a ``{prompt}`` that appears inside
a response is left alone). A judge with a small context window clips each field
to a token budget first (:func:`clip_tokens`): when a text has more than ``n``
tokens it keeps the first ``h = round(head_share * (n - m))`` tokens, the marker
:data:`CLIP_MARKER` (``m`` tokens) and the last ``n - m - h`` tokens, so the
judge still sees how a long reply ends (cut off, looping, or finished).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Literal, Protocol

from gate.errors import ConfigError

__all__ = [
    "CLIP_MARKER",
    "FIELDS",
    "FieldLimits",
    "JudgeTemplate",
    "QuestionKind",
    "TextCodec",
    "clip_tokens",
    "default_template",
    "load_template",
]

QuestionKind = Literal["pairwise", "validity"]

#: The placeholders each kind of template must contain.
FIELDS: dict[QuestionKind, tuple[str, ...]] = {
    "pairwise": ("prompt", "response_a", "response_b"),
    "validity": ("prompt", "response"),
}

#: Written between the head and the tail of a clipped field.
CLIP_MARKER = "\n[...]\n"

_VERSION_DIGITS = 16


class TextCodec(Protocol):
    """A tokenizer seen as text <-> token ids (no special tokens added)."""

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``."""
        ...

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids``."""
        ...


@dataclass(frozen=True)
class FieldLimits:
    """Token budgets of the filled fields for a judge with a small context.

    ``prompt``: the user message; ``response``: each response. ``prompt_head`` and
    ``response_head`` are the shares of a clipped field kept from its start.
    """

    prompt: int
    response: int
    prompt_head: float = 0.5
    response_head: float = 0.75

    def __post_init__(self) -> None:
        if self.prompt < 16 or self.response < 16:
            raise ValueError(f"field limits must be >= 16 tokens, got {self}")
        for share in (self.prompt_head, self.response_head):
            if not 0.0 <= share <= 1.0:
                raise ValueError(f"head share {share} outside [0, 1]")


def clip_tokens(text: str, max_tokens: int, codec: TextCodec, head_share: float = 0.75) -> str:
    """``text`` itself if it has at most ``max_tokens`` tokens, else head + marker + tail.

    With ``m`` the marker's token count and ``k = max_tokens - m``, the head keeps
    ``round(head_share * k)`` tokens and the tail the other ``k - head`` tokens. The
    result re-encodes to about ``max_tokens`` tokens: BPE may merge or split tokens at
    the two seams, so it can differ by a token or two.
    """
    ids = codec.encode(text)
    if len(ids) <= max_tokens:
        return text
    marker = len(codec.encode(CLIP_MARKER))
    keep = max(0, max_tokens - marker)
    head = round(head_share * keep)
    tail = keep - head
    head_text = codec.decode(ids[:head])
    tail_text = codec.decode(ids[len(ids) - tail :]) if tail else ""
    return head_text + CLIP_MARKER + tail_text


@dataclass(frozen=True)
class JudgeTemplate:
    """One judge question: its kind, text, where it came from and its version."""

    kind: QuestionKind
    text: str
    source: str
    version: str

    def fill(self, fields: Mapping[str, str]) -> str:
        """The template with every placeholder replaced by ``fields[name]`` (one pass)."""
        names = FIELDS[self.kind]
        missing = [n for n in names if n not in fields]
        if missing:
            raise ValueError(f"{self.kind} template needs fields {missing}")
        pattern = re.compile(r"\{(" + "|".join(names) + r")\}")
        return pattern.sub(lambda m: fields[m.group(1)], self.text)

    def render(
        self,
        fields: Mapping[str, str],
        limits: FieldLimits | None = None,
        codec: TextCodec | None = None,
    ) -> str:
        """:meth:`fill` after clipping the prompt and responses to ``limits`` (if given)."""
        if limits is None or codec is None:
            return self.fill(fields)
        clipped: dict[str, str] = {}
        for name, value in fields.items():
            if name == "prompt":
                clipped[name] = clip_tokens(value, limits.prompt, codec, limits.prompt_head)
            else:
                clipped[name] = clip_tokens(value, limits.response, codec, limits.response_head)
        return self.fill(clipped)


def _version(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:_VERSION_DIGITS]


def template_from_bytes(data: bytes, kind: QuestionKind, source: str) -> JudgeTemplate:
    """A template from raw file bytes: UTF-8, with every placeholder of its kind."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"judge template {source} is not UTF-8 text (byte {exc.start})",
            "save the template as UTF-8",
        ) from exc
    missing = [f"{{{n}}}" for n in FIELDS[kind] if f"{{{n}}}" not in text]
    if missing:
        raise ConfigError(
            f"{kind} judge template {source} lacks the placeholder(s) {' '.join(missing)}",
            f"a {kind} template must contain " + " ".join(f"{{{n}}}" for n in FIELDS[kind]),
        )
    return JudgeTemplate(kind=kind, text=text, source=source, version=_version(data))


def load_template(path: str | Path, kind: QuestionKind) -> JudgeTemplate:
    """Read a template file of ``kind``; a missing placeholder is a :class:`ConfigError`."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise ConfigError(
            f"cannot read the {kind} judge template {p}: {exc.strerror or exc}",
            "check the path in gate.toml",
        ) from exc
    return template_from_bytes(data, kind, str(p))


def default_template(kind: QuestionKind) -> JudgeTemplate:
    """The project's own template of ``kind`` (``gate/assets/judge/<kind>.txt``)."""
    resource = resources.files("gate").joinpath("assets", "judge", f"{kind}.txt")
    return template_from_bytes(resource.read_bytes(), kind, f"gate/assets/judge/{kind}.txt")

"""Token ids from text and back, the same way for every backend.

A gate backend always tokenizes locally with the model's own tokenizer (an
in-process model and a served one alike), so prompts become the same ids as
the reference pack's:

* :func:`encode_prompt` — a user turn through the chat template, with the
  assistant prefix (``add_generation_prompt``), when the tokenizer has a
  template; otherwise the text with the tokenizer's special tokens;
* :func:`encode_messages` — a whole conversation (user/assistant turns)
  through the chat template, with the assistant prefix;
* :func:`encode_text` — plain ids, no template and no special tokens (corpora);
* :func:`decode` — text of ids, special tokens skipped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def encode_prompt(tokenizer: Any, text: str, *, chat: bool = True) -> list[int]:
    """Ids of a user turn through the chat template (with the assistant prefix) if any."""
    if chat and getattr(tokenizer, "chat_template", None):
        ids = tokenizer.apply_chat_template(
            [{"role": "user", "content": text}],
            add_generation_prompt=True,
            tokenize=True,
            return_dict=False,
        )
        if isinstance(ids, dict) or hasattr(ids, "keys"):
            ids = ids["input_ids"]
        return [int(i) for i in ids]
    return [int(i) for i in tokenizer(text, add_special_tokens=True)["input_ids"]]


def encode_messages(tokenizer: Any, messages: Sequence[Mapping[str, str]]) -> list[int]:
    """Ids of a conversation through the chat template, with the assistant prefix.

    A tokenizer without a chat template cannot tell turns apart, so it is refused
    (``ModelLoadError``) rather than guessed at.
    """
    if not getattr(tokenizer, "chat_template", None):
        from gate.errors import ModelLoadError

        raise ModelLoadError(
            "the model's tokenizer has no chat template; multi-turn prompts need one",
            "use a chat model, or the single-turn fidelity prompt set",
        )
    ids = tokenizer.apply_chat_template(
        [dict(m) for m in messages], add_generation_prompt=True, tokenize=True, return_dict=False
    )
    if isinstance(ids, dict) or hasattr(ids, "keys"):
        ids = ids["input_ids"]
    return [int(i) for i in ids]


def encode_text(tokenizer: Any, text: str) -> list[int]:
    """Plain ids, no template, no special tokens."""
    return [int(i) for i in tokenizer(text, add_special_tokens=False)["input_ids"]]


def decode(tokenizer: Any, ids: Sequence[int]) -> str:
    """Text of ids with special tokens skipped."""
    return str(tokenizer.decode(list(ids), skip_special_tokens=True))


class TokenizerMethods:
    """The token methods every backend has, over its local ``tokenizer`` (the same
    tokenizer as the reference pack: in process, and for a served build, whose
    server is checked to agree)."""

    tokenizer: Any

    def encode_prompt(self, text: str, *, chat: bool = True) -> list[int]:
        """Ids of a user turn through the chat template (with the assistant prefix) if any."""
        return encode_prompt(self.tokenizer, text, chat=chat)

    def encode_messages(self, messages: Sequence[Mapping[str, str]]) -> list[int]:
        """Ids of a conversation through the chat template, with the assistant prefix."""
        return encode_messages(self.tokenizer, messages)

    def encode_text(self, text: str) -> list[int]:
        """Plain ids, no template, no special tokens."""
        return encode_text(self.tokenizer, text)

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ids with special tokens skipped."""
        return decode(self.tokenizer, ids)


class InnerTokens:
    """The token methods of a wrapper backend (a compressed cache, a drafter): its inner
    build's, which holds the tokenizer."""

    inner: Any

    def encode_prompt(self, text: str, *, chat: bool = True) -> list[int]:
        """The inner build's prompt encoding."""
        return list(self.inner.encode_prompt(text, chat=chat))

    def encode_messages(self, messages: Sequence[Mapping[str, str]]) -> list[int]:
        """The inner build's conversation encoding."""
        return list(self.inner.encode_messages(messages))

    def encode_text(self, text: str) -> list[int]:
        """The inner build's plain encoding."""
        return list(self.inner.encode_text(text))

    def decode(self, ids: Sequence[int]) -> str:
        """The inner build's decoding."""
        return str(self.inner.decode(ids))

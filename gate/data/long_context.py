"""Long-context fidelity prompts: whole ShareGPT histories cut to token-count tiers.

A long-context prompt is a real multi-turn conversation rendered through the
model's chat template: every earlier user/assistant turn is context, the last
user turn is the question, and the baseline's answer to it is what the
fidelity tier scores (docs/compression-families.md "Long-context tiers").

Tiers are token budgets ``b_1 < b_2 < ... < b_n`` (the CGA paper's 8K / 16K /
24K; the demo model's window holds 1,024 positions, so its tiers are
256 / 512 / 896). Tier ``i`` holds prompts of ``n`` tokens with
``b_(i-1) < n <= b_i``, where ``b_0 = b_1 // 2``; ``n`` counts the whole
rendered prompt (template, special tokens and the assistant prefix).

A conversation is fitted to a budget ``B`` by dropping its oldest turns:
the newest whole turns that fit are kept, then the newest dropped turn is cut
from its start at a word boundary so the prompt comes as close to ``B`` as the
words allow. The question is never cut: a conversation whose question alone
exceeds ``B`` is not used for that tier.

Selection is deterministic: conversations are taken in ``sha256(id)`` order,
the largest tier first (it needs the longest histories), each conversation at
most once, ``per_tier`` prompts per tier; the set is then interleaved tier by
tier (smallest first), so its first ``N`` prompts stay balanced across tiers.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from gate.data.categorize import classify, length_tier
from gate.data.jsonl import read_jsonl
from gate.data.sharegpt import Conversation, Turn
from gate.errors import DataError

__all__ = [
    "DEMO_CONTEXT_TIERS",
    "LongContextPrompt",
    "build_long_context_set",
    "check_tiers",
    "context_tier",
    "default_conversations_path",
    "fit_to_budget",
    "load_conversations",
    "tier_bounds",
]

#: Context tiers of the demo model (1,024 positions): room for 128 generated tokens.
DEMO_CONTEXT_TIERS: tuple[int, ...] = (256, 512, 896)

#: Chat messages ``[{"role": ..., "content": ...}]`` -> token count of the rendered prompt.
MessageCounter = Callable[[Sequence[Turn]], int]
#: Plain text -> token count (no template).
TextCounter = Callable[[str], int]


@dataclass(frozen=True)
class LongContextPrompt:
    """One long-context prompt: the fields of a fidelity prompt plus its history.

    ``text`` is the question (the last user turn), ``messages`` the whole
    prompt in order (history, then the question), ``context_tier`` the tier's
    budget in tokens and ``n_tokens`` the rendered prompt's token count.
    ``category`` and ``length`` describe the question as for any fidelity prompt.
    """

    id: str
    category: str
    length: str
    text: str
    messages: tuple[Turn, ...]
    context_tier: int
    n_tokens: int

    def chat_messages(self) -> list[dict[str, str]]:
        """The prompt as chat-template messages."""
        return [{"role": t.role, "content": t.content} for t in self.messages]


def default_conversations_path() -> Path:
    """The packaged held-out multi-turn conversations."""
    return Path(
        str(
            resources.files("gate").joinpath(
                "assets", "prompts", "long_context_conversations.jsonl"
            )
        )
    )


def check_tiers(tiers: Sequence[int]) -> tuple[int, ...]:
    """``tiers`` as a tuple, refused (``ValueError``) unless strictly increasing and >= 16."""
    out = tuple(int(t) for t in tiers)
    if not out:
        raise ValueError("context_tiers needs at least one token budget, e.g. [256, 512, 896]")
    if out[0] < 16:
        raise ValueError(f"context tier budgets must be >= 16 tokens, got {out[0]}")
    if any(b <= a for a, b in itertools.pairwise(out)):
        raise ValueError(f"context_tiers must be strictly increasing, got {list(out)}")
    return out


def tier_bounds(tiers: Sequence[int]) -> list[tuple[int, int]]:
    """``(lower, upper)`` token bounds per tier: ``lower < n <= upper``; the first lower is ``b_1 // 2``."""
    budgets = check_tiers(tiers)
    lowers = (budgets[0] // 2, *budgets[:-1])
    return list(zip(lowers, budgets, strict=True))


def context_tier(n_tokens: int, tiers: Sequence[int]) -> str:
    """The tier label (its budget) of a prompt of ``n_tokens``: the smallest budget >= ``n_tokens``.

    A prompt longer than every budget is labelled ``>b_n``.
    """
    budgets = check_tiers(tiers)
    for budget in budgets:
        if n_tokens <= budget:
            return str(budget)
    return f">{budgets[-1]}"


def load_conversations(path: str | Path | None = None) -> list[Conversation]:
    """Conversations of a ``{"id", "turns": [{"role", "content"}]}`` JSONL file (default: packaged).

    Every conversation must end with a user turn (the question) and have at
    least one earlier turn; roles are ``user`` or ``assistant``.
    """
    p = default_conversations_path() if path is None else Path(path)
    out: list[Conversation] = []
    seen: set[str] = set()
    for line in read_jsonl(p, what="conversations"):
        obj = line.value
        if not isinstance(obj, dict) or not isinstance(obj.get("id"), str):
            raise DataError(f"{line.where}: a conversation needs a string 'id'")
        raw = obj.get("turns")
        if not isinstance(raw, list) or len(raw) < 2:
            raise DataError(f"{line.where}: 'turns' must list at least two turns")
        turns: list[Turn] = []
        for t in raw:
            role = t.get("role") if isinstance(t, dict) else None
            content = t.get("content") if isinstance(t, dict) else None
            if role not in ("user", "assistant") or not isinstance(content, str):
                raise DataError(
                    f"{line.where}: each turn needs role 'user' or 'assistant' and a string content"
                )
            turns.append(Turn(role, content))
        if turns[-1].role != "user" or not turns[-1].content.strip():
            raise DataError(f"{line.where}: the last turn must be the user's question")
        if obj["id"] in seen:
            raise DataError(f"{line.where}: duplicate conversation id {obj['id']!r}")
        seen.add(obj["id"])
        out.append(Conversation(obj["id"], tuple(turns)))
    if not out:
        raise DataError(f"conversations file {p} is empty", "give at least one conversation")
    return out


def _word_starts(text: str) -> list[int]:
    """Character offsets where a word starts (after whitespace, or at 0)."""
    return [i for i, c in enumerate(text) if not c.isspace() and (i == 0 or text[i - 1].isspace())]


def fit_to_budget(
    turns: Sequence[Turn], budget: int, count: MessageCounter
) -> tuple[tuple[Turn, ...], int] | None:
    """The longest suffix of ``turns`` whose rendered prompt has at most ``budget`` tokens.

    Whole turns are kept newest first; then the newest turn that did not fit
    is kept from the latest word start that still fits (its tail), found by
    bisection over word starts (shorter tails never hold more words). Returns
    ``(messages, token count)``, or ``None`` when the question alone is over
    the budget. The last turn (the question) is never cut.
    """
    start = len(turns) - 1
    n = count(turns[start:])
    if n > budget:
        return None
    while start > 0:
        m = count(turns[start - 1 :])
        if m > budget:
            break
        start, n = start - 1, m
    kept = tuple(turns[start:])
    if start == 0:
        return kept, n
    older = turns[start - 1]
    starts = _word_starts(older.content)

    def tail(k: int) -> tuple[Turn, ...]:
        return (Turn(older.role, older.content[starts[k] :]), *kept)

    # smallest index k (longest tail) with count <= budget; counts fall as k grows
    lo, hi = 0, len(starts)
    while lo < hi:
        mid = (lo + hi) // 2
        if count(tail(mid)) <= budget:
            hi = mid
        else:
            lo = mid + 1
    if lo < len(starts):
        m = count(tail(lo))
        if m <= budget:
            return tail(lo), m
    return kept, n


def _key(cid: str) -> str:
    return hashlib.sha256(cid.encode("utf-8")).hexdigest()


def build_long_context_set(
    conversations: Sequence[Conversation],
    count_messages: MessageCounter,
    count_text: TextCounter,
    tiers: Sequence[int] = DEMO_CONTEXT_TIERS,
    per_tier: int = 12,
) -> list[LongContextPrompt]:
    """Up to ``per_tier`` long-context prompts per tier (see the module docstring).

    ``count_messages`` renders messages through the model's chat template
    (with the assistant prefix) and counts the tokens; ``count_text`` counts a
    plain text's tokens (for the question's length tier). Raises
    :class:`DataError` when a tier gets no prompt at all.
    """
    if per_tier < 1:
        raise ValueError(f"per_tier must be >= 1, got {per_tier}")
    bounds = tier_bounds(tiers)
    ordered = sorted(conversations, key=lambda c: _key(c.id))
    used: set[str] = set()
    chosen: dict[int, list[LongContextPrompt]] = {b: [] for _, b in bounds}
    for lower, budget in reversed(bounds):
        for conv in ordered:
            if len(chosen[budget]) == per_tier:
                break
            if conv.id in used:
                continue
            fitted = fit_to_budget(conv.turns, budget, count_messages)
            if fitted is None or fitted[1] <= lower:
                continue
            messages, n = fitted
            question = messages[-1].content
            chosen[budget].append(
                LongContextPrompt(
                    id=f"ctx{budget}:{conv.id}",
                    category=classify(question).category,
                    length=length_tier(count_text(question)),
                    text=question,
                    messages=messages,
                    context_tier=budget,
                    n_tokens=n,
                )
            )
            used.add(conv.id)
        if not chosen[budget]:
            raise DataError(
                f"no conversation is long enough for the context tier of {budget} tokens",
                "lower the tier, or give a conversations file with longer histories "
                "(scripts/build_long_context_set.py --max-chars)",
            )
    out: list[LongContextPrompt] = []
    for depth in range(per_tier):
        for _, budget in bounds:
            if depth < len(chosen[budget]):
                out.append(chosen[budget][depth])
    return out

"""Build the packaged multi-turn conversations of the long-context fidelity prompts.

Writes ``gate/assets/prompts/long_context_conversations.jsonl``: held-out ShareGPT
conversations (``gate.data.sharegpt.is_heldout``, never trained on by the demo
model) that have history before their last user turn, as ``{"id", "turns":
[{"role", "content"}, ...]}`` records, in ``sha256(id)`` order. Each is kept up
to its last user turn; when longer than ``--max-chars`` its oldest turns are
dropped (the newest history is what a context tier keeps). The tiers themselves
are cut with the model's tokenizer at run time (``gate.data.long_context``).

Run:
    python scripts/build_long_context_set.py            # demo-sized (tiers up to ~1K tokens)
    python scripts/build_long_context_set.py --max-chars 120000 --count 200 \
        --out my_long_conversations.jsonl               # enough text for 8K/16K/24K tiers
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

from gate.data.sharegpt import Conversation, load_sharegpt, split_conversations

ROOT = Path(__file__).resolve().parents[1]


def up_to_last_question(conv: Conversation) -> list[dict[str, str]]:
    """User/assistant turns up to and including the last non-empty user turn."""
    turns = [t for t in conv.turns if t.role in ("user", "assistant") and t.content.strip()]
    last = max((i for i, t in enumerate(turns) if t.role == "user"), default=-1)
    return [{"role": t.role, "content": t.content} for t in turns[: last + 1]]


def newest(turns: list[dict[str, str]], max_chars: int) -> list[dict[str, str]]:
    """The newest whole turns whose texts total at most ``max_chars`` (the question always)."""
    kept: list[dict[str, str]] = []
    total = 0
    for turn in reversed(turns):
        if kept and total + len(turn["content"]) > max_chars:
            break
        kept.append(turn)
        total += len(turn["content"])
    return kept[::-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, default=ROOT / "gate/assets/prompts/long_context_conversations.jsonl"
    )
    parser.add_argument("--count", type=int, default=96, help="conversations to keep")
    parser.add_argument("--max-chars", type=int, default=6000, help="history kept per conversation")
    parser.add_argument("--min-chars", type=int, default=1500, help="shortest history accepted")
    args = parser.parse_args()
    convs, _ = load_sharegpt(warn=False)
    _, held = split_conversations(convs)
    held.sort(key=lambda c: hashlib.sha256(c.id.encode("utf-8")).hexdigest())
    records: list[dict[str, object]] = []
    for conv in held:
        turns = newest(up_to_last_question(conv), args.max_chars)
        if len(turns) < 3 or sum(len(t["content"]) for t in turns) < args.min_chars:
            continue
        records.append({"id": conv.id, "turns": turns})
        if len(records) == args.count:
            break
    lines = [json.dumps(r, ensure_ascii=False) for r in records]
    args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {len(records)} conversations to {args.out}")


if __name__ == "__main__":
    main()

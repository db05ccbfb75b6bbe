"""Build the committed fidelity prompt set and the held-out perplexity sample.

Both come from held-out ShareGPT conversations only (``gate.data.sharegpt.is_heldout``),
which the demo model never saw in training.

* ``gate/assets/prompts/fidelity_prompts.jsonl``: ~300 first user turns, categorized,
  length-tiered with the demo tokenizer, cut to 192 tokens (``gate.data.prompt_set``).
* ``gate/assets/data/heldout_sharegpt.jsonl``: ``{"id", "text"}`` records, the first
  assistant reply of held-out conversations (cut at a word boundary), up to ``--ppl-bytes``.

Run:
    python scripts/build_prompt_set.py --tokenizer gate/assets/demo_model
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import sys
from pathlib import Path

from tokenizers import Tokenizer

from gate.data.prompt_set import (
    DEFAULT_MAX_TOKENS,
    DEFAULT_SIZE,
    build_prompt_set,
    write_prompt_set,
)
from gate.data.sharegpt import Conversation, load_sharegpt, split_conversations, usable

ROOT = Path(__file__).resolve().parents[1]


def heldout_texts(held: list[Conversation], max_bytes: int, max_chars: int) -> list[dict[str, str]]:
    """First assistant replies (>= 300 chars) in ``sha256(id)`` order until ``max_bytes``."""
    out: list[dict[str, str]] = []
    total = 0
    for conv in sorted(held, key=lambda c: hashlib.sha256(c.id.encode()).hexdigest()):
        reply = next((t.content for t in conv.turns if t.role == "assistant"), "")
        if len(reply) < 300:
            continue
        text = reply[:max_chars]
        if len(reply) > max_chars and " " in text:
            text = text[: text.rindex(" ")]
        rec = {"id": conv.id, "text": text.strip()}
        size = len(json.dumps(rec, ensure_ascii=False).encode("utf-8")) + 1
        if total + size > max_bytes:
            break
        out.append(rec)
        total += size
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokenizer", type=Path, default=ROOT / "gate/assets/demo_model")
    ap.add_argument(
        "--prompts-out", type=Path, default=ROOT / "gate/assets/prompts/fidelity_prompts.jsonl"
    )
    ap.add_argument(
        "--heldout-out", type=Path, default=ROOT / "gate/assets/data/heldout_sharegpt.jsonl"
    )
    ap.add_argument("--size", type=int, default=DEFAULT_SIZE)
    ap.add_argument("--max-tokens", type=int, default=DEFAULT_MAX_TOKENS)
    ap.add_argument("--ppl-bytes", type=int, default=200_000)
    ap.add_argument("--ppl-chars", type=int, default=2000)
    args = ap.parse_args(argv)

    tok = Tokenizer.from_file(str(args.tokenizer / "tokenizer.json"))

    def encode(text: str) -> list[tuple[int, int]]:
        return [tuple(o) for o in tok.encode(text, add_special_tokens=False).offsets]  # type: ignore[misc]

    convs, report = load_sharegpt(warn=False)
    _, held = split_conversations(usable(convs))
    prompts = build_prompt_set(held, encode, size=args.size, max_tokens=args.max_tokens)
    args.prompts_out.parent.mkdir(parents=True, exist_ok=True)
    write_prompt_set(prompts, args.prompts_out)
    texts = heldout_texts(held, args.ppl_bytes, args.ppl_chars)
    args.heldout_out.parent.mkdir(parents=True, exist_ok=True)
    args.heldout_out.write_text(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in texts), encoding="utf-8"
    )
    cats = collections.Counter(p.category for p in prompts)
    tiers = collections.Counter(p.length for p in prompts)
    tags = collections.Counter(f"{p.category}:{p.tag}" for p in prompts if p.tag)
    print(
        json.dumps(
            {
                "recovered": report.recovered,
                "heldout_conversations": len(held),
                "prompts": len(prompts),
                "categories": dict(sorted(cats.items())),
                "length_tiers": dict(sorted(tiers.items())),
                "tags": dict(sorted(tags.items())),
                "heldout_texts": len(texts),
                "heldout_bytes": args.heldout_out.stat().st_size,
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

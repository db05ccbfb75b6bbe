"""Build the packaged calibration set for ``prune-wanda`` (``gate.data.activation_prompts``).

Conversations of the ShareGPT training split only (the fidelity prompts are the
held-out split), first user turn plus reply, deterministic order.

Run:
    python scripts/build_activation_prompt_set.py [--size 128] [--max-chars 768]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from gate.data.activation_prompts import (
    DEFAULT_MAX_CHARS,
    DEFAULT_SIZE,
    build_activation_prompt_set,
    default_activation_prompts_path,
    write_activation_prompt_set,
)
from gate.data.sharegpt import load_sharegpt


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--size", type=int, default=DEFAULT_SIZE)
    ap.add_argument("--max-chars", type=int, default=DEFAULT_MAX_CHARS)
    ap.add_argument("--out", type=Path, default=default_activation_prompts_path())
    args = ap.parse_args(argv)
    conversations, report = load_sharegpt(warn=False)
    records = build_activation_prompt_set(conversations, args.size, args.max_chars)
    write_activation_prompt_set(records, args.out)
    print(f"{len(records)} calibration texts from {report.recovered} conversations -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

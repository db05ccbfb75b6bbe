"""Token-length buckets of prompts and of generated responses.

The Elo framework for efficiency techniques (see :mod:`gate.judge`) reports scores
per length of the prompt, because compression often hurts long contexts first. A
length ``n`` in tokens falls in the first bucket whose upper edge is ``>= n``:

==========  ===========
bucket      tokens
==========  ===========
XS          0 - 128
S           129 - 256
M           257 - 512
L           513 - 1024
XL          1025 - 2048
XXL         2049 - 4096
XXL+        4097 and more
==========  ===========

The same edges bucket generated lengths (the tokens a build produced for a prompt),
which separates "short answers got worse" from "long answers got worse".
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["BUCKETS", "EDGES", "OVERFLOW", "bucket_counts", "length_bucket"]

#: ``(name, upper edge inclusive)`` in increasing order.
EDGES: tuple[tuple[str, int], ...] = (
    ("XS", 128),
    ("S", 256),
    ("M", 512),
    ("L", 1024),
    ("XL", 2048),
    ("XXL", 4096),
)
#: The bucket of lengths above the last edge.
OVERFLOW = "XXL+"
#: Every bucket name, shortest first.
BUCKETS: tuple[str, ...] = (*(name for name, _ in EDGES), OVERFLOW)


def length_bucket(n_tokens: int) -> str:
    """The bucket of a length of ``n_tokens`` tokens (``>= 0``)."""
    if n_tokens < 0:
        raise ValueError(f"a length cannot be negative ({n_tokens})")
    for name, upper in EDGES:
        if n_tokens <= upper:
            return name
    return OVERFLOW


def bucket_counts(lengths: Sequence[int]) -> dict[str, int]:
    """How many lengths fall in each bucket (every bucket present, in order)."""
    counts = dict.fromkeys(BUCKETS, 0)
    for n in lengths:
        counts[length_bucket(n)] += 1
    return counts

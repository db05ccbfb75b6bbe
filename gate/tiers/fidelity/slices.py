"""Slicing the scored prompts: which prompts make each breakdown of a measurement.

``category:<c>``, ``length:<t>`` and, with context tiers, ``context:<budget>``
(the tier a prompt's token count falls in); a slice's token-level values are
its prompts' positions pooled (concatenated)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gate.tiers.fidelity.pack_scores import PromptScores


def slice_groups(
    results: Sequence[PromptScores], context_tiers: Sequence[int] | None = None
) -> dict[str, list[int]]:
    """Slices: ``category:<c>``, ``length:<t>`` and, with ``context_tiers``, ``context:<budget>``
    (the tier a prompt's token count falls in, :func:`gate.data.long_context.context_tier`)."""
    from gate.data.long_context import context_tier

    groups: dict[str, list[int]] = {}
    for n, r in enumerate(results):
        groups.setdefault(f"category:{r.meta.category}", []).append(n)
        groups.setdefault(f"length:{r.meta.length}", []).append(n)
        if context_tiers:
            tier = context_tier(r.meta.n_prompt, context_tiers)
            groups.setdefault(f"context:{tier}", []).append(n)
    return dict(sorted(groups.items()))


def pooled(results: Sequence[PromptScores], indices: Sequence[int], field: str) -> np.ndarray:
    return np.concatenate([getattr(results[i].positions, field) for i in indices])

"""Speculative-tier metric declarations (torch-free).

Definitions in :mod:`gate.metrics.speculative` (docs/speculative.md). Every
prompt is generated twice in the session, with and without speculation, so
the losslessness figures need no baseline: ``speculative.lossless`` (the share
of prompts whose tokens are equal) is reported, and
``speculative.confident_divergences`` (prompts that left the plain tokens where
the target was sure, beyond the verification path's rounding) is gated against
its ideal 0. The acceptance figures are per-prompt means (``PAIRED_SCORE``,
paired with the baseline's prompts); only the acceptance length is gated by
default. The speed-up is a with/without ratio measured in one session
(``RATIO``), gated only by the tier's ``min_speedup``.
"""

from __future__ import annotations

from gate.metrics.metric_spec import MetricSpec, SampleKind

#: The tier these metrics belong to (the part of each name before the dot).
TIER = "speculative"

# Names other modules refer to: every one is a spec of :data:`SPECS`.
LOSSLESS = "speculative.lossless"
CONFIDENT_DIVERGENCES = "speculative.confident_divergences"
ACCEPTANCE_LENGTH = "speculative.acceptance_length"
ACCEPTANCE_RATE = "speculative.acceptance_rate"
SPEEDUP = "speculative.speedup"

SPECS: tuple[MetricSpec, ...] = (
    MetricSpec(
        LOSSLESS,
        "ratio",
        True,
        SampleKind.POINT,
        "share of prompts whose greedy tokens with speculation equal those without it",
        ideal=1.0,
    ),
    MetricSpec(
        CONFIDENT_DIVERGENCES,
        "prompts",
        False,
        SampleKind.POINT,
        "prompts whose speculative tokens left the plain ones where the target's top-2 margin"
        " exceeds the verification path's rounding noise",
        ideal=0.0,
    ),
    MetricSpec(
        ACCEPTANCE_LENGTH,
        "tokens/step",
        True,
        SampleKind.PAIRED_SCORE,
        "tokens per target verification step (accepted + 1), mean over steps, then prompts",
    ),
    MetricSpec(
        ACCEPTANCE_RATE,
        "ratio",
        True,
        SampleKind.PAIRED_SCORE,
        "draft tokens accepted / proposed per prompt, mean over prompts (per draft position in"
        " the details)",
    ),
    MetricSpec(
        SPEEDUP,
        "x",
        True,
        SampleKind.RATIO,
        "tokens/s with speculation / without, per prompt back to back, geometric mean",
        ideal=1.0,
    ),
)

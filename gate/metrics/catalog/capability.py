"""Metric specs of the capability tier (docs/metrics.md "Capability probes").

Every metric is a pass rate over seeded probes with exact checkers
(:mod:`gate.data.probes`). The samples are per-probe outcomes (1 pass, 0 fail)
with ``sample_ids`` = probe ids, so a candidate is paired with the baseline
probe by probe and compared with McNemar's exact test on the discordant pairs:
the probes that flipped pass->fail against those that flipped fail->pass.
Breakdown slices (``op:*``, ``constraint:word_count``, ``type:integer``,
``task:fib`` ...) carry the same kind of samples.
"""

from __future__ import annotations

from gate.metrics.metric_spec import MetricSpec, SampleKind

#: The tier these metrics belong to (the part of each name before the dot).
TIER = "capability"

# Names other modules refer to: every one is a spec of :data:`SPECS`.
ARITHMETIC_EASY = "capability.arithmetic_easy"


def _rate(name: str, description: str) -> MetricSpec:
    return MetricSpec(
        name=f"capability.{name}",
        unit="fraction",
        higher_is_better=True,
        sample_kind=SampleKind.PAIRED_BINARY,
        description=description,
    )


SPECS: tuple[MetricSpec, ...] = (
    _rate("arithmetic_easy", "pass rate of one-step arithmetic probes (last number of the reply)"),
    _rate("arithmetic_medium", "pass rate of two-step arithmetic probes (a * b +/- c)"),
    _rate("arithmetic_hard", "pass rate of three-step arithmetic probes (a * b + c * d)"),
    _rate(
        "instruction_following",
        "pass rate of verifiable instructions (counts, required/forbidden words, capitals, ...)",
    ),
    _rate("structured_output", "pass rate of JSON replies with the asked key and value type"),
    _rate("code", "pass rate of small Python functions on hidden tests run in the sandbox"),
)

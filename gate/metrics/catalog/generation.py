"""Generation-tier metric declarations (torch-free).

Definitions in :mod:`gate.metrics.generation` (docs/metrics.md "Generation").
The candidate answers the fidelity prompts greedily; the baseline's answers are
the reference pack's (never generated again). Every metric is per prompt
(``sample_ids`` = prompt ids), paired with the baseline's value on the same
prompt: the baseline's values come from its pack, in the session
(``details["paired_reference"]``, :mod:`gate.gating.compare`), and from its own
recorded measurements against any other ref.

* ``exact_match`` and ``stop_rate`` and ``loop_rate`` are 0/1 per prompt
  (McNemar's exact test on the discordant prompts);
* ``length_ratio`` and ``stop_rate`` are two-sided (``MetricSpec.two_sided``):
  rambling and truncation are both regressions;
* ``divergence_position`` (tokens), ``length_ratio`` (logs of the per-prompt
  ratio: the value is their geometric mean) and ``distinct_2`` are scores per
  prompt (paired bootstrap).
"""

from __future__ import annotations

from gate.metrics.metric_spec import MetricSpec, SampleKind

#: The tier these metrics belong to (the part of each name before the dot).
TIER = "generation"

# Names other modules refer to: every one is a spec of :data:`SPECS`.
EXACT_MATCH = "generation.exact_match"
DIVERGENCE_POSITION = "generation.divergence_position"
LENGTH_RATIO = "generation.length_ratio"
STOP_RATE = "generation.stop_rate"
LOOP_RATE = "generation.loop_rate"
DISTINCT_2 = "generation.distinct_2"


class GenerationDetail:
    """Keys of ``generation.exact_match``'s ``Measurement.details`` that the reports read."""

    #: The worst divergences, each ``{prompt_id, category, prompt, position, common,
    #: baseline, candidate, baseline_tokens, candidate_tokens}``
    #: (:class:`gate.tiers.generation.DivergenceExample`) -> every report.
    EXAMPLES = "examples"
    #: The sampling of sampled answers, ``{seed, temperature, top_p}`` (absent: greedy).
    SAMPLING = "sampling"


SPECS: tuple[MetricSpec, ...] = (
    MetricSpec(
        EXACT_MATCH,
        "ratio",
        True,
        SampleKind.PAIRED_BINARY,
        "share of greedy answers identical to the baseline's (same tokens, same length)",
        ideal=1.0,
    ),
    MetricSpec(
        DIVERGENCE_POSITION,
        "tokens",
        True,
        SampleKind.PAIRED_SCORE,
        "tokens until the first difference from the baseline's answer, censored at the "
        "baseline's stored answer length and at [tiers.generation] divergence_horizon, "
        "mean over prompts",
    ),
    MetricSpec(
        LENGTH_RATIO,
        "x",
        False,
        SampleKind.PAIRED_SCORE,
        "candidate / baseline answer length, geometric mean over prompts (samples: log ratios);"
        " above 1 the candidate rambles, below 1 it cuts its answers short (two-sided)",
        log_samples=True,
        two_sided=True,
    ),
    MetricSpec(
        STOP_RATE,
        "ratio",
        True,
        SampleKind.PAIRED_BINARY,
        "share of answers that end by themselves (EOS or the chat template's end) within the cap"
        " (two-sided: stopping more often cuts answers short, less often rambles)",
        two_sided=True,
    ),
    MetricSpec(
        LOOP_RATE,
        "ratio",
        False,
        SampleKind.PAIRED_BINARY,
        "share of answers whose tail is a degenerate loop (one span repeated, docs/metrics.md)",
    ),
    MetricSpec(
        DISTINCT_2,
        "ratio",
        True,
        SampleKind.PAIRED_SCORE,
        "distinct token bigrams / bigrams of each answer, mean over prompts",
    ),
)

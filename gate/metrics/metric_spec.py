"""The frozen description of a metric, shared by config, compare and reports."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class SampleKind(enum.Enum):
    """What the per-sample values of a metric are, which picks the statistical test.

    * ``PAIRED_BINARY``: 0/1 correctness per item (question, probe, token position
      averaged per prompt is *not* binary). Compared with McNemar's exact test on
      the discordant pairs.
    * ``PAIRED_SCORE``: a real-valued score per item, the same items on both sides
      (per-prompt CGA, per-prompt KL). Compared with a paired bootstrap of the mean
      difference.
    * ``REPEATED``: unpaired repeated runs of a noisy measurement (latency,
      throughput). Compared with a two-sample test (Mann-Whitney U) and a
      bootstrap CI of the relative change of the median.
    * ``POINT``: a single number with no per-sample evidence (parameter bytes,
      a value imported from another tool). Compared on the value alone.
    * ``RATIO``: a candidate/baseline ratio measured in one session (the load
      tier's interleaved sweeps), its per-sweep ratios as samples and its
      interval in ``details["ratio_ci"]``; gated by the tier's ``min_speedup``
      (:mod:`gate.gating.speedup`), never against a stored value.
    """

    PAIRED_BINARY = "paired_binary"
    PAIRED_SCORE = "paired_score"
    REPEATED = "repeated"
    POINT = "point"
    RATIO = "ratio"


@dataclass(frozen=True)
class MetricSpec:
    """A metric the gate knows: dotted name ``tier.metric``, unit and direction."""

    name: str
    unit: str
    higher_is_better: bool
    sample_kind: SampleKind
    description: str
    #: Metrics whose value must be computed against the baseline itself (CGA, KL,
    #: flips) have a fixed ideal (1.0 or 0.0) and are compared against that value
    #: rather than against the baseline's own number.
    ideal: float | None = None
    #: The per-sample values are natural logs of the value's unit (perplexity:
    #: samples are per-window mean NLL, value ``exp(mean NLL)``). The verdict's CI
    #: of ``delta`` is then mapped to the value's unit: a difference ``x`` of the
    #: mean log is a ratio ``e^x``, so ``delta = r (e^x - 1)`` for reference ``r``.
    log_samples: bool = False
    #: The per-sample values are centred pairwise scores (win +1/2, tie 0, loss -1/2)
    #: and the value is the Elo delta ``D(1/2 + mean)``, ``D(p) = -400 log10(1/p - 1)``.
    #: The verdict's CI ``[lo, hi]`` of the mean difference against the reference's
    #: centred scores is mapped to ``[D(1/2 + lo), D(1/2 + hi)]`` (``D`` increases).
    elo_samples: bool = False
    #: A change either way is a regression (the generation tier's length ratio and stop
    #: rate: rambling and truncation alike). The gate judges it in the direction it moved
    #: (``higher_is_better`` then reads "away from the reference is worse") and doubles
    #: the one-sided test's p-value (two one-sided tests at ``alpha / 2`` each, Bonferroni).
    two_sided: bool = False

    @property
    def tier(self) -> str:
        """The tier: the part of the name before the first dot."""
        return self.name.split(".", 1)[0]

"""The ``[tiers.generation]`` settings: the loop detector, the divergence horizon, the
examples and the sampling of sampled answers."""

from __future__ import annotations

from dataclasses import dataclass

from gate.metrics import generation as gm
from gate.metrics.catalog import generation as catalog
from gate.models.backends.sampling import Sampling

TIER = catalog.TIER


@dataclass(frozen=True)
class GenerationSettings:
    """``[tiers.generation]`` settings (built with :func:`gate.tiers.registry.build_settings`).

    The prompts, the cap and the batch size are the fidelity tier's pack's and
    ``[tiers.fidelity]``'s (``limit``, ``batch_size``): the candidate answers what
    the baseline answered, batched as it was.
    """

    #: ``R`` of the loop detector: copies of the span the answer's tail must hold.
    loop_repeats: int = 3
    #: ``M`` of the loop detector: the fewest tail tokens a loop covers.
    loop_min_tokens: int = 16
    #: ``P`` of the loop detector: the longest repeated span looked for, in tokens.
    loop_max_period: int = 32
    #: ``H``: the divergence position is censored at this many tokens (and at the
    #: stored answer's length), so that its relative bounds mean the same at every
    #: cap of at least ``H`` (:func:`gate.metrics.generation.divergence_position`).
    #: 48: the cap the default bounds were chosen at (thresholds.toml).
    divergence_horizon: int = 48
    #: Worst divergences shown in the reports (0: none).
    examples: int = 3
    #: Sampled answers instead of greedy ones, with this seed (None: greedy). The
    #: baseline's sampled answers are stored with it when it is recorded
    #: (:data:`~gate.tiers.generation.sampled.SAMPLED_ARTIFACT`);
    #: :mod:`gate.models.backends.sampling` draws them.
    seed: int | None = None
    #: ``T`` of the sampled answers.
    temperature: float = 1.0
    #: ``p`` of the sampled answers: the nucleus mass (1: the whole vocabulary).
    top_p: float = 1.0

    def __post_init__(self) -> None:
        self.loop_rule  # noqa: B018 - validates the detector's parameters
        if self.examples < 0:
            raise ValueError(f"examples must be >= 0, got {self.examples}")
        if self.divergence_horizon < 1:
            raise ValueError(f"divergence_horizon must be >= 1, got {self.divergence_horizon}")
        if self.seed is None and (self.temperature != 1.0 or self.top_p != 1.0):
            raise ValueError("temperature and top_p shape sampled answers: set seed too")
        self.sampling  # noqa: B018 - validates the sampling parameters

    @property
    def sampling(self) -> Sampling | None:
        """The seeded sampling these settings ask for (None: greedy answers)."""
        if self.seed is None:
            return None
        return Sampling(self.seed, self.temperature, self.top_p)

    @property
    def loop_rule(self) -> gm.LoopRule:
        """The degenerate-loop detector these settings describe."""
        return gm.LoopRule(self.loop_repeats, self.loop_min_tokens, self.loop_max_period)


__all__ = ["TIER", "GenerationSettings"]

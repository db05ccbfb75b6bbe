"""``record``: the baseline's own generation measurements, from its pack (greedy) or its
sampled answers."""

from __future__ import annotations

from gate.measurement import Measurement
from gate.store.reference import ReferencePack
from gate.tiers.generation.answers import stored_answers
from gate.tiers.generation.pairing import paired_values, to_measurements
from gate.tiers.generation.sampled import SampledAnswers
from gate.tiers.generation.settings import GenerationSettings


def record(
    pack: ReferencePack,
    settings: GenerationSettings,
    *,
    limit: int | None = None,
    sampled: SampledAnswers | None = None,
) -> list[Measurement]:
    """The baseline's own generation measurements: from its pack alone (greedy, nothing
    generated), or from its ``sampled`` answers (settings with a seed)."""
    answers = stored_answers(pack, limit)
    if sampled is not None:
        answers = sampled.as_stored(answers)
    values = paired_values(answers, [a.tokens for a in answers], pack.max_new_tokens, settings)
    return to_measurements(values, side="baseline")


__all__ = ["record"]

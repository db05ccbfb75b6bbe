"""``measure``: the candidate's answers against the baseline's, as measurements with the
worst divergences (and, sampled, the sampling) in ``generation.exact_match``'s details."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from gate.errors import DataError
from gate.measurement import Measurement
from gate.metrics.catalog import generation as catalog
from gate.metrics.catalog.generation import GenerationDetail
from gate.models.backends.base import Backend
from gate.store.reference import ReferencePack
from gate.tiers.generation.answers import StoredAnswer, answer, stored_answers
from gate.tiers.generation.examples import worst_divergences
from gate.tiers.generation.pairing import paired_values, to_measurements
from gate.tiers.generation.sampled import SampledAnswers, no_sampled_answers, sampled_facts
from gate.tiers.generation.settings import GenerationSettings


def measure(
    backend: Backend,
    pack: ReferencePack,
    settings: GenerationSettings,
    *,
    batch_size: int,
    limit: int | None = None,
    against: str | None = None,
    sampled: SampledAnswers | None = None,
) -> list[Measurement]:
    """The candidate's generation measurements against the baseline's answers: the greedy
    ones in ``pack``, or (settings with a seed) the baseline's ``sampled`` answers."""
    answers = stored_answers(pack, limit)
    if not answers:
        raise DataError("the reference pack holds no prompt", "re-record the baseline")
    sampling = settings.sampling
    if sampling is not None:
        if sampled is None:
            raise no_sampled_answers(sampling)
        sampled.check_matches(sampling, pack.max_new_tokens)
        answers = sampled.as_stored(answers)
    answered = answer(backend, pack, answers, batch_size, sampling)
    out = measure_answers(backend, pack, answers, answered, settings, against=against)
    if sampling is None:
        return out
    return _with_detail(out, GenerationDetail.SAMPLING, sampled_facts(sampling))


def measure_answers(
    backend: Backend,
    pack: ReferencePack,
    answers: Sequence[StoredAnswer],
    answered: Sequence[Sequence[int]],
    settings: GenerationSettings,
    *,
    against: str | None = None,
) -> list[Measurement]:
    """The measurements of the candidate's ``answered`` against the stored ``answers``
    (``backend`` decodes the examples)."""
    values = paired_values(answers, answered, pack.max_new_tokens, settings)
    out = to_measurements(values, side="candidate", against=against)
    if not settings.examples:
        return out
    worst = worst_divergences(backend, pack, answers, answered, settings.examples)
    return _with_detail(out, GenerationDetail.EXAMPLES, [d.to_dict() for d in worst])


def _with_detail(measurements: Sequence[Measurement], key: str, value: Any) -> list[Measurement]:
    """``measurements`` with ``value`` under ``key`` in ``generation.exact_match``'s details
    (where the reports read the tier's examples and sampling)."""
    return [
        dataclasses.replace(m, details={**m.details, key: value})
        if m.name == catalog.EXACT_MATCH
        else m
        for m in measurements
    ]


__all__ = ["measure", "measure_answers"]

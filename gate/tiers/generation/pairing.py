"""Per-prompt values of every metric on both sides, paired, and the measurements they
make (sliced by category and length)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gate.measurement import Measurement, MeasurementDetail
from gate.metrics import generation as gm
from gate.metrics.catalog import generation as catalog
from gate.tiers.generation.answers import StoredAnswer
from gate.tiers.generation.settings import GenerationSettings


@dataclass(frozen=True)
class PairedValues:
    """One metric's per-prompt values on both sides, on the prompts it uses."""

    ids: tuple[str, ...]
    candidate: tuple[float, ...]
    baseline: tuple[float, ...]
    slices: Mapping[str, tuple[int, ...]]


def _slices(answers: Sequence[StoredAnswer]) -> dict[str, tuple[int, ...]]:
    groups: dict[str, list[int]] = {}
    for n, a in enumerate(answers):
        groups.setdefault(f"category:{a.meta.category}", []).append(n)
        groups.setdefault(f"length:{a.meta.length}", []).append(n)
    return {k: tuple(v) for k, v in sorted(groups.items())}


def _paired(
    answers: Sequence[StoredAnswer],
    answered: Sequence[Sequence[int]],
    uses: Callable[[StoredAnswer], bool],
    candidate: Callable[[StoredAnswer, Sequence[int]], float],
    baseline: Callable[[StoredAnswer], float],
) -> PairedValues:
    """Each side's value on the prompts ``uses`` keeps: ``candidate`` of its answer,
    ``baseline`` of the stored one (the baseline against itself)."""
    kept = [(a, c) for a, c in zip(answers, answered, strict=True) if uses(a)]
    return PairedValues(
        ids=tuple(a.meta.id for a, _ in kept),
        candidate=tuple(candidate(a, c) for a, c in kept),
        baseline=tuple(baseline(a) for a, _ in kept),
        slices=_slices([a for a, _ in kept]),
    )


def paired_values(
    answers: Sequence[StoredAnswer],
    answered: Sequence[Sequence[int]],
    cap: int,
    settings: GenerationSettings,
) -> dict[str, PairedValues]:
    """Every metric's per-prompt values: the candidate's (``answered``) and the baseline's
    (the pack: its divergence from itself is ``min(n'_b, H)``, its exact match 1, its log
    length ratio 0), under ``settings``' loop detector and divergence horizon."""
    rule = settings.loop_rule
    horizon = settings.divergence_horizon

    def has_tokens(a: StoredAnswer) -> bool:
        return bool(a.tokens)

    def known(a: StoredAnswer) -> bool:
        return a.generated is not None and a.generated > 0

    def whole(a: StoredAnswer) -> bool:
        return a.whole and bool(a.tokens)

    def generated(a: StoredAnswer) -> int:
        assert a.generated is not None  # only on the prompts ``known`` keeps
        return a.generated

    return {
        catalog.EXACT_MATCH: _paired(
            answers,
            answered,
            known,
            lambda a, c: float(gm.exact_match(c, a.tokens, generated(a))),
            lambda a: 1.0,
        ),
        catalog.DIVERGENCE_POSITION: _paired(
            answers,
            answered,
            has_tokens,
            lambda a, c: float(gm.divergence_position(c, a.tokens, horizon)),
            lambda a: float(min(len(a.tokens), horizon)),
        ),
        catalog.LENGTH_RATIO: _paired(
            answers,
            answered,
            known,
            lambda a, c: gm.log_length_ratio(max(len(c), 1), generated(a)),
            lambda a: 0.0,
        ),
        catalog.STOP_RATE: _paired(
            answers,
            answered,
            known,
            lambda a, c: float(gm.stopped(len(c), cap)),
            lambda a: float(gm.stopped(generated(a), cap)),
        ),
        catalog.LOOP_RATE: _paired(
            answers,
            answered,
            whole,
            lambda a, c: float(gm.is_loop(c, rule)),
            lambda a: float(gm.is_loop(a.tokens, rule)),
        ),
        catalog.DISTINCT_2: _paired(
            answers,
            answered,
            whole,
            lambda a, c: gm.distinct_2(c),
            lambda a: gm.distinct_2(a.tokens),
        ),
    }


def _aggregate(name: str, samples: Sequence[float]) -> float:
    """The metric's value from its per-prompt samples: the mean; for the length ratio
    the geometric mean (its samples are logs)."""
    if name == catalog.LENGTH_RATIO:
        return gm.geometric_mean_ratio(samples)
    return math.fsum(samples) / len(samples)


def _measurement(
    name: str,
    ids: Sequence[str],
    samples: Sequence[float],
    reference: Sequence[float] | None,
    against: str | None,
) -> Measurement:
    details: dict[str, Any] = {}
    if reference is not None:
        details[MeasurementDetail.PAIRED_REFERENCE] = {
            "against": against,
            "value": _aggregate(name, reference),
            "samples": [float(x) for x in reference],
        }
    return Measurement(
        name,
        _aggregate(name, samples),
        samples=tuple(float(x) for x in samples),
        sample_ids=tuple(ids),
        details=details,
    )


def to_measurements(
    values: Mapping[str, PairedValues], *, side: str, against: str | None = None
) -> list[Measurement]:
    """One measurement per metric with a prompt, sliced; ``side`` ``"candidate"`` carries
    the baseline's values beside its own (``against``: the ref whose pack they are),
    ``"baseline"`` is the baseline's own."""
    out = []
    for name, v in values.items():
        if not v.ids:
            continue
        own = v.candidate if side == "candidate" else v.baseline
        ref = v.baseline if side == "candidate" else None

        def pick(xs: Sequence[float] | None, idx: Sequence[int]) -> list[float] | None:
            return None if xs is None else [xs[i] for i in idx]

        breakdown = {
            key: _measurement(
                name,
                [v.ids[i] for i in idx],
                [own[i] for i in idx],
                pick(ref, idx),
                against,
            )
            for key, idx in v.slices.items()
        }
        whole = _measurement(name, v.ids, own, ref, against)
        out.append(dataclasses.replace(whole, breakdown=breakdown))
    return out


__all__ = ["PairedValues", "paired_values", "to_measurements"]

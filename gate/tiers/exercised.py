"""Metrics that say what they measured: did the candidate's compression act on the tier's requests?

Every compressed build counts what its recipe changed
(:class:`gate.models.activity.Activity`, ``backend.activity``): modules
quantized or pruned at load, attention calls replaced, KV pairs evicted per
request. A tier reads that count around its work (:func:`counts`, then
:func:`attach`, key :attr:`~gate.measurement.MeasurementDetail.COMPRESSION_EXERCISED`;
the session does it for every measurement a tier test records), so each
measurement carries the :class:`~gate.models.activity.Exercise` of its tier.

From those, for each tier (:func:`tier_exercise`):

* share 0 — **NOT EXERCISED**: the compression acted on none of the tier's
  requests, its numbers measure the uncompressed model; the run is never
  approved on them (exit 5, :func:`not_exercised`);
* 0 < share < 1 — partly exercised: the report says which share (:func:`notes`).
  A tier that knows which of its items the method acted on lists them
  (``exercised_ids``, :func:`mark_exercised_ids`; the fidelity tier, per
  prompt), and ``exercised_only = true`` in ``[gate]`` gates its per-item
  metrics on those items alone (:func:`restrict`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any

from gate.gating.verdict import NotExercised
from gate.measurement import Measurement, MeasurementDetail
from gate.metrics.catalog.generation import TIER as GENERATION_TIER
from gate.metrics.catalog.speculative import TIER as SPECULATIVE_TIER
from gate.models.activity import Counting, Exercise, Reading, request_key
from gate.models.backends.capabilities import activity_of

KEY = MeasurementDetail.COMPRESSION_EXERCISED


def counts(backend: Any) -> Reading | None:
    """The build's activity reading now; ``None`` for a build with nothing to prove."""
    activity = activity_of(backend)
    return activity.reading() if activity is not None else None


def attach(
    measurements: Sequence[Measurement], backend: Any, before: Reading | None
) -> list[Measurement]:
    """``measurements`` stamped with what the compression did since ``before``.

    A measurement stamped already keeps its stamp (the tier's own reading is
    the narrower one); a build without an activity changes nothing.
    """
    activity = activity_of(backend)
    if activity is None:
        return list(measurements)
    entry = activity.since(before).to_dict()
    return [
        m if KEY in m.details else dataclasses.replace(m, details={**m.details, KEY: entry})
        for m in measurements
    ]


def mark_exercised_ids(
    measurements: Sequence[Measurement],
    backend: Any,
    requests: Mapping[str, tuple[Sequence[int], Sequence[int]]],
) -> list[Measurement]:
    """Add ``exercised_ids`` (the item ids whose request the method acted on) to the stamps.

    ``requests`` maps each item id to its ``(context, continuation)``. Only for
    per-request counting, and only when some item was not exercised (else every
    item is).
    """
    activity = activity_of(backend)
    if activity is None or activity.footprint.counting is not Counting.PER_REQUEST:
        return list(measurements)
    ids = [i for i, (c, y) in requests.items() if request_key(c, y) in activity.exercised_keys]
    if len(ids) == len(requests):
        return list(measurements)
    out = []
    for m in measurements:
        entry = m.details.get(KEY)
        if isinstance(entry, Mapping):
            m = dataclasses.replace(m, details={**m.details, KEY: {**entry, "exercised_ids": ids}})
        out.append(m)
    return out


def restrict(measurement: Measurement) -> Measurement | None:
    """``measurement`` gated on its exercised items only (``exercised_only``), else ``None``.

    Applies where the stamp lists ``exercised_ids`` and the value is the mean of
    per-item samples with ids: value, samples and every slice are recomputed
    over the exercised items (a slice left without any is dropped). A metric
    of another form (a token-level percentile) cannot be restricted: ``None``.
    """
    entry = measurement.details.get(KEY)
    ids = entry.get("exercised_ids") if isinstance(entry, Mapping) else None
    if ids is None:
        return None
    kept = _mean_over(measurement, set(map(str, ids)))
    if kept is None:
        return None
    breakdown = {}
    for name, part in measurement.breakdown.items():
        sub = _mean_over(part, set(map(str, ids)))
        if sub is not None:
            breakdown[name] = sub
    return dataclasses.replace(kept, breakdown=breakdown)


def _mean_over(m: Measurement, keep: set[str]) -> Measurement | None:
    samples, ids = m.samples, m.sample_ids
    if not samples or ids is None:
        return None
    if abs(sum(samples) / len(samples) - m.value) > 1e-9 * max(1.0, abs(m.value)):
        return None  # not a mean of its samples
    pairs = [(s, i) for s, i in zip(samples, ids, strict=True) if i in keep]
    if not pairs:
        return None
    values = tuple(s for s, _ in pairs)
    return dataclasses.replace(
        m, value=sum(values) / len(values), samples=values, sample_ids=tuple(i for _, i in pairs)
    )


def gate_on_exercised(measurements: Sequence[Measurement]) -> tuple[list[Measurement], list[str]]:
    """``exercised_only``: every restrictable measurement restricted, and one note per tier."""
    out: list[Measurement] = []
    restricted: dict[str, list[str]] = {}
    kept_as_is: dict[str, list[str]] = {}
    for m in measurements:
        entry = m.details.get(KEY)
        if not isinstance(entry, Mapping) or entry.get("exercised_ids") is None:
            out.append(m)
            continue
        tier = m.name.partition(".")[0]
        narrowed = restrict(m)
        if narrowed is None:
            kept_as_is.setdefault(tier, []).append(m.name)
            out.append(m)
        else:
            restricted.setdefault(tier, []).append(m.name)
            out.append(narrowed)
    notes = []
    for tier, names in restricted.items():
        note = f"{tier}: exercised_only: {', '.join(names)} gated on the exercised items only"
        if kept_as_is.get(tier):
            note += f"; {', '.join(kept_as_is[tier])} are not per-item means, gated on all items"
        notes.append(note)
    return out, notes


def exercise_of(measurement: Measurement) -> Exercise | None:
    """The stamp of one measurement, if any."""
    entry = measurement.details.get(KEY)
    return Exercise.from_dict(entry) if isinstance(entry, Mapping) else None


def tier_exercise(measurements: Sequence[Measurement]) -> dict[str, Exercise]:
    """Per tier, its requests and how many were exercised, over its distinct tests.

    Measurements of one test share one stamp; the tier's is their sum (for
    at-load and per-call counting: the largest count, as every test ran the
    same changed model).
    """
    stamps: dict[str, dict[str, Exercise]] = {}
    for m in measurements:
        found = exercise_of(m)
        if found is not None:
            tier = m.name.partition(".")[0]
            key = json.dumps(found.to_dict(), sort_keys=True)
            stamps.setdefault(tier, {})[key] = found
    return {tier: _merged(list(distinct.values())) for tier, distinct in stamps.items()}


def _merged(stamps: list[Exercise]) -> Exercise:
    """One tier's distinct stamps as one exercise (a stack's parts merged part by part)."""
    first = stamps[0]
    per_request = first.counting == Counting.PER_REQUEST.value
    widths = {len(s.parts) for s in stamps}
    parts = (
        tuple(_merged([s.parts[i] for s in stamps]) for i in range(len(first.parts)))
        if len(widths) == 1
        else first.parts
    )
    return dataclasses.replace(
        first,
        acted=sum(s.acted for s in stamps) if per_request else max(s.acted for s in stamps),
        requests=sum(s.requests for s in stamps),
        exercised=sum(s.exercised for s in stamps),
        parts=parts,
    )


def _generates_through_speculation(tier: str) -> bool:
    """Whether ``tier`` certainly generated through a speculative decoder: the speculative
    and generation tiers generate greedily through the build; elsewhere scoring runs the
    target alone."""
    return tier in (SPECULATIVE_TIER, GENERATION_TIER)


def not_exercised(measurements: Sequence[Measurement]) -> dict[str, Exercise]:
    """The tiers on whose requests the compression (a stack: one of its parts) never acted
    (NOT EXERCISED). A speculative decoder idle on a tier other than the speculative
    one is noted (:func:`notes`), not counted: that tier may have only scored."""
    return {
        tier: e
        for tier, e in tier_exercise(measurements).items()
        if e.idle(_generates_through_speculation(tier))
    }


def reason(tier: str, exercise: Exercise) -> NotExercised:
    """Why ``tier`` is NOT EXERCISED and what to do: its typed record (a stack: its first
    idle part's)."""
    idle = exercise.idle(_generates_through_speculation(tier))
    if exercise.parts and idle:
        part = reason(tier, idle[0])
        return NotExercised(tier=tier, why=f"{exercise.recipe}: {part.why}")
    if exercise.generation_only:
        what = f"{exercise.recipe} proposed no draft token on the tier's generations"
        fix = "check that the build generates through its drafter (docs/speculative.md)"
    elif exercise.counting == Counting.PER_REQUEST.value:
        what = f"{exercise.recipe} acted on none of the {exercise.requests} request(s)"
        fix = "give longer prompts or a smaller budget"
    elif exercise.counting == Counting.PER_CALL.value:
        what = f"{exercise.recipe} replaced none of the tier's attention calls"
        fix = "check that the model selects attention through transformers' interface"
    else:
        what = f"{exercise.recipe} changed no module of the loaded model ({exercise.unit}: 0)"
        fix = "check that the quantization kernels are installed and the recipe applies"
    return NotExercised(tier=tier, why=f"{what}; {fix}")


def notes(measurements: Sequence[Measurement]) -> list[str]:
    """Report notes: tiers NOT EXERCISED, and partly exercised ones with their share."""
    out: list[str] = []
    for tier, e in tier_exercise(measurements).items():
        if e.idle(_generates_through_speculation(tier)):
            out.append(reason(tier, e).line)
        elif e.none:  # only a speculative part idle, on a tier that may have only scored
            idle = ", ".join(p.recipe for p in e.idle(True))
            out.append(
                f"{tier}: {idle} did not act (speculative decoding runs on generation;"
                " this tier's scoring ran the target alone)"
            )
        elif e.counting == Counting.PER_REQUEST.value and e.exercised < e.requests:
            out.append(f"{tier}: {e.describe()}; its metrics include the requests it never touched")
    return out


__all__ = [
    "KEY",
    "attach",
    "counts",
    "exercise_of",
    "gate_on_exercised",
    "mark_exercised_ids",
    "not_exercised",
    "notes",
    "reason",
    "restrict",
    "tier_exercise",
]

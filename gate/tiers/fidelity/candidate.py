"""Measuring a candidate: the pack verified, scored, aggregated, exercise-stamped.

The assembly of :mod:`pack_scores <gate.tiers.fidelity.pack_scores>` and
:mod:`aggregate <gate.tiers.fidelity.aggregate>`: a KV-cache backend scores in
chunks, and the measurements say how many scored prompts the compression
touched (:mod:`gate.tiers.exercised`)."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext

from gate.measurement import Measurement
from gate.models.backends.base import Backend
from gate.models.backends.capabilities import ChunksScoring
from gate.store.reference import PromptLike, ReferencePack
from gate.tiers import exercised
from gate.tiers.fidelity.aggregate import measurements
from gate.tiers.fidelity.pack_scores import score_pack, uses_tail_samples, verify_candidate
from gate.tiers.fidelity.scoring import Progress
from gate.tiers.fidelity.settings import FidelitySettings


def measure(
    backend: Backend,
    pack: ReferencePack,
    settings: FidelitySettings,
    *,
    prompts: Sequence[PromptLike] | None = None,
    baseline_backend: Backend | None = None,
    progress: Progress | None = None,
) -> list[Measurement]:
    """The fidelity measurements of ``backend`` against ``pack`` (verified first).

    A backend that scores through a KV-cache method scores in chunks of
    ``settings.cache_chunk_size``; the measurements then say how many of the
    scored prompts the method touched (:mod:`gate.tiers.exercised`).
    """
    verify_candidate(backend, pack, prompts)
    before = exercised.counts(backend)
    chunking = (
        backend.scoring_chunk(settings.cache_chunk_size)
        if isinstance(backend, ChunksScoring)
        else nullcontext()
    )
    with chunking:
        results = score_pack(
            backend, pack, settings, baseline_backend=baseline_backend, progress=progress
        )
    interval = baseline_backend is None and any(r.interval for r in results)
    out = measurements(
        results,
        k=pack.k,
        exact=baseline_backend is not None,
        tail_mass_mean=pack.mean_tail_mass(results[-1].index),
        m=pack.m if uses_tail_samples(backend) or baseline_backend is not None or interval else 0,
        recording=pack.recording_summary(),
        context_tiers=settings.context_tiers,
        interval=interval,
    )
    stamped = exercised.attach(out, backend, before)
    requests = {
        r.meta.id: (pack.prompt_ids(r.index).tolist(), pack.output_ids(r.index).tolist())
        for r in results
    }
    return exercised.mark_exercised_ids(stamped, backend, requests)

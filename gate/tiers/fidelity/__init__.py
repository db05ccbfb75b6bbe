"""The fidelity tier: record a reference pack, then measure a candidate against it.

``record`` runs the *baseline*: greedy outputs on the fidelity prompts, then one
batched teacher-forced pass over ``prompt + output`` for the top-k log-probs,
tail masses and sampled tail tokens, written as a reference pack
(:mod:`gate.store.reference`).

``measure`` runs the *candidate*: the same batched teacher-forced pass over the
pack's ``prompt + reference output`` (never the baseline model, unless a live
baseline is given for the exact KL), then the metrics of
:mod:`gate.metrics.fidelity` per prompt, aggregated into measurements with
per-prompt samples (``sample_ids`` = prompt ids) and breakdowns
``category:<c>`` and ``length:<t>``, plus ``context:<budget>`` with the
long-context prompts (``context_tiers``, :mod:`gate.data.long_context`).

Both sides batch the same way (:func:`batches`: by decreasing total length,
fixed size), so a baseline scored against its own pack sees bitwise the same
numbers: CGA exactly 1 and KL exactly 0.

The package, by concern:

* :mod:`~gate.tiers.fidelity.settings`: the ``[tiers.fidelity]`` table;
* :mod:`~gate.tiers.fidelity.prompts`: the prompt set and its token ids;
* :mod:`~gate.tiers.fidelity.scoring`: batched teacher-forced scoring;
* :mod:`~gate.tiers.fidelity.recording`: the baseline's reference pack;
* :mod:`~gate.tiers.fidelity.pack_scores`: a candidate's per-prompt scores against it;
* :mod:`~gate.tiers.fidelity.slices`: the breakdowns' prompt groups;
* :mod:`~gate.tiers.fidelity.aggregate`: per-prompt scores into measurements;
* :mod:`~gate.tiers.fidelity.candidate`: ``measure``, the assembly of the last three.

This module is the tier's face: the names the suite, the session and the
scripts use.
"""

from __future__ import annotations

from gate.tiers.fidelity.aggregate import SLICED_POINT_STATS, kl_label, measurements
from gate.tiers.fidelity.candidate import measure
from gate.tiers.fidelity.pack_scores import (
    PromptScores,
    score_pack,
    uses_tail_samples,
    verify_candidate,
)
from gate.tiers.fidelity.prompts import encode, load_prompts, long_context_prompts
from gate.tiers.fidelity.recording import NO_TAIL_SERVED, record, recording_provenance
from gate.tiers.fidelity.scoring import Progress, batches, score_rows, scored_rows
from gate.tiers.fidelity.settings import CGA_K, TIER, FidelitySettings

__all__ = [
    "CGA_K",
    "NO_TAIL_SERVED",
    "SLICED_POINT_STATS",
    "TIER",
    "FidelitySettings",
    "Progress",
    "PromptScores",
    "batches",
    "encode",
    "kl_label",
    "load_prompts",
    "long_context_prompts",
    "measure",
    "measurements",
    "record",
    "recording_provenance",
    "score_pack",
    "score_rows",
    "scored_rows",
    "uses_tail_samples",
    "verify_candidate",
]

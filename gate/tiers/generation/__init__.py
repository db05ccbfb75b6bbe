"""The generation tier: the candidate's free-running answers against the baseline's.

The baseline's answers are those its reference pack already stores (the
fidelity tier's greedy outputs, :mod:`gate.store.reference`): the baseline is
never generated again. The candidate answers the same prompt token ids
greedily, up to the pack's cap (``max_new_tokens``), batched as the pack was
recorded (the fidelity tier's ``batch_size``), so the baseline build itself
reproduces its pack token for token. The per-prompt values of
:mod:`gate.metrics.generation` become one :class:`~gate.measurement.Measurement`
per metric, with per-prompt samples (``sample_ids`` = prompt ids) and
breakdowns ``category:<c>`` and ``length:<t>``.

What the pack says of the baseline's answer ``j``: the stored tokens ``b``
(``n'_b``), the length it generated ``n_b`` (``n_generated``; for a pack
older than version 3, ``n'_b`` unless the recorder cut it, else unknown) and
whether ``b`` is the whole answer (not cut). Which prompts each metric uses:

* divergence position: every prompt with a stored token;
* exact match, length ratio, stop rate: every prompt whose ``n_b`` is known;
* loop rate, distinct-2: every prompt whose whole answer is stored (the
  detector and the bigrams need the answer's tail).

The baseline's values on those prompts come from the pack too (its divergence
from itself is ``min(n'_b, H)``, its exact match 1, its log length ratio 0): in run
mode each candidate measurement carries them under
``details["paired_reference"]`` (:mod:`gate.gating.compare`: the in-session
reference), so a baseline recorded before this tier existed gates it on its
pack alone; in record mode they are the baseline's own measurements.

With a seed (``[tiers.generation] seed``), both builds' answers are coupled
samples (:mod:`gate.models.backends.sampling`) instead: the baseline draws its
own when it is recorded and stores them (:class:`SampledAnswers`, artifact
:data:`SAMPLED_ARTIFACT`), and they stand in for the pack's greedy answers,
each whole, on both sides.

The worst divergences (the earliest, relative to the stored answer) go to
``details["examples"]`` of ``generation.exact_match`` (keys
:class:`gate.metrics.catalog.generation.GenerationDetail`): the prompt, the common
prefix and the two answers from the divergence on, as text, for the reports.

The package, by concern:

* :mod:`~gate.tiers.generation.settings`: the ``[tiers.generation]`` table;
* :mod:`~gate.tiers.generation.answers`: the stored answers and a build's own;
* :mod:`~gate.tiers.generation.pairing`: per-prompt values on both sides, and
  their measurements;
* :mod:`~gate.tiers.generation.examples`: the worst divergences;
* :mod:`~gate.tiers.generation.sampled`: the baseline's sampled answers and the
  checks on a run's sampling;
* :mod:`~gate.tiers.generation.candidate`: ``measure``;
* :mod:`~gate.tiers.generation.recording`: ``record``.

This module is the tier's face: the names the suite, the session and the
scripts use.
"""

from __future__ import annotations

from gate.tiers.generation.answers import StoredAnswer, answer, draws_its_own, stored_answers
from gate.tiers.generation.candidate import measure, measure_answers
from gate.tiers.generation.examples import DivergenceExample, worst_divergences
from gate.tiers.generation.pairing import PairedValues, paired_values, to_measurements
from gate.tiers.generation.recording import record
from gate.tiers.generation.sampled import (
    SAMPLED_ARTIFACT,
    SampledAnswers,
    check_sampling_fits,
    no_sampled_answers,
    sampled_facts,
)
from gate.tiers.generation.settings import TIER, GenerationSettings

__all__ = [
    "SAMPLED_ARTIFACT",
    "TIER",
    "DivergenceExample",
    "GenerationSettings",
    "PairedValues",
    "SampledAnswers",
    "StoredAnswer",
    "answer",
    "check_sampling_fits",
    "draws_its_own",
    "measure",
    "measure_answers",
    "no_sampled_answers",
    "paired_values",
    "record",
    "sampled_facts",
    "stored_answers",
    "to_measurements",
    "worst_divergences",
]

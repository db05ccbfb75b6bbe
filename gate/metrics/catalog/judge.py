"""Judge-tier metric declarations (torch-free); the tier is :mod:`gate.tiers.judge`.

* ``judge.elo_delta`` — the candidate's Elo delta against the baseline from
  pairwise LLM judgements (docs/judge.md "The score"). Its per-sample values are
  *centred scores* per scored prompt: win ``+1/2``, tie ``0``, loss ``-1/2``, so
  their mean is ``p - 1/2`` with ``p = (w + t/2) / (w + r + t)``; the value is
  ``D(p) = -400 log10(1/p - 1)`` (clamped to half a game at ``p`` = 0 or 1). The
  ideal is 0 (the baseline against itself); the core tests "worse" with a paired
  bootstrap of the centred scores against 0 and maps its interval through ``D``
  (``MetricSpec.elo_samples``).
* ``judge.validity`` — 1 per prompt whose candidate output the judges do not call
  corrupted, else 0; paired by prompt id with the baseline's own validity, stored
  when the baseline was recorded, and compared with McNemar's exact test.
* ``judge.swap_inconsistency`` — share of the judged (non-identical) pairs whose
  verdict changed with the order of the replies (excluded from the score).
* ``judge.disagreement`` — with two or more judges, share of the decidable pairs
  on which they disagree (the stability gate's rate; above its bound the tier is
  UNSTABLE and gives no verdict).

The two rates describe the judges, not the build: they are reported, not gated
by default.
"""

from __future__ import annotations

from gate.metrics.metric_spec import MetricSpec, SampleKind

#: The tier these metrics belong to (the part of each name before the dot).
TIER = "judge"

# Names other modules refer to: every one is a spec of :data:`SPECS`.
ELO_DELTA = "judge.elo_delta"
VALIDITY = "judge.validity"
SWAP_INCONSISTENCY = "judge.swap_inconsistency"
DISAGREEMENT = "judge.disagreement"

SPECS: tuple[MetricSpec, ...] = (
    MetricSpec(
        "judge.elo_delta",
        "Elo",
        True,
        SampleKind.PAIRED_SCORE,
        "Elo delta of the candidate against the baseline from pairwise LLM judgements, "
        "D = -400 log10(1/p - 1), p = (wins + ties/2) / scored prompts",
        ideal=0.0,
        elo_samples=True,
    ),
    MetricSpec(
        "judge.validity",
        "ratio",
        True,
        SampleKind.PAIRED_BINARY,
        "share of outputs the judges do not call corrupted (empty, looping, scrambled)",
    ),
    MetricSpec(
        "judge.swap_inconsistency",
        "ratio",
        False,
        SampleKind.POINT,
        "share of judged pairs whose verdict changed when the replies swapped places",
        ideal=0.0,
    ),
    MetricSpec(
        "judge.disagreement",
        "ratio",
        False,
        SampleKind.POINT,
        "share of decidable pairs on which the judges of the panel disagree",
        ideal=0.0,
    ),
)


class JudgeDetail:
    """Keys of the judge tier's ``Measurement.details`` that the reports read."""

    #: Per judge: name, family, model_id, calls, cache_hits, tokens, parse_failures ...
    JUDGES = "judges"
    #: Counts over pairs: pairs, identical, wins, losses, ties, swap_inconsistent ...
    TALLY = "tally"
    #: The stability gate: stable, rate, bound, reason.
    STABILITY = "stability"
    #: Versions of the pairwise and validity templates.
    TEMPLATES = "templates"
    #: Example pairs: prompt, both answers, every judge's verdicts.
    EXAMPLES = "examples"
    #: The tier's own Elo estimate: wins, losses, ties, score, delta, ci, clamped ...
    ELO = "elo"
    #: The candidate's judged answers (``id, category, length, prompt, prompt_tokens,
    #: text, tokens``): a round robin among several candidates judges them pairwise.
    OUTPUTS = "candidate_outputs"

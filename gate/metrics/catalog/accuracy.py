"""Metric specs of the accuracy tier (definitions in docs/metrics.md "Accuracy", "Multiple choice").

``accuracy.perplexity`` is ``PAIRED_SCORE``: its samples are the mean NLL
(nats/token) of each sliding window, and both sides score the very same token
windows (the baseline's tokenizer is checked by the store), so a paired
bootstrap of the per-window difference says whether a rise is more than
window-to-window variation; a ``POINT`` metric would gate on the value alone
and flap on small corpora. The value itself is the corpus perplexity
``exp(token-weighted mean NLL)``.

The MCQ metrics have one sample per question with ``sample_ids`` = question
ids, so a candidate is paired with the baseline question by question. Flips,
all-flips and choice KL are computed against the baseline's own per-question
results (ideal 0); the baseline records them against itself (all zero).

``accuracy.gen_exact_match``, ``accuracy.gen_f1`` and ``accuracy.gen_flips`` come from generative
lm-eval tasks (``gate import lm-eval``, :mod:`gate.data.lmeval_generative`),
one sample per document; the other per-document metrics of such a file
(``accuracy.gen_<metric>``) get their spec from the file and are reported, not
gated, unless listed here.
"""

from __future__ import annotations

from gate.metrics.metric_spec import MetricSpec, SampleKind

#: The tier these metrics belong to (the part of each name before the dot).
TIER = "accuracy"

# Names other modules refer to: every one is a spec of :data:`SPECS`.
PERPLEXITY = "accuracy.perplexity"
MCQ_ACC = "accuracy.mcq_acc"
MCQ_ACC_NORM = "accuracy.mcq_acc_norm"
FLIPS = "accuracy.flips"
ALL_FLIPS = "accuracy.all_flips"
CHOICE_KL = "accuracy.choice_kl"
TOP_MARGIN_MEAN = "accuracy.top_margin_mean"
GEN_FLIPS = "accuracy.gen_flips"

SPECS: tuple[MetricSpec, ...] = (
    MetricSpec(
        name="accuracy.perplexity",
        unit="ppl",
        higher_is_better=False,
        sample_kind=SampleKind.PAIRED_SCORE,
        description="sliding-window perplexity of a text corpus (samples: per-window mean NLL)",
        log_samples=True,
    ),
    MetricSpec(
        name="accuracy.mcq_acc",
        unit="fraction",
        higher_is_better=True,
        sample_kind=SampleKind.PAIRED_BINARY,
        description="multiple-choice accuracy, argmax of summed option log-likelihood",
    ),
    MetricSpec(
        name="accuracy.mcq_acc_norm",
        unit="fraction",
        higher_is_better=True,
        sample_kind=SampleKind.PAIRED_BINARY,
        description="multiple-choice accuracy, log-likelihood divided by option length in characters",
    ),
    MetricSpec(
        name="accuracy.flips",
        unit="fraction",
        higher_is_better=False,
        sample_kind=SampleKind.PAIRED_BINARY,
        description="share of questions whose correctness changed against the baseline",
        ideal=0.0,
    ),
    MetricSpec(
        name="accuracy.all_flips",
        unit="fraction",
        higher_is_better=False,
        sample_kind=SampleKind.PAIRED_BINARY,
        description="share of questions whose chosen option changed against the baseline",
        ideal=0.0,
    ),
    MetricSpec(
        name="accuracy.choice_kl",
        unit="nats",
        higher_is_better=False,
        sample_kind=SampleKind.PAIRED_SCORE,
        description="KL(baseline || candidate) of the softmax over each question's options",
        ideal=0.0,
    ),
    MetricSpec(
        name="accuracy.top_margin_mean",
        unit="probability",
        higher_is_better=True,
        sample_kind=SampleKind.PAIRED_SCORE,
        description="mean p(best option) - p(second best option); shrinks as a build loses confidence",
    ),
    MetricSpec(
        name="accuracy.gen_exact_match",
        unit="fraction",
        higher_is_better=True,
        sample_kind=SampleKind.PAIRED_BINARY,
        description="exact match of a generative lm-eval task's extracted answer, per document",
    ),
    MetricSpec(
        name="accuracy.gen_f1",
        unit="score",
        higher_is_better=True,
        sample_kind=SampleKind.PAIRED_SCORE,
        description="token F1 of a generative lm-eval task's answer against the reference, per document",
    ),
    MetricSpec(
        name="accuracy.gen_flips",
        unit="fraction",
        higher_is_better=False,
        sample_kind=SampleKind.PAIRED_BINARY,
        description="share of a generative task's documents whose 0/1 score changed against the baseline",
        ideal=0.0,
    ),
)

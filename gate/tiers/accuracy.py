"""The accuracy tier: sliding-window perplexity and multiple choice, with flips.

Workload only: it turns a :class:`~gate.models.backends.base.Backend` plus
:class:`AccuracySettings` into model scores, and hands the numbers to the pure
functions of :mod:`gate.metrics.accuracy` (definitions in docs/metrics.md "Accuracy").

* Perplexity: the corpus is tokenized once (:meth:`Backend.encode_text`), cut
  into :func:`~gate.metrics.accuracy.sliding_windows`, and each window is one
  ``ScoreRequest(context = earlier tokens of the window, continuation = its new
  tokens)``, so every token is scored once with up to ``window - stride`` tokens
  of context.
* Multiple choice: tokenized as lm-evaluation-harness does for causal models
  (trailing spaces of the context move to the continuation; the continuation
  is ``encode(context + option)`` minus the ``encode(context)`` prefix). When
  every option of a question is a single token, the question costs ONE forward
  pass: the context is scored once with the full next-token distribution and the
  options' log-probs are read from it. Otherwise every option is a
  continuation, batched through :meth:`Backend.score`.
* Flips etc. need the baseline's per-question results: :func:`mcq_measurements`
  takes them as parsed :class:`~gate.metrics.accuracy.QuestionResult` objects and
  pairs them by question id. Their file (the ``mcq`` artifact) is the store's
  (:mod:`gate.store.mcq_results`): the suite writes it in record mode and reads it
  back in run mode.
* A broken model (NaN or infinite log-probs) is measured, not refused: such
  tokens count as :data:`~gate.metrics.accuracy.NLL_CAP` nats and such
  questions as unanswered (:mod:`gate.metrics.accuracy`), so the comparison
  reports a critical regression; the counts are in each measurement's details.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

import numpy as np

from gate.data.corpus import load_corpus
from gate.data.mcq import MCQuestion, load_mcq_set
from gate.errors import DataError
from gate.measurement import Measurement
from gate.metrics import accuracy as am
from gate.metrics.catalog import accuracy as accuracy_catalog
from gate.models.backends.base import ScoreRequest, TokenScores
from gate.models.backends.capabilities import exact_full_rows
from gate.progress import task as progress_task
from gate.tiers import exercised

TIER = "accuracy"
#: Questions whose full next-token rows are held in memory at once (single-token path).
_FULL_CHUNK = 32


class Scorer(Protocol):
    """The part of :class:`~gate.models.backends.base.Backend` this tier uses (any Backend is one)."""

    name: str

    def encode_text(self, text: str) -> list[int]: ...

    def score(
        self,
        requests: Sequence[ScoreRequest],
        *,
        top_k: int = 32,
        full: bool = False,
        batch_size: int = 8,
    ) -> list[TokenScores]: ...


@dataclass(frozen=True)
class AccuracySettings:
    """``[tiers.accuracy]`` settings (built with :func:`gate.tiers.registry.build_settings`)."""

    #: Measure perplexity at all.
    perplexity: bool = True
    #: ``heldout``, a .txt/.jsonl path, or ``hf:NAME[:CONFIG[:SPLIT[:FIELD]]]`` (gate.data.corpus).
    perplexity_corpus: str = "heldout"
    #: Tokens the model sees per window.
    perplexity_window: int = 256
    #: Tokens between window starts; each window scores the tokens past the previous one.
    perplexity_stride: int = 128
    #: Corpus tokens used (the first ones); bounds the tier's cost.
    perplexity_max_tokens: int = 8192
    #: MCQ sets: built-in names, JSONL paths, or ``hf:NAME[:CONFIG[:SPLIT[:FORMAT]]]``.
    mcq_sets: tuple[str, ...] = ("arithmetic", "antonyms", "facts")
    #: Questions taken from each set (the first ones), or all.
    mcq_limit: int | None = None
    #: Requests per forward pass.
    batch_size: int = 8

    def __post_init__(self) -> None:
        if self.perplexity_window < 2:
            raise ValueError("perplexity_window must be at least 2")
        if not 1 <= self.perplexity_stride <= self.perplexity_window:
            raise ValueError("perplexity_stride must be between 1 and perplexity_window")
        if self.perplexity_max_tokens < 2:
            raise ValueError("perplexity_max_tokens must be at least 2")
        if self.mcq_limit is not None and self.mcq_limit < 1:
            raise ValueError("mcq_limit must be at least 1")
        if self.batch_size < 1:
            raise ValueError("batch_size must be at least 1")


# --------------------------------------------------------------------------- perplexity


@dataclass(frozen=True)
class WindowScore:
    """Summed NLL (nats, per token capped at ``NLL_CAP``) of one window's scored tokens."""

    nll_sum: float
    n_tokens: int
    #: Tokens whose log-prob was NaN or infinite (counted as ``NLL_CAP``).
    nonfinite: int = 0
    #: Tokens whose NLL exceeded ``NLL_CAP`` (counted as ``NLL_CAP``).
    capped: int = 0


def score_windows(
    backend: Scorer, ids: Sequence[int], *, window: int, stride: int, batch_size: int = 8
) -> list[WindowScore]:
    """Teacher-forced NLL of every sliding window of ``ids`` (one request per window)."""
    windows = am.sliding_windows(len(ids), window, stride)
    requests = [
        ScoreRequest(
            context=list(ids[w.begin : w.score_from]), continuation=list(ids[w.score_from : w.end])
        )
        for w in windows
    ]
    with progress_task("accuracy: perplexity windows", total=len(requests), counted_below=True):
        scores = backend.score(requests, top_k=1, batch_size=batch_size)
    out: list[WindowScore] = []
    for w, s in zip(windows, scores, strict=True):
        lp = np.asarray(s.target_logprobs, dtype=np.float64)
        if lp.shape != (w.n_scored,):
            raise DataError(
                f"backend returned {lp.shape} log-probs for a window of {w.n_scored} tokens",
                "the backend's score() must return one log-prob per continuation token",
            )
        nll = am.token_nll(lp)
        out.append(
            WindowScore(
                nll_sum=float(nll.nll.sum()),
                n_tokens=w.n_scored,
                nonfinite=nll.nonfinite,
                capped=nll.capped,
            )
        )
    return out


def perplexity_measurement(
    scores: Sequence[WindowScore], *, window: int, stride: int, corpus: str
) -> Measurement:
    """``accuracy.perplexity``: value ``exp(sum NLL / N)``, samples per-window mean NLL."""
    value = am.perplexity([s.nll_sum for s in scores], [s.n_tokens for s in scores])
    return Measurement(
        name=accuracy_catalog.PERPLEXITY,
        value=value,
        samples=tuple(s.nll_sum / s.n_tokens for s in scores),
        sample_ids=tuple(f"window-{i:05d}" for i in range(len(scores))),
        details={
            "corpus": corpus,
            "window": window,
            "stride": stride,
            "scored_tokens": sum(s.n_tokens for s in scores),
            "nonfinite_tokens": sum(s.nonfinite for s in scores),
            "capped_tokens": sum(s.capped for s in scores),
            "nll_cap": am.NLL_CAP,
            "samples_are": "mean NLL per window, nats/token",
        },
    )


def measure_perplexity(backend: Scorer, settings: AccuracySettings) -> Measurement:
    """Load the corpus, tokenize, score the windows, build the measurement.

    Through a KV-cache method the measurement says how many windows the
    method touched (:mod:`gate.tiers.exercised`).
    """
    before = exercised.counts(backend)
    # Reading ~8 characters per wanted token is ample for BPE tokenizers.
    text = load_corpus(settings.perplexity_corpus, max_chars=8 * settings.perplexity_max_tokens)
    ids = backend.encode_text(text)[: settings.perplexity_max_tokens]
    scores = score_windows(
        backend,
        ids,
        window=settings.perplexity_window,
        stride=settings.perplexity_stride,
        batch_size=settings.batch_size,
    )
    measurement = perplexity_measurement(
        scores,
        window=settings.perplexity_window,
        stride=settings.perplexity_stride,
        corpus=settings.perplexity_corpus,
    )
    return exercised.attach([measurement], backend, before)[0]


# --------------------------------------------------------------------------- multiple choice


def encode_pair(
    encode: Callable[[str], list[int]], context: str, continuation: str
) -> tuple[list[int], list[int]]:
    """Context and continuation ids, split as lm-evaluation-harness does for causal models."""
    n_spaces = len(context) - len(context.rstrip())
    if n_spaces:
        continuation = context[-n_spaces:] + continuation
        context = context[:-n_spaces]
    context_ids = encode(context)
    whole = encode(context + continuation)
    return context_ids, whole[len(context_ids) :]


@dataclass(frozen=True)
class _Encoded:
    question: MCQuestion
    qid: str
    context: list[int]
    options: list[list[int]]

    @property
    def single_token(self) -> bool:
        return all(len(o) == 1 for o in self.options)


def _encode_question(backend: Scorer, q: MCQuestion, qid: str) -> _Encoded:
    context: list[int] | None = None
    options: list[list[int]] = []
    for j in range(len(q.choices)):
        ctx, cont = encode_pair(backend.encode_text, q.context, q.continuation(j))
        if not cont:
            raise DataError(
                f"question {qid!r} option {j} encodes to no tokens after the context",
                "give options that add text to the question",
            )
        context = ctx if context is None else context
        options.append(cont)
    if not context:
        raise DataError(f"question {qid!r} has an empty context", "give the question text")
    return _Encoded(question=q, qid=qid, context=context, options=options)


def score_questions(
    backend: Scorer, questions: Sequence[MCQuestion], *, batch_size: int = 8, prefix: str = ""
) -> list[am.QuestionResult]:
    """Option log-likelihoods of every question (ids are ``prefix + question.id``).

    Single-token questions cost one request each (full next-token row, read at
    the options' ids) when the backend's full rows are exact; the rest, and
    every question on a backend whose full rows are rebuilt from a top-k (a
    serving engine, ``exact_full_rows = False``), cost one request per option,
    whose log-likelihood is then the option's own target log-prob.
    """
    encoded = [_encode_question(backend, q, prefix + q.id) for q in questions]
    lls: dict[str, list[float]] = {}
    exact_rows = exact_full_rows(backend)
    single = [e for e in encoded if e.single_token and exact_rows]
    multi = [e for e in encoded if not (e.single_token and exact_rows)]
    options = [ScoreRequest(context=e.context, continuation=o) for e in multi for o in e.options]
    label = f"accuracy: MCQ {prefix.rstrip('/')}" if prefix else "accuracy: MCQ"
    with progress_task(f"{label} requests", total=len(single) + len(options), counted_below=True):
        for start in range(0, len(single), _FULL_CHUNK):
            chunk = single[start : start + _FULL_CHUNK]
            reqs = [ScoreRequest(context=e.context, continuation=e.options[0]) for e in chunk]
            scores = backend.score(reqs, top_k=1, full=True, batch_size=batch_size)
            for e, s in zip(chunk, scores, strict=True):
                if s.full_logprobs is None:
                    raise DataError(
                        f"backend {backend.name!r} returned no full distribution",
                        "the MCQ single-token path needs score(..., full=True)",
                    )
                row = np.asarray(s.full_logprobs[0], dtype=np.float64)
                lls[e.qid] = [float(row[o[0]]) for o in e.options]
        scored = backend.score(options, top_k=1, batch_size=batch_size) if options else []
    flat = iter(scored)
    for e in multi:
        lls[e.qid] = [
            float(np.asarray(next(flat).target_logprobs, dtype=np.float64).sum()) for _ in e.options
        ]
    return [
        am.QuestionResult(
            id=e.qid,
            subject=e.question.subject,
            answer=e.question.answer,
            option_logprobs=tuple(lls[e.qid]),
            option_chars=tuple(len(c) for c in e.question.choices),
        )
        for e in encoded
    ]


def load_questions(settings: AccuracySettings) -> list[tuple[str, list[MCQuestion]]]:
    """The configured sets as ``(set name, questions)``; an empty list of sets is refused."""
    if not settings.mcq_sets:
        raise DataError("no MCQ sets configured", "set [tiers.accuracy] mcq_sets")
    out = []
    for spec in settings.mcq_sets:
        if spec.endswith(".jsonl"):
            name = Path(spec).stem
        else:
            name = spec.removeprefix("hf:").replace(":", "-")
        out.append((name, load_mcq_set(spec, limit=settings.mcq_limit)))
    return out


def run_mcq(backend: Scorer, settings: AccuracySettings) -> list[am.QuestionResult]:
    """Score every configured question; ids are ``<set>/<question id>``."""
    results: list[am.QuestionResult] = []
    for name, questions in load_questions(settings):
        results += score_questions(
            backend, questions, batch_size=settings.batch_size, prefix=f"{name}/"
        )
    return results


def mcq_measurements(
    results: Sequence[am.QuestionResult], baseline: Sequence[am.QuestionResult] | None
) -> list[Measurement]:
    """acc, acc_norm, and flips/all-flips/choice KL/top margin against ``baseline``.

    With no baseline (record mode) the results are paired with themselves, so the
    baseline stores flips = all-flips = choice KL = 0 and its own top margins.
    """
    measurements = am.accuracy_measurements(
        [r.id for r in results],
        [r.subject for r in results],
        [r.correct for r in results],
        [r.correct_norm for r in results],
    )
    pairs = am.pair_questions(baseline if baseline is not None else results, results)
    unanswered = sum(r.broken for r in results)
    return [
        replace(m, details={**m.details, "nonfinite_questions": unanswered})
        for m in measurements + am.pair_measurements(pairs)
    ]

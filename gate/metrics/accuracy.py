"""Accuracy-tier metrics: perplexity and multiple choice, baseline against candidate.

Pure functions over numbers (no model, no file). Definitions follow
docs/metrics.md "Accuracy" and "Multiple choice":

* Sliding-window perplexity: ``PPL = exp(sum_t NLL_t / N)`` over every scored
  token ``t`` of the corpus, each token scored exactly once, in the window where
  it is *new* (the stride scheme of the Hugging Face perplexity guide). See
  :func:`sliding_windows` and :func:`perplexity`.
* Multiple choice by log-likelihood (as lm-evaluation-harness, Gao et al. 2021):
  ``LL_j = sum_i log p(cont_j[i] | context, cont_j[:i])`` for option ``j``;
  ``acc`` takes ``argmax_j LL_j``; ``acc_norm`` takes ``argmax_j LL_j / len(choice_j)``
  with the length in characters of the option text.
* Baseline vs candidate per question ("Accuracy is not all you need",
  Dutta et al. 2024): *flips* = share of questions whose correctness changed;
  *all-flips* = share whose predicted option changed (also wrong -> other wrong);
  choice-level KL ``sum_j p_b(j) (log p_b(j) - log p_c(j))`` with
  ``p(j) = softmax_j(LL_j)`` over the options only; top margin
  ``p(best) - p(second best)`` of that same distribution.

Broken models (NaN or infinite log-probabilities) are measured, not refused,
so that they gate as a critical regression like in the fidelity tier:

* a token whose NLL is not finite, or above :data:`NLL_CAP`, counts as
  ``NLL_CAP`` nats (``exp(-50) ~ 2e-22``: no trustworthy mass on the token), so
  perplexity stays finite and far past any bound;
* a question with a non-finite option log-likelihood has no prediction
  (:data:`NO_PREDICTION`): it is answered wrongly, counts as a changed option,
  its choice KL is :data:`CHOICE_KL_CAP` and its top margin 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from gate.errors import DataError
from gate.measurement import Measurement, MeasurementDetail, from_samples
from gate.metrics.catalog import accuracy as accuracy_catalog

#: Edges of the baseline-margin buckets of the flips-vs-margin table.
MARGIN_EDGES: tuple[float, ...] = (0.0, 0.05, 0.1, 0.25, 0.5, 1.0)
#: Largest NLL (nats) one token contributes; a non-finite NLL counts as this.
NLL_CAP: float = 50.0
#: Choice KL (nats) of a question where either side has no finite distribution.
CHOICE_KL_CAP: float = 50.0
#: The "predicted option" of a question whose option log-likelihoods are not finite.
NO_PREDICTION: int = -1


# --------------------------------------------------------------------------- perplexity


@dataclass(frozen=True)
class Window:
    """One window of the sliding-window scheme over a token stream.

    The model sees ``ids[begin:end]``; only ``ids[score_from:end]`` are scored
    (the tokens no earlier window scored), with ``ids[begin:score_from]`` as context.
    """

    begin: int
    score_from: int
    end: int

    @property
    def n_scored(self) -> int:
        """Number of tokens this window scores."""
        return self.end - self.score_from


def sliding_windows(n_tokens: int, window: int, stride: int) -> list[Window]:
    """Windows of at most ``window`` tokens, starting every ``stride`` tokens.

    Window ``w`` covers ``[w*stride, min(w*stride + window, n))`` and scores only
    the tokens past the previous window's end, so every token except the first
    (which has no context) is scored exactly once, with up to ``window - stride``
    tokens of context. ``stride == window`` gives disjoint chunks, whose first
    tokens have no context and are not scored (as in the Hugging Face recipe).
    """
    if window < 2:
        raise DataError(
            f"perplexity window {window} is too small", "use a window of at least 2 tokens"
        )
    if not 1 <= stride <= window:
        raise DataError(
            f"perplexity stride {stride} is outside 1..window ({window})",
            "choose 1 <= stride <= window (e.g. stride = window / 2)",
        )
    if n_tokens < 2:
        raise DataError(
            f"perplexity corpus has {n_tokens} token(s)", "give a corpus of at least 2 tokens"
        )
    out: list[Window] = []
    prev_end = 0
    for begin in range(0, n_tokens, stride):
        end = min(begin + window, n_tokens)
        # The very first token cannot be predicted: it is context only.
        score_from = max(prev_end, begin + 1)
        out.append(Window(begin=begin, score_from=score_from, end=end))
        prev_end = end
        if end == n_tokens:
            break
    return out


@dataclass(frozen=True)
class TokenNLL:
    """Per-token NLL after capping, and how many tokens were capped."""

    nll: np.ndarray
    #: Tokens whose log-prob was NaN or +-inf (a broken model).
    nonfinite: int
    #: Tokens whose finite NLL exceeded :data:`NLL_CAP`.
    capped: int


def token_nll(logprobs: Sequence[float] | np.ndarray) -> TokenNLL:
    """``min(-logprob, NLL_CAP)`` per token; NaN and +-inf log-probs count as ``NLL_CAP``."""
    lp = np.asarray(logprobs, dtype=np.float64)
    bad = ~np.isfinite(lp)
    nll = np.where(bad, NLL_CAP, -lp)
    over = ~bad & (nll > NLL_CAP)
    return TokenNLL(nll=np.minimum(nll, NLL_CAP), nonfinite=int(bad.sum()), capped=int(over.sum()))


def perplexity(nll_sums: Sequence[float], token_counts: Sequence[int]) -> float:
    """``exp(sum(nll_sums) / sum(token_counts))``: token-weighted, natural log."""
    total = float(sum(token_counts))
    if total <= 0:
        raise DataError("perplexity over zero scored tokens", "give a longer corpus")
    return math.exp(float(sum(nll_sums)) / total)


# --------------------------------------------------------------------------- multiple choice


@dataclass(frozen=True)
class QuestionResult:
    """What one model did on one multiple-choice question.

    ``option_logprobs[j]`` is ``LL_j`` (natural log, summed over the option's
    tokens); ``option_chars[j]`` the character length of option ``j``'s text
    (the acc_norm denominator).
    """

    id: str
    subject: str
    answer: int
    option_logprobs: tuple[float, ...]
    option_chars: tuple[int, ...]

    @property
    def broken(self) -> bool:
        """Whether an option log-likelihood is NaN or infinite (no prediction is made)."""
        return not finite_options(self.option_logprobs)

    @property
    def pred(self) -> int:
        """``argmax_j LL_j`` (first index on ties, as numpy); :data:`NO_PREDICTION` if broken."""
        return predicted_option(self.option_logprobs)

    @property
    def pred_norm(self) -> int:
        """``argmax_j LL_j / chars_j``; :data:`NO_PREDICTION` if broken."""
        lls = np.asarray(self.option_logprobs, dtype=np.float64)
        chars = np.maximum(np.asarray(self.option_chars, dtype=np.float64), 1.0)
        return predicted_option(lls / chars)

    @property
    def correct(self) -> bool:
        """Whether the acc prediction is the answer."""
        return self.pred == self.answer

    @property
    def correct_norm(self) -> bool:
        """Whether the acc_norm prediction is the answer."""
        return self.pred_norm == self.answer

    def to_dict(self) -> dict[str, Any]:
        """JSON form, with the derived prediction kept for readers of the artifact."""
        return {
            "id": self.id,
            "subject": self.subject,
            "answer": self.answer,
            "pred": self.pred,
            "correct": self.correct,
            "option_logprobs": list(self.option_logprobs),
            "option_chars": list(self.option_chars),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> QuestionResult:
        """Parse :meth:`to_dict` output; :class:`DataError` on a malformed entry."""
        try:
            result = cls(
                id=str(data["id"]),
                subject=str(data.get("subject", "general")),
                answer=int(data["answer"]),
                option_logprobs=tuple(float(x) for x in data["option_logprobs"]),
                option_chars=tuple(int(x) for x in data["option_chars"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise DataError(
                f"malformed per-question result {dict(data).get('id', '?')!r}: {exc!r}",
                "re-record the baseline with this gate version",
            ) from None
        if len(result.option_logprobs) < 2 or len(result.option_chars) != len(
            result.option_logprobs
        ):
            raise DataError(
                f"per-question result {result.id!r} has {len(result.option_logprobs)} option "
                f"log-probs and {len(result.option_chars)} lengths",
                "each question needs two or more options with one length each",
            )
        return result


def finite_options(option_logprobs: Sequence[float] | np.ndarray) -> bool:
    """Whether every option log-likelihood is a finite number."""
    return bool(np.all(np.isfinite(np.asarray(option_logprobs, dtype=np.float64))))


def predicted_option(scores: Sequence[float] | np.ndarray) -> int:
    """``argmax_j scores_j`` (first on ties), or :data:`NO_PREDICTION` if a score is not finite."""
    if not finite_options(scores):
        return NO_PREDICTION
    return int(np.argmax(np.asarray(scores, dtype=np.float64)))


def option_distribution(option_logprobs: Sequence[float]) -> np.ndarray:
    """``softmax_j(LL_j)`` over the options only (float64, sums to 1)."""
    lls = np.asarray(option_logprobs, dtype=np.float64)
    if not np.all(np.isfinite(lls)):
        return np.full(lls.shape, np.nan)
    shifted = lls - lls.max()
    p: np.ndarray = np.exp(shifted) / np.exp(shifted).sum()
    return p


def choice_kl(base_logprobs: Sequence[float], cand_logprobs: Sequence[float]) -> float:
    """``KL(p_base || p_cand)`` over the options, in nats (docs/metrics.md "Multiple choice").

    At most :data:`CHOICE_KL_CAP`, which is also the KL when either side has a
    non-finite option log-likelihood.
    """
    if len(base_logprobs) != len(cand_logprobs):
        raise DataError(
            f"choice KL over {len(base_logprobs)} vs {len(cand_logprobs)} options",
            "baseline and candidate must score the same options",
        )
    if not (finite_options(base_logprobs) and finite_options(cand_logprobs)):
        return CHOICE_KL_CAP
    lb = np.asarray(base_logprobs, dtype=np.float64)
    lc = np.asarray(cand_logprobs, dtype=np.float64)
    log_pb = lb - _logsumexp(lb)
    log_pc = lc - _logsumexp(lc)
    return float(min(CHOICE_KL_CAP, max(0.0, np.sum(np.exp(log_pb) * (log_pb - log_pc)))))


def top_margin(option_logprobs: Sequence[float]) -> float:
    """``p(best) - p(second best)`` of :func:`option_distribution`; 0 when it has no distribution."""
    if not finite_options(option_logprobs):
        return 0.0
    p = np.sort(option_distribution(option_logprobs))[::-1]
    return float(p[0] - p[1])


def _logsumexp(x: np.ndarray) -> float:
    m = float(x.max())
    return m + math.log(float(np.exp(x - m).sum()))


@dataclass(frozen=True)
class QuestionPair:
    """Baseline and candidate on one question, with the per-question distances."""

    id: str
    subject: str
    base_correct: bool
    cand_correct: bool
    base_correct_norm: bool
    cand_correct_norm: bool
    flip: bool
    any_flip: bool
    kl: float
    base_margin: float
    cand_margin: float


def pair_questions(
    base: Sequence[QuestionResult], cand: Sequence[QuestionResult]
) -> list[QuestionPair]:
    """Join baseline and candidate results by question id (candidate order).

    Every candidate question must exist in the baseline with the same answer and
    number of options; otherwise the two runs did not see the same set and any
    flip count would be meaningless (:class:`DataError`).
    """
    by_id = {r.id: r for r in base}
    if len(by_id) != len(base):
        raise DataError(
            "baseline per-question results repeat a question id", "re-record the baseline"
        )
    missing = [c.id for c in cand if c.id not in by_id]
    if missing:
        raise DataError(
            f"{len(missing)} question(s) are not in the baseline's results (first: {missing[0]!r})",
            "record the baseline with the same MCQ sets and limit as the candidate run",
        )
    pairs: list[QuestionPair] = []
    for c in cand:
        b = by_id[c.id]
        if b.answer != c.answer or len(b.option_logprobs) != len(c.option_logprobs):
            raise DataError(
                f"question {c.id!r} differs between baseline and candidate (answer or options)",
                "the MCQ set changed since the baseline was recorded; re-record it",
            )
        pairs.append(
            make_pair(
                c.id,
                c.subject,
                b.option_logprobs,
                c.option_logprobs,
                correct=(b.correct, c.correct),
                correct_norm=(b.correct_norm, c.correct_norm),
            )
        )
    return pairs


def make_pair(
    question_id: str,
    subject: str,
    base_logprobs: Sequence[float],
    cand_logprobs: Sequence[float],
    *,
    correct: tuple[bool, bool],
    correct_norm: tuple[bool, bool],
) -> QuestionPair:
    """One :class:`QuestionPair` from both sides' option log-likelihoods and correctness.

    ``any_flip`` compares the predicted options (:func:`predicted_option`; a
    candidate with no prediction always counts); ``flip`` the correctness flags
    (``correct = (baseline, candidate)``).
    """
    return QuestionPair(
        id=question_id,
        subject=subject,
        base_correct=correct[0],
        cand_correct=correct[1],
        base_correct_norm=correct_norm[0],
        cand_correct_norm=correct_norm[1],
        flip=correct[0] != correct[1],
        any_flip=(
            predicted_option(base_logprobs) != predicted_option(cand_logprobs)
            or predicted_option(cand_logprobs) == NO_PREDICTION
        ),
        kl=choice_kl(base_logprobs, cand_logprobs),
        base_margin=top_margin(base_logprobs),
        cand_margin=top_margin(cand_logprobs),
    )


@dataclass(frozen=True)
class MarginBucket:
    """Flip rate among the questions whose *baseline* top margin is in ``[lo, hi)``."""

    lo: float
    hi: float
    n: int
    flips: int

    @property
    def rate(self) -> float | None:
        """``flips / n``, or ``None`` for an empty bucket."""
        return self.flips / self.n if self.n else None

    @property
    def label(self) -> str:
        """``margin:[0.05,0.10)`` style slice name."""
        close = "]" if self.hi >= 1.0 else ")"
        return f"margin:[{self.lo:.2f},{self.hi:.2f}{close}"


def bucket_indices(
    margins: Sequence[float], edges: Sequence[float] = MARGIN_EDGES
) -> list[tuple[float, float, list[int]]]:
    """Indices of ``margins`` in each ``[edges[i], edges[i+1])`` (last bucket closed)."""
    out: list[tuple[float, float, list[int]]] = []
    last = len(edges) - 2
    for i in range(len(edges) - 1):
        lo, hi = edges[i], edges[i + 1]
        idx = [k for k, m in enumerate(margins) if lo <= m < hi or (i == last and m == hi)]
        out.append((lo, hi, idx))
    return out


def flips_by_margin(
    pairs: Sequence[QuestionPair], edges: Sequence[float] = MARGIN_EDGES
) -> list[MarginBucket]:
    """Table of flip rate by baseline-margin bucket (low-margin questions flip first)."""
    margins = [p.base_margin for p in pairs]
    return [
        MarginBucket(lo=lo, hi=hi, n=len(idx), flips=sum(pairs[k].flip for k in idx))
        for lo, hi, idx in bucket_indices(margins, edges)
    ]


# --------------------------------------------------------------------------- measurements


def _subject_groups(subjects: Sequence[str]) -> dict[str, list[int]]:
    groups: dict[str, list[int]] = {}
    for i, subject in enumerate(subjects):
        groups.setdefault(f"subject:{subject}", []).append(i)
    return groups if len(groups) > 1 else {}


def accuracy_measurements(
    ids: Sequence[str],
    subjects: Sequence[str],
    correct: Sequence[bool],
    correct_norm: Sequence[bool] | None,
) -> list[Measurement]:
    """``accuracy.mcq_acc`` (and ``accuracy.mcq_acc_norm``): 0/1 per question, paired by id.

    Breakdown per subject (``subject:<name>``) when there is more than one.
    """
    groups = _subject_groups(subjects)
    out = [from_samples(accuracy_catalog.MCQ_ACC, [float(c) for c in correct], ids, groups=groups)]
    if correct_norm is not None:
        out.append(
            from_samples(
                accuracy_catalog.MCQ_ACC_NORM, [float(c) for c in correct_norm], ids, groups=groups
            )
        )
    return out


def pair_measurements(
    pairs: Sequence[QuestionPair], edges: Sequence[float] = MARGIN_EDGES
) -> list[Measurement]:
    """Flips, all-flips, choice KL and candidate top margin, per question, paired by id.

    ``accuracy.flips`` also carries the flips-by-baseline-margin table, as
    ``margin:[lo,hi)`` breakdown slices and in ``details["by_margin"]``, and the
    McNemar counts of the acc change (``b`` = right->wrong, ``c`` = wrong->right).
    """
    if not pairs:
        raise DataError("no questions to compare", "the MCQ sets produced no questions")
    ids = [p.id for p in pairs]
    subjects = [p.subject for p in pairs]
    groups = _subject_groups(subjects)
    flip_groups = dict(groups)
    table = flips_by_margin(pairs, edges)
    for bucket, (_, _, idx) in zip(
        table, bucket_indices([p.base_margin for p in pairs], edges), strict=True
    ):
        if idx:
            flip_groups[bucket.label] = idx
    right_to_wrong = sum(p.base_correct and not p.cand_correct for p in pairs)
    wrong_to_right = sum(p.cand_correct and not p.base_correct for p in pairs)
    flips = from_samples(
        accuracy_catalog.FLIPS,
        [float(p.flip) for p in pairs],
        ids,
        groups=flip_groups,
        details={
            "right_to_wrong": right_to_wrong,
            "wrong_to_right": wrong_to_right,
            MeasurementDetail.BY_MARGIN: [
                {"lo": b.lo, "hi": b.hi, "n": b.n, "flips": b.flips, "rate": b.rate} for b in table
            ],
        },
    )
    return [
        flips,
        from_samples(
            accuracy_catalog.ALL_FLIPS, [float(p.any_flip) for p in pairs], ids, groups=groups
        ),
        from_samples(accuracy_catalog.CHOICE_KL, [p.kl for p in pairs], ids, groups=groups),
        from_samples(
            accuracy_catalog.TOP_MARGIN_MEAN, [p.cand_margin for p in pairs], ids, groups=groups
        ),
    ]

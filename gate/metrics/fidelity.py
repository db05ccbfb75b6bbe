"""Fidelity metrics: how closely a candidate follows the baseline's own outputs.

Pure functions over numpy arrays; nothing here touches a model or a file.
Definitions are those of docs/metrics.md "Fidelity". For one prompt ``X``
the baseline produced the greedy output ``y = (y_1 .. y_T)``; the candidate is
run teacher-forced on ``X + y`` and gives, at every output position ``i``, a
log-distribution ``log p_c(. | X, y_<i)``. The baseline's distribution at the
same position is known either in full (live baseline) or through a reference
pack: its top-k token ids and log-probabilities plus the log of the remaining
tail mass.

Per position ``i``:

* ``cga_i   = [argmax_v p_c(v) = y_i]`` (Conditional Greedy Agreement of
  "Beyond Proxy Metrics", the CGA paper); ``cga@k_i = [rank_c(y_i) < k]``.
  Ties are broken towards the lower token id (``numpy.argmax`` semantics), so
  rank 0 is exactly the argmax.
* ``KL_i = sum_v p_b(v) (log p_b(v) - log p_c(v))`` — exact when both rows
  are full (:func:`exact_kl`). From a pack, :func:`topk_tail_kl` gives a lower
  bound (the base top-k set ``S`` exactly plus one tail bucket), and
  :func:`sampled_tail_kl` an unbiased estimate with its standard error (``S``
  exactly plus ``m`` tokens drawn from the baseline's tail, see below).
* ``delta_p_i = p_c(y_i) - p_b(y_i)`` (llama.cpp's ``Δp`` of its
  ``--kl-divergence`` mode).

**The sampled tail** (pack format v3). Write ``P = sum_{v not in S} p_b(v)``
and ``Q = sum_{v not in S} p_c(v)`` (both known exactly: ``P`` from the pack,
``Q`` from the candidate's full row) and ``q(v) = p_b(v) / P`` on the tail.
The tail's share of the KL is ``P E_q[-log r(v)]`` with ``r = p_c / p_b``.
The pack stores ``m`` tokens ``v_1 .. v_m`` drawn i.i.d. from ``q``, so
``P mean_j(-log r(v_j))`` is unbiased, but its variance is first-order in the
change (``-log r`` swings both ways around a small mean): on the demo model,
m = 32 left that plain estimate up to 23 % off an 8-bit build's mean KL and
its p99 several times too high. Since ``E_q[r] = Q / P`` is known, ``r - Q / P`` is a control
variate with mean 0; adding it (coefficient 1) gives::

    tail_i = (P - Q) + P mean_j g(r(v_j)),   g(r) = r - 1 - log r >= 0

still unbiased (``E[tail_i] = P - Q + Q - P + P E_q[-log r]``), with a
variance second-order in ``log r`` (``g(r) ~ (log r)^2 / 2``). Its standard
error is ``P sd_j(g) / sqrt(m)`` (sample standard deviation). Where ``P = 0``
(the stored set covers the whole vocabulary) the tail term is exactly 0.

Summary statistics of the per-token KL (mean, median, p90, p95, p99, p99.9,
max) follow llama.cpp's KL-divergence report (``tools/perplexity``): the tail of
this distribution is where a collapse shows first.

Broken candidates: a row with a NaN or ``+inf`` log-probability is *non-finite*.
Such positions count as disagreement (``cga = cga@k = 0``), ``delta_p = -p_b(y_i)``
(no trustworthy mass on the reference token), and ``KL = KL_CAP``. A finite
row that gives zero mass (``-inf``) to a token the baseline finds likely has an
infinite KL; it is capped at ``KL_CAP`` too. Both are counted so that the tier
reports a critical finding instead of crashing or storing ``inf``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

#: Largest per-token KL (nats) a measurement reports. ``exp(-50) ~ 2e-22``: a KL
#: this large means the candidate put (numerically) no mass on a token the
#: baseline predicted, or produced NaN; it is always far past any bound.
KL_CAP: float = 50.0

#: Percentiles reported for the per-token KL distribution, by metric suffix.
KL_PERCENTILES: Mapping[str, float] = {
    "median": 50.0,
    "p90": 90.0,
    "p95": 95.0,
    "p99": 99.0,
    "p999": 99.9,
}

#: Percentiles reported (in details) for the delta-p distribution.
DELTA_P_PERCENTILES: Mapping[str, float] = {
    "p1": 1.0,
    "p5": 5.0,
    "p10": 10.0,
    "median": 50.0,
    "p90": 90.0,
    "p95": 95.0,
    "p99": 99.0,
}


@dataclass(frozen=True)
class PositionScores:
    """Per-position fidelity values of one prompt (all arrays have length ``T``)."""

    cga: np.ndarray
    cga_at_k: np.ndarray
    #: The KL: exact (live baseline), the sampled-tail estimate or the lower bound.
    kl: np.ndarray
    delta_p: np.ndarray
    #: Positions whose candidate row had NaN/+inf (counted as disagreement, KL capped).
    nonfinite: np.ndarray
    #: Positions whose KL was infinite or above the cap before capping.
    capped: np.ndarray
    #: The top-k + tail-bucket lower bound of the KL (:func:`topk_tail_kl`), capped alike.
    kl_bound: np.ndarray
    #: Standard error of each ``kl`` value (0 where it is exact or the bound).
    kl_se: np.ndarray
    #: Lower end of the KL where it is an interval (a served candidate's sampled-tail
    #: estimate, :func:`sampled_tail_kl_interval`; ``kl`` is then its upper end), else ``kl``.
    kl_lower: np.ndarray

    @property
    def length(self) -> int:
        """Number of scored output positions ``T``."""
        return int(self.cga.shape[0])

    def from_position(self, start: int) -> PositionScores:
        """The same scores without the first ``start`` positions."""
        return PositionScores(**{name: value[start:] for name, value in vars(self).items()})


def _as_rows(rows: np.ndarray) -> np.ndarray:
    out = np.asarray(rows)
    if out.ndim != 2:
        raise ValueError(f"expected a [T, V] array of log-probabilities, got shape {out.shape}")
    return out


def nonfinite_rows(logprobs: np.ndarray) -> np.ndarray:
    """``[T]`` True where a full log-probability row holds NaN or ``+inf``.

    ``-inf`` alone is a legitimate log-probability (a masked token) and is not
    flagged here; it shows up as an infinite KL instead.
    """
    peak = _as_rows(logprobs).max(axis=-1)  # NaN propagates through max
    return np.isnan(peak) | np.isposinf(peak)


def target_ranks(logprobs: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """``[T]`` rank of ``targets[i]`` in row ``i``, ties broken towards lower ids.

    ``rank = #{v : l(v) > l(y)} + #{v < y : l(v) = l(y)}``, so rank 0 is exactly
    ``argmax`` (first maximum). NaN rows give meaningless ranks; callers mask them
    with :func:`nonfinite_rows`.
    """
    rows = _as_rows(logprobs)
    y = np.asarray(targets, dtype=np.int64)
    ly = np.take_along_axis(rows, y[:, None], axis=-1)
    above = (rows > ly).sum(axis=-1)
    ranks = above.astype(np.int64)
    tied = (rows == ly).sum(axis=-1) > 1  # another token shares y's value
    for i in np.flatnonzero(tied):
        ranks[i] += int((rows[i, : y[i]] == ly[i, 0]).sum())
    return ranks


def topk_of_rows(logprobs: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` ids and log-probs of every row, descending, ties towards lower ids.

    A stable sort of the negated row keeps tied tokens in id order, so the tie
    rule matches :func:`target_ranks` and ``ids[:, 0]`` is the argmax.
    """
    rows = _as_rows(logprobs)
    top = np.argsort(-rows, axis=-1, kind="stable")[:, : min(k, rows.shape[-1])]
    return top.astype(np.int64), np.take_along_axis(rows, top, axis=-1)


def tail_logmass(logprobs: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """``[T]`` ``log sum_{v not in ids[i]} p(v)`` computed over the full row.

    Summing the tail directly (the excluded tokens' probabilities, accumulated
    in float64) keeps precision when the top-k mass is close to 1, where
    ``log(1 - sum p)`` would cancel. ``-inf`` when the ids cover the whole
    vocabulary. Rows are normalised log-probabilities, so ``exp`` cannot overflow.
    """
    p = np.exp(_as_rows(logprobs))
    np.put_along_axis(p, np.asarray(ids, dtype=np.int64), 0.0, axis=-1)
    with np.errstate(divide="ignore"):
        return np.log(p.sum(axis=-1, dtype=np.float64))


def tail_logmass_from_topk(topk_logprobs: np.ndarray) -> np.ndarray:
    """``[T]`` ``log(1 - sum_k p_k)`` from top-k log-probs alone (no full row).

    For backends that return only top-k (a serving engine). Clamped at ``-inf``
    when rounding makes the top-k mass reach 1.
    """
    mass = np.exp(np.asarray(topk_logprobs, dtype=np.float64)).sum(axis=-1)
    with np.errstate(divide="ignore"):
        return np.log(np.clip(1.0 - mass, 0.0, 1.0))


def _plogp_ratio(logp: np.ndarray, logq: np.ndarray) -> np.ndarray:
    """Elementwise ``p (log p - log q)`` with ``0 log(0/q) = 0`` and ``p log(p/0) = inf``."""
    p = np.exp(logp)
    with np.errstate(invalid="ignore"):
        diff = logp - logq
        out = np.where(p > 0.0, p * np.where(np.isnan(diff), np.inf, diff), 0.0)
    return np.where(np.isneginf(logp), 0.0, out)


def topk_tail_kl(
    base_topk_logprobs: np.ndarray,
    base_tail_logmass: np.ndarray,
    cand_topk_logprobs: np.ndarray,
    cand_tail_logmass: np.ndarray,
) -> np.ndarray:
    """``[T]`` KL(base || candidate) over the base top-k set ``S`` plus one tail bucket.

    With ``P = 1 - sum_{v in S} p_b(v)`` and ``Q = 1 - sum_{v in S} p_c(v)`` (the
    same tokens ``S`` on both sides)::

        KL~_i = sum_{v in S} p_b(v) log(p_b(v) / p_c(v)) + P log(P / Q)

    **Lower bound.** The exact KL splits into the sum over ``S`` (identical in
    both) and ``sum_{v not in S} p_b(v) log(p_b(v) / p_c(v))``. By the log-sum
    inequality, for non-negative ``a_v, b_v``:
    ``sum a_v log(a_v / b_v) >= (sum a_v) log(sum a_v / sum b_v)``; with
    ``a_v = p_b(v), b_v = p_c(v)`` over ``v not in S`` the right side is exactly
    ``P log(P / Q)``. Hence ``KL~_i <= KL_i``, with equality iff ``p_b / p_c``
    is constant on the tail. It is still ``>= 0``: ``KL~`` is the exact KL of
    the two distributions coarsened to ``|S| + 1`` outcomes.

    Inputs: ``base_topk_logprobs``/``cand_topk_logprobs`` are ``[T, k]`` on the
    same ids, ``*_tail_logmass`` are ``[T]`` log tail masses. Computed in float64.
    """
    lb = np.asarray(base_topk_logprobs, dtype=np.float64)
    lc = np.asarray(cand_topk_logprobs, dtype=np.float64)
    tb = np.asarray(base_tail_logmass, dtype=np.float64)
    tc = np.asarray(cand_tail_logmass, dtype=np.float64)
    head = _plogp_ratio(lb, lc).sum(axis=-1)
    tail = _plogp_ratio(tb, tc)
    return np.asarray(head + tail, dtype=np.float64)


def draw_tail_samples(
    logprobs: np.ndarray, topk_ids: np.ndarray, m: int, rng: np.random.Generator
) -> np.ndarray:
    """``[T, m]`` token ids drawn i.i.d. (with replacement) from each row's tail.

    Row ``i``'s tail distribution is ``q_i(v) = p_i(v) / P_i`` for ``v`` not in
    ``topk_ids[i]`` (``P_i`` the tail mass), ``0`` on the top-k. Inverse-CDF
    sampling over the row in float64: ``u ~ U[0, P_i)`` picks the first token
    whose cumulative tail mass exceeds ``u``, so a top-k token (zero width in
    the cumulative sum) is never drawn. With replacement, the draws are
    independent and the plain mean of :func:`sampled_tail_kl` is unbiased with
    the textbook standard error. A row whose tail has no mass at all (every
    token outside the top-k at ``-inf``) contributes exactly 0 to the KL; it gets
    the lowest tail id ``m`` times (stored with its ``-inf`` log-prob, ignored by
    :func:`sampled_tail_kl`). The top-k must leave some token out (``ValueError``).
    """
    rows = _as_rows(logprobs)
    ids = np.asarray(topk_ids, dtype=np.int64)
    out = np.zeros((rows.shape[0], m), dtype=np.int64)
    if m == 0 or rows.shape[0] == 0:
        return out
    if ids.shape[-1] >= rows.shape[-1]:
        raise ValueError("the top-k covers the whole vocabulary: there is no tail to sample")
    p = np.exp(rows.astype(np.float64))
    np.put_along_axis(p, ids, 0.0, axis=-1)
    cumulative = np.cumsum(p, axis=-1)
    mass = cumulative[:, -1]
    u = rng.random((rows.shape[0], m)) * mass[:, None]
    in_top = np.zeros(rows.shape, dtype=bool)
    np.put_along_axis(in_top, ids, True, axis=-1)
    for i in range(rows.shape[0]):
        if not mass[i] > 0.0:
            out[i] = int(np.argmin(in_top[i]))  # the lowest id outside the top-k
            continue
        drawn = np.searchsorted(cumulative[i], u[i], side="right")
        # u < mass, but rounding may put u on the last step: take the last token with mass
        out[i] = np.minimum(drawn, int(np.flatnonzero(p[i] > 0.0)[-1]))
    return out


def _g(log_r: np.ndarray) -> np.ndarray:
    """``g(r) = r - 1 - log r`` from ``log r`` (``+inf`` at ``log r = -inf``)."""
    with np.errstate(invalid="ignore", over="ignore"):
        return np.where(np.isneginf(log_r), np.inf, np.expm1(log_r) - log_r)


def sampled_tail_kl(
    base_topk_logprobs: np.ndarray,
    base_tail_logmass: np.ndarray,
    cand_topk_logprobs: np.ndarray,
    cand_tail_logmass: np.ndarray,
    base_sample_logprobs: np.ndarray,
    cand_sample_logprobs: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """``([T] estimate, [T] standard error)`` of KL(base || candidate) from a v3 pack.

    ``sum_{v in S} p_b(v) log(p_b(v) / p_c(v))`` over the top-k set ``S``
    (exact) plus the control-variate tail estimate of the module docstring::

        tail_i = (P - Q) + P mean_j g(r_j),   g(r) = r - 1 - log r,   r_j = p_c(v_j) / p_b(v_j)

    over the ``m`` sampled tail tokens ``v_j`` (``*_sample_logprobs`` ``[T, m]``,
    the same ids on both sides); standard error ``P sd_j(g) / sqrt(m)``
    (``ddof = 1``; 0 when ``m = 1``, where it is unknown, or ``P = 0``).

    A candidate that gives a sampled token a tiny probability makes ``log r``
    very negative and ``g`` large but finite: rows from ``log_softmax`` are
    finite. A candidate log-prob of ``-inf`` (a backend that masks tokens)
    means zero mass on a token the baseline can emit, an infinite KL: ``g`` is
    then ``+inf`` and :func:`score_positions` caps the position at
    :data:`KL_CAP` and counts it, as it does for the exact KL.
    Computed in float64.
    """
    lb = np.asarray(base_topk_logprobs, dtype=np.float64)
    lc = np.asarray(cand_topk_logprobs, dtype=np.float64)
    big_p = np.exp(np.asarray(base_tail_logmass, dtype=np.float64))
    big_q = np.exp(np.asarray(cand_tail_logmass, dtype=np.float64))
    sb = np.asarray(base_sample_logprobs, dtype=np.float64)
    sc = np.asarray(cand_sample_logprobs, dtype=np.float64)
    head = _plogp_ratio(lb, lc).sum(axis=-1)
    m = sb.shape[-1]
    if m == 0:
        raise ValueError("no sampled tail tokens: use topk_tail_kl (the lower bound)")
    with np.errstate(invalid="ignore", over="ignore"):
        g = _g(sc - sb)
        mean_g = g.mean(axis=-1)
        sd_g = g.std(axis=-1, ddof=1) if m > 1 else np.zeros_like(mean_g)
        has_tail = big_p > 0.0
        tail = np.where(has_tail, (big_p - big_q) + big_p * mean_g, 0.0)
        se = np.where(has_tail & np.isfinite(sd_g), big_p * sd_g / np.sqrt(m), 0.0)
    return np.asarray(head + tail, dtype=np.float64), np.asarray(se, dtype=np.float64)


@dataclass(frozen=True)
class ServedCoverage:
    """What a served top-K answer says of the candidate at one prompt's stored tokens.

    A token the server did not return has ``log p_c(v)`` somewhere in ``(-inf, b]``,
    ``b`` the ``K``-th returned log-prob.
    """

    #: ``[T, k]`` True where the server returned the stored top-k id.
    topk_known: np.ndarray
    #: ``[T, m]`` True where the server returned the sampled tail token.
    sample_known: np.ndarray
    #: ``[T]`` the ``K``-th returned log-prob ``b`` (the bound on every unreturned one).
    bound: np.ndarray


def sampled_tail_kl_interval(
    base_topk_logprobs: np.ndarray,
    base_tail_logmass: np.ndarray,
    cand_topk_logprobs: np.ndarray,
    cand_tail_logmass: np.ndarray,
    base_sample_logprobs: np.ndarray,
    cand_sample_logprobs: np.ndarray,
    served: ServedCoverage,
) -> tuple[np.ndarray, np.ndarray]:
    """``([T] lower, [T] upper)``: the range of :func:`sampled_tail_kl`'s estimate over every
    candidate row consistent with a served top-K answer.

    A serving engine returns the log-probs of its own top ``K`` tokens (and the
    target) per position; any other token ``v`` has ``log p_c(v)`` somewhere in
    ``(-inf, b]``, ``b`` the ``K``-th returned log-prob (``served.bound``). Write the
    estimate token by token (``Q = 1 - sum_{s in S} p_c(s)``)::

        KL^ = sum_{s in S} h_s(p_c(s)) + (P - 1) + (P / m) sum_j g(p_c(v_j) / p_b(v_j))
        h_s(c) = p_b(s) log(p_b(s) / c) + c,   g(r) = r - 1 - log r

    Both ``h_s`` and ``g`` are convex with their minimum where the candidate equals
    the baseline (``h_s' = 1 - p_b(s) / c``, ``g' = 1 - 1 / r``) and tend to ``+inf``
    as the candidate's probability goes to 0. So for an unreturned token the
    **lower end** takes the allowed value nearest the baseline's
    (``c = min(e^b, p_b(s))``, ``r = min(e^b / p_b(v_j), 1)``), and the **upper
    end** is ``+inf``: a token outside the answer may have any probability below
    the ``K``-th, down to 0. Where every stored id and sampled token is returned
    (``served.topk_known``, ``served.sample_known`` ``[T, k]``/``[T, m]`` all True) both
    ends equal :func:`sampled_tail_kl`'s estimate, computed by it on the same inputs.
    The lower end is not the top-k + tail bucket bound (:func:`topk_tail_kl`):
    that bounds the exact KL, this interval bounds the estimate. Float64.
    """
    lb = np.asarray(base_topk_logprobs, dtype=np.float64)
    lc = np.asarray(cand_topk_logprobs, dtype=np.float64)
    sb = np.asarray(base_sample_logprobs, dtype=np.float64)
    sc = np.asarray(cand_sample_logprobs, dtype=np.float64)
    known_s = np.asarray(served.topk_known, dtype=bool)
    known_v = np.asarray(served.sample_known, dtype=bool)
    bound = np.asarray(served.bound, dtype=np.float64)[:, None]
    big_p = np.exp(np.asarray(base_tail_logmass, dtype=np.float64))
    m = sb.shape[-1]
    if m == 0:
        raise ValueError("no sampled tail tokens: use topk_tail_kl (the lower bound)")
    exact, _ = sampled_tail_kl(
        lb, base_tail_logmass, np.where(known_s, lc, bound), cand_tail_logmass, sb, sc
    )
    all_known = known_s.all(axis=-1) & known_v.all(axis=-1)
    # lower end, token by token: an unreturned token at the value nearest the baseline's
    # (with every stored id returned, sum_S h_s + P - 1 is computed as the estimate does:
    # sum_S p_b log(p_b / p_c) + P - Q, Q from the candidate's row, without cancellation)
    c_low = np.where(known_s, lc, np.minimum(bound, lb))
    head = _plogp_ratio(lb, c_low).sum(axis=-1)
    big_q = np.exp(np.asarray(cand_tail_logmass, dtype=np.float64))
    head = np.where(
        known_s.all(axis=-1), head + big_p - big_q, head + np.exp(c_low).sum(axis=-1) + big_p - 1.0
    )
    log_r = np.where(known_v, sc - sb, np.minimum(bound - sb, 0.0))
    with np.errstate(invalid="ignore"):
        tail = np.where(big_p > 0.0, big_p * _g(log_r).mean(axis=-1), 0.0)
    # the estimate is >= 0 (sum_S h_s >= sum_S p_b(s) = 1 - P, g >= 0): so is its lower end
    lower = np.where(all_known, exact, np.maximum(head + tail, 0.0))
    upper = np.where(all_known, exact, np.inf)
    return np.asarray(lower, dtype=np.float64), np.asarray(upper, dtype=np.float64)


def exact_kl(base_logprobs: np.ndarray, cand_logprobs: np.ndarray) -> np.ndarray:
    """``[T]`` exact ``KL_i = sum_v p_b(v) (log p_b(v) - log p_c(v))`` over full rows (float64)."""
    lb = _as_rows(base_logprobs).astype(np.float64)
    lc = _as_rows(cand_logprobs).astype(np.float64)
    return np.asarray(_plogp_ratio(lb, lc).sum(axis=-1), dtype=np.float64)


@dataclass(frozen=True)
class BaselineReference:
    """One prompt's baseline, as a candidate is scored against it.

    ``targets`` ``[T]`` are the baseline's greedy tokens ``y_i``, which the pack
    guarantees equal ``topk_ids[:, 0]`` (so ``p_b(y_i) = exp(topk_logprobs[:, 0])``);
    ``topk_ids``/``topk_logprobs`` ``[T, k]`` its top-k set ``S`` and
    ``tail_logmass`` ``[T]`` ``log P``, ``P = sum_{v not in S} p_b(v)``. A live
    baseline adds its full log-softmax rows ``full_logprobs`` ``[T, V]``; a pack
    (format v3) may add ``m`` tokens drawn from the tail, ``sample_ids`` and
    ``sample_logprobs`` ``[T, m]``.
    """

    targets: np.ndarray
    topk_ids: np.ndarray
    topk_logprobs: np.ndarray
    tail_logmass: np.ndarray
    full_logprobs: np.ndarray | None = None
    sample_ids: np.ndarray | None = None
    sample_logprobs: np.ndarray | None = None


@dataclass(frozen=True)
class ServedRows:
    """Which entries of candidate rows rebuilt from a served top-K answer are the server's."""

    #: ``[T, V]`` True where the server returned the entry.
    returned: np.ndarray
    #: ``[T]`` the ``K``-th returned log-prob: every other entry lies at or below it.
    bound: np.ndarray | None


def score_positions(
    reference: BaselineReference,
    cand_logprobs: np.ndarray,
    *,
    served: ServedRows | None = None,
    cga_k: int = 5,
    logprob_dtype: type[np.floating[Any]] = np.float32,
) -> PositionScores:
    """Score one prompt's candidate rows against the baseline's reference.

    ``cand_logprobs`` ``[T, V]`` are the candidate's full log-softmax rows, one per
    reference token ``y_i`` (``reference.targets``).
    The KL is exact with ``reference.full_logprobs`` (live baseline); otherwise the
    :func:`sampled_tail_kl` estimate when the pack has sampled tail tokens
    (``reference.sample_ids``/``sample_logprobs`` ``[T, m]``, ``m >= 1``), else
    the :func:`topk_tail_kl` lower bound, which is always reported as ``kl_bound``.
    Rows rebuilt from a served top-K answer (``served``: which entries the server
    returned and the K-th returned log-prob) give the estimate as an interval
    (:func:`sampled_tail_kl_interval`): ``kl`` is its upper end, ``kl_lower`` its
    lower end, and ``kl_se`` the estimate's standard error where both ends meet.
    The candidate's tails are summed over its full row. Its log-probs at the
    stored ids are rounded to the precision the pack stores the baseline's in
    (``logprob_dtype``, float32 tails), so both sides of every difference carry
    the same rounding and a baseline scored against its own pack gives exactly 0.
    """
    rows = _as_rows(cand_logprobs)
    y = np.asarray(reference.targets, dtype=np.int64)
    if rows.shape[0] != y.shape[0]:
        raise ValueError(f"{rows.shape[0]} candidate rows for {y.shape[0]} reference tokens")
    bad = nonfinite_rows(rows)
    ranks = target_ranks(rows, y)
    cga = (ranks == 0) & ~bad
    cga_k_hit = (ranks < cga_k) & ~bad

    ids = np.asarray(reference.topk_ids, dtype=np.int64)
    cand_at_ids = np.take_along_axis(rows, ids, axis=-1).astype(logprob_dtype)
    cand_tail = tail_logmass(rows, ids).astype(np.float32)
    bound = topk_tail_kl(reference.topk_logprobs, reference.tail_logmass, cand_at_ids, cand_tail)
    se = np.zeros_like(bound)
    lower: np.ndarray | None = None
    if reference.full_logprobs is not None:
        kl = exact_kl(reference.full_logprobs, rows)
    else:
        kl, se, lower = _pack_kl(
            reference, rows, cand_at_ids, cand_tail, bound, served, logprob_dtype
        )
    delta_p = _delta_p(reference, rows, bad, logprob_dtype)
    capped = ~np.isfinite(kl) | (kl > KL_CAP) | bad
    kl = np.where(capped, KL_CAP, kl)
    low = kl if lower is None else lower
    low = np.where(bad | np.isnan(low), KL_CAP, np.minimum(low, KL_CAP))
    bound = np.where(~np.isfinite(bound) | (bound > KL_CAP) | bad, KL_CAP, bound)
    se = np.where(capped, 0.0, se)
    return PositionScores(
        cga=cga.astype(np.float64),
        cga_at_k=cga_k_hit.astype(np.float64),
        kl=kl.astype(np.float64),
        delta_p=delta_p.astype(np.float64),
        nonfinite=bad,
        capped=capped,
        kl_bound=bound.astype(np.float64),
        kl_se=se.astype(np.float64),
        kl_lower=low.astype(np.float64),
    )


def _pack_kl(
    reference: BaselineReference,
    rows: np.ndarray,
    cand_at_ids: np.ndarray,
    cand_tail: np.ndarray,
    bound: np.ndarray,
    served: ServedRows | None,
    logprob_dtype: type[np.floating[Any]],
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """``(kl, se, lower)`` against a pack: the :func:`sampled_tail_kl` estimate and its
    standard error where the pack has sampled tail tokens, as the interval
    ``[lower, kl]`` of :func:`sampled_tail_kl_interval` for ``served`` rows (``se`` kept
    only where both ends meet); else the top-k + tail-bucket ``bound`` (``se = 0``,
    no lower end)."""
    se = np.zeros_like(bound)
    if reference.sample_ids is None or reference.sample_logprobs is None:
        return bound, se, None
    sample_ids = np.asarray(reference.sample_ids, dtype=np.int64)
    if sample_ids.shape[-1] == 0:
        return bound, se, None
    cand_at_samples = np.take_along_axis(rows, sample_ids, axis=-1).astype(logprob_dtype)
    kl, se = sampled_tail_kl(
        reference.topk_logprobs,
        reference.tail_logmass,
        cand_at_ids,
        cand_tail,
        reference.sample_logprobs,
        cand_at_samples,
    )
    if served is None:
        return kl, se, None
    known = np.asarray(served.returned, dtype=bool)
    sample_known = np.take_along_axis(known, sample_ids, axis=-1)
    topk_known = np.take_along_axis(known, np.asarray(reference.topk_ids, dtype=np.int64), axis=-1)
    if served.bound is None:
        raise ValueError("cand_returned needs cand_bound")
    coverage = ServedCoverage(
        topk_known=topk_known,
        sample_known=sample_known,
        bound=np.asarray(served.bound, dtype=np.float64).astype(logprob_dtype),
    )
    lower, kl = sampled_tail_kl_interval(
        reference.topk_logprobs,
        reference.tail_logmass,
        cand_at_ids,
        cand_tail,
        reference.sample_logprobs,
        cand_at_samples,
        coverage,
    )
    return kl, np.where(lower == kl, se, 0.0), lower


def _delta_p(
    reference: BaselineReference,
    rows: np.ndarray,
    bad: np.ndarray,
    logprob_dtype: type[np.floating[Any]],
) -> np.ndarray:
    """``[T]`` ``delta_p_i = p_c(y_i) - p_b(y_i)``, ``-p_b(y_i)`` on a non-finite row.

    ``p_b(y_i)`` from the live baseline's full row, else ``exp(topk_logprobs[:, 0])``
    with the candidate's ``log p_c(y_i)`` rounded to the pack's ``logprob_dtype``.
    """
    y = np.asarray(reference.targets, dtype=np.int64)
    if reference.full_logprobs is not None:
        full = _as_rows(reference.full_logprobs).astype(np.float64)
        p_base_y = np.exp(np.take_along_axis(full, y[:, None], axis=-1)[:, 0])
    else:
        p_base_y = np.exp(np.asarray(reference.topk_logprobs, dtype=np.float64)[:, 0])
    cand_y = np.take_along_axis(rows, y[:, None], axis=-1)[:, 0]
    if reference.full_logprobs is None:
        cand_y = cand_y.astype(logprob_dtype)
    p_cand_y = np.exp(cand_y.astype(np.float64))
    return np.asarray(np.where(bad, -p_base_y, p_cand_y - p_base_y))


def kl_summary(kl: np.ndarray) -> dict[str, float]:
    """Mean, median, p90, p95, p99, p99.9 and max of pooled per-token KL values.

    Percentiles use numpy's default linear interpolation between order
    statistics. An empty input is a programming error (the tier refuses empty
    prompt sets earlier).
    """
    values = np.asarray(kl, dtype=np.float64)
    if values.size == 0:
        raise ValueError("no KL values to summarise")
    out = {"mean": float(values.mean())}
    for key, q in KL_PERCENTILES.items():
        out[key] = float(np.percentile(values, q))
    out["max"] = float(values.max())
    return out


def delta_p_summary(delta_p: np.ndarray) -> dict[str, float]:
    """Mean, RMS and percentiles (p1 .. p99) of pooled delta-p values."""
    values = np.asarray(delta_p, dtype=np.float64)
    if values.size == 0:
        raise ValueError("no delta-p values to summarise")
    out = {
        "mean": float(values.mean()),
        "rms": float(np.sqrt(np.mean(values**2))),
        "min": float(values.min()),
        "max": float(values.max()),
    }
    for key, q in DELTA_P_PERCENTILES.items():
        out[key] = float(np.percentile(values, q))
    return out

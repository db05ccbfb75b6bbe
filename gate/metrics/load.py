"""The load tier's maths: SLO goodput, the saturation knee and candidate/baseline ratio CIs.

Pure: numbers in, numbers out (no I/O). A served build is swept over offered
request rates ``r_1 < r_2 < ... < r_n`` by GuideLLM; each rate gives one
:class:`RatePoint` (GuideLLM's measurements: achieved request throughput,
TTFT / ITL / end-to-end percentiles, output tokens/s). ``gate`` adds:

SLO and goodput
    A rate *meets the SLO* when GuideLLM's p95 TTFT ``<= ttft_p95_ms`` and its p95
    ITL ``<= itl_p95_ms``. The **goodput** of a sweep is the highest completed
    request throughput ``x`` (requests/s) at which the SLO still holds: with
    ``k`` the highest rate that meets it, each latency ``L`` with bound ``B``
    that rate ``k + 1`` violates crosses it at ``t_L = (B - L_k) / (L_{k+1} -
    L_k)`` (linear between the two rates), and ``goodput = x_k + min_L t_L
    (x_{k+1} - x_k)``. The highest rate meets it: ``goodput = x_n`` (a lower
    bound, :attr:`Capacity.censored`). No rate meets it: ``goodput = 0``. (The
    highest such rate, not the end of the first run of them: on a shared
    machine one noisy low rate must not zero a whole sweep.)

Knee (maximum sustainable rate)
    Rate ``i`` is *sustained* when the server keeps up with it: completed
    throughput ``x_i >= sustain * r_i``. The **maximum sustainable rate** is
    ``x_k`` of the highest sustained rate ``k``; the **knee** is the next
    offered rate ``r_{k+1}`` (``None`` when the highest rate is sustained,
    censored like goodput). A window of ``T`` seconds cuts off the requests
    still running at its end, so a server that keeps up completes about
    ``r (1 - L/T)`` requests/s for requests of latency ``L``: ``sustain`` must
    leave room for that (``0.8`` for 60 s windows of requests of a few
    seconds). A first rate that is not sustained means the server saturates
    before the sweep starts.

Speed at the SLO (the gated figure)
    At an offered rate a build uses ``u = max(TTFT_p95 / B_ttft, ITL_p95 /
    B_itl)`` of its SLO (:func:`slo_load`; ``u <= 1``: the SLO is met, and
    ``u`` is how much of the binding bound the p95 takes). At the same offered
    rate the candidate's **speed ratio at the SLO** is ``q = u_b / u_c``: 2 means
    its binding p95 latency is half the baseline's under the same load, 0.5 that
    it is twice as slow. Unlike goodput, ``q`` is defined at every rate both
    builds completed requests at, so each rate of each repeat gives one paired
    observation (:func:`paired_rates`); goodput is one number per sweep.
    GuideLLM's percentiles are over the requests of a benchmark (each request's
    TTFT and mean ITL), so with few requests the p95 is the slowest one: the
    ratio can be taken at another percentile ``q`` (the tier's
    ``speed_percentile``), ``u = max(TTFT_q / B_ttft, ITL_q / B_itl)``, the
    bounds only weighing the two latencies.

Latencies observed request by request
    A rate's TTFT, ITL and end-to-end percentiles are taken from GuideLLM's
    per-request records, with GuideLLM's own definition
    (:func:`weighted_percentile`): each request's TTFT and end-to-end latency
    weigh 1, its mean ITL ``(t_last - t_first) / (n - 1)`` weighs its ``n - 1``
    later tokens, and ``p_q`` is the smallest value whose share of the total
    weight, counted from below, reaches ``q``. One kind of request is left
    out of TTFT and ITL: one whose token stream the load generator read in one
    burst, after the server had sent it all (its mean ITL below
    ``BURST_ITL_MS`` and its later tokens within ``BURST_SHARE`` of its latency,
    :mod:`gate.loadgen.guidellm`). A client that was not
    scheduled while the tokens arrived (a loaded machine) moves the whole
    decode into that request's TTFT and leaves an ITL of microseconds that no
    server produced; with a handful of requests per rate such a request can be
    the median, and one pair's speed ratio was seen off by 10-100x. The
    point counts them (:attr:`RatePoint.unobserved`); a rate where every
    completed request was read that way has no observed latency
    (:attr:`RatePoint.timed` is false) and gives no pair and no SLO verdict.

Ratios with a confidence interval
    A ratio metric has ``N`` paired observations ``q_i = c_i / b_i`` (candidate
    over baseline, taken back to back so that a shared machine's drift hits
    both): for the rate-level figures (the speed at the SLO, the latency
    percentiles) one per offered rate and repeat, ``N = repeats x rates``; for
    the sweep-level figures (goodput, the maximum sustainable rate, tokens/s at
    saturation) one per repeat, ``N = repeats``. The ratio reported is the
    geometric mean ``exp(mean_i log q_i)`` and its interval the t-interval on
    the log scale, ``exp(mean log q +- t_{(1+level)/2, N-1} s / sqrt(N))``
    (``s``: the sample standard deviation of ``log q_i``), computed from
    ``N >= MIN_PAIRS = 3`` observations (with 2 the t quantile of 1 degree of
    freedom, 12.7 at 95 %, makes any interval span orders of magnitude; with
    fewer the ratio is reported without one).

    The assumption, stated: the ``log q_i`` are independent draws around one
    common log ratio. Pairing removes what the two builds share (the drift of
    the machine while the pair runs); what is left is each benchmark's own
    sampling noise, independent between pairs. Two departures are possible.
    (1) The speedup may vary with the offered rate (queueing past a knee
    magnifies it): the interval then describes the average log speedup over
    the swept rates, and the spread between rates widens it (``s`` includes
    it). (2) Drift slower than one pair correlates neighbouring pairs: the
    interval is then too narrow; the alternating order (baseline first, then
    candidate first, ...) cancels a linear drift within pairs, and more repeats
    spread the pairs in time. Ratios are floored at :data:`RATIO_FLOOR` before
    the log (a build with goodput 0 in a sweep).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

#: Ratios below this are taken as this before the log (a zero goodput).
RATIO_FLOOR = 1e-3
#: The fewest paired observations an interval is computed from (t with >= 2 df).
MIN_PAIRS = 3
#: The percentiles GuideLLM reports that the tier compares.
PERCENTILES: tuple[str, ...] = ("p50", "p95", "p99")


def weighted_percentile(values: Sequence[tuple[float, float]], q: float) -> float:
    """GuideLLM's percentile of weighted values: ``p_q = min{x : W(<= x) / W >= q}``.

    ``values`` are ``(value, weight)`` pairs; equal values pool their weights and
    zero weights drop out (as GuideLLM's ``DistributionSummary.from_values``);
    ``W(<= x)`` is the weight of the values at most ``x``, ``W`` the total. All
    weights zero: every value weighs 1. No values: 0.0 (GuideLLM's empty
    distribution).
    """
    if not 0.0 <= q <= 1.0:
        raise ValueError("q must be in [0, 1]")
    pooled: dict[float, float] = {}
    for value, weight in values:
        pooled[float(value)] = pooled.get(float(value), 0.0) + float(weight)
    kept = sorted((v, w) for v, w in pooled.items() if w > 0.0)
    if not kept:
        kept = sorted((v, 1.0) for v in pooled)
    if not kept:
        return 0.0
    import numpy as np

    weights = np.array([w for _, w in kept])
    cdf = np.cumsum(weights / weights.sum())
    index = min(int(np.searchsorted(cdf, q, side="left")), len(kept) - 1)
    return kept[index][0]


@dataclass(frozen=True)
class Latencies:
    """One latency distribution of a rate: its p50, p95 and p99 (GuideLLM's percentiles)."""

    p50: float
    p95: float
    p99: float

    @classmethod
    def of(cls, values: Sequence[tuple[float, float]]) -> Latencies:
        """The p50, p95 and p99 of weighted values (:func:`weighted_percentile`)."""
        return cls(*(weighted_percentile(values, q) for q in (0.5, 0.95, 0.99)))

    def at(self, percentile: str) -> float:
        """The value at ``"p50"``, ``"p95"`` or ``"p99"``."""
        value: float = getattr(self, percentile)
        return value


@dataclass(frozen=True)
class RatePoint:
    """What GuideLLM measured at one offered rate (ms for TTFT/ITL, s for end-to-end)."""

    offered_rate: float
    #: Completed requests per second over the measured window.
    achieved_rate: float
    ttft_ms: Latencies
    itl_ms: Latencies
    e2e_s: Latencies
    output_tokens_per_s: float
    completed: int
    incomplete: int = 0
    errored: int = 0
    #: GuideLLM's own goodput at this rate (conforming requests/s; ``None`` without an SLO).
    conforming_rate: float | None = None
    #: GuideLLM's share of requests meeting the per-request SLO (``None`` without one).
    attainment: float | None = None
    #: Completed requests whose token stream was read in one burst: left out of the TTFT
    #: and ITL percentiles (module docstring, "Latencies observed request by request").
    unobserved: int = 0

    @property
    def observed(self) -> bool:
        """Whether some completed request's latencies were observed (finite TTFT/ITL)."""
        return self.completed > self.unobserved

    @property
    def timed(self) -> bool:
        """Whether the TTFT/ITL percentiles describe this rate: some completed request was
        observed, or none completed (then they are infinite: nothing finished in time)."""
        return self.completed == 0 or self.observed


@dataclass(frozen=True)
class Slo:
    """The service-level objective: p95 bounds on TTFT and ITL, in milliseconds."""

    ttft_p95_ms: float
    itl_p95_ms: float

    def violations(self, point: RatePoint) -> list[tuple[str, float, float]]:
        """``(name, value, bound)`` of each bound ``point`` is past (empty: it meets the SLO).

        A point whose latencies were not observed (:attr:`RatePoint.timed`) has no verdict:
        ValueError, so that it is never counted as meeting the SLO."""
        if not point.timed:
            raise ValueError(
                f"no latency was observed at {point.offered_rate:g} req/s: no SLO verdict"
            )
        checks = (
            ("ttft_p95", point.ttft_ms.p95, self.ttft_p95_ms),
            ("itl_p95", point.itl_ms.p95, self.itl_p95_ms),
        )
        return [(name, value, bound) for name, value, bound in checks if value > bound]

    def met(self, point: RatePoint) -> bool:
        """Whether ``point`` meets the SLO."""
        return not self.violations(point)


@dataclass(frozen=True)
class Capacity:
    """A rate read off a sweep (goodput or maximum sustainable rate), in requests/s.

    ``last_ok`` indexes the last rate that met the criterion (``None``: not even
    the first); ``censored``: every rate met it, so the value is a lower bound.
    """

    value: float
    last_ok: int | None
    censored: bool


def _ordered(sweep: Sequence[RatePoint]) -> list[RatePoint]:
    if not sweep:
        raise ValueError("a sweep needs at least one rate")
    return sorted(sweep, key=lambda p: p.offered_rate)


def goodput(sweep: Sequence[RatePoint], slo: Slo) -> Capacity:
    """The highest completed throughput at which the SLO holds (module docstring); rates
    with no observed latency (:attr:`RatePoint.timed`) are left out of the sweep."""
    points = [p for p in _ordered(sweep) if p.timed]
    if not points:
        return Capacity(0.0, None, False)
    k = max((i for i, point in enumerate(points) if slo.met(point)), default=-1)
    if k < 0:
        return Capacity(0.0, None, False)
    if k == len(points) - 1:
        return Capacity(points[k].achieved_rate, k, True)
    ok, bad = points[k], points[k + 1]
    fractions = []
    for name, value, bound in slo.violations(bad):
        below = ok.ttft_ms.p95 if name == "ttft_p95" else ok.itl_ms.p95
        fractions.append((bound - below) / (value - below) if value > below else 0.0)
    t = min(max(min(fractions), 0.0), 1.0)
    return Capacity(ok.achieved_rate + t * (bad.achieved_rate - ok.achieved_rate), k, False)


def sustained(point: RatePoint, sustain: float) -> bool:
    """Whether the server kept up with ``point``'s offered rate: ``x >= sustain * r``."""
    return point.achieved_rate >= sustain * point.offered_rate


def max_sustainable(sweep: Sequence[RatePoint], sustain: float) -> Capacity:
    """The completed throughput at the highest sustained rate, before the knee (module docstring)."""
    points = _ordered(sweep)
    k = max((i for i, point in enumerate(points) if sustained(point, sustain)), default=-1)
    if k < 0:
        return Capacity(0.0, None, False)
    return Capacity(points[k].achieved_rate, k, k == len(points) - 1)


def knee_rate(sweep: Sequence[RatePoint], sustain: float) -> float | None:
    """The offered rate after the highest sustained one (``None``: the highest is sustained)."""
    points = _ordered(sweep)
    found = max_sustainable(points, sustain)
    if found.last_ok is None:
        return points[0].offered_rate
    if found.censored:
        return None
    return points[found.last_ok + 1].offered_rate


def saturation_tokens_per_s(sweep: Sequence[RatePoint]) -> float:
    """Output tokens/s at saturation: the highest output throughput over the sweep."""
    return max(p.output_tokens_per_s for p in _ordered(sweep))


@dataclass(frozen=True)
class RatioInterval:
    """A candidate/baseline ratio over paired observations: geometric mean and its interval.

    ``low``/``high`` are ``None`` with fewer than :data:`MIN_PAIRS` pairs.
    """

    value: float
    low: float | None
    high: float | None
    ratios: tuple[float, ...]
    level: float

    def contains(self, x: float) -> bool:
        """Whether ``x`` lies in ``[low, high]`` (no interval: False)."""
        if self.low is None or self.high is None:
            return False
        return self.low <= x <= self.high


def ratio_interval(
    candidate: Sequence[float], baseline: Sequence[float], *, level: float = 0.95
) -> RatioInterval:
    """Paired ratios ``c_i / b_i`` -> geometric mean and t-interval on the log scale.

    ``N >= 1`` pairs; the interval needs ``N >= MIN_PAIRS`` (module docstring),
    every baseline value must be positive. With identical logs the interval is
    the point.
    """
    if len(candidate) != len(baseline):
        raise ValueError("candidate and baseline need one value per pair each")
    if not candidate:
        raise ValueError("a ratio needs at least one paired observation")
    if not 0.0 < level < 1.0:
        raise ValueError("level must be in (0, 1)")
    if any(not (b > 0.0 and math.isfinite(b)) for b in baseline):
        raise ValueError("baseline values must be positive and finite")
    ratios = tuple(max(c, 0.0) / b for c, b in zip(candidate, baseline, strict=True))
    logs = [math.log(max(q, RATIO_FLOOR)) for q in ratios]
    m = len(logs)
    mean = sum(logs) / m
    if m < MIN_PAIRS:
        return RatioInterval(math.exp(mean), None, None, ratios, level)
    from scipy import stats as sps  # slow to import: only when used

    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (m - 1))
    half = float(sps.t.ppf((1.0 + level) / 2.0, m - 1)) * sd / math.sqrt(m)
    return RatioInterval(
        value=math.exp(mean),
        low=math.exp(mean - half),
        high=math.exp(mean + half),
        ratios=ratios,
        level=level,
    )


def slo_load(point: RatePoint, slo: Slo, percentile: str = "p95") -> float:
    """``u = max(TTFT_q / B_ttft, ITL_q / B_itl)`` at ``percentile`` ``q`` (default the SLO's
    p95): the share of the SLO's binding bound used (``<= 1`` at p95: met; infinite when
    nothing completed)."""
    ttft, itl = point.ttft_ms.at(percentile), point.itl_ms.at(percentile)
    return max(ttft / slo.ttft_p95_ms, itl / slo.itl_p95_ms)


@dataclass(frozen=True)
class PairedRate:
    """One paired observation: both builds at one offered rate of one repeat."""

    repeat: int
    rate: float
    candidate: RatePoint
    baseline: RatePoint


def paired_rates(
    candidate: Sequence[Sequence[RatePoint]], baseline: Sequence[Sequence[RatePoint]]
) -> list[PairedRate]:
    """Repeat by repeat, the offered rates both builds swept and completed requests at.

    A rate at which either build completed nothing has no finite latency and
    gives no pair (the tier reports it; the goodput and the knee count it); nor
    does one whose completed requests were all read in one burst
    (:attr:`RatePoint.timed`: no latency observed).
    """
    if len(candidate) != len(baseline):
        raise ValueError("candidate and baseline need the same number of sweeps")
    pairs: list[PairedRate] = []
    for j, (cand, base) in enumerate(zip(candidate, baseline, strict=True)):
        base_at = {p.offered_rate: p for p in base}
        for c in _ordered(cand):
            b = base_at.get(c.offered_rate)
            if b is not None and c.observed and b.observed:
                pairs.append(PairedRate(j, c.offered_rate, c, b))
    return pairs


def slo_speedup(
    pairs: Sequence[PairedRate], slo: Slo, *, percentile: str = "p95", level: float = 0.95
) -> RatioInterval:
    """The speed ratio at the SLO, ``u_b / u_c`` per pair, and its interval (module docstring)."""
    speed_c = [1.0 / slo_load(p.candidate, slo, percentile) for p in pairs]
    speed_b = [1.0 / slo_load(p.baseline, slo, percentile) for p in pairs]
    return ratio_interval(speed_c, speed_b, level=level)


__all__ = [
    "MIN_PAIRS",
    "PERCENTILES",
    "RATIO_FLOOR",
    "Capacity",
    "Latencies",
    "PairedRate",
    "RatePoint",
    "RatioInterval",
    "Slo",
    "goodput",
    "knee_rate",
    "max_sustainable",
    "paired_rates",
    "ratio_interval",
    "saturation_tokens_per_s",
    "slo_load",
    "slo_speedup",
    "sustained",
    "weighted_percentile",
]

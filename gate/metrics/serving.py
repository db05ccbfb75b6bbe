"""Latency of a served model from streamed responses (pure: numbers in, numbers out).

One streamed request is sent at ``t = 0`` (seconds, host clock) and its
response arrives as chunks; chunk ``c`` arrives at ``a_c`` carrying ``n_c >= 0``
generated tokens (counted from the chunk's token ids or log-probs, never from
its text, which can merge or hold back tokens). With ``N = sum_c n_c`` tokens:

* token times ``t_j`` (``j = 0 .. N-1``): the tokens of the first chunk that
  carries any count at its arrival; the ``n`` tokens of a later chunk arriving
  at ``a`` after the previous token-carrying chunk at ``a'`` are spread evenly
  over that gap, ``t = a' + (a - a') i / n`` for ``i = 1 .. n``, so the last
  one is the chunk's arrival. An engine that falls behind merges several
  decoding steps into one chunk; spreading them keeps the ITL an estimate of
  the decoding step (instead of one long gap and ``n - 1`` zeros) while TTFT,
  E2E and the sum of the ITLs stay exactly as observed;
* ``TTFT = t_0``; ``ITL_j = t_j - t_{j-1}`` for ``j = 1 .. N-1`` (they add up
  to ``t_{N-1} - t_0``);
* end-to-end ``E = t_{N-1}`` (the last token's arrival), and
  ``TPOT = (E - TTFT) / (N - 1)`` for ``N >= 2``.

These match the definitions of :mod:`gate.metrics.latency` (the in-process
timed generation) and those of vLLM's serving benchmark (``vllm bench serve``),
which also takes ``TPOT = (latency - TTFT) / (output tokens - 1)``.

A load run sends ``R`` requests with arrival offsets ``s_r`` (Poisson process
at a request rate, or all at once) under a concurrency cap and lasts ``D``
seconds from the first send to the last completion. Its summary, over the
``C`` completed requests, is: ``request_throughput = C / D``,
``output_throughput = sum N_r / D`` (generated tokens/s),
``total_token_throughput = sum (P_r + N_r) / D`` (prompt + generated tokens/s),
and mean, p50, p95, p99 of TTFT, TPOT (requests with ``N >= 2``), E2E, and of
the ITLs pooled over all requests. Percentiles use numpy's linear interpolation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gate.errors import DataError

#: Percentiles reported by :func:`load_summary`.
LOAD_PERCENTILES: tuple[int, ...] = (50, 95, 99)


@dataclass(frozen=True)
class StreamTiming:
    """One streamed request: token arrival times and token counts.

    ``token_times`` has one entry per generated token (seconds since the
    request was sent); ``prompt_tokens`` comes from the server's usage report.
    ``start`` is the send time relative to the start of a load run (0 alone).
    ``error`` is set (and the times may be empty) when the request failed.
    """

    token_times: tuple[float, ...]
    prompt_tokens: int
    start: float = 0.0
    error: str | None = None

    @property
    def ok(self) -> bool:
        """Whether the request completed with at least one token."""
        return self.error is None and bool(self.token_times)

    @property
    def output_tokens(self) -> int:
        """Generated tokens ``N``."""
        return len(self.token_times)

    @property
    def ttft(self) -> float:
        """Time to first token ``t_0``."""
        return self.token_times[0]

    @property
    def e2e(self) -> float:
        """End-to-end latency ``t_{N-1}``."""
        return self.token_times[-1]

    @property
    def itls(self) -> tuple[float, ...]:
        """Inter-token latencies ``t_j - t_{j-1}``, ``j = 1 .. N-1``."""
        t = self.token_times
        return tuple(t[j] - t[j - 1] for j in range(1, len(t)))

    @property
    def tpot(self) -> float | None:
        """``(E - TTFT) / (N - 1)``, or None for a single-token response."""
        n = self.output_tokens
        return (self.e2e - self.ttft) / (n - 1) if n >= 2 else None

    @property
    def end(self) -> float:
        """Completion time relative to the start of the load run."""
        return self.start + (self.token_times[-1] if self.token_times else 0.0)


def token_times(chunks: Sequence[tuple[float, int]]) -> tuple[float, ...]:
    """Per-token times from ``(arrival, tokens in chunk)`` pairs, in arrival order.

    The first token-carrying chunk's tokens all count at its arrival; a later
    chunk's ``n`` tokens are spread evenly over the gap since the previous
    token-carrying chunk (see the module docstring). Chunks with no token
    (role, usage or keep-alive chunks) contribute none. Arrivals must not decrease.
    """
    out: list[float] = []
    last = -np.inf
    previous: float | None = None
    for arrival, count in chunks:
        if count < 0:
            raise DataError(f"a stream chunk reported {count} tokens", "counts must be >= 0")
        if arrival < last:
            raise DataError("stream chunk arrival times decrease", "read chunks in arrival order")
        last = arrival
        if count == 0:
            continue
        if previous is None:
            out.extend([float(arrival)] * count)
        else:
            gap = float(arrival) - previous
            out.extend(previous + gap * i / count for i in range(1, count + 1))
        previous = float(arrival)
    return tuple(out)


def step_times(streams: Sequence[Sequence[float]]) -> tuple[float, ...]:
    """Step ``j`` of a batch of parallel streams: when *every* stream has token ``j``.

    ``step_j = max_b t_{b,j}`` over the ``B`` streams, for ``j`` below the
    shortest stream's length: the moment the batch's ``j``-th tokens all exist,
    as an in-process batched decoding step marks it.
    """
    if not streams:
        return ()
    n = min(len(s) for s in streams)
    return tuple(max(float(s[j]) for s in streams) for j in range(n))


def _stats(values: Sequence[float]) -> dict[str, float]:
    arr = np.asarray(values, dtype=np.float64)
    out = {"mean": float(arr.mean())}
    for q in LOAD_PERCENTILES:
        out[f"p{q}"] = float(np.percentile(arr, q))
    return out


@dataclass(frozen=True)
class LoadSummary:
    """The figures of one load run (see the module docstring)."""

    requests: int
    completed: int
    failed: int
    duration: float
    request_throughput: float
    output_throughput: float
    total_token_throughput: float
    #: ``{"ttft": {"mean", "p50", "p95", "p99"}, "tpot": ..., "itl": ..., "e2e": ...}`` in seconds.
    latency: dict[str, dict[str, float]]

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready dict."""
        return {
            "requests": self.requests,
            "completed": self.completed,
            "failed": self.failed,
            "duration_s": self.duration,
            "request_throughput": self.request_throughput,
            "output_throughput": self.output_throughput,
            "total_token_throughput": self.total_token_throughput,
            "latency_s": self.latency,
        }


def load_summary(timings: Sequence[StreamTiming], duration: float | None = None) -> LoadSummary:
    """Throughput and latency percentiles of a load run (:class:`DataError` if none completed).

    ``duration`` defaults to ``max end - min start`` over all requests.
    """
    done = [t for t in timings if t.ok]
    if not done:
        first = next((t.error for t in timings if t.error), "no request returned a token")
        raise DataError(f"no request of the load run completed ({first})")
    if duration is None:
        duration = max(t.end for t in done) - min(t.start for t in timings)
    if duration <= 0:
        raise DataError(f"load run duration {duration} is not positive")
    tpots = [p for p in (t.tpot for t in done) if p is not None]
    itls = [d for t in done for d in t.itls]
    latency = {
        "ttft": _stats([t.ttft for t in done]),
        "e2e": _stats([t.e2e for t in done]),
    }
    if tpots:
        latency["tpot"] = _stats(tpots)
    if itls:
        latency["itl"] = _stats(itls)
    out_tokens = sum(t.output_tokens for t in done)
    in_tokens = sum(t.prompt_tokens for t in done)
    return LoadSummary(
        requests=len(timings),
        completed=len(done),
        failed=len(timings) - len(done),
        duration=float(duration),
        request_throughput=len(done) / duration,
        output_throughput=out_tokens / duration,
        total_token_throughput=(out_tokens + in_tokens) / duration,
        latency=latency,
    )


def arrival_offsets(
    count: int, request_rate: float, *, burstiness: float = 1.0, seed: int = 0
) -> tuple[float, ...]:
    """Send offsets (seconds) of ``count`` requests at ``request_rate`` requests/s.

    ``inf`` sends all at once (offsets 0). Otherwise the gaps are independent
    gamma variates with shape ``burstiness`` and mean ``1 / request_rate``
    (``burstiness = 1``: exponential gaps, a Poisson process), drawn from a
    seeded generator so a run is repeatable; the first request goes at 0.
    """
    if count < 0 or request_rate <= 0 or burstiness <= 0:
        raise DataError(
            "a load run needs count >= 0, request_rate > 0 and burstiness > 0",
            "use request_rate = inf to send every request at once",
        )
    if count == 0:
        return ()
    if np.isinf(request_rate):
        return (0.0,) * count
    rng = np.random.default_rng(seed)
    gaps = rng.gamma(shape=burstiness, scale=1.0 / (request_rate * burstiness), size=count - 1)
    return (0.0, *(float(x) for x in np.cumsum(gaps)))

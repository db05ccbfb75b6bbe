"""Load-tier metric declarations (torch-free).

Every metric is a candidate/baseline ratio from interleaved GuideLLM benchmarks
of the two served builds (``SampleKind.RATIO``: the paired ratios as samples,
the interval in the details; :mod:`gate.metrics.load`). Speeds and throughputs
are higher-is-better (a ratio above 1 is a faster candidate), latencies
lower-is-better. Only ``load.slo_speedup`` is gated (the tier's
``min_speedup``, :mod:`gate.gating.speedup`); the others are reported with
their intervals.
"""

from __future__ import annotations

from gate.metrics.load import PERCENTILES
from gate.metrics.metric_spec import MetricSpec, SampleKind

#: The tier these metrics belong to (the part of each name before the dot).
TIER = "load"

# Names other modules refer to: every one is a spec of :data:`SPECS`.
SLO_SPEEDUP = "load.slo_speedup"
GOODPUT_RATIO = "load.goodput_ratio"
MAX_RATE_RATIO = "load.max_rate_ratio"
OUTPUT_TOKENS_PER_S_RATIO = "load.output_tokens_per_s_ratio"

_RATIO = SampleKind.RATIO


def _spec(name: str, higher: bool, description: str) -> MetricSpec:
    return MetricSpec(f"load.{name}", "x", higher, _RATIO, description, ideal=1.0)


_LATENCIES = {
    "ttft": "time to first token",
    "itl": "inter-token latency",
    "e2e": "end-to-end request latency",
}

SPECS: tuple[MetricSpec, ...] = (
    _spec(
        "slo_speedup",
        True,
        "speed at the SLO: baseline / candidate share of the binding p95 bound used, at each"
        " offered rate of each pass",
    ),
    _spec(
        "goodput_ratio",
        True,
        "completed requests/s with p95 TTFT and ITL within the SLO, candidate / baseline",
    ),
    _spec(
        "max_rate_ratio",
        True,
        "completed requests/s at the last sustained rate before the knee, candidate / baseline",
    ),
    _spec(
        "output_tokens_per_s_ratio",
        True,
        "output tokens/s at saturation (highest over the sweep), candidate / baseline",
    ),
    *(
        _spec(
            f"{family}_{q}_ratio",
            False,
            f"{text} {q} at each offered rate of each pass, candidate / baseline",
        )
        for family, text in _LATENCIES.items()
        for q in PERCENTILES
    ),
)

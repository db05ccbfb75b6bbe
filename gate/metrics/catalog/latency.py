"""Latency-tier metric declarations (torch-free).

Timings are REPEATED (per-run samples, compared with the repeated-run test).
Memory figures are POINT values: the peak over the tracked runs (allocator
peaks are deterministic for a fixed shape, so there is no noise to test), and
the parameter bytes of the loaded model. See :mod:`gate.metrics.latency` for the definitions.
"""

from __future__ import annotations

from gate.metrics.metric_spec import MetricSpec, SampleKind

#: The tier these metrics belong to (the part of each name before the dot).
TIER = "latency"

# Names other modules refer to: every one is a spec of :data:`SPECS`.
TOKENS_PER_S = "latency.tokens_per_s"
BEST_TOKENS_PER_S = "latency.best_tokens_per_s"
PARAM_BYTES = "latency.param_bytes"
KV_BYTES_PER_TOKEN = "latency.kv_bytes_per_token"
LOAD_OUTPUT_TOKENS_PER_S = "latency.load_output_tokens_per_s"

_R = SampleKind.REPEATED


def _lower(name: str, unit: str, description: str, kind: SampleKind = _R) -> MetricSpec:
    return MetricSpec(f"latency.{name}", unit, False, kind, description)


def _higher(name: str, unit: str, description: str) -> MetricSpec:
    return MetricSpec(f"latency.{name}", unit, True, _R, description)


SPECS: tuple[MetricSpec, ...] = (
    _lower("ttft_p50", "s", "time to first token, median over runs"),
    _lower("ttft_p95", "s", "time to first token, 95th percentile over runs"),
    _lower("itl_p50", "s", "inter-token latency per generated token, median"),
    _lower("itl_p95", "s", "inter-token latency per generated token, 95th percentile"),
    _lower("itl_p99", "s", "inter-token latency per generated token, 99th percentile"),
    _lower("tpot_p50", "s", "time per output token (E - TTFT)/(N - 1), median over runs"),
    _lower("e2e_p50", "s", "end-to-end request latency, median over runs"),
    _lower("e2e_p95", "s", "end-to-end request latency, 95th percentile over runs"),
    _lower("e2e_p99", "s", "end-to-end request latency, 99th percentile over runs"),
    _higher("tokens_per_s", "tok/s", "generated tokens per second at the reference batch"),
    _higher("requests_per_s", "req/s", "completed sequences per second at the reference batch"),
    _higher("best_tokens_per_s", "tok/s", "tokens per second at the best batch of the sweep"),
    _lower(
        "peak_allocated_bytes", "B", "torch.cuda peak allocated bytes over runs", SampleKind.POINT
    ),
    _lower(
        "peak_reserved_bytes", "B", "torch.cuda peak reserved bytes over runs", SampleKind.POINT
    ),
    _lower(
        "process_vram_bytes",
        "B",
        "peak VRAM held by this process (NVML) over runs",
        SampleKind.POINT,
    ),
    _lower(
        "global_vram_bytes",
        "B",
        "peak VRAM used on the device by all processes (NVML)",
        SampleKind.POINT,
    ),
    _lower(
        "peak_rss_bytes", "B", "peak resident set size of the process over runs", SampleKind.POINT
    ),
    _lower("load_ttft_p50", "s", "served: TTFT per request at the highest load level, median"),
    _lower("load_ttft_p95", "s", "served: TTFT per request at the highest load level, p95"),
    _lower("load_tpot_p50", "s", "served: TPOT per request at the highest load level, median"),
    _lower("load_e2e_p50", "s", "served: end-to-end per request at the highest load level, median"),
    _lower("load_e2e_p95", "s", "served: end-to-end per request at the highest load level, p95"),
    MetricSpec(
        "latency.load_output_tokens_per_s",
        "tok/s",
        True,
        SampleKind.POINT,
        "served: generated tokens per second of the load run at the highest level",
    ),
    _lower(
        "param_bytes",
        "B",
        "bytes of the loaded parameters and buffers, the model provenance's parameter_bytes "
        "(the CPU memory-reduction metric)",
        SampleKind.POINT,
    ),
    _lower(
        "kv_bytes_per_token",
        "B",
        "KV-cache bytes held per token seen at the end of a timed generation (cache recipes)",
        SampleKind.POINT,
    ),
)

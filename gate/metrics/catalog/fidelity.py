"""Fidelity-tier metric declarations (torch-free).

Definitions in :mod:`gate.metrics.fidelity` (docs/metrics.md "Fidelity").
Every fidelity metric is computed *against* the baseline's own outputs, so each
has a fixed ideal (1.0 for agreement, 0.0 for divergences) and is compared with
that ideal.

Sample kinds, chosen honestly:

* means (CGA, CGA@5, mean KL, mean KL bound, mean and RMS delta-p) are macro-averages over
  prompts: the value is the mean of per-prompt values, and those per-prompt
  values are the samples (``sample_ids`` = prompt ids), compared with a paired
  bootstrap (``PAIRED_SCORE``);
* the KL distribution's percentiles and maximum are statistics of the pooled
  per-token KL values (llama.cpp's definition), which are not a mean of
  per-prompt values; they are ``POINT`` metrics (the candidate is
  deterministic given its weights, so the value is the whole population of
  reference tokens, not a noisy estimate of it). From a v3 pack the per-token
  KL values are estimates; the percentiles then carry their (small) sampling
  noise, and ``details["bound"]`` holds the same statistic of the lower bound.

``fidelity.kl_bound_mean`` is reported, not gated by default: it never exceeds
``fidelity.kl_mean`` (equal to it for a v1/v2 pack), which is gated.
"""

from __future__ import annotations

from gate.metrics.metric_spec import MetricSpec, SampleKind

#: The tier these metrics belong to (the part of each name before the dot).
TIER = "fidelity"

# Names other modules refer to: every one is a spec of :data:`SPECS`.
CGA = "fidelity.cga"
CGA_AT_5 = "fidelity.cga_at_5"
KL_MEAN = "fidelity.kl_mean"
KL_BOUND_MEAN = "fidelity.kl_bound_mean"
KL_P99 = "fidelity.kl_p99"
DELTA_P_MEAN = "fidelity.delta_p_mean"
DELTA_P_RMS = "fidelity.delta_p_rms"

_PS = SampleKind.PAIRED_SCORE
_PT = SampleKind.POINT


def _kl_point(suffix: str, what: str) -> MetricSpec:
    return MetricSpec(
        f"fidelity.kl_{suffix}",
        "nats",
        False,
        _PT,
        f"{what} of the pooled per-token KL(base || candidate)",
        ideal=0.0,
    )


SPECS: tuple[MetricSpec, ...] = (
    MetricSpec(
        "fidelity.cga",
        "ratio",
        True,
        _PS,
        "conditional greedy agreement: candidate argmax equals the baseline's token, "
        "mean over positions, then over prompts",
        ideal=1.0,
    ),
    MetricSpec(
        "fidelity.cga_at_5",
        "ratio",
        True,
        _PS,
        "the baseline's token within the candidate's top 5, mean over positions, then prompts",
        ideal=1.0,
    ),
    MetricSpec(
        "fidelity.kl_mean",
        "nats",
        False,
        _PS,
        "per-token KL(base || candidate), mean over positions, then over prompts: exact with "
        "a live baseline, an unbiased estimate from a v3 pack (details: standard_error), the "
        "lower bound from a v1/v2 pack (details: kl)",
        ideal=0.0,
    ),
    MetricSpec(
        "fidelity.kl_bound_mean",
        "nats",
        False,
        _PS,
        "per-token top-k + tail-bucket lower bound of KL(base || candidate), mean over "
        "positions, then over prompts (never above the exact KL)",
        ideal=0.0,
    ),
    _kl_point("median", "median"),
    _kl_point("p90", "90th percentile"),
    _kl_point("p95", "95th percentile"),
    _kl_point("p99", "99th percentile"),
    _kl_point("p999", "99.9th percentile"),
    _kl_point("max", "maximum"),
    MetricSpec(
        "fidelity.delta_p_mean",
        "prob",
        True,
        _PS,
        "p_cand(y_i) - p_base(y_i) on the baseline's tokens, mean over positions, then prompts",
        ideal=0.0,
    ),
    MetricSpec(
        "fidelity.delta_p_rms",
        "prob",
        False,
        _PS,
        "root mean square of p_cand(y_i) - p_base(y_i) per prompt, mean over prompts",
        ideal=0.0,
    ),
)

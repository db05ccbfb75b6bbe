"""Capability pass rates from per-probe outcomes (pure: no model, no file).

For a family with probes ``j = 1..n`` and outcomes ``x_j in {0, 1}`` (the exact
checker of :mod:`gate.data.probes` passed or not), the metric is the pass rate
``p = (1/n) sum_j x_j`` (docs/metrics.md "Capability probes"). The per-probe
outcomes are kept as ``PAIRED_BINARY`` samples with ``sample_ids`` = probe ids,
so :mod:`gate.gating.compare` pairs a candidate with its baseline probe by probe
(McNemar on the flips), and each breakdown slice (``op:*``,
``constraint:<kind>`` ...) is the same pass rate over its probes.

``details`` carries the count of passes, the 95 % Wilson score interval of
``p`` (Wilson, 1927; :func:`wilson_interval`), the
probe seed, and a few failing examples (prompt, reply, checker reason) for
the report.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gate.errors import DataError
from gate.measurement import Measurement, from_samples

__all__ = ["ProbeOutcome", "pass_rate", "pass_rate_measurement", "wilson_interval"]


@dataclass(frozen=True)
class ProbeOutcome:
    """The result of one probe: which probe, its slices, the reply and the checker's verdict."""

    probe_id: str
    prompt: str
    reply: str
    passed: bool
    reason: str
    tags: tuple[str, ...] = ()


def pass_rate(outcomes: Sequence[bool]) -> float:
    """``sum(x) / n``; an empty list is a :class:`DataError` (nothing was probed)."""
    if not outcomes:
        raise DataError("no probe outcomes to score", "ask for at least one probe per family")
    return sum(1 for x in outcomes if x) / len(outcomes)


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of the proportion ``successes / n``.

    ``(p + z^2/2n ± z sqrt(p(1-p)/n + z^2/4n^2)) / (1 + z^2/n)`` with ``z`` the
    two-sided normal quantile; computed by scipy's ``proportion_ci``.
    """
    if n <= 0:
        raise ValueError("wilson_interval: n must be positive")
    if not 0 <= successes <= n:
        raise ValueError(f"wilson_interval: {successes} successes out of {n}")
    from scipy import stats as sps  # scipy.stats is slow to import: only when used

    ci = sps.binomtest(int(successes), int(n)).proportion_ci(
        confidence_level=confidence, method="wilson"
    )
    return float(ci.low), float(ci.high)


def pass_rate_measurement(
    name: str,
    outcomes: Sequence[ProbeOutcome],
    *,
    examples: int = 3,
    extra: Mapping[str, Any] | None = None,
) -> Measurement:
    """A ``PAIRED_BINARY`` measurement of the pass rate, with per-tag breakdowns.

    ``examples`` failing probes (first in probe order) go to ``details``;
    ``extra`` is merged into ``details`` (seed, generation settings ...).
    """
    if not outcomes:
        raise DataError(f"no probe outcomes for {name!r}", "ask for at least one probe")
    ids = [o.probe_id for o in outcomes]
    if len(set(ids)) != len(ids):
        raise DataError(f"duplicate probe ids in {name!r}", "probe ids must be unique per family")
    samples = [1.0 if o.passed else 0.0 for o in outcomes]
    groups: dict[str, list[int]] = {}
    for i, outcome in enumerate(outcomes):
        for tag in outcome.tags:
            groups.setdefault(tag, []).append(i)
    passes = int(sum(samples))
    low, high = wilson_interval(passes, len(samples))
    failing = [
        {"id": o.probe_id, "prompt": o.prompt, "reply": o.reply[:300], "reason": o.reason}
        for o in outcomes
        if not o.passed
    ][: max(examples, 0)]
    details: dict[str, Any] = {
        "passed": passes,
        "wilson_95": [low, high],
        "failing_examples": failing,
    }
    details.update(extra or {})
    return from_samples(name, samples, ids, groups=dict(sorted(groups.items())), details=details)

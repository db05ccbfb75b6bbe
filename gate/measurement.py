"""The measurement record: what a tier produces and what a baseline stores.

Data flows one way: tiers produce :class:`Measurement` objects, the baseline
stores them, :mod:`gate.gating.compare` turns (candidate, baseline, thresholds) into
verdicts. A measurement keeps its per-sample values so that the comparison can
say how sure it is:

* ``samples`` are the per-item values (per prompt, per question, per timed run);
* ``sample_ids`` name the items, so that two measurements of the same prompts
  can be *paired* (McNemar, paired bootstrap). Repeated timings have no ids.
* ``breakdown`` holds the same metric restricted to a slice of the items
  (``"category:code"``, ``"length:long"``), each itself a Measurement, so
  per-category thresholds get the same statistics as the whole.

:class:`TimedGeneration` is the raw record of one timed request (per-step
timestamps) that a backend returns and the latency metrics turn into numbers.
:class:`OutputSet` (of :class:`JudgedOutput`) is the raw record of a build's
answers to a prompt set: the judge tier generates and judges it, the baseline
stores it (:mod:`gate.store.judge_outputs`).
``details`` is free-form; the entries that another layer reads are named by
:class:`MeasurementDetail`, which both the writer and the readers use.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from gate.errors import DataError


@dataclass(frozen=True)
class Measurement:
    """One metric value with the evidence behind it."""

    name: str
    value: float
    samples: tuple[float, ...] | None = None
    sample_ids: tuple[str, ...] | None = None
    breakdown: Mapping[str, Measurement] = field(default_factory=dict)
    #: Free-form, JSON-serialisable details (k of a top-k KL, tail mass, units of a timer ...).
    details: Mapping[str, Any] = field(default_factory=dict)

    @property
    def n(self) -> int:
        """Number of samples behind the value (0 when only the value is known)."""
        return len(self.samples) if self.samples is not None else 0

    def validate(self) -> None:
        """Refuse NaN/inf values and misaligned ids with a :class:`DataError`."""
        if not math.isfinite(self.value):
            raise DataError(
                f"measurement {self.name!r} has a non-finite value ({self.value})",
                "re-run the tier; a NaN usually means the model produced NaN logits",
            )
        if self.samples is not None:
            if any(not math.isfinite(s) for s in self.samples):
                raise DataError(
                    f"measurement {self.name!r} has non-finite samples",
                    "drop or fix the NaN/inf samples in the measurements file",
                )
            if self.sample_ids is not None and len(self.sample_ids) != len(self.samples):
                raise DataError(
                    f"measurement {self.name!r} has {len(self.samples)} samples but "
                    f"{len(self.sample_ids)} sample_ids",
                    "give one id per sample, or none",
                )
        for part in self.breakdown.values():
            part.validate()

    def to_dict(self) -> dict[str, Any]:
        """JSON form (the ``metrics[]`` entry of a measurements file)."""
        out: dict[str, Any] = {"name": self.name, "value": self.value, "n": self.n}
        if self.samples is not None:
            out["samples"] = list(self.samples)
        if self.sample_ids is not None:
            out["sample_ids"] = list(self.sample_ids)
        if self.breakdown:
            out["breakdown"] = {k: v.to_dict() for k, v in self.breakdown.items()}
        if self.details:
            out["details"] = dict(self.details)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, name: str | None = None) -> Measurement:
        """Parse the JSON form; raises :class:`DataError` on a malformed entry."""
        try:
            metric_name = str(name if name is not None else data["name"])
            value = float(data["value"])
            samples = data.get("samples")
            ids = data.get("sample_ids")
            breakdown_raw = data.get("breakdown") or {}
            breakdown = {
                str(k): cls.from_dict(
                    v if isinstance(v, Mapping) else {"value": v}, name=metric_name
                )
                for k, v in breakdown_raw.items()
            }
            return cls(
                name=metric_name,
                value=value,
                samples=tuple(float(s) for s in samples) if samples is not None else None,
                sample_ids=tuple(str(i) for i in ids) if ids is not None else None,
                breakdown=breakdown,
                details=dict(data.get("details") or {}),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise DataError(
                f"malformed metric entry {dict(data).get('name', '?')!r}: {exc}",
                "each metric needs a name and a numeric value; samples must be numbers",
            ) from None


def from_samples(
    name: str,
    samples: Sequence[float],
    sample_ids: Sequence[str] | None = None,
    *,
    groups: Mapping[str, Sequence[int]] | None = None,
    details: Mapping[str, Any] | None = None,
) -> Measurement:
    """Build a mean-valued measurement from per-item samples.

    ``groups`` maps a slice name (``"category:code"``) to the indices of its
    items; each slice becomes a breakdown entry with its own samples.
    """
    values = tuple(float(s) for s in samples)
    if not values:
        raise DataError(f"no samples for {name!r}", "the tier produced no items to measure")
    ids = tuple(sample_ids) if sample_ids is not None else None
    breakdown: dict[str, Measurement] = {}
    for key, indices in (groups or {}).items():
        if not indices:
            continue
        part = tuple(values[i] for i in indices)
        breakdown[key] = Measurement(
            name=name,
            value=sum(part) / len(part),
            samples=part,
            sample_ids=tuple(ids[i] for i in indices) if ids is not None else None,
        )
    return Measurement(
        name=name,
        value=sum(values) / len(values),
        samples=values,
        sample_ids=ids,
        breakdown=breakdown,
        details=dict(details or {}),
    )


@dataclass(frozen=True)
class TimedGeneration:
    """One timed generation of a batch.

    ``step_times`` holds seconds since the start of the request (after the
    inputs were on the device) at which each decoding step's tokens were
    available; ``step_times[0]`` is the time to first token.
    """

    batch_size: int
    prompt_tokens: int
    new_tokens: int
    step_times: tuple[float, ...]
    end_to_end: float
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class JudgedOutput:
    """One prompt and the build's greedy answer to it."""

    id: str
    category: str
    length: str
    prompt: str
    prompt_tokens: int
    text: str
    tokens: int

    @classmethod
    def from_dict(cls, entry: Mapping[str, Any]) -> JudgedOutput:
        """One output as stored (a judge outputs file, a result's ``details``);
        a missing key is a ``KeyError``, a malformed number a ``ValueError``."""
        return cls(
            id=str(entry["id"]),
            category=str(entry["category"]),
            length=str(entry["length"]),
            prompt=str(entry["prompt"]),
            prompt_tokens=int(entry["prompt_tokens"]),
            text=str(entry["text"]),
            tokens=int(entry["tokens"]),
        )


@dataclass(frozen=True)
class OutputSet:
    """A build's answers to a prompt set, with how they were generated."""

    max_new_tokens: int
    prompt_set_sha256: str
    outputs: tuple[JudgedOutput, ...]

    def by_id(self) -> dict[str, JudgedOutput]:
        """Outputs keyed by prompt id."""
        return {o.id: o for o in self.outputs}


class MeasurementDetail:
    """Keys of the ``Measurement.details`` entries that a layer other than the writer reads.

    The tier (or metric function) that writes an entry and every reader use
    these names; the strings are part of the measurements, baseline and
    results JSON and stay as they are.
    """

    #: In-session baseline of a REPEATED timing, latency tier (paired mode) -> compare:
    #: ``{"against", "value", "samples", "model", "recipe"}``.
    PAIRED_REFERENCE: Final = "paired_reference"
    #: How the fidelity tier computed KL (``"exact"`` or top-k + tail bucket) -> HTML plots.
    KL_METHOD: Final = "kl"
    #: ``accuracy.flips`` per baseline top-margin bucket, ``[{"lo", "hi", "n", "rate"}]``
    #: (:func:`gate.metrics.accuracy.pair_measurements`) -> HTML plots.
    BY_MARGIN: Final = "by_margin"
    #: Batch size of the latency tier's timed runs -> HTML plots.
    BATCH_SIZE: Final = "batch_size"
    #: Median tokens/s per batch size of the throughput sweep, ``{"8": 812.5, ...}`` -> plots.
    PER_BATCH: Final = "per_batch"
    #: First batch size of the sweep that ran out of memory (``None``: none did) -> plots.
    OOM_BATCH: Final = "oom_batch"
    #: The hardware fingerprint of a timing (:class:`gate.hw.fingerprint.Fingerprint` as a
    #: dict) -> the latency tier's baseline check and the HTML provenance.
    FINGERPRINT: Final = "fingerprint"
    #: ``Fingerprint.hash`` and ``Fingerprint.hardware_hash`` of that fingerprint -> HTML.
    FINGERPRINT_HASH: Final = "fingerprint_hash"
    HARDWARE_HASH: Final = "hardware_hash"
    #: A ratio measurement's interval ``[low, high]`` (None: too few pairs gave none), its
    #: level, and the tier's ``min_speedup`` that gates it (load and speculative tiers) ->
    #: :mod:`gate.gating.speedup`, compare and the HTML report.
    RATIO_CI: Final = "ratio_ci"
    RATIO_LEVEL: Final = "ratio_level"
    MIN_SPEEDUP: Final = "min_speedup"
    #: The load tier's SLO, ``{"ttft_p95_ms", "itl_p95_ms"}`` -> HTML table and plots.
    SLO: Final = "slo"
    #: The load tier's rows per sweep and side, ``{"candidate": [...], "baseline": [...]}``,
    #: and each pass's latency-against-rate curve -> HTML table and plots.
    PER_SWEEP: Final = "per_sweep"
    CURVES: Final = "curves"
    #: Passes of the load tier's plan -> HTML table.
    REPEATS: Final = "repeats"
    #: Requests a KV-cache method scored and how many it touched, ``{"method",
    #: "requests", "exercised"}`` (:mod:`gate.tiers.exercised`) -> report notes.
    COMPRESSION_EXERCISED: Final = "compression_exercised"

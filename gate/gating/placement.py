"""Placement drift: the device and dtype that measured the baseline against the candidate's.

A baseline measured on the CPU in float32 and a candidate measured on a GPU in
bfloat16 differ in more than the compression: other kernels (cuBLAS against
oneDNN, fused attention), another accumulation order and another precision move
the logits, so the gated numbers may move for that reason alone. Like a package
version drift (:mod:`gate.gating.versions`), each difference is a
:class:`~gate.gating.verdict.VersionDrift` (``package`` ``device`` or ``dtype``)
— a warning naming both sides (``--strict`` blocks), listed in the results JSON's
``version_drift`` and the report's notes.

What is compared (:func:`compare_placement`, pure: provenance records in, drift out):

* the device *kind* (``cpu``, ``cuda``; ``cuda:0`` against ``cuda:1`` is the same
  hardware path, and two GPU models are the latency tier's fingerprint check);
* the compute dtype (``compute_dtype``, transformers' ``model.dtype``), or for a
  record older than that fact, its one parameter dtype when ``dtypes`` names
  exactly one. A quantized candidate's storage (uint8, int8) is not its compute
  dtype, so an nf4 build of a float32 baseline computing in float32 is no drift.

A side that does not record the fact (a served model, a hand-written
measurements file) is not compared: a served build runs where its server put it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from gate.gating.against import DEFAULT_AGAINST
from gate.gating.verdict import VersionDrift

if TYPE_CHECKING:
    from gate.provenance import ModelProvenance

#: The ``package`` of a device and of a dtype drift.
DEVICE = "device"
DTYPE = "dtype"


def device_kind_of(provenance: ModelProvenance) -> str | None:
    """``cuda`` of ``cuda:1``, ``cpu`` of ``cpu``; ``None`` when not recorded."""
    device = provenance.device
    if not device or provenance.engine is not None:
        return None
    return device.partition(":")[0].strip().lower()


def compute_dtype_of(provenance: ModelProvenance) -> str | None:
    """The dtype the model computed in; ``None`` when the record does not say."""
    if provenance.engine is not None:
        return None
    if provenance.compute_dtype:
        return provenance.compute_dtype
    dtypes = provenance.dtypes or ()
    return dtypes[0] if len(dtypes) == 1 else None


def compare_placement(
    baseline: ModelProvenance, candidate: ModelProvenance, *, against: str = DEFAULT_AGAINST
) -> list[VersionDrift]:
    """The device and dtype drift between two sides (the rules of the module docstring)."""
    drift: list[VersionDrift] = []
    for name, read in ((DEVICE, device_kind_of), (DTYPE, compute_dtype_of)):
        was, now = read(baseline), read(candidate)
        if was is not None and now is not None and was != now:
            drift.append(VersionDrift(name, was, now, against))
    return drift


def placement_drift(
    baselines: Mapping[str, ModelProvenance], candidate: ModelProvenance
) -> list[VersionDrift]:
    """:func:`compare_placement` of the candidate with each baseline ref, in ref order."""
    return [
        item
        for ref, baseline in baselines.items()
        for item in compare_placement(baseline, candidate, against=ref)
    ]


def placement_notes(drift: list[VersionDrift], *, strict: bool) -> list[str]:
    """Report notes: one warning per device or dtype drift (``--strict`` blocks)."""
    effect = "blocks under --strict" if strict else "a warning; --strict blocks"
    return [f"{d.package} drift ({effect}): {d.message}" for d in drift]


__all__ = ["DEVICE", "DTYPE", "compare_placement", "placement_drift", "placement_notes"]

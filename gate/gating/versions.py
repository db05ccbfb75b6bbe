"""Version drift: the software that measured the baseline against the software that measured
the candidate.

A baseline recorded with transformers 5.23.0 and a candidate measured with 5.24.0 differ
in more than the compression: the model code, its kernels and their defaults moved too,
so the numbers may move for that reason alone. Each such difference is a
:class:`~gate.gating.verdict.VersionDrift` — a warning (``--strict`` blocks), listed in
the results JSON (``version_drift``) and named in every report's notes.

Which versions count — those that compute the numbers the gate compares:

* ``torch``: every in-process forward pass runs its kernels (matmul, attention
  backends, reductions), whose numerics and defaults move between releases; the
  whole version string is compared, so another build of one release
  (``2.5.1+cpu`` against ``2.5.1+cu124``) counts too;
* ``transformers``: the model code that turns weights into logits (attention
  implementation, rotary embeddings, cache classes, generation defaults, the
  quantizer integrations);
* the quantization kernel packages: ``bitsandbytes``, ``optimum-quanto``,
  ``compressed-tensors``, and ``kernels`` (Hub kernels transformers can load in
  place of its own layers) — their dequantize and matmul kernels are the
  compressed build's arithmetic;
* the serving engine, as the server names it (``owned_by`` of ``/v1/models``)
  with the version its ``/version`` endpoint reports (vLLM's), when both sides
  were served (:meth:`gate.engines.http.HTTPBackend.provenance`): for a
  served build the engine computes every number.

Not counted, although :func:`gate.provenance.environment` records them:
``python`` (the interpreter does none of the model's arithmetic; that lives in
the packages above), ``numpy`` (the gate's statistics over measured values, not
the measurement), ``tokenizers`` (tokenization is checked directly: tokenizer
file hashes, the prompt token ids in the reference pack, the served tokenizer
against the local one — a different encoding is an error, not a drift) and
``accelerate`` (it places weights on devices and does no arithmetic). Hardware
is the latency tier's fingerprint check.

Rules (:func:`compare_versions`, pure: records in, findings out):

* a package both records name as installed at different versions is a drift;
* a package installed on one side only is not: the side without it cannot have
  run its code, and a candidate quantized through a package its fp16 baseline
  never needed is the comparison the gate exists for;
* a record that names no package versions at all (a baseline recorded before
  the gate kept them, a hand-written measurements file), or no torch or
  transformers version while the other side has one, or a served side whose
  server reported no version, is *unknown*: a note, never a warning;
* a kernel package a record does not name (the record is older than the gate's
  entry for it: ``compressed-tensors`` and ``kernels`` joined the record after
  the demo baseline was made) reads as not installed there, like the rule
  above: the gate cannot tell from the record whether that side's build ran it,
  and a note on every comparison with an older baseline would be noise;
* a served side against an in-process side is a comparison across paths by
  design (the reference pack is the contract between them), not an engine
  drift; torch and transformers are still compared.

Data flows one way: :func:`measured_with` reads a side's ``environment`` and
provenance, :func:`compare_versions` finds the drift and the unknowns,
:func:`gate.gating.verdict.decide` counts the drift as warnings and
:func:`version_notes` words both for the reports.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from gate.gating.against import DEFAULT_AGAINST
from gate.gating.verdict import VersionDrift

if TYPE_CHECKING:
    from gate.provenance import ModelProvenance

#: The packages whose versions count: (key in ``environment["packages"]``, name shown).
COMPARED_PACKAGES: tuple[tuple[str, str], ...] = (
    ("torch", "torch"),
    ("transformers", "transformers"),
    ("bitsandbytes", "bitsandbytes"),
    ("optimum_quanto", "optimum-quanto"),
    ("compressed_tensors", "compressed-tensors"),
    ("kernels", "kernels"),
)

#: The packages every in-process measurement runs: a record without one is unknown there.
CORE_PACKAGES: tuple[str, ...] = ("torch", "transformers")

#: The ``package`` of a drift between two different serving engines.
ENGINE = "engine"

Side = Literal["baseline", "candidate"]


@dataclass(frozen=True)
class MeasuredWith:
    """The versions one side's record names (see :func:`measured_with`)."""

    #: Whether the record lists package versions at all (old baselines do not).
    recorded: bool
    #: Shown package name -> version, ``None`` when recorded as not installed; a
    #: package absent here was not recorded.
    packages: Mapping[str, str | None] = field(default_factory=dict)
    #: The serving engine's name as the server gave it; ``None``: measured in process.
    engine: str | None = None
    #: The engine's version as the server reported it; ``None``: it reported none.
    engine_version: str | None = None


@dataclass(frozen=True)
class UnknownVersion:
    """What could not be compared: ``package`` on ``side`` (``None``: the whole record)."""

    side: Side
    package: str | None = None
    #: The other side's version, when it has one.
    other: str | None = None
    #: Whether ``package`` is the serving engine (its server reported no version).
    engine: bool = False


@dataclass(frozen=True)
class VersionCheck:
    """The version comparison of the candidate with baseline ``against``."""

    against: str
    drift: tuple[VersionDrift, ...] = ()
    unknown: tuple[UnknownVersion, ...] = ()


def _text(value: Any) -> str | None:
    return None if value is None or value == "" else str(value)


def measured_with(environment: Mapping[str, Any], provenance: ModelProvenance) -> MeasuredWith:
    """The versions a side's ``environment`` (:func:`gate.provenance.environment`) and
    provenance (the backend's ``provenance()``) name."""
    packages = environment.get("packages")
    engine = _text(provenance.engine)
    engine_version = _text(provenance.engine_version)
    if not isinstance(packages, Mapping):
        return MeasuredWith(recorded=False, engine=engine, engine_version=engine_version)
    return MeasuredWith(
        recorded=True,
        packages={
            shown: _text(packages[key]) for key, shown in COMPARED_PACKAGES if key in packages
        },
        engine=engine,
        engine_version=engine_version,
    )


def _engine_check(
    baseline: MeasuredWith, candidate: MeasuredWith, against: str
) -> tuple[list[VersionDrift], list[UnknownVersion]]:
    if baseline.engine is None or candidate.engine is None:
        return [], []  # not both served: no engine to compare
    if baseline.engine != candidate.engine:
        return [
            VersionDrift(
                ENGINE,
                f"{baseline.engine} {baseline.engine_version or '(version unknown)'}",
                f"{candidate.engine} {candidate.engine_version or '(version unknown)'}",
                against,
            )
        ], []
    unknown: list[UnknownVersion] = []
    if baseline.engine_version is None:
        unknown.append(
            UnknownVersion("baseline", baseline.engine, candidate.engine_version, engine=True)
        )
    if candidate.engine_version is None:
        unknown.append(
            UnknownVersion("candidate", candidate.engine, baseline.engine_version, engine=True)
        )
    if unknown:
        return [], unknown
    if baseline.engine_version != candidate.engine_version:
        return [
            VersionDrift(
                baseline.engine,
                str(baseline.engine_version),
                str(candidate.engine_version),
                against,
            )
        ], []
    return [], []


def compare_versions(
    baseline: MeasuredWith, candidate: MeasuredWith, *, against: str = DEFAULT_AGAINST
) -> VersionCheck:
    """The drift and the unknowns between two sides (the rules of the module docstring)."""
    drift: list[VersionDrift] = []
    unknown: list[UnknownVersion] = []
    if not baseline.recorded:
        unknown.append(UnknownVersion("baseline"))
    if not candidate.recorded:
        unknown.append(UnknownVersion("candidate"))
    if baseline.recorded and candidate.recorded:
        for _, name in COMPARED_PACKAGES:
            mine, theirs = name in baseline.packages, name in candidate.packages
            if mine and theirs:
                was, now = baseline.packages[name], candidate.packages[name]
                if was is not None and now is not None and was != now:
                    drift.append(VersionDrift(name, was, now, against))
            elif name not in CORE_PACKAGES:
                continue  # a record older than this kernel package's entry: as not installed
            elif mine and baseline.packages[name] is not None:
                unknown.append(UnknownVersion("candidate", name, baseline.packages[name]))
            elif theirs and candidate.packages[name] is not None:
                unknown.append(UnknownVersion("baseline", name, candidate.packages[name]))
    engine_drift, engine_unknown = _engine_check(baseline, candidate, against)
    return VersionCheck(
        against=against,
        drift=(*drift, *engine_drift),
        unknown=(*unknown, *engine_unknown),
    )


def check_refs(
    baselines: Mapping[str, MeasuredWith], candidate: MeasuredWith
) -> list[VersionCheck]:
    """:func:`compare_versions` of the candidate with each baseline ref, in ref order."""
    return [compare_versions(side, candidate, against=ref) for ref, side in baselines.items()]


def drift_of(checks: Sequence[VersionCheck]) -> list[VersionDrift]:
    """Every drift of ``checks`` (what :func:`gate.gating.verdict.decide` counts)."""
    return [item for check in checks for item in check.drift]


def _unknown_note(check: VersionCheck, item: UnknownVersion) -> str:
    who = f"baseline {check.against}" if item.side == "baseline" else "the candidate"
    if item.package is None:
        since = "since it was measured" if item.side == "baseline" else f"since {check.against}"
        return (
            f"{who} records no package versions (an old or hand-written record): whether "
            f"torch, transformers or the kernel packages moved {since} is unknown (not a failure)"
        )
    other_side = "candidate" if item.side == "baseline" else f"baseline {check.against}"
    other = f" ({other_side}: {item.other})" if item.other else ""
    if item.engine:
        return (
            f"the {item.package} server that measured {who} reported no version{other}: "
            "whether the engine moved is unknown (not a failure)"
        )
    return (
        f"{who} records no version of {item.package}{other}: "
        "whether it moved is unknown (not a failure)"
    )


def version_notes(checks: Sequence[VersionCheck], *, strict: bool) -> list[str]:
    """Report notes: one warning per drift (``--strict`` blocks), one note per unknown."""
    effect = "blocks under --strict" if strict else "a warning; --strict blocks"
    notes = [f"version drift ({effect}): {d.message}" for check in checks for d in check.drift]
    return notes + [_unknown_note(check, item) for check in checks for item in check.unknown]


__all__ = [
    "COMPARED_PACKAGES",
    "CORE_PACKAGES",
    "ENGINE",
    "MeasuredWith",
    "UnknownVersion",
    "VersionCheck",
    "check_refs",
    "compare_versions",
    "drift_of",
    "measured_with",
    "version_notes",
]

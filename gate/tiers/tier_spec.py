"""One declaration per tier: everything the gate knows of a tier, in a :class:`TierSpec`.

A tier's name is its metric catalog's ``TIER`` (:mod:`gate.metrics.catalog`),
which the gating layer reads to answer "is this a tier?"
(:func:`gate.metrics.registry.check_tier`) without importing the tiers. The rest
is declared here, once: its typed settings class, the metrics it owns, its
pytest suite, whether it runs when no tier is named, whether ``gate calibrate``
measures its noise, and whether its baseline holds on other hardware. Every
list of tiers the gate uses — the settings registry, the default tiers of
``gate run``, the tiers ``gate calibrate`` accepts, the demo's tiers, the
suite files, the ``--help`` texts — is derived from :data:`TIER_SPECS`.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType

from gate.errors import ConfigError
from gate.metrics.catalog import accuracy as accuracy_catalog
from gate.metrics.catalog import capability as capability_catalog
from gate.metrics.catalog import fidelity as fidelity_catalog
from gate.metrics.catalog import generation as generation_catalog
from gate.metrics.catalog import judge as judge_catalog
from gate.metrics.catalog import latency as latency_catalog
from gate.metrics.catalog import load as load_catalog
from gate.metrics.catalog import speculative as speculative_catalog
from gate.metrics.metric_spec import MetricSpec
from gate.metrics.registry import check_tier


@dataclass(frozen=True)
class TierSpec:
    """What the gate knows of one tier.

    ``default``: it runs when no tier list is given (``--tiers``, ``[run].tiers``);
    an opt-in tier runs only when named. ``calibrated``: ``gate calibrate``
    measures its noise. ``portable``: a baseline recorded on one machine holds on
    another (timings and served load do not). ``records_with``: the tiers whose
    records it reads when a baseline is recorded, so they are recorded in the same
    session (the generation tier reads the fidelity tier's reference pack).
    """

    name: str
    #: Its settings class as ``module:Class``, imported on first use (:attr:`settings`),
    #: so that reading the specs (the ``--help`` texts) imports no tier workload.
    settings_class: str
    metrics: tuple[MetricSpec, ...]
    default: bool
    calibrated: bool
    portable: bool
    records_with: tuple[str, ...] = ()

    @property
    def settings(self) -> type:
        """Its settings class (the ``[tiers.<name>]`` table; typed as one of
        :data:`gate.tiers.registry.TierSettings` where the registry reads it)."""
        module, _, name = self.settings_class.partition(":")
        found: type = getattr(importlib.import_module(module), name)
        return found

    @property
    def suite(self) -> str:
        """The file name of its pytest suite in ``suites/``."""
        return f"test_{self.name}.py"

    @property
    def metric_names(self) -> tuple[str, ...]:
        """The names of the metrics it owns, as its catalog declares them."""
        return tuple(m.name for m in self.metrics)


def _tier(
    catalog: ModuleType,
    settings: str,
    *,
    default: bool,
    calibrated: bool,
    portable: bool,
    records_with: tuple[str, ...] = (),
) -> TierSpec:
    name: str = catalog.TIER
    metrics: tuple[MetricSpec, ...] = catalog.SPECS
    return TierSpec(name, settings, metrics, default, calibrated, portable, records_with)


#: Every tier, sorted by name (the order of :data:`gate.metrics.registry.TIERS`).
#: The judge tier is opt-in: it needs judges and baseline outputs recorded for it,
#: which older baselines lack. The load tier is opt-in: it needs two served builds
#: (``--endpoint`` and ``--baseline-endpoint``) and GuideLLM. The speculative tier is
#: opt-in: it needs a build with a ``spec-*`` recipe; its baseline stays on the machine that
#: recorded it (its speed-up is a timing; its acceptance follows the hardware's numerics). Timings have their own
#: paired mode in ``gate calibrate`` (``--paired-latency``); the judge tier's noise is
#: its stability gate.
TIER_SPECS: tuple[TierSpec, ...] = (
    _tier(
        accuracy_catalog,
        "gate.tiers.accuracy:AccuracySettings",
        default=True,
        calibrated=True,
        portable=True,
    ),
    _tier(
        capability_catalog,
        "gate.tiers.capability:CapabilitySettings",
        default=True,
        calibrated=True,
        portable=True,
    ),
    _tier(
        fidelity_catalog,
        "gate.tiers.fidelity.settings:FidelitySettings",
        default=True,
        calibrated=True,
        portable=True,
    ),
    _tier(
        generation_catalog,
        "gate.tiers.generation:GenerationSettings",
        default=False,
        calibrated=True,
        portable=True,
        records_with=(fidelity_catalog.TIER,),
    ),
    _tier(
        judge_catalog,
        "gate.tiers.judge:JudgeSettings",
        default=False,
        calibrated=False,
        portable=True,
    ),
    _tier(
        latency_catalog,
        "gate.tiers.latency:LatencySettings",
        default=True,
        calibrated=False,
        portable=False,
    ),
    _tier(
        load_catalog,
        "gate.tiers.load:LoadTierSettings",
        default=False,
        calibrated=False,
        portable=False,
    ),
    _tier(
        speculative_catalog,
        "gate.tiers.speculative:SpeculativeSettings",
        default=False,
        calibrated=True,
        portable=False,
    ),
)

_BY_NAME: dict[str, TierSpec] = {spec.name: spec for spec in TIER_SPECS}

#: What "every tier" means when no tier list is given.
DEFAULT_TIERS: tuple[str, ...] = tuple(s.name for s in TIER_SPECS if s.default)
#: Tiers that run only when named.
OPT_IN_TIERS: tuple[str, ...] = tuple(s.name for s in TIER_SPECS if not s.default)
#: Tiers whose noise ``gate calibrate`` measures.
CALIBRATED_TIERS: tuple[str, ...] = tuple(s.name for s in TIER_SPECS if s.calibrated)
#: What ``gate calibrate`` measures when ``--tiers`` names nothing: the fidelity tier,
#: whose bounds a compression gate needs first.
DEFAULT_CALIBRATION_TIERS: tuple[str, ...] = (fidelity_catalog.TIER,)
#: Tiers whose baseline holds on any machine (a committed baseline can hold them).
PORTABLE_TIERS: tuple[str, ...] = tuple(s.name for s in TIER_SPECS if s.portable)


def check_recorded_together(tiers: Sequence[str]) -> None:
    """A baseline recorded over ``tiers`` holds what each tier reads when it records
    (:attr:`TierSpec.records_with`); a tier named without them is refused in one line (exit 4)."""
    for tier in tiers:
        lacking = [t for t in _BY_NAME[tier].records_with if t not in tiers]
        if lacking:
            together = ",".join(dict.fromkeys([*tiers, *lacking]))
            raise ConfigError(
                f"a baseline over {','.join(tiers)} lacks what the {tier} tier reads:"
                f" the {' and '.join(lacking)} tier's records",
                f"name them together: --tiers {together}",
            )


def recorded_tiers(tiers: Sequence[str]) -> tuple[str, ...]:
    """The tiers of ``tiers`` a baseline must record for a run over ``tiers`` to gate:
    all but those that read another tier's records (:attr:`TierSpec.records_with`), which
    gate on those records alone."""
    return tuple(t for t in tiers if not _BY_NAME[t].records_with)


def tier_spec(tier: str, where: str = "") -> TierSpec:
    """The spec of ``tier``; an unknown name raises :class:`~gate.errors.ConfigError`
    with a "did you mean" (``where`` prefixes the message)."""
    return _BY_NAME[check_tier(tier, where)]


def tiers_help() -> str:
    """The tiers as ``--tiers`` help names them: every tier, the opt-in ones marked."""
    return ", ".join(f"{s.name} (opt-in)" if not s.default else s.name for s in TIER_SPECS)


__all__ = [
    "CALIBRATED_TIERS",
    "DEFAULT_CALIBRATION_TIERS",
    "DEFAULT_TIERS",
    "OPT_IN_TIERS",
    "PORTABLE_TIERS",
    "TIER_SPECS",
    "TierSpec",
    "check_recorded_together",
    "recorded_tiers",
    "tier_spec",
    "tiers_help",
]

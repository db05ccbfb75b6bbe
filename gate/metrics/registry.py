"""The one registry of metric specs, strict, with "did you mean" on typos.

Each tier declares its specs in a torch-free module under
:mod:`gate.metrics.catalog` so that loading the registry (for config
validation, compare and reports) never imports a model library.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache

from gate.config import suggest as suggest  # re-exported: the registry's "did you mean"
from gate.errors import ConfigError
from gate.metrics.catalog import (
    accuracy,
    capability,
    fidelity,
    generation,
    judge,
    latency,
    load,
    speculative,
)
from gate.metrics.metric_spec import MetricSpec

#: Catalog modules, one per tier; each defines ``TIER`` (its name) and
#: ``SPECS: tuple[MetricSpec, ...]``. A tier's name is declared there once; what
#: else the gate knows of a tier (settings, suite, default, calibrate) is its
#: :class:`gate.tiers.tier_spec.TierSpec`.
CATALOG_MODULES = (
    fidelity,
    accuracy,
    capability,
    latency,
    judge,
    load,
    speculative,
    generation,
)

#: The tiers, one per catalog module, sorted: the one answer to "is this a tier?"
#: (:func:`check_tier`).
TIERS: tuple[str, ...] = tuple(sorted(module.TIER for module in CATALOG_MODULES))


@cache
def all_metrics() -> Mapping[str, MetricSpec]:
    """Every known metric by name. Duplicate names are a programming error."""
    specs: dict[str, MetricSpec] = {}
    for module in CATALOG_MODULES:
        for spec in module.SPECS:
            if spec.name in specs:
                raise RuntimeError(f"metric {spec.name!r} registered twice")
            specs[spec.name] = spec
    return specs


def check_tier(tier: str, where: str = "") -> str:
    """``tier`` when it is one of :data:`TIERS`, else :class:`ConfigError` with a "did you mean".

    ``where`` (a file, a table) prefixes the message. Every place that reads a
    tier name (``--tiers``, ``[run].tiers``, ``[tiers.<name>]`` of the run config
    and of thresholds.toml, ``GateRun.settings``) asks here.
    """
    if tier not in TIERS:
        prefix = f"{where}: " if where else ""
        raise ConfigError(f"{prefix}unknown tier {tier!r}", suggest(tier, list(TIERS)))
    return tier


def get_metric(name: str) -> MetricSpec:
    """The spec of ``name``; unknown names raise :class:`ConfigError` with a suggestion."""
    specs = all_metrics()
    try:
        return specs[name]
    except KeyError:
        raise ConfigError(f"unknown metric {name!r}", suggest(name, list(specs))) from None

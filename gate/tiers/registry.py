"""The tier settings registry: one typed settings class per tier.

Every ``[tiers.<name>]`` table — in ``thresholds.toml``, in a run config, in a
baseline's recorded ``tier_settings`` — becomes the frozen dataclass of its
tier here (:func:`build_settings`), so a misspelt key or a bad value fails
with a "did you mean" (:class:`~gate.errors.ConfigError`, exit 4) where the
table is read, before any model loads, instead of when the tier runs.

Where it sits in the layers: the tiers own their settings, so the registry
lives with them and imports only the tier modules (none of which imports
torch). The session layer validates every table through it as soon as
``thresholds.toml`` and the run config are loaded
(:func:`gate.session.settings.layer_settings`). The gating layer never
imports the tiers: ``thresholds.toml`` checks only the tier *names*, with the
one answer to "is this a tier?", :func:`gate.metrics.registry.check_tier`,
which this registry uses too.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Literal, TypeAlias, cast, overload

from gate.config import build_dataclass
from gate.errors import ConfigError
from gate.metrics.registry import check_tier
from gate.tiers.accuracy import AccuracySettings
from gate.tiers.capability import CapabilitySettings
from gate.tiers.fidelity.settings import FidelitySettings
from gate.tiers.generation import GenerationSettings
from gate.tiers.judge import JudgeSettings
from gate.tiers.latency import LatencySettings
from gate.tiers.load import LoadTierSettings
from gate.tiers.speculative import SpeculativeSettings
from gate.tiers.tier_spec import TIER_SPECS

#: The settings of any tier.
TierSettings: TypeAlias = (
    AccuracySettings
    | CapabilitySettings
    | FidelitySettings
    | GenerationSettings
    | JudgeSettings
    | LatencySettings
    | LoadTierSettings
    | SpeculativeSettings
)

#: Tier name -> its settings class, from each tier's :class:`~gate.tiers.tier_spec.TierSpec`.
SETTINGS: Mapping[str, type[TierSettings]] = MappingProxyType(
    {spec.name: cast("type[TierSettings]", spec.settings) for spec in TIER_SPECS}
)


def settings_class(tier: str, where: str = "") -> type[TierSettings]:
    """The settings class of ``tier`` (unknown tier: ``ConfigError`` with a did-you-mean)."""
    return SETTINGS[check_tier(tier, where)]


@overload
def build_settings(
    tier: Literal["accuracy"], table: Mapping[str, Any] | None = None, *, source: str = ""
) -> AccuracySettings: ...
@overload
def build_settings(
    tier: Literal["capability"], table: Mapping[str, Any] | None = None, *, source: str = ""
) -> CapabilitySettings: ...
@overload
def build_settings(
    tier: Literal["fidelity"], table: Mapping[str, Any] | None = None, *, source: str = ""
) -> FidelitySettings: ...
@overload
def build_settings(
    tier: Literal["generation"], table: Mapping[str, Any] | None = None, *, source: str = ""
) -> GenerationSettings: ...
@overload
def build_settings(
    tier: Literal["judge"], table: Mapping[str, Any] | None = None, *, source: str = ""
) -> JudgeSettings: ...
@overload
def build_settings(
    tier: Literal["latency"], table: Mapping[str, Any] | None = None, *, source: str = ""
) -> LatencySettings: ...
@overload
def build_settings(
    tier: Literal["load"], table: Mapping[str, Any] | None = None, *, source: str = ""
) -> LoadTierSettings: ...
@overload
def build_settings(
    tier: Literal["speculative"], table: Mapping[str, Any] | None = None, *, source: str = ""
) -> SpeculativeSettings: ...
@overload
def build_settings(
    tier: str, table: Mapping[str, Any] | None = None, *, source: str = ""
) -> TierSettings: ...


def build_settings(
    tier: str, table: Mapping[str, Any] | None = None, *, source: str = ""
) -> TierSettings:
    """The typed settings of ``tier`` from a ``[tiers.<tier>]`` table (``None``: defaults).

    The one settings builder of every tier (a literal tier name gives its own
    settings class to type checkers).

    ``source`` (a file, a baseline) prefixes error messages:
    ``thresholds.toml: tiers.latency: unknown key 'rnus' (did you mean 'runs'?)``.
    """
    cls = settings_class(tier, source)
    where = f"{source}: tiers.{tier}" if source else f"tiers.{tier}"
    return build_dataclass(cls, dict(table or {}), where=where)


def validate_tables(tables: Mapping[str, Any], *, source: str) -> dict[str, dict[str, Any]]:
    """Check every ``[tiers.<name>]`` table of one source; returns plain copies of them.

    Each table on its own must name a tier and build that tier's settings, so
    the error names the file the typo is in.
    """
    checked: dict[str, dict[str, Any]] = {}
    for tier, table in tables.items():
        check_tier(tier, source)
        if not isinstance(table, Mapping):
            raise ConfigError(f"{source}: tiers.{tier} must be a table", f"write [tiers.{tier}]")
        build_settings(tier, table, source=source)
        checked[tier] = dict(table)
    return checked


def machine_keys(tier: str) -> frozenset[str]:
    """Keys of ``tier`` that describe one run's machine or output (``MACHINE_KEYS``).

    They are never recorded into a baseline nor inherited from one.
    """
    keys: frozenset[str] = getattr(settings_class(tier), "MACHINE_KEYS", frozenset())
    return keys


__all__ = [
    "SETTINGS",
    "TierSettings",
    "build_settings",
    "machine_keys",
    "settings_class",
    "validate_tables",
]

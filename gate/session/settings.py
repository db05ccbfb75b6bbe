"""A session's tier settings: four layers merged, every table validated up front.

Layers, lowest first (a key in a later layer wins):

1. the settings the baseline was recorded with (its provenance's
   ``tier_settings``, less the machine keys): a candidate is measured like its
   baseline was, so prompt limits, MCQ sets and token counts match without
   being repeated;
2. ``[tiers.<name>]`` of ``thresholds.toml``;
3. ``[tiers.<name>]`` of the run config (``--config``);
4. command-line flags that stand for a tier setting (``--gate-history``,
   ``--gate-allow-hardware-mismatch``, ``--gate-paired-latency``: the
   ``setting`` column of :mod:`gate.session.options`).

Each layer is checked on its own against the tier settings registry
(:mod:`gate.tiers.registry`), so an error names the file the typo is in; then
every tier's merged table is built into its typed settings once, so a value
that only fails in combination fails too. All of it happens when the session's
inputs are read (:func:`gate.session.inputs.prepare_session`), before any
model is loaded.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from gate.metrics.registry import TIERS

if TYPE_CHECKING:
    from gate.store.baseline import Baseline

#: The merged ``[tiers.<name>]`` tables of one session, by tier.
TierTables = dict[str, dict[str, Any]]


def recorded_settings(baseline: Baseline | None) -> TierTables:
    """The tier settings ``baseline`` was recorded with, less the machine keys."""
    from gate.tiers.registry import machine_keys

    if baseline is None:
        return {}
    recorded = baseline.provenance.tier_settings or {}
    return {
        str(tier): {k: v for k, v in table.items() if k not in machine_keys(tier)}
        for tier, table in recorded.items()
        if tier in TIERS and isinstance(table, dict)
    }


def storable_settings(tables: Mapping[str, Mapping[str, Any]]) -> TierTables:
    """What a new baseline records of a session's settings: non-empty tables, no machine keys."""
    from gate.tiers.registry import machine_keys

    return {
        tier: {k: v for k, v in table.items() if k not in machine_keys(tier)}
        for tier, table in tables.items()
        if table
    }


def layer_settings(layers: Sequence[tuple[str, Mapping[str, Mapping[str, Any]]]]) -> TierTables:
    """Merge ``(source, tables)`` layers, lowest first, into one validated table per tier.

    ``source`` names the layer in errors (``thresholds.toml``, ``gate.toml``,
    ``baseline demo#0001 (fp16)``, ``command line``). Every tier is present in
    the result (empty when nothing sets it).
    """
    from gate.tiers.registry import build_settings, validate_tables

    merged: TierTables = {tier: {} for tier in TIERS}
    for source, tables in layers:
        for tier, table in validate_tables(tables, source=source).items():
            merged[tier].update(table)
    combined = "tier settings (baseline, thresholds, run config and flags combined)"
    for tier, table in merged.items():
        build_settings(tier, table, source=combined)
    return merged


__all__ = ["TierTables", "layer_settings", "recorded_settings", "storable_settings"]

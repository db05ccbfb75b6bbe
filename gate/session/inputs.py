"""What a gate session reads before it measures anything: :func:`prepare_session`.

The device (a CUDA device this machine lacks is refused), thresholds, the run config,
the baseline store and the baselines compared
with, and every tier's settings (:mod:`gate.session.settings`), all validated,
nothing loaded: a bad input is a :class:`~gate.errors.GateError` (exit 4, one
line) before any model library is imported. The pytest plugin calls it when a
session starts; ``gate run`` calls it for every candidate before the first
session starts, and ``gate run --dry-run`` stops after it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from gate.session.options import DEFAULT_STORE, SessionOptions
from gate.session.settings import TierTables, layer_settings, recorded_settings

if TYPE_CHECKING:
    from gate.gating.thresholds import Thresholds
    from gate.session.run import Mode
    from gate.store.baseline import Baseline, BaselineStore


@dataclass(frozen=True)
class SessionInputs:
    """A session's validated inputs."""

    mode: Mode
    model: str
    #: The options with the plugin's defaults filled in.
    options: SessionOptions
    model_slug: str
    thresholds: Thresholds
    store: BaselineStore
    #: Run mode: the baselines compared with, by ref, in command-line order.
    baselines: dict[str, Baseline]
    #: Every tier's merged, validated ``[tiers.<name>]`` table.
    tier_settings: TierTables


def model_slug(model: str, explicit: str | None) -> str:
    """The store slug of ``model``: ``explicit`` when given, else the model's own."""
    if explicit:
        return explicit
    from gate.models.spec import ModelSpec

    return ModelSpec.parse(model).slug


def prepare_session(mode: Mode, model: str, options: SessionOptions) -> SessionInputs:
    """Read and validate everything a ``mode`` session of ``model`` needs (loads no model)."""
    from gate.gating.thresholds import load_thresholds
    from gate.session.run_config import load_run_config
    from gate.store.baseline import BaselineStore
    from gate.tiers.registry import validate_tables

    options = options.with_defaults()
    if options.engine is None:  # a served model runs where its server put it
        from gate.hw.devices import check_device

        check_device(options.load.effective_device)  # --device cuda without CUDA: exit 4 here
    thresholds = load_thresholds(options.thresholds)
    validate_tables(thresholds.tiers, source=thresholds.source)
    run_config = load_run_config(options.config) if options.config is not None else None
    store = BaselineStore(options.store if options.store is not None else DEFAULT_STORE)
    slug = model_slug(model, options.model_slug)
    baselines: dict[str, Baseline] = {}
    if mode == "run":
        for ref in options.against or ("latest",):
            baselines[ref] = store.resolve(ref, slug)
    first = next(iter(baselines.values()), None)
    layers: list[tuple[str, TierTables]] = []
    if first is not None:
        layers.append((f"baseline {first.display}", recorded_settings(first)))
    layers.append((thresholds.source, {k: dict(v) for k, v in thresholds.tiers.items()}))
    if run_config is not None:
        layers.append((run_config.source, {k: dict(v) for k, v in run_config.tiers.items()}))
    layers.append(("command line", options.setting_overrides()))
    return SessionInputs(
        mode=mode,
        model=model,
        options=options,
        model_slug=slug,
        thresholds=thresholds,
        store=store,
        baselines=baselines,
        tier_settings=layer_settings(layers),
    )


__all__ = ["SessionInputs", "model_slug", "prepare_session"]

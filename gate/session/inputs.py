"""What a gate session reads before it measures anything: :func:`prepare_session`.

The device (a CUDA device this machine lacks is refused), thresholds, the run config,
the baseline store and the baselines compared
with, and every tier's settings (:mod:`gate.session.settings`), all validated,
nothing loaded: a bad input is a :class:`~gate.errors.GateError` (exit 4, one
line) before any model library is imported. ``gate run`` (and ``gate demo``,
``gate calibrate``, ``gate baseline record``) calls it for every session before
the first starts and hands the :class:`SessionInputs` to the session in its
request; the pytest plugin calls it only when pytest runs with ``--gate-model``
and no request. ``gate run --dry-run`` stops after it.

The files behind the inputs are read through one :class:`InputFiles` per run,
which parses each once: the run config (``gate.toml``), the thresholds file
and each baseline file, however many candidates use them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from gate.session.options import DEFAULT_STORE, SessionOptions
from gate.session.settings import TierTables, layer_settings, recorded_settings

if TYPE_CHECKING:
    from gate.gating.thresholds import Thresholds
    from gate.session.run import SessionMode
    from gate.session.run_config import RunConfig
    from gate.store.baseline import Baseline, BaselineStore


@dataclass
class InputFiles:
    """The input files of one run, each parsed once, by path: run configs, thresholds
    files (validated tier tables included) and baseline files. A run with N candidates
    shares one, so ``gate.toml``, ``thresholds.toml`` and each baseline are read once."""

    _configs: dict[Path, RunConfig] = field(default_factory=dict)
    _thresholds: dict[Path | None, Thresholds] = field(default_factory=dict)
    _baselines: dict[Path, Baseline] = field(default_factory=dict)

    def run_config(self, path: Path) -> RunConfig:
        """The run config at ``path`` (:func:`gate.session.run_config.load_run_config`)."""
        key = Path(path)
        if key not in self._configs:
            from gate.session.run_config import load_run_config

            self._configs[key] = load_run_config(key)
        return self._configs[key]

    def thresholds(self, path: Path | None) -> Thresholds:
        """The thresholds at ``path`` (``None``: ``./thresholds.toml``, else the packaged
        default), their ``[tiers.<name>]`` tables validated."""
        if path not in self._thresholds:
            from gate.gating.thresholds import load_thresholds
            from gate.tiers.registry import validate_tables

            loaded = load_thresholds(path)
            validate_tables(loaded.tiers, source=loaded.source)
            self._thresholds[path] = loaded
        return self._thresholds[path]

    def baseline(self, store: BaselineStore, ref: str, slug: str) -> Baseline:
        """The baseline ``ref`` of ``slug`` in ``store`` (located each time, read once per file)."""
        path = store.locate(ref, slug)
        if path not in self._baselines:
            from gate.store.baseline import load_baseline_file

            self._baselines[path] = load_baseline_file(path)
        return self._baselines[path]


@dataclass(frozen=True)
class SessionInputs:
    """A session's validated inputs."""

    mode: SessionMode
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
    #: The run config whose ``[tiers]`` are one layer of :attr:`tier_settings` (``None``: none).
    run_config: RunConfig | None = None


def store_slug(model: str, explicit: str | None) -> str:
    """The store slug a session of ``model`` uses: ``explicit`` (``--model-slug``) when
    given, else the model's own (:func:`gate.slugs.model_slug`)."""
    if explicit:
        return explicit
    from gate.models.model_spec import ModelSpec

    return ModelSpec.parse(model).slug


def prepare_session(
    mode: SessionMode,
    model: str,
    options: SessionOptions,
    *,
    run_config: RunConfig | None = None,
    files: InputFiles | None = None,
) -> SessionInputs:
    """Read and validate everything a ``mode`` session of ``model`` needs (loads no model).

    ``run_config``: the run config already parsed (else the one at ``options.config``,
    when given); ``files``: the run's :class:`InputFiles` (else a new one).
    """
    from gate.store.baseline import BaselineStore

    files = files if files is not None else InputFiles()
    options = options.with_defaults()
    if options.engine is None:  # a served model runs where its server put it
        from gate.hw.devices import check_device

        check_device(options.load.effective_device)  # --device cuda without CUDA: exit 4 here
    thresholds = files.thresholds(options.thresholds)
    if run_config is None and options.config is not None:
        run_config = files.run_config(options.config)
    store = BaselineStore(options.store if options.store is not None else DEFAULT_STORE)
    slug = store_slug(model, options.model_slug)
    baselines: dict[str, Baseline] = {}
    if mode == "run":
        for ref in options.against or ("latest",):
            baselines[ref] = files.baseline(store, ref, slug)
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
        run_config=run_config,
    )


__all__ = ["InputFiles", "SessionInputs", "prepare_session", "store_slug"]

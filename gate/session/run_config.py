"""The run config (``gate.toml``): which candidates to gate, against what, with which tier settings.

Layout (documented with an example in docs/run-config.md)::

    [run]                        # defaults for every candidate (all optional)
    baseline = "demo"            # model the candidates are built from: its store slug
    against = ["fp16"]           # baseline refs to compare with (default: latest)
    tiers = ["fidelity", "capability"]   # default: every available tier
    calibration = "calib.jsonl"  # calibration texts for prune-wanda (default: packaged set)
    store = "baselines"          # baseline store (default: --store / $GATE_STORE / ./baselines)
    thresholds = "thresholds.toml"
    strict = false

    [[candidates]]               # one table per build to gate
    name = "nf4"                 # unique; used in report file names
    model = "demo"               # id, local directory or "demo"
    recipe = "bnb-nf4"           # optional; also: against, tiers, calibration, model_slug

    [tiers.fidelity]             # settings of a tier (each tier validates its own keys)
    max_new_tokens = 64

Everything is validated before any model is loaded: unknown keys and tiers
fail with a did-you-mean, recipes are parsed (:func:`gate.models.recipes.parse_recipe`),
candidate names must be unique file-name-safe words. Every error is a
:class:`~gate.errors.ConfigError` (exit 4) with one line. Relative paths are
relative to the directory ``gate`` runs in, as the tiers' own path settings are.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gate.errors import ConfigError
from gate.gating.thresholds import build_dataclass, check_keys, load_toml
from gate.metrics.registry import TIERS, suggest

TOP_KEYS = ("run", "candidates", "tiers")
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def _check_tiers(tiers: tuple[str, ...] | None, where: str) -> None:
    if tiers is None:
        return
    if not tiers:
        raise ConfigError(f"{where}: the tier list is empty", f"name tiers from {', '.join(TIERS)}")
    for tier in tiers:
        if tier not in TIERS:
            raise ConfigError(f"{where}: unknown tier {tier!r}", suggest(tier, list(TIERS)))


@dataclass(frozen=True)
class RunDefaults:
    """``[run]``: defaults for every candidate."""

    baseline: str | None = None
    model_slug: str | None = None
    against: tuple[str, ...] = ()
    tiers: tuple[str, ...] | None = None
    calibration: Path | None = None
    store: Path | None = None
    thresholds: Path | None = None
    strict: bool = False

    def __post_init__(self) -> None:
        _check_tiers(self.tiers, "run.tiers")


@dataclass(frozen=True)
class CandidateConfig:
    """One ``[[candidates]]`` table as written (``None``: use the ``[run]`` default)."""

    name: str
    model: str
    recipe: str | None = None
    against: tuple[str, ...] | None = None
    tiers: tuple[str, ...] | None = None
    calibration: Path | None = None
    model_slug: str | None = None

    def __post_init__(self) -> None:
        if not NAME_RE.match(self.name):
            raise ValueError(
                f"name {self.name!r} must be 1-64 letters, digits, '.', '_' or '-'"
                " (it names report files)"
            )
        if not self.model.strip():
            raise ValueError("model is empty")
        _check_tiers(self.tiers, f"candidate {self.name!r} tiers")


@dataclass(frozen=True)
class Candidate:
    """A candidate with every default resolved: what one gate session measures."""

    name: str
    model: str
    recipe: str | None
    against: tuple[str, ...]
    tiers: tuple[str, ...] | None
    calibration: Path | None
    model_slug: str | None

    @property
    def recipe_label(self) -> str:
        """The recipe as shown in reports (``none`` when absent)."""
        return self.recipe or "none"


@dataclass(frozen=True)
class RunConfig:
    """A validated run config."""

    source: str
    run: RunDefaults = field(default_factory=RunDefaults)
    candidates: tuple[CandidateConfig, ...] = ()
    #: ``[tiers.<name>]`` tables, as written.
    tiers: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def slug_for(self, candidate: CandidateConfig) -> str | None:
        """Store slug: the candidate's, else ``[run].model_slug``, else the baseline model's."""
        if candidate.model_slug:
            return candidate.model_slug
        if self.run.model_slug:
            return self.run.model_slug
        if self.run.baseline:
            from gate.models.spec import ModelSpec

            return ModelSpec.parse(self.run.baseline).slug
        return None

    def resolve(self, candidate: CandidateConfig) -> Candidate:
        """``candidate`` with the ``[run]`` defaults filled in."""
        return Candidate(
            name=candidate.name,
            model=candidate.model,
            recipe=candidate.recipe,
            against=candidate.against if candidate.against is not None else self.run.against,
            tiers=candidate.tiers if candidate.tiers is not None else self.run.tiers,
            calibration=candidate.calibration or self.run.calibration,
            model_slug=self.slug_for(candidate),
        )

    def resolved(self) -> list[Candidate]:
        """Every candidate, resolved, in file order."""
        return [self.resolve(c) for c in self.candidates]


def _validate_tier_settings(tier: str, settings: Mapping[str, Any], where: str) -> None:
    """Let the tier check its own keys now (``settings_from``), so typos fail before loading."""
    try:
        module = importlib.import_module(f"gate.tiers.{tier}")
    except ModuleNotFoundError:
        return  # tier not built in this checkout: reported as unavailable at run time
    settings_from = getattr(module, "settings_from", None)
    if settings_from is None:
        return
    try:
        settings_from(dict(settings))
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc.message}", exc.hint) from None


def parse_run_config(data: Mapping[str, Any], *, source: str) -> RunConfig:
    """Validate a parsed run config mapping (see the module docstring)."""
    check_keys(data, TOP_KEYS, source)
    run_table = data.get("run", {})
    run = build_dataclass(RunDefaults, run_table, where=f"{source}: run")
    raw_candidates = data.get("candidates", [])
    if not isinstance(raw_candidates, list):
        raise ConfigError(
            f"{source}: 'candidates' must be an array of tables", "write [[candidates]] sections"
        )
    candidates: list[CandidateConfig] = []
    for index, table in enumerate(raw_candidates):
        where = f"{source}: candidates[{index}]"
        if isinstance(table, Mapping) and isinstance(table.get("name"), str):
            where = f"{source}: candidate {table['name']!r}"
        candidate = build_dataclass(CandidateConfig, table, where=where)
        if candidate.recipe is not None:
            from gate.models.recipes import format_recipe, parse_recipe

            try:
                recipe = format_recipe(parse_recipe(candidate.recipe))
            except ConfigError as exc:
                raise ConfigError(f"{where}: {exc.message}", exc.hint) from None
            candidate = replace(candidate, recipe=recipe)
        if any(c.name == candidate.name for c in candidates):
            raise ConfigError(
                f"{source}: candidate name {candidate.name!r} is used twice",
                "give every candidate its own name",
            )
        candidates.append(candidate)
    tiers_table = data.get("tiers", {})
    if not isinstance(tiers_table, Mapping):
        raise ConfigError(f"{source}: 'tiers' must be a table", "write [tiers.<name>] sections")
    tiers: dict[str, Mapping[str, Any]] = {}
    for tier, settings in tiers_table.items():
        if tier not in TIERS:
            raise ConfigError(f"{source}: unknown tier {tier!r}", suggest(tier, list(TIERS)))
        if not isinstance(settings, Mapping):
            raise ConfigError(f"{source}: tiers.{tier} must be a table", f"[tiers.{tier}]")
        _validate_tier_settings(tier, settings, f"{source}: tiers.{tier}")
        tiers[tier] = dict(settings)
    return RunConfig(source=source, run=run, candidates=tuple(candidates), tiers=tiers)


def load_run_config(path: Path) -> RunConfig:
    """Read and validate a run config TOML file (errors: :class:`ConfigError`, exit 4)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"run config {path} not found", "pass an existing --config file")
    return parse_run_config(load_toml(path), source=str(path))


__all__ = [
    "Candidate",
    "CandidateConfig",
    "RunConfig",
    "RunDefaults",
    "load_run_config",
    "parse_run_config",
]

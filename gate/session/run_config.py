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
    runs_on = ["self-hosted", "linux", "x64", "gpu"]   # CI runner labels (``--matrix``)
    device = "auto"              # auto (GPU when CUDA is present, else CPU), cpu, cuda, cuda:N
    dtype = "bfloat16"           # auto (the checkpoint's own), float32, bfloat16, float16
    trust_remote_code = false    # run the model repository's own code when loading
    watch = ["recipes/**"]       # other paths whose change the gate workflow gates

    [[candidates]]               # one table per build to gate
    name = "nf4"                 # unique; used in report file names
    model = "demo"               # id, local directory, .gguf file or "demo"
    recipe = "bnb-nf4"           # optional; also: against, tiers, calibration, model_slug,
                                 # allow_pickle, allow_incomplete_weights (default false),
                                 # device, dtype, trust_remote_code (over [run]'s),
                                 # runs_on (the runner labels of its matrix job)

    engine = "llama.cpp"         # optional, gguf-* recipes: run the made file in llama.cpp
                                 # (the [run] key too; docs/gguf.md), or instead:
    [candidates.engine]          # optional: gate the build as a serving engine serves it
    serve = "python -m vllm.entrypoints.openai.api_server --model ./build"  # or endpoint = URL
    served_model = "build"       # also: api_key_env, max_concurrency, request_timeout_s,
                                 # startup_timeout_s, server_log, baseline_serve/_endpoint

    [tiers.fidelity]             # settings of a tier (each tier validates its own keys)
    max_new_tokens = 64

    [[judges]]                   # judges of the judge tier (default: the packaged judge)
    name = "qwen"                # unique; also: family, endpoint, api_key_env,
    model = "Qwen/Qwen2.5-7B-Instruct"   # max_output_tokens, concurrency
    endpoint = "http://127.0.0.1:8001/v1"

``[run.engine]`` is the default engine of every candidate without its own; an
engine table's keys are the fields of
:class:`~gate.engines.settings.EngineSettings` (each also a ``gate run`` option).

Everything is validated before any model is loaded: unknown keys and tiers
fail with a did-you-mean (every ``[tiers.<name>]`` table is built into its
tier's settings class, :mod:`gate.tiers.registry`), recipes are parsed
(:func:`canonical_recipe`),
candidate names must be unique file-name-safe words. Every error is a
:class:`~gate.errors.ConfigError` (exit 4) with one line. Relative paths are
relative to the directory ``gate`` runs in, as the tiers' own path settings are.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gate.config import build_dataclass, check_keys, load_toml_file
from gate.engines.settings import EngineSettings
from gate.errors import ConfigError, UsageError
from gate.metrics.registry import TIERS, check_tier
from gate.models.load_settings import LoadSettings

TOP_KEYS = ("run", "candidates", "tiers", "judges")
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
#: A runner label: what ``runs-on`` of a GitHub Actions job may name.
LABEL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
#: The runner labels of a candidate's matrix job when neither it nor ``[run]`` names any:
#: the self-hosted GPU runner of docs/self-hosted-runners.md.
DEFAULT_RUNS_ON: tuple[str, ...] = ("self-hosted", "linux", "x64", "gpu")


def _check_runs_on(labels: tuple[str, ...] | None) -> None:
    """``runs_on``: a non-empty list of distinct runner labels (``None``: not given)."""
    if labels is None:
        return
    if not labels:
        raise ValueError('runs_on is empty (name the runner labels, e.g. ["self-hosted", "gpu"])')
    for label in labels:
        if not LABEL_RE.match(label):
            raise ValueError(
                f"runs_on label {label!r} must be 1-100 letters, digits, '.', '_' or '-'"
            )
    if len(set(labels)) != len(labels):
        raise ValueError(f"runs_on names a label twice: {list(labels)}")


def _check_runtime(engine: EngineSettings | str | None) -> None:
    """``engine = "..."`` (a string) names the engine that runs a ``gguf-*`` recipe's file."""
    from gate.models.methods.registry import runtimes

    engines = runtimes()
    if isinstance(engine, str) and engine not in engines:
        spelled = " or ".join(f"engine = {name!r}" for name in engines)
        raise ValueError(
            f"engine {engine!r} is not an engine gate runs: write {spelled}, or an"
            " engine table ([candidates.engine] serve = ...)"
        )


def split_engine(
    engine: EngineSettings | str | None,
) -> tuple[EngineSettings | None, str | None]:
    """An ``engine`` key as ``(served engine, runtime)``: a table is a served build, a string
    the engine that runs a ``gguf-*`` recipe's file."""
    if isinstance(engine, str):
        return None, engine
    return engine, None


def _check_tiers(tiers: tuple[str, ...] | None, where: str) -> None:
    if tiers is None:
        return
    if not tiers:
        raise ConfigError(f"{where}: the tier list is empty", f"name tiers from {', '.join(TIERS)}")
    for tier in tiers:
        check_tier(tier, where)


def canonical_recipe(text: str, where: str = "") -> str:
    """``text`` parsed as a recipe (or a stack, ``a+b``) and written back in canonical form
    (``PRUNE-WANDA:0.50`` -> ``prune-wanda:0.5``); an unknown name, a bad argument or parts
    that cannot stack is a one-line ConfigError."""
    from gate.models.stack import parse_stack

    try:
        return str(parse_stack(text))
    except ConfigError as exc:
        if not where:
            raise
        raise ConfigError(f"{where}: {exc.message}", exc.hint) from None


@dataclass(frozen=True)
class RunDefaults(LoadSettings):
    """``[run]``: defaults for every candidate (with the keys of
    :class:`~gate.models.load_settings.LoadSettings`: ``device``, ``dtype``,
    ``trust_remote_code``)."""

    baseline: str | None = None
    model_slug: str | None = None
    against: tuple[str, ...] = ()
    tiers: tuple[str, ...] | None = None
    calibration: Path | None = None
    store: Path | None = None
    thresholds: Path | None = None
    strict: bool = False
    #: An engine table (a served build), or ``"llama.cpp"``: the engine that runs a ``gguf-*``
    #: recipe's file (``--engine``; :func:`split_engine`).
    engine: EngineSettings | str | None = None
    #: Runner labels of every candidate's matrix job (``gate run --matrix``).
    runs_on: tuple[str, ...] | None = None
    #: Globs of other repository paths the builds depend on (recipes, quantization
    #: configs): the gate workflow gates a change to them (:mod:`gate.ci.watched`).
    watch: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_tiers(self.tiers, "run.tiers")
        _check_runs_on(self.runs_on)
        _check_runtime(self.engine)


@dataclass(frozen=True)
class CandidateConfig(LoadSettings):
    """One ``[[candidates]]`` table as written (``None``: use the ``[run]`` default); its
    ``device``, ``dtype`` and ``trust_remote_code`` keys override ``[run]``'s."""

    name: str
    model: str
    recipe: str | None = None
    against: tuple[str, ...] | None = None
    tiers: tuple[str, ...] | None = None
    calibration: Path | None = None
    model_slug: str | None = None
    #: Load a pickle-only checkpoint (``--allow-pickle``).
    allow_pickle: bool = False
    #: Measure weights that do not match the config (``--allow-incomplete-weights``).
    allow_incomplete_weights: bool = False
    #: An engine table, or ``"llama.cpp"`` (as ``[run].engine``).
    engine: EngineSettings | str | None = None
    #: Runner labels of its matrix job (``None``: ``[run].runs_on``).
    runs_on: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_runs_on(self.runs_on)
        _check_runtime(self.engine)
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
    allow_pickle: bool = False
    allow_incomplete_weights: bool = False
    #: The serving engine the build is gated on (``None``: loaded in process).
    engine: EngineSettings | None = None
    #: The engine that runs its ``gguf-*`` recipe's file (``--engine llama.cpp``; ``None``:
    #: the file is loaded dequantized in process).
    runtime: str | None = None
    #: The runner labels of its matrix job (``gate run --matrix``).
    runs_on: tuple[str, ...] = DEFAULT_RUNS_ON
    #: Device, dtype and remote-code trust (command line over the candidate over ``[run]``).
    load: LoadSettings = field(default_factory=LoadSettings)

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
    #: The file it was parsed from (``None``: built by a command, e.g. ``gate demo``).
    path: Path | None = None
    #: sha256 of that file's bytes, as parsed (the results document's ``config_sha256``).
    sha256: str | None = None

    def slug_for(self, candidate: CandidateConfig) -> str | None:
        """Store slug: the candidate's, else ``[run].model_slug``, else the baseline model's."""
        if candidate.model_slug:
            return candidate.model_slug
        if self.run.model_slug:
            return self.run.model_slug
        if self.run.baseline:
            from gate.models.model_spec import ModelSpec

            return ModelSpec.parse(self.run.baseline).slug
        return None

    def resolve(self, candidate: CandidateConfig) -> Candidate:
        """``candidate`` with the ``[run]`` defaults filled in."""
        engine, runtime = split_engine(
            candidate.engine if candidate.engine is not None else self.run.engine
        )
        return Candidate(
            name=candidate.name,
            model=candidate.model,
            recipe=candidate.recipe,
            against=candidate.against if candidate.against is not None else self.run.against,
            tiers=candidate.tiers if candidate.tiers is not None else self.run.tiers,
            calibration=candidate.calibration or self.run.calibration,
            model_slug=self.slug_for(candidate),
            allow_pickle=candidate.allow_pickle,
            allow_incomplete_weights=candidate.allow_incomplete_weights,
            engine=engine,
            runtime=runtime,
            runs_on=candidate.runs_on or self.run.runs_on or DEFAULT_RUNS_ON,
            load=candidate.settings().over(self.run.settings()),
        )

    def resolved(self) -> list[Candidate]:
        """Every candidate, resolved, in file order."""
        return [self.resolve(c) for c in self.candidates]


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
            candidate = replace(candidate, recipe=canonical_recipe(candidate.recipe, where))
        if any(c.name == candidate.name for c in candidates):
            raise ConfigError(
                f"{source}: candidate name {candidate.name!r} is used twice",
                "give every candidate its own name",
            )
        candidates.append(candidate)
    tiers_table = data.get("tiers", {})
    if not isinstance(tiers_table, Mapping):
        raise ConfigError(f"{source}: 'tiers' must be a table", "write [tiers.<name>] sections")
    tiers_table = _with_judges(data.get("judges"), tiers_table, source)
    from gate.tiers.registry import validate_tables

    tiers = validate_tables(tiers_table, source=source)
    return RunConfig(source=source, run=run, candidates=tuple(candidates), tiers=tiers)


def built_run_config(
    source: str,
    *,
    run: RunDefaults | None = None,
    candidates: Sequence[CandidateConfig] = (),
    tiers: Mapping[str, Mapping[str, Any]] | None = None,
) -> RunConfig:
    """A run config a command builds from typed parts (no file): the tables checked as a
    ``gate.toml``'s are (unknown tiers or keys: :class:`ConfigError`), recipes made canonical,
    candidate names unique."""
    from gate.tiers.registry import validate_tables

    named: list[CandidateConfig] = []
    for candidate in candidates:
        where = f"{source}: candidate {candidate.name!r}"
        if candidate.recipe is not None:
            candidate = replace(candidate, recipe=canonical_recipe(candidate.recipe, where))
        if any(c.name == candidate.name for c in named):
            raise ConfigError(f"{where} is named twice", "give every candidate its own name")
        named.append(candidate)
    return RunConfig(
        source=source,
        run=run if run is not None else RunDefaults(),
        candidates=tuple(named),
        tiers=validate_tables(tiers or {}, source=source),
    )


def _with_judges(judges: Any, tiers_table: Mapping[str, Any], source: str) -> Mapping[str, Any]:
    """``[[judges]]`` folded into ``[tiers.judge] judges`` (validated with that tier's settings)."""
    if judges is None:
        return tiers_table
    if not isinstance(judges, list):
        raise ConfigError(
            f"{source}: 'judges' must be an array of tables", "write [[judges]] sections"
        )
    judge_table = tiers_table.get("judge", {})
    if isinstance(judge_table, Mapping) and "judges" in judge_table:
        raise ConfigError(
            f"{source}: judges are given both as [[judges]] and in [tiers.judge]",
            "keep the [[judges]] tables only",
        )
    merged = dict(judge_table) if isinstance(judge_table, Mapping) else judge_table
    if isinstance(merged, dict):
        merged["judges"] = judges
    return {**tiers_table, "judge": merged}


@dataclass(frozen=True)
class CandidateOverrides:
    """What the command line says about the candidates (``None``/empty: not given).

    ``candidate`` gates that one model (the config then only lends its ``[run]``
    defaults); without it every ``[[candidates]]`` entry of the config runs, and
    ``against``, ``tiers`` and ``calibration`` override each entry's.
    """

    candidate: str | None = None
    recipe: str | None = None
    against: tuple[str, ...] = ()
    tiers: tuple[str, ...] | None = None
    calibration: Path | None = None
    model_slug: str | None = None
    #: ``--serve``/``--endpoint`` and their options (replaces a config's engine table).
    engine: EngineSettings | None = None
    #: ``--engine llama.cpp`` (replaces a config's ``engine``).
    runtime: str | None = None
    #: ``--only NAME``: just that ``[[candidates]]`` entry (one job of the CI matrix).
    only: str | None = None
    #: ``--device``, ``--dtype``, ``--trust-remote-code`` (each over the config's).
    load: LoadSettings = field(default_factory=LoadSettings)


def build_candidates(config: RunConfig | None, overrides: CandidateOverrides) -> list[Candidate]:
    """The candidates to gate: ``--candidate`` alone, else every ``[[candidates]]`` entry.

    Command-line values win over the config's; ``--only NAME`` keeps that entry
    alone. A ``--recipe`` or ``--model-slug`` without ``--candidate``, ``--only``
    with ``--candidate`` or naming no entry (with a did-you-mean), or nothing to
    gate at all, is a :class:`~gate.errors.UsageError` (exit 4).
    """
    if overrides.only is not None and overrides.candidate is not None:
        raise UsageError(
            "--only picks a [[candidates]] entry of --config; --candidate gates a model of its own",
            "drop one of them",
        )
    if overrides.candidate is not None:
        return [_single(config.run if config is not None else RunDefaults(), overrides)]
    if config is None:
        raise UsageError(
            "nothing to gate", "give --candidate MODEL or --config gate.toml with [[candidates]]"
        )
    if overrides.recipe is not None or overrides.model_slug is not None:
        raise UsageError(
            "--recipe and --model-slug apply to --candidate only",
            "set them per [[candidates]] entry in the config",
        )
    if not config.candidates:
        raise UsageError(
            f"{config.source} names no candidates", "add [[candidates]] tables or --candidate"
        )
    chosen = config.resolved()
    if overrides.only is not None:
        chosen = [only_candidate(chosen, overrides.only, config.source)]
    engine_given = overrides.engine is not None or overrides.runtime is not None
    resolved: list[Candidate] = []
    for c in chosen:
        given = command_line_over(overrides, c)
        resolved.append(
            replace(
                c,
                against=given.against,
                tiers=given.tiers,
                calibration=given.calibration,
                engine=overrides.engine if engine_given else c.engine,
                runtime=overrides.runtime if engine_given else c.runtime,
                load=given.load,
            )
        )
    return resolved


def command_line_over(
    overrides: CandidateOverrides, below: Candidate | RunDefaults
) -> CandidateOverrides:
    """The one override rule: the command line over ``[[candidates]]`` over ``[run]``.

    ``below`` is a candidate already resolved over ``[run]``
    (:meth:`RunConfig.resolve`), or ``[run]`` itself for a model the command line
    names (``gate run --candidate``, ``gate baseline record``, ``gate calibrate``).
    What the command line gives (``against``, ``tiers``, ``calibration``,
    ``model_slug``; each of the load settings) wins; what it leaves out is
    ``below``'s. The engine is not layered here: a command-line engine replaces the
    config's whole (:func:`build_candidates`).
    """
    load = below.load if isinstance(below, Candidate) else below.settings()
    return replace(
        overrides,
        against=overrides.against or below.against,
        tiers=overrides.tiers or below.tiers,
        calibration=overrides.calibration or below.calibration,
        model_slug=overrides.model_slug or below.model_slug,
        load=overrides.load.over(load),
    )


def only_candidate(candidates: list[Candidate], name: str, source: str) -> Candidate:
    """The candidate called ``name`` (``--only``); none is a one-line UsageError with a
    did-you-mean over the names there are."""
    for candidate in candidates:
        if candidate.name == name:
            return candidate
    from gate.config import suggest

    names = [c.name for c in candidates]
    raise UsageError(f"--only {name!r}: {source} has no such candidate", suggest(name, names))


def _single(defaults: RunDefaults, overrides: CandidateOverrides) -> Candidate:
    from gate.models.model_spec import ModelSpec

    model = str(overrides.candidate)
    baseline_slug = ModelSpec.parse(defaults.baseline).slug if defaults.baseline else None
    engine, runtime = split_engine(defaults.engine)
    if overrides.engine is not None or overrides.runtime is not None:
        engine, runtime = overrides.engine, overrides.runtime
    given = command_line_over(overrides, defaults)
    return Candidate(
        name=ModelSpec.parse(model).slug,
        model=model,
        recipe=overrides.recipe,
        against=given.against,
        tiers=given.tiers,
        calibration=given.calibration,
        model_slug=given.model_slug or baseline_slug,
        engine=engine,
        runtime=runtime,
        runs_on=defaults.runs_on or DEFAULT_RUNS_ON,
        load=given.load,
    )


def load_run_config(path: Path) -> RunConfig:
    """Read and validate a run config TOML file (errors: :class:`ConfigError`, exit 4)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"run config {path} not found", "pass an existing --config file")
    data, digest = load_toml_file(path)
    return replace(parse_run_config(data, source=str(path)), path=path, sha256=digest)


__all__ = [
    "DEFAULT_RUNS_ON",
    "Candidate",
    "CandidateConfig",
    "CandidateOverrides",
    "RunConfig",
    "RunDefaults",
    "build_candidates",
    "built_run_config",
    "canonical_recipe",
    "command_line_over",
    "load_run_config",
    "only_candidate",
    "parse_run_config",
]

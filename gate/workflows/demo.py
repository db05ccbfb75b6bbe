"""``gate demo``: gate a panel of compressed builds of the demo model.

The packaged demo model (``gate/assets/demo_model``) has a committed baseline
(ref ``fp32``) with its reference pack in the packaged store
``gate/assets/baselines``. The demo is a run config, built typed (:func:`demo_config`: one
``[[candidates]]`` entry per recipe, ``[run]`` against ``fp32`` in the packaged
store, ``[tiers.*]`` = :data:`DEMO_SETTINGS`) handed to the same planner, checks
and candidate loop as ``gate run --config`` (:mod:`gate.workflows.plan`,
:func:`gate.workflows.multirun.run_candidates`): same suites, plugin,
comparison and report per build, then one summary table of headline values.

Each build's verdicts, exit code and console report are its ``gate run``
session's (the one judgement, :func:`gate.session.judgement.judge_run`, at the end
of the session); the panel's rows are read from each session's ``Results``
(:func:`candidate_result`) and decide nothing again. The demo's own exit code
(:func:`panel_exit_code`) is a statement about the panel, not a verdict:
blocked candidates are the point of the demo, so a run in which some builds
are blocked is a successful demo (exit 0). It fails (nonzero) when a candidate
run errors, or when the control build (recipe ``none``, the baseline itself)
is not approved, which would mean the gate flaps.

The demo's tier settings (:data:`DEMO_SETTINGS`) keep the panel under five
minutes on a two-core CPU; the committed baseline is recorded with the same
settings (:func:`record_baseline`, ``gate demo --record-baseline``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gate.cache import cache_root
from gate.errors import ExitCode, decided
from gate.gating.against import DEFAULT_AGAINST
from gate.metrics.catalog import accuracy as accuracy_catalog
from gate.metrics.catalog import capability as capability_catalog
from gate.metrics.catalog import fidelity as fidelity_catalog
from gate.metrics.catalog import generation as generation_catalog
from gate.metrics.catalog import judge as judge_catalog
from gate.metrics.catalog import latency as latency_catalog
from gate.metrics.catalog import speculative as speculative_catalog
from gate.models.load_settings import LoadSettings
from gate.tiers.tier_spec import DEFAULT_TIERS as SPEC_DEFAULT_TIERS
from gate.tiers.tier_spec import PORTABLE_TIERS, recorded_tiers

if TYPE_CHECKING:
    from gate.session.run_config import Candidate, RunConfig
    from gate.workflows.multirun import CandidateOutcome

#: The panel: the control first, then builds from mild to severe compression.
DEFAULT_RECIPES: tuple[str, ...] = (
    "none",
    "bnb-int8",
    "bnb-nf4",
    "quanto-int4",
    "quanto-int2",
    "prune-magnitude:0.5",
    "drop-layers:2",
)
#: Tiers the committed baseline holds: the portable ones (latency and load are left
#: out: their figures hold only on the hardware they were measured on).
BASELINE_TIERS: tuple[str, ...] = PORTABLE_TIERS
#: Tiers gated by default: the default tiers the baseline holds (the judge tier is
#: opt-in, ``--tiers judge``: the packaged judge model answers). The seven-build panel
#: takes about 2 min on a quiet two-core CPU (README, "What the demo shows", with its
#: source run); on a heavily loaded machine `--tiers fidelity` keeps it short.
DEFAULT_TIERS: tuple[str, ...] = tuple(t for t in BASELINE_TIERS if t in SPEC_DEFAULT_TIERS)
CONTROL = "none"
#: Ref and label of the committed baseline: the demo model is stored and recorded in float32.
BASELINE_REF = "fp32"
MODEL = "demo"

#: ``[tiers.<name>]`` settings of the demo run config (and of its committed baseline).
DEMO_SETTINGS: Mapping[str, Mapping[str, Any]] = {
    "fidelity": {"limit": 96, "max_new_tokens": 64, "batch_size": 16},
    "accuracy": {"perplexity_max_tokens": 4096, "mcq_limit": 60, "batch_size": 16},
    "capability": {
        "families": ["arithmetic_easy", "arithmetic_medium", "structured_output"],
        "arithmetic_easy": 40,
        "arithmetic_medium": 40,
        "structured_output": 30,
        "max_new_tokens": 40,
        "batch_size": 40,
    },
    # The packaged judge (gate/assets/judge_model) compares each build's answers with
    # the baseline's stored ones (artifact judge-outputs of the committed baseline).
    # Replies of 96 tokens: the length the packaged judge was trained on (its
    # TRAINING.md); asked about 48-token replies it mostly answers by position.
    "judge": {"limit": 64, "max_new_tokens": 96, "batch_size": 16},
    # Paired A/B timing against the unmodified model in the same session: the
    # committed baseline holds no timings (they only hold on the machine that
    # recorded them), and interleaving cancels a shared machine's drift.
    "latency": {
        "paired": True,
        "new_tokens": 16,
        "batch_sizes": [1],
        "warmup": 2,
        "runs": 10,
        "memory_runs": 1,
    },
}

#: Headline metrics shown per candidate in the summary table, in order, when measured.
HEADLINES: tuple[tuple[str, str], ...] = (
    (fidelity_catalog.CGA, "CGA"),
    (fidelity_catalog.KL_MEAN, "mean KL"),
    (fidelity_catalog.KL_P99, "KL p99"),
    (accuracy_catalog.PERPLEXITY, "ppl"),
    (accuracy_catalog.FLIPS, "flips"),
    (capability_catalog.ARITHMETIC_EASY, "arith"),
    (generation_catalog.STOP_RATE, "stops"),
    (generation_catalog.LENGTH_RATIO, "length"),
    (generation_catalog.LOOP_RATE, "loops"),
    (judge_catalog.ELO_DELTA, "Elo"),
    (latency_catalog.TOKENS_PER_S, "tok/s"),
    (speculative_catalog.ACCEPTANCE_LENGTH, "accept len"),
    (speculative_catalog.LOSSLESS, "lossless"),
    (speculative_catalog.SPEEDUP, "speed-up"),
)


@dataclass(frozen=True)
class DemoModel:
    """A model ``gate demo`` can gate a panel of: where its baseline lives and how it is measured.

    The packaged demo model has a committed baseline; a real model's baseline is
    recorded on the first run (:func:`ensure_baseline`) into a store of its own,
    named after the settings, and reused by the runs after it.
    """

    #: The model source (``demo`` or a packaged model's name, :mod:`gate.models.packaged`).
    name: str
    #: Ref and label of its baseline.
    baseline_ref: str
    settings: Mapping[str, Mapping[str, Any]]
    recipes: tuple[str, ...]
    tiers: tuple[str, ...]
    #: Tiers recorded in its baseline.
    baseline_tiers: tuple[str, ...]
    #: Whether the baseline ships in the packaged store (else it is recorded on first use).
    committed: bool
    #: Whether the panel gates the model's GGUF as a dequantized safetensors copy, made
    #: once in the cache (:func:`gate.models.gguf.dequantized_dir`): bitsandbytes recipes
    #: apply to it, and each build loads in a second instead of dequantizing again.
    dequantize_once: bool = False
    #: The build the baseline is recorded with (None: the model as it is).
    baseline_recipe: str | None = None
    #: The panel's control: the build its baseline was recorded from, gated again; the
    #: demo fails when it is not approved.
    control: str = CONTROL

    def source(self) -> str:
        """The model source the panel's sessions load (the copy's directory, made here
        on first use, for :attr:`dequantize_once`)."""
        if not self.dequantize_once:
            return self.name
        from gate.models.gguf import dequantized_dir
        from gate.models.model_spec import ModelSpec

        gguf = ModelSpec.parse(self.name).gguf_file
        if gguf is None:
            return self.name
        return str(dequantized_dir(gguf))

    @property
    def slug(self) -> str:
        """The baseline store slug (the model's name)."""
        return self.name


#: SmolLM2's panel settings: 32 prompts of the packaged set through its chat template,
#: 48 greedy tokens each; perplexity on 2048 tokens and 120 multiple-choice questions
#: (sized for a 2-core CPU; a GPU runner affords the docs' 64 x 64 and 180).
SMOLLM2_SETTINGS: Mapping[str, Mapping[str, Any]] = {
    "fidelity": {"limit": 32, "max_new_tokens": 48, "batch_size": 16},
    "accuracy": {"perplexity_max_tokens": 2048, "mcq_limit": 120, "batch_size": 16},
}

#: The tiers SmolLM2's panel gates: those that finish in a CPU session's time.
SMOLLM2_TIERS: tuple[str, ...] = ("fidelity", "accuracy", "generation")

#: The models of ``gate demo --model``.
DEMO_MODELS: Mapping[str, DemoModel] = {
    MODEL: DemoModel(
        name=MODEL,
        baseline_ref=BASELINE_REF,
        settings=DEMO_SETTINGS,
        recipes=DEFAULT_RECIPES,
        tiers=DEFAULT_TIERS,
        baseline_tiers=BASELINE_TIERS,
        committed=True,
    ),
    "smollm2": DemoModel(
        name="smollm2",
        baseline_ref="q41",
        settings=SMOLLM2_SETTINGS,
        recipes=(
            "none",
            "bnb-int8",
            "quanto-int8",
            "bnb-nf4",
            "quanto-int4",
            "quanto-int2",
            "prune-wanda:0.5",
            "kv-snapkv:0.5",
            "drop-layers:2",
        ),
        tiers=SMOLLM2_TIERS,
        # the generation tier reads the baseline's answers from its fidelity pack, so the
        # baseline records fidelity and accuracy (docs/real-models.md)
        baseline_tiers=recorded_tiers(SMOLLM2_TIERS),
        committed=False,
        dequantize_once=True,
    ),
}


#: ``[tiers.speculative]`` of the speculative panels: SmolLM2's sized for a 2-core CPU
#: (a quanto int4 draft or target costs about 0.2 s a token there: docs/speculative.md).
SPECULATIVE_SETTINGS: Mapping[str, Mapping[str, Mapping[str, Any]]] = {
    MODEL: {"speculative": {"limit": 4, "max_new_tokens": 16, "speed_prompts": 2}},
    "smollm2": {"speculative": {"limit": 8, "max_new_tokens": 24, "speed_prompts": 2}},
}
#: The speculative panel's baseline build: the model as the target, drafted by its own
#: weights quantized to int4 (a self-draft); its ref.
SPECULATIVE_BASELINE = "spec-draft:quanto-int4"
SPECULATIVE_REF = "spec4"
#: The speculative panel after its control (:data:`SPECULATIVE_BASELINE`): a re-compressed
#: draft of the same target, a draft that reads the prompt (n-gram lookup), and a
#: compressed target with the baseline's draft (the target's quantization moves what the
#: draft predicts).
SPECULATIVE_RECIPES: tuple[str, ...] = (
    SPECULATIVE_BASELINE,
    "spec-draft:quanto-int2",
    "spec-ngram:3",
    "quanto-int4+" + SPECULATIVE_BASELINE,
)
#: The panels ``gate demo --panel NAME`` builds from a model's own entry.
PANELS: tuple[str, ...] = ("paper", "speculative")


def speculative_panel(model: DemoModel) -> DemoModel:
    """``model``'s speculative panel: a baseline recorded with :data:`SPECULATIVE_BASELINE`
    (ref :data:`SPECULATIVE_REF`) on the speculative tier, in a store of its own."""
    return replace(
        model,
        baseline_ref=SPECULATIVE_REF,
        settings=SPECULATIVE_SETTINGS[model.name],
        recipes=SPECULATIVE_RECIPES,
        tiers=(speculative_catalog.TIER,),
        baseline_tiers=(speculative_catalog.TIER,),
        committed=False,
        baseline_recipe=SPECULATIVE_BASELINE,
        control=SPECULATIVE_BASELINE,
    )


def demo_model(name: str, panel: str | None = None) -> DemoModel:
    """The panel model called ``name`` (its ``panel`` variant: ``speculative``); an unknown
    one is a one-line ConfigError."""
    from gate.errors import ConfigError

    if name not in DEMO_MODELS:
        raise ConfigError(
            f"gate demo has no model {name!r}", f"choose one of {', '.join(DEMO_MODELS)}"
        )
    if panel == "speculative":
        return speculative_panel(DEMO_MODELS[name])
    return DEMO_MODELS[name]


def store_dir(model: DemoModel | None = None) -> Path:
    """Where the panel's baseline lives: the packaged store for the demo model (committed),
    else a cache directory per model and settings (``$XDG_CACHE_HOME/gate/demo/<slug>-<hash>``),
    recorded on the first run."""
    import hashlib

    from gate.workflows.plan import packaged_store

    if model is None or model.committed:
        return packaged_store()
    digest = hashlib.sha256(
        json.dumps(
            {
                "settings": model.settings,
                "tiers": model.baseline_tiers,
                "recipe": model.baseline_recipe,
            },
            sort_keys=True,
        ).encode()
    ).hexdigest()[:12]
    return cache_root() / "demo" / f"{model.slug}-{digest}"


def has_baseline(store: Path, model: DemoModel) -> bool:
    """Whether ``store`` holds ``model``'s baseline ref (a store that cannot be read: no)."""
    from gate.errors import GateError
    from gate.store.baseline import BaselineStore

    if not (store / model.slug).is_dir():
        return False
    try:
        return model.baseline_ref in BaselineStore(store).refs(model.slug)
    except GateError:
        return False


def candidate_name(recipe: str) -> str:
    """The run config name of the candidate built with ``recipe`` (``prune-magnitude_0_5``);
    with ``--json-dir`` its results are ``<name>.json``."""
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in recipe)


def demo_config(
    recipes: Sequence[str] = DEFAULT_RECIPES,
    tiers: Sequence[str] = DEFAULT_TIERS,
    *,
    store: Path | None = None,
    model: DemoModel | None = None,
    source: str | None = None,
) -> RunConfig:
    """The demo's run config, built typed (no file): what a ``gate.toml`` would say.

    ``[run]``: the model's store slug, ``against`` its baseline ref, ``tiers``
    and ``store`` (default: :func:`store_dir`); one candidate per recipe (the
    control, ``none``, has no recipe); ``[tiers.<name>]`` tables of the model's
    settings, checked as a ``gate.toml``'s are.
    """
    from gate.session.run_config import CandidateConfig, RunDefaults, built_run_config

    model = model or DEMO_MODELS[MODEL]
    run = RunDefaults(
        model_slug=model.slug,
        against=(model.baseline_ref,),
        tiers=tuple(tiers),
        store=store if store is not None else store_dir(model),
    )
    candidates = [
        CandidateConfig(
            name=candidate_name(recipe),
            model=source or model.name,
            recipe=None if recipe == CONTROL else recipe,
        )
        for recipe in recipes
    ]
    return built_run_config(
        f"gate demo ({model.name})", run=run, candidates=candidates, tiers=model.settings
    )


@dataclass(frozen=True)
class CandidateResult:
    """One candidate of the panel: its exit code and headline values."""

    recipe: str
    exit_code: int
    verdict: str
    values: Mapping[str, float] = field(default_factory=dict)
    json_path: Path | None = None
    error: str | None = None
    #: Slice values of each whole metric (``"fidelity.cga" -> {"category:code": 0.9}``).
    breakdowns: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    #: Tiers on whose requests the compression never acted: their values are not shown.
    idle_tiers: frozenset[str] = frozenset()

    def cell(self, metric: str, digits: str = ".4g") -> str:
        """A table cell: the value, ``not exercised``, or ``-`` when not measured."""
        if metric.partition(".")[0] in self.idle_tiers:
            return "not exercised"
        value = self.values.get(metric)
        return "-" if value is None else format(value, digits)


@dataclass(frozen=True)
class DemoResult:
    """The whole panel and the demo's own exit code."""

    candidates: tuple[CandidateResult, ...]
    exit_code: ExitCode
    problem: str | None = None


def candidate_result(
    outcome: CandidateOutcome, baseline_ref: str = BASELINE_REF
) -> CandidateResult:
    """One row of the panel from the outcome of its gate session."""
    recipe = outcome.candidate.recipe_label
    code = int(outcome.exit_code)
    if outcome.error is not None:
        return CandidateResult(recipe, code, "error", error=outcome.error)
    results = outcome.results
    if results is None:
        return CandidateResult(recipe, code, "error", error="no results were written")
    whole = [
        v
        for v in results.verdicts
        if v.slice is None and v.against in (baseline_ref, DEFAULT_AGAINST)
    ]
    idle = frozenset(item.tier for item in results.not_exercised)
    values = {v.metric: v.value for v in whole if v.tier not in idle}
    breakdowns = {v.metric: dict(v.breakdown) for v in whole if v.breakdown and v.tier not in idle}
    return CandidateResult(
        recipe,
        code,
        results.verdict,
        values,
        outcome.json,
        breakdowns=breakdowns,
        idle_tiers=idle,
    )


def panel_exit_code(
    candidates: Sequence[CandidateResult], control_recipe: str = CONTROL
) -> tuple[ExitCode, str | None]:
    """The demo's exit code from its builds' own exit codes: 0 when every run completed and
    the control (``control_recipe``) passed."""
    for c in candidates:
        if not decided(c.exit_code):
            return ExitCode(c.exit_code), f"candidate {c.recipe} ended with exit {c.exit_code}"
    control = next((c for c in candidates if c.recipe == control_recipe), None)
    if control is not None and control.exit_code != ExitCode.OK:
        return ExitCode.BLOCKED, "the control build (the baseline itself) was not approved"
    return ExitCode.OK, None


def run_demo(
    recipes: Sequence[str] = DEFAULT_RECIPES,
    tiers: Sequence[str] = DEFAULT_TIERS,
    *,
    json_dir: Path | None = None,
    store: Path | None = None,
    model: DemoModel | None = None,
    on_start: Callable[[str], None] | None = None,
    on_done: Callable[[CandidateResult], None] | None = None,
    load: LoadSettings | None = None,
) -> DemoResult:
    """Gate every recipe against the model's baseline; returns the panel.

    The panel is checked like any run config before the first build loads
    (unknown recipes, baseline refs, settings, a CUDA ``load.device`` without
    CUDA): a bad input raises. A model whose baseline is not committed has it
    recorded first (:func:`ensure_baseline`).
    """
    model = model or DEMO_MODELS[MODEL]
    source = model.source()
    if not model.committed:
        store = ensure_baseline(model, store, load, source)
    from gate.report.outputs import ReportTargets
    from gate.session.options import SessionOptions
    from gate.session.run_config import CandidateOverrides
    from gate.store.writable import writing
    from gate.workflows.multirun import run_candidates, session_runner
    from gate.workflows.plan import check_plan, plan_run

    config = demo_config(recipes, tiers, store=store, model=model, source=source)
    overrides = CandidateOverrides(load=load or LoadSettings())
    plan = plan_run(config, overrides, SessionOptions(), ReportTargets())
    checked = check_plan(plan)
    if json_dir is not None:
        with writing("--json-dir", json_dir):
            json_dir.mkdir(parents=True, exist_ok=True)
    results: list[CandidateResult] = []

    def targets_for(candidate: Candidate) -> ReportTargets:
        if json_dir is None:
            return ReportTargets()
        return ReportTargets(json=json_dir / f"{candidate.name}.json")

    def started(index: int, total: int, candidate: Candidate) -> None:
        if on_start is not None:
            on_start(candidate.recipe_label)

    def finished(outcome: CandidateOutcome) -> None:
        results.append(candidate_result(outcome, model.baseline_ref))
        if on_done is not None:
            on_done(results[-1])

    run_candidates(
        plan.candidates,
        session_runner(checked),
        targets_for,
        on_start=started,
        on_done=finished,
    )
    code, problem = panel_exit_code(results, model.control)
    if json_dir is not None:
        write_summary(json_dir / "summary.json", results, code, problem)
    return DemoResult(tuple(results), code, problem)


def write_summary(
    path: Path, candidates: Sequence[CandidateResult], code: ExitCode, problem: str | None
) -> None:
    """The panel as JSON (one entry per candidate with its headline values); a failed write
    is a one-line UsageError (exit 4)."""
    from gate.store.atomic import write_atomic
    from gate.store.writable import writing

    data = {
        "kind": "gate-demo",
        "exit_code": int(code),
        "problem": problem,
        "candidates": [
            {
                "recipe": c.recipe,
                "exit_code": c.exit_code,
                "verdict": c.verdict,
                "error": c.error,
                "results": str(c.json_path) if c.json_path else None,
                "metrics": {name: c.values[name] for name, _ in HEADLINES if name in c.values},
            }
            for c in candidates
        ],
    }
    with writing("--json-dir", path):
        write_atomic(path, (json.dumps(data, indent=2) + "\n").encode())


def demo_summary_table(
    candidates: Sequence[CandidateResult], baseline_ref: str = BASELINE_REF
) -> Any:
    """A rich table: candidate, headline metrics that any candidate has, verdict."""
    from rich.table import Table

    shown = [
        (name, label) for name, label in HEADLINES if any(name in c.values for c in candidates)
    ]
    table = Table(title=f"gate demo: candidates against the {baseline_ref} baseline")
    table.add_column("candidate")
    for _, label in shown:
        table.add_column(label, justify="right")
    table.add_column("verdict")
    styles = {
        "pass": "green",
        "warn": "yellow",
        "block": "bold red",
        "not_exercised": "bold magenta",
        "error": "bold magenta",
    }
    for c in candidates:
        cells = [c.cell(name) for name, _ in shown]
        word = c.verdict.replace("_", " ").upper() if c.error is None else f"ERROR: {c.error}"
        table.add_row(c.recipe, *cells, f"[{styles.get(c.verdict, '')}]{word}[/]")
    return table


def record_baseline(
    store: Path | None = None,
    tiers: Sequence[str] = BASELINE_TIERS,
    model: DemoModel | None = None,
    load: LoadSettings | None = None,
    source: str | None = None,
) -> ExitCode:
    """Record the model's baseline (its ref, e.g. ``fp32`` of the demo model) with its
    panel settings (maintainers: the committed demo baseline)."""
    from gate.session.inputs import prepare_session
    from gate.session.options import SessionOptions
    from gate.session.runner import run_session

    model = model or DEMO_MODELS[MODEL]
    store = store if store is not None else store_dir(model)
    source = source or model.source()
    options = SessionOptions(
        store=store,
        label=model.baseline_ref,
        ref=model.baseline_ref,
        model_slug=model.slug,
        load=load or LoadSettings(),
        recipe=model.baseline_recipe,
    )
    config = demo_config(tiers=tiers, store=store, model=model, source=source)
    # a CUDA device without CUDA: exit 4 here; the session reads nothing again
    inputs = prepare_session("record", source, options, run_config=config)
    return run_session(inputs, tiers=tiers)


def ensure_baseline(
    model: DemoModel,
    store: Path | None = None,
    load: LoadSettings | None = None,
    source: str | None = None,
) -> Path:
    """The store holding ``model``'s baseline, recorded there first when it is missing
    (a failed recording raises: the panel has nothing to compare with)."""
    import sys

    from gate.errors import ModelLoadError

    store = store if store is not None else store_dir(model)
    if has_baseline(store, model):
        return store
    print(
        f"gate demo: recording the {model.name} baseline ({model.baseline_ref}, tiers "
        f"{','.join(model.baseline_tiers)}) into {store}; later runs reuse it",
        file=sys.stderr,
        flush=True,
    )
    code = record_baseline(store, model.baseline_tiers, model, load, source)
    if code != ExitCode.OK or not has_baseline(store, model):
        raise ModelLoadError(
            f"recording the {model.name} baseline ended with exit {int(code)}",
            "see the session's report above",
        )
    return store

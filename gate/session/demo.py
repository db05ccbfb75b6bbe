"""``gate demo``: gate a panel of compressed builds of the demo model.

The packaged demo model (``gate/assets/demo_model``) has a committed baseline
(ref ``fp32``) with its reference pack in the packaged store
``gate/assets/baselines``. The demo is a run config (:func:`write_config`: one
``[[candidates]]`` entry per recipe, ``[run]`` against ``fp32`` in the packaged
store, ``[tiers.*]`` = :data:`DEMO_SETTINGS`) handed to the same planner, checks
and candidate loop as ``gate run --config`` (:mod:`gate.session.plan`,
:func:`gate.session.multirun.run_candidates`): same suites, plugin,
comparison and report per build, then one summary table of headline values. Blocked candidates are the point of the demo: a run in which some
builds are blocked is a successful demo (exit 0). It fails (nonzero) when a
candidate run errors, or when the control build (recipe ``none``, the baseline
itself) is not approved, which would mean the gate flaps.

The demo's tier settings (:data:`DEMO_SETTINGS`) keep the panel under five
minutes on a two-core CPU; the committed baseline is recorded with the same
settings (:func:`record_baseline`, ``gate demo --record-baseline``).
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gate.errors import ExitCode, decided

if TYPE_CHECKING:
    from gate.session.multirun import Outcome
    from gate.session.run_config import Candidate

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
#: Tiers the committed baseline holds (latency is left out: its baseline only
#: holds on the hardware it was recorded on).
BASELINE_TIERS: tuple[str, ...] = ("fidelity", "accuracy", "capability", "judge")
#: Tiers gated by default: the first three the baseline holds (the judge tier is
#: opt-in, ``--tiers judge``: the packaged judge model answers). The seven-build panel
#: takes about 75 s on an idle two-core CPU (about 10 s per build); on a heavily
#: loaded machine `--tiers fidelity` keeps it short.
DEFAULT_TIERS: tuple[str, ...] = ("fidelity", "accuracy", "capability")
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
    ("fidelity.cga", "CGA"),
    ("fidelity.kl_mean", "mean KL"),
    ("fidelity.kl_p99", "KL p99"),
    ("accuracy.perplexity", "ppl"),
    ("accuracy.flips", "flips"),
    ("capability.arithmetic_easy", "arith"),
    ("judge.elo_delta", "Elo"),
    ("latency.tokens_per_s", "tok/s"),
)


def store_dir() -> Path:
    """The packaged baseline store holding the demo model's committed baseline (gate/assets)."""
    from gate.session.plan import packaged_store

    return packaged_store()


def candidate_name(recipe: str) -> str:
    """The run config name of the candidate built with ``recipe`` (``prune-magnitude_0_5``);
    with ``--json-dir`` its results are ``<name>.json``."""
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in recipe)


def write_config(
    path: Path,
    recipes: Sequence[str] = DEFAULT_RECIPES,
    tiers: Sequence[str] = DEFAULT_TIERS,
    *,
    store: Path | None = None,
    settings: Mapping[str, Mapping[str, Any]] = DEMO_SETTINGS,
) -> Path:
    """Write the demo's run config (``gate.toml``) at ``path``.

    ``[run]``: the demo model's store slug, ``against = ["fp32"]``, ``tiers``
    and ``store`` (default: the packaged store); one ``[[candidates]]`` entry per
    recipe (the control, ``none``, has no recipe); ``[tiers.<name>]`` tables.
    """
    run = {
        "model_slug": MODEL,
        "against": [BASELINE_REF],
        "tiers": list(tiers),
        "store": str(store if store is not None else store_dir()),
    }
    lines = ["# gate demo run config (generated by gate.session.demo)", "[run]"]
    lines += [f"{key} = {json.dumps(value)}" for key, value in run.items()]
    for recipe in recipes:
        lines += ["", "[[candidates]]", f"name = {json.dumps(candidate_name(recipe))}"]
        lines.append(f"model = {json.dumps(MODEL)}")
        if recipe != CONTROL:
            lines.append(f"recipe = {json.dumps(recipe)}")
    for tier, table in settings.items():
        lines += ["", f"[tiers.{tier}]"]
        lines += [f"{key} = {json.dumps(value)}" for key, value in table.items()]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


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


def candidate_result(outcome: Outcome) -> CandidateResult:
    """One row of the panel from the outcome of its gate session."""
    recipe = outcome.candidate.recipe_label
    code = int(outcome.exit_code)
    if outcome.error is not None:
        return CandidateResult(recipe, code, "error", error=outcome.error)
    results = outcome.results
    if results is None:
        return CandidateResult(recipe, code, "error", error="no results were written")
    whole = [
        v for v in results.verdicts if v.slice is None and v.against in (BASELINE_REF, "baseline")
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


def judge(candidates: Sequence[CandidateResult]) -> tuple[ExitCode, str | None]:
    """The demo's exit code: 0 when every run completed and the control passed."""
    for c in candidates:
        if not decided(c.exit_code):
            return ExitCode(c.exit_code), f"candidate {c.recipe} ended with exit {c.exit_code}"
    control = next((c for c in candidates if c.recipe == CONTROL), None)
    if control is not None and control.exit_code != ExitCode.OK:
        return ExitCode.BLOCKED, "the control build (the baseline itself) was not approved"
    return ExitCode.OK, None


def run_demo(
    recipes: Sequence[str] = DEFAULT_RECIPES,
    tiers: Sequence[str] = DEFAULT_TIERS,
    *,
    json_dir: Path | None = None,
    store: Path | None = None,
    on_start: Callable[[str], None] | None = None,
    on_done: Callable[[CandidateResult], None] | None = None,
) -> DemoResult:
    """Gate every recipe against the committed baseline; returns the panel.

    The panel is checked like any run config before the first build loads
    (unknown recipes, baseline refs, settings): a bad input raises.
    """
    from gate.report.outputs import ReportTargets
    from gate.session.multirun import run_candidates, session_runner
    from gate.session.options import SessionOptions
    from gate.session.plan import check_plan, plan_run
    from gate.session.run_config import CandidateOverrides
    from gate.store.writable import writing

    with tempfile.TemporaryDirectory(prefix="gate-demo-") as tmp:
        config = write_config(Path(tmp) / "demo.toml", recipes, tiers, store=store)
        plan = plan_run(config, CandidateOverrides(), SessionOptions(), ReportTargets())
        check_plan(plan)
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

        def finished(outcome: Outcome) -> None:
            results.append(candidate_result(outcome))
            if on_done is not None:
                on_done(results[-1])

        run_candidates(
            plan.candidates,
            session_runner(plan),
            targets_for,
            on_start=started,
            on_done=finished,
        )
    code, problem = judge(results)
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


def summary_table(candidates: Sequence[CandidateResult]) -> Any:
    """A rich table: candidate, headline metrics that any candidate has, verdict."""
    from rich.table import Table

    shown = [
        (name, label) for name, label in HEADLINES if any(name in c.values for c in candidates)
    ]
    table = Table(title=f"gate demo: candidates against the {BASELINE_REF} baseline")
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


def record_baseline(store: Path | None = None, tiers: Sequence[str] = BASELINE_TIERS) -> ExitCode:
    """Record the demo model's baseline (ref ``fp32``) with the demo settings (maintainers)."""
    from gate.session.options import SessionOptions
    from gate.session.runner import run_pytest

    with tempfile.TemporaryDirectory(prefix="gate-demo-") as tmp:
        options = SessionOptions(
            store=store if store is not None else store_dir(),
            label=BASELINE_REF,
            ref=BASELINE_REF,
            config=write_config(Path(tmp) / "demo.toml", tiers=tiers, store=store),
            model_slug=MODEL,
        )
        return run_pytest("record", MODEL, options, tiers=tiers)

"""``gate run``: measure one candidate build, or every candidate of a run config, and gate it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from gate.commands.options import (
    TIERS_HELP,
    collect_engine,
    collect_load,
    collect_options,
    collect_reports,
    engine_options,
    explicit_store,
    json_option,
    load_options,
    measurements_option,
    model_trust_options,
    report_options,
    session_option,
    store_option,
    strict_option,
    thresholds_option,
)
from gate.errors import ExitCode, UsageError
from gate.report.outputs import ReportTargets
from gate.session.options import SessionOptions
from gate.session.run_config import CandidateOverrides, RunConfig

if TYPE_CHECKING:
    from gate.workflows.plan import RunPlan

_F = TypeVar("_F", bound=Callable[..., Any])

#: ``--engine``: the engine that runs a ``gguf-*`` recipe's file (docs/gguf.md).
RUNTIME_HELP = (
    "Run the gguf-* recipe's file in this engine: llama.cpp (gate makes the file, starts "
    "llama-server on it, gates it and stops it; default: loaded dequantized in process)."
)


def runtime_option(command: _F) -> _F:
    """``--engine ENGINE`` (keyword ``runtime``), of ``gate run`` and ``gate baseline record``."""
    from gate.models.methods.registry import runtimes

    return click.option(
        "--engine", "runtime", type=click.Choice(list(runtimes())), default=None, help=RUNTIME_HELP
    )(command)


def effective_store(store: Path, config: RunConfig | None) -> Path:
    """``--store`` / ``$GATE_STORE`` when given, else ``[run].store``, else the default."""
    given = explicit_store(store)
    if given is None and config is not None and config.run.store is not None:
        return config.run.store
    return given or store


def candidate_overrides(*, tiers: str | None, **given: Any) -> CandidateOverrides:
    """What ``gate run``'s command line says about the candidates, typed once (``tiers``
    parsed; the rest as :class:`~gate.session.run_config.CandidateOverrides` names it)."""
    from gate.session.runner import parse_tiers

    return CandidateOverrides(tiers=parse_tiers(tiers), **given)


def shared_options(*, store: Path, **given: Any) -> SessionOptions:
    """The session options ``gate run`` gives every candidate's session (``--store`` only
    when the user gave it: else the config's, :func:`gate.workflows.plan.plan_run`)."""
    return SessionOptions(store=explicit_store(store), **given)


#: The parameters :func:`candidate_overrides` collects (besides ``load`` and ``engine``).
_CANDIDATE_PARAMS = ("candidate", "recipe", "against", "tiers", "calibration", "model_slug")
#: The parameters :func:`shared_options` collects.
_SHARED_PARAMS = (
    "store",
    "thresholds",
    "strict",
    "verbose",
    "history",
    "allow_hardware_mismatch",
    "paired_latency",
    "allow_pickle",
    "allow_incomplete_weights",
)


@click.command("run")
@collect_load
@collect_engine
@collect_options(
    "overrides",
    (*_CANDIDATE_PARAMS, "runtime", "only", "load", "engine"),
    candidate_overrides,
)
@collect_options("shared", _SHARED_PARAMS, shared_options)
@collect_reports("json", "html", "junit", "markdown", "measurements")
@click.option(
    "--candidate",
    help="Model id, local directory, .gguf file, or 'demo' (without it: every candidate of --config).",
)
@session_option("recipe", help="Compression recipe applied at load time (e.g. bnb-nf4).")
@session_option(
    "against",
    metavar="REF",
    help="Baseline ref to compare with (repeatable; default: latest).",
)
@click.option("--tiers", help=TIERS_HELP)
@json_option
@session_option(
    "config",
    help="Run config (gate.toml): [run] defaults, [[candidates]], [tiers.<name>] settings.",
)
@session_option(
    "calibration",
    help="Calibration texts (JSONL with 'text') for prune-wanda (default: packaged set).",
)
@thresholds_option
@strict_option
@session_option("model_slug", help="Store slug of the baselines (default: from --candidate).")
@click.option("--verbose", "-v", is_flag=True, help="List every tier test.")
@session_option(
    "history", help="Append the latency figures to the latency history in this directory."
)
@session_option(
    "allow_hardware_mismatch",
    help="Compare latency with a baseline from other hardware (a warning instead of exit 4).",
)
@session_option(
    "paired_latency",
    help="Time the baseline build in this session too, alternating runs (noisy runners).",
)
@model_trust_options
@load_options
@runtime_option
@engine_options
@store_option
@report_options
@measurements_option
@click.option(
    "--dry-run",
    is_flag=True,
    help="Check everything (config, thresholds, tier settings, recipes, baseline refs, "
    "report paths), print what would run (and the --matrix) and exit 0; loads no model.",
)
@click.option(
    "--matrix",
    "matrix",
    is_flag=True,
    help="Print the candidates of --config as a CI matrix (JSON, one entry per "
    "[[candidates]] with its runs_on labels) and exit 0; reads the config only.",
)
@click.option(
    "--only",
    metavar="NAME",
    help="Gate only the [[candidates]] entry NAME of --config (one job of the matrix).",
)
@click.option(
    "--localize",
    "localize",
    is_flag=True,
    help="When the --candidate build is blocked, run `gate localize` on it: the layers that "
    "carry the loss and the repaired build, gated (with --json, also <name>.localize.json).",
)
def run(
    overrides: CandidateOverrides,
    shared: SessionOptions,
    reports: ReportTargets,
    config: Path | None,
    dry_run: bool,
    matrix: bool,
    localize: bool,
) -> int:
    """Measure a candidate build (or every candidate of --config) and gate it against baselines.

    Runs the packaged tier suites under pytest, compares the measurements with
    the baseline ref(s) and thresholds, prints the report and exits 0 (approved),
    1 (blocked or a tier failed; under --strict also a warning or a baseline
    metric the run did not measure), 2 (interrupted: Ctrl-C, SIGINT, SIGTERM),
    3 (model could not be loaded), 4 (bad input) or 5 (nothing measured).
    Measured metrics without a bound and baseline metrics not measured are
    listed in the report and the results JSON.

    \b
    Run config (gate.toml; docs/run-config.md):
      [run]                       defaults: baseline, against, tiers, calibration,
                                  store, thresholds, strict, model_slug, runs_on,
                                  device, dtype, trust_remote_code
      [[candidates]]              name, model, recipe (+ against, tiers,
                                  calibration, model_slug, allow_pickle,
                                  allow_incomplete_weights, runs_on, device,
                                  dtype, trust_remote_code)
      [tiers.<tier>]              tier settings (e.g. max_new_tokens)
    Without --candidate every [[candidates]] entry runs in its own session, then
    a summary table follows; the exit code is the worst one (an error, 3 4 5,
    outranks a block, 1; an interrupt, 2, stops the run). With several
    candidates each report file gets the candidate's name, e.g. --json
    out/results.json writes out/results-<name>.json, and --markdown also
    writes one combined comment (summary + every report) at the given path.
    With --candidate the config only lends its [run] defaults and [tiers].
    Command-line flags override the config (--tiers, --against, --store, ...).
    --matrix prints the candidates as a GitHub Actions matrix and --only NAME
    gates one of them, so that CI runs one job per candidate and `gate merge`
    combines their results JSONs (docs/self-hosted-runners.md).
    Every input of every candidate (config, thresholds.toml, tier settings,
    recipes, baseline refs, calibration, report paths) is checked before the
    first model loads; --dry-run stops there and prints what would run.

    \b
    Examples:
      gate run --config gate.toml --json out/results.json --markdown out/comment.md
      gate run --config gate.toml --tiers latency
      gate run --config gate.toml --dry-run
      gate run --config gate.toml --matrix
      gate run --config gate.toml --only int8 --json out/results-int8.json
      gate run --candidate demo --recipe bnb-nf4
      gate run --candidate ./llama-8b --device cuda:1 --dtype bfloat16 --recipe bnb-nf4
      gate run --candidate ./llama-8b --recipe quanto-int4 --against fp16 --against prod
      gate run --candidate demo --recipe prune-magnitude:0.3 --tiers fidelity --json out.json
      gate run --candidate demo --recipe prune-wanda:0.5 --calibration my-prompts.jsonl
      gate run --candidate demo --recipe quanto-int4 --tiers latency --paired-latency
      gate run --candidate demo --serve "venv/bin/python -m vllm.entrypoints.openai.api_server
        --model ./demo --served-model-name demo --dtype float32"
      gate run --candidate org/model --endpoint http://gpu-box:8000/v1 --api-key-env KEY
      gate run --candidate smollm2 --recipe gguf-q4_k_m --engine llama.cpp --against base

    \b
    Serving engine (docs/serving.md): --serve starts the command (own process
    group, waits for /health, keeps its log, always stops it) and --endpoint
    uses a running server; --candidate then names the model whose tokenizer
    recorded the baseline. --baseline-serve/--baseline-endpoint time the
    baseline build's engine beside the candidate (paired latency).
    """
    from gate.workflows.plan import plan_run

    if matrix:
        return _print_matrix(config, overrides, shared, reports)
    plan = plan_run(config, overrides, shared, reports)
    return _gate(plan, dry_run=dry_run, localize=localize, json_out=reports.json)


def _print_matrix(
    config: Path | None,
    overrides: CandidateOverrides,
    shared: SessionOptions,
    reports: ReportTargets,
) -> int:
    """``--matrix``: print the candidates of ``config`` as a CI matrix (the run config only:
    no store, no thresholds, no model library)."""
    from gate.workflows.matrix import matrix_json
    from gate.workflows.plan import plan_run

    if config is None or overrides.candidate is not None:
        raise UsageError(
            "--matrix lists the [[candidates]] of --config", "gate run --config gate.toml --matrix"
        )
    click.echo(matrix_json(plan_run(config, overrides, shared, reports).candidates))
    return int(ExitCode.OK)


def _gate(plan: RunPlan, *, dry_run: bool, localize: bool, json_out: Path | None) -> int:
    """Check every input of every candidate of ``plan`` before any model loads, then (unless
    ``dry_run``: print what would run) gate them; a blocked ``--localize`` build is localized."""
    from gate.report.console import make_console
    from gate.workflows.multirun import execute_plan
    from gate.workflows.plan import check_plan, describe_plan

    checked = check_plan(plan)  # every input of every candidate, before any model loads
    if dry_run:
        for line in describe_plan(plan, checked):
            click.echo(line)
        return int(ExitCode.OK)
    if localize and not plan.single:
        raise UsageError(
            "--localize localizes one --candidate build",
            "gate run --candidate MODEL --recipe RECIPE --localize",
        )
    code = execute_plan(plan, checked, make_console())
    if localize and code == ExitCode.BLOCKED:
        from gate.commands.localize import localize_blocked

        localize_blocked(plan, json_out)
    return int(code)

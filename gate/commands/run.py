"""``gate run``: measure one candidate build, or every candidate of a run config, and gate it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from gate.commands.options import (
    TIERS_HELP,
    dir_option,
    explicit_store,
    file_option,
    json_option,
    load_options,
    load_settings,
    model_trust_options,
    report_options,
    store_option,
    strict_option,
    thresholds_option,
)
from gate.errors import ExitCode, UsageError
from gate.models.engine_settings import EngineSettings, OptionKind, engine_setting_options
from gate.report.outputs import ReportTargets
from gate.session.options import SessionOptions
from gate.session.run_config import CandidateOverrides, RunConfig

_F = TypeVar("_F", bound=Callable[..., Any])

#: The click type of each kind of engine setting.
_CLICK_TYPES: dict[OptionKind, Any] = {
    "text": str,
    "texts": str,
    "count": click.IntRange(min=1),
    "seconds": click.FloatRange(min=0, min_open=True),
    "file": click.Path(dir_okay=False, path_type=Path),
}


def engine_options(command: _F) -> _F:
    """The serving-engine options of ``gate run`` (docs/serving.md), one per field of
    :class:`~gate.models.engine_settings.EngineSettings`, keyword-named as the field."""
    for name, option in reversed(engine_setting_options()):
        command = click.option(
            option.flag,
            name,
            type=_CLICK_TYPES[option.kind],
            multiple=option.kind == "texts",  # one per replica
            help=option.help,
        )(command)
    return command


#: ``--engine``: the engine that runs a ``gguf-*`` recipe's file (docs/gguf.md).
RUNTIME_HELP = (
    "Run the gguf-* recipe's file in this engine: llama.cpp (gate makes the file, starts "
    "llama-server on it, gates it and stops it; default: loaded dequantized in process)."
)


def runtime_option(command: _F) -> _F:
    """``--engine ENGINE`` (keyword ``runtime``), of ``gate run`` and ``gate baseline record``."""
    from gate.models.llama_cpp.install import ENGINE

    return click.option(
        "--engine", "runtime", type=click.Choice([ENGINE]), default=None, help=RUNTIME_HELP
    )(command)


def engine_override(given: dict[str, Any]) -> EngineSettings | None:
    """The engine the command line names (``None``: none); the one reader of engine options
    (:func:`gate.models.engine_settings.engine_from_options`)."""
    from gate.models.engine_settings import engine_from_options

    return engine_from_options(given)


def effective_store(store: Path, config: RunConfig | None) -> Path:
    """``--store`` / ``$GATE_STORE`` when given, else ``[run].store``, else the default."""
    given = explicit_store(store)
    if given is None and config is not None and config.run.store is not None:
        return config.run.store
    return given or store


@click.command("run")
@click.option(
    "--candidate",
    help="Model id, local directory, .gguf file, or 'demo' (without it: every candidate of --config).",
)
@click.option("--recipe", help="Compression recipe applied at load time (e.g. bnb-nf4).")
@click.option(
    "--against",
    multiple=True,
    metavar="REF",
    help="Baseline ref to compare with (repeatable; default: latest).",
)
@click.option("--tiers", help=TIERS_HELP)
@json_option
@file_option(
    "--config",
    help="Run config (gate.toml): [run] defaults, [[candidates]], [tiers.<name>] settings.",
)
@file_option(
    "--calibration",
    help="Calibration texts (JSONL with 'text') for prune-wanda (default: packaged set).",
)
@thresholds_option
@strict_option
@click.option("--model-slug", help="Store slug of the baselines (default: from --candidate).")
@click.option("--verbose", "-v", is_flag=True, help="List every tier test.")
@dir_option(
    "--history", help="Append the latency figures to the latency history in this directory."
)
@click.option(
    "--allow-hardware-mismatch",
    is_flag=True,
    help="Compare latency with a baseline from other hardware (a warning instead of exit 4).",
)
@click.option(
    "--paired-latency",
    is_flag=True,
    help="Time the baseline build in this session too, alternating runs (noisy runners).",
)
@model_trust_options
@load_options
@runtime_option
@engine_options
@store_option
@report_options
@file_option(
    "--measurements",
    "measurements_out",
    help="Also write what the run measured here: a measurements file that `gate compare` "
    "re-gates against another baseline or thresholds file without measuring again.",
)
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
    candidate: str | None,
    recipe: str | None,
    against: tuple[str, ...],
    tiers: str | None,
    json_out: Path | None,
    config: Path | None,
    calibration: Path | None,
    thresholds: Path | None,
    strict: bool,
    model_slug: str | None,
    verbose: bool,
    history: Path | None,
    allow_hardware_mismatch: bool,
    paired_latency: bool,
    allow_pickle: bool,
    allow_incomplete_weights: bool,
    device: str | None,
    dtype: str | None,
    trust_remote_code: bool | None,
    store: Path,
    html_out: Path | None,
    junit_out: Path | None,
    markdown_out: Path | None,
    measurements_out: Path | None,
    dry_run: bool,
    matrix: bool,
    only: str | None,
    localize: bool,
    runtime: str | None,
    **engine: Any,
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
    from gate.report.console import make_console
    from gate.session.runner import parse_tiers
    from gate.workflows.multirun import execute_plan
    from gate.workflows.plan import check_plan, describe_plan, plan_run

    overrides = CandidateOverrides(
        candidate=candidate,
        recipe=recipe,
        against=against,
        tiers=parse_tiers(tiers),
        calibration=calibration,
        model_slug=model_slug,
        engine=engine_override(engine),
        runtime=runtime,
        only=only,
        load=load_settings(device, dtype, trust_remote_code),
    )
    shared = SessionOptions(
        store=explicit_store(store),
        thresholds=thresholds,
        strict=strict,
        verbose=verbose,
        history=history,
        allow_hardware_mismatch=allow_hardware_mismatch,
        paired_latency=paired_latency,
        allow_pickle=allow_pickle,
        allow_incomplete_weights=allow_incomplete_weights,
    )
    targets = ReportTargets(
        json=json_out,
        html=html_out,
        junit=junit_out,
        markdown=markdown_out,
        measurements=measurements_out,
    )
    if matrix and (config is None or candidate is not None):
        raise UsageError(
            "--matrix lists the [[candidates]] of --config", "gate run --config gate.toml --matrix"
        )
    plan = plan_run(config, overrides, shared, targets)
    if matrix:  # the run config only: no store, no thresholds, no model library
        from gate.workflows.matrix import matrix_json

        click.echo(matrix_json(plan.candidates))
        return int(ExitCode.OK)
    checked = check_plan(plan)  # every input of every candidate, before any model loads
    if dry_run:
        for line in describe_plan(plan, checked):
            click.echo(line)
        return int(ExitCode.OK)
    if localize and candidate is None:
        raise UsageError(
            "--localize localizes one --candidate build",
            "gate run --candidate MODEL --recipe RECIPE --localize",
        )
    code = execute_plan(plan, checked, make_console())
    if localize and code == ExitCode.BLOCKED:
        from gate.commands.localize import localize_blocked

        localize_blocked(plan, json_out)
    return int(code)

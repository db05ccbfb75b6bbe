"""``gate run``: measure one candidate build, or every candidate of a run config, and gate it."""

from __future__ import annotations

from pathlib import Path

import click
from click.core import ParameterSource

from gate.commands.options import (
    DEFAULT_STORE,
    dir_option,
    file_option,
    json_option,
    report_options,
    store_option,
    strict_option,
    thresholds_option,
)
from gate.errors import ExitCode, GateError, UsageError
from gate.report.outputs import ReportTargets
from gate.session.run_config import Candidate, RunConfig, RunDefaults, load_run_config


def effective_store(store: Path, config: RunConfig | None) -> Path:
    """``--store`` / ``$GATE_STORE`` when given, else ``[run].store``, else the default."""
    ctx = click.get_current_context()
    source = ctx.get_parameter_source("store")
    explicit = source in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)
    if not explicit and config is not None and config.run.store is not None:
        return config.run.store
    return store


def store_for(model: str, store: Path) -> Path:
    """The store a candidate is judged against.

    ``store`` itself, except for the demo model when ``store`` is the default
    ``./baselines`` and holds no demo baselines: then the packaged store with the
    demo's committed baseline, so ``gate run --candidate demo`` works from any
    directory after ``pip install``.
    """
    if model != "demo" or store != DEFAULT_STORE or (store / "demo").is_dir():
        return store
    from gate.session.demo import store_dir

    return store_dir()


def _name_of(model: str) -> str:
    from gate.models.spec import ModelSpec

    return ModelSpec.parse(model).slug


@click.command("run")
@click.option(
    "--candidate",
    help="Model id, local path, or 'demo' (without it: every candidate of --config).",
)
@click.option("--recipe", help="Compression recipe applied at load time (e.g. bnb-nf4).")
@click.option(
    "--against",
    multiple=True,
    metavar="REF",
    help="Baseline ref to compare with (repeatable; default: latest).",
)
@click.option("--tiers", help="Comma-separated tiers (default: every available tier).")
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
@store_option
@report_options
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
    store: Path,
    html_out: Path | None,
    junit_out: Path | None,
    markdown_out: Path | None,
) -> int:
    """Measure a candidate build (or every candidate of --config) and gate it against baselines.

    Runs the packaged tier suites under pytest, compares the measurements with
    the baseline ref(s) and thresholds, prints the report and exits 0 (approved),
    1 (blocked or a tier failed), 3 (model could not be loaded), 4 (bad input)
    or 5 (nothing measured).

    \b
    Run config (gate.toml; docs/run-config.md):
      [run]                       defaults: baseline, against, tiers, calibration,
                                  store, thresholds, strict, model_slug
      [[candidates]]              name, model, recipe (+ against, tiers,
                                  calibration, model_slug)
      [tiers.<tier>]              tier settings (e.g. max_new_tokens)
    Without --candidate every [[candidates]] entry runs in its own session, then
    a summary table follows; the exit code is the worst one (an error, 3 4 5,
    outranks a block, 1; an interrupt, 2, stops the run). With several
    candidates each report file gets the candidate's name, e.g. --json
    out/results.json writes out/results-<name>.json, and --markdown also
    writes one combined comment (summary + every report) at the given path.
    With --candidate the config only lends its [run] defaults and [tiers].
    Command-line flags override the config (--tiers, --against, --store, ...).

    \b
    Examples:
      gate run --config gate.toml --json out/results.json --markdown out/comment.md
      gate run --config gate.toml --tiers latency
      gate run --candidate demo --recipe bnb-nf4
      gate run --candidate ./llama-8b --recipe quanto-int4 --against fp16 --against prod
      gate run --candidate demo --recipe prune-magnitude:0.3 --tiers fidelity --json out.json
      gate run --candidate demo --recipe prune-wanda:0.5 --calibration my-prompts.jsonl
      gate run --candidate demo --recipe quanto-int4 --tiers latency --paired-latency
    """
    from gate.report.console import make_console
    from gate.session.multirun import precheck, run_candidates
    from gate.session.runner import LatencyFlags, SessionOptions, parse_tiers, run_pytest

    run_config = load_run_config(config) if config is not None else None
    defaults = run_config.run if run_config is not None else RunDefaults()
    store = effective_store(store, run_config)
    thresholds = thresholds or defaults.thresholds
    strict = strict or defaults.strict
    tier_override = parse_tiers(tiers)
    latency = LatencyFlags(history, allow_hardware_mismatch, paired_latency)
    reports = ReportTargets(json=json_out, html=html_out, junit=junit_out, markdown=markdown_out)

    def session(item: Candidate, targets: ReportTargets) -> ExitCode:
        options = SessionOptions(
            recipe=item.recipe,
            against=tuple(item.against),
            store=store_for(item.model, store),
            thresholds=thresholds,
            strict=strict,
            json_out=targets.json,
            config=config,
            model_slug=item.model_slug,
            verbose=verbose,
            reports=ReportTargets(
                html=targets.html, junit=targets.junit, markdown=targets.markdown
            ),
            latency=latency,
            calibration=item.calibration,
        )
        try:
            return run_pytest("run", item.model, options, tiers=tier_override or item.tiers)
        except GateError as exc:  # one candidate's error must not stop the others
            click.echo(f"gate: error: {exc.format_line()}", err=True)
            return exc.exit_code

    if candidate is not None:
        single = Candidate(
            name=_name_of(candidate),
            model=candidate,
            recipe=recipe,
            against=against or defaults.against,
            tiers=defaults.tiers,
            calibration=calibration or defaults.calibration,
            model_slug=model_slug or defaults.model_slug or _baseline_slug(defaults),
        )
        return int(session(single, reports))
    if run_config is None:
        raise UsageError(
            "nothing to gate", "give --candidate MODEL or --config gate.toml with [[candidates]]"
        )
    if recipe is not None or model_slug is not None:
        raise UsageError(
            "--recipe and --model-slug apply to --candidate only",
            "set them per [[candidates]] entry in the config",
        )
    if not run_config.candidates:
        raise UsageError(
            f"{run_config.source} names no candidates", "add [[candidates]] tables or --candidate"
        )
    candidates = [
        Candidate(
            name=c.name,
            model=c.model,
            recipe=c.recipe,
            against=against or c.against,
            tiers=c.tiers,
            calibration=calibration or c.calibration,
            model_slug=c.model_slug,
        )
        for c in run_config.resolved()
    ]
    precheck(candidates, store)
    return int(run_candidates(candidates, session, reports, make_console()))


def _baseline_slug(defaults: RunDefaults) -> str | None:
    return _name_of(defaults.baseline) if defaults.baseline else None

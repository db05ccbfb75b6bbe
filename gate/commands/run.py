"""``gate run``: measure a candidate build with the tier suites and gate it."""

from __future__ import annotations

from pathlib import Path

import click

from gate.commands.compare import store_option
from gate.report.outputs import ReportTargets, report_options


@click.command("run")
@click.option("--candidate", required=True, help="Model id, local path, or 'demo'.")
@click.option("--recipe", help="Compression recipe applied at load time (e.g. bnb-nf4).")
@click.option(
    "--against",
    multiple=True,
    metavar="REF",
    help="Baseline ref to compare with (repeatable; default: latest).",
)
@click.option("--tiers", help="Comma-separated tiers (default: every available tier).")
@click.option(
    "--json",
    "json_out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write the results JSON here.",
)
@click.option(
    "--config",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Run config TOML with [tiers.<name>] settings.",
)
@click.option(
    "--thresholds",
    type=click.Path(dir_okay=False, path_type=Path),
    help="thresholds.toml (default: ./thresholds.toml, else the packaged defaults).",
)
@click.option("--strict", is_flag=True, help="Treat warnings as failures (exit 1).")
@click.option("--model-slug", help="Store slug of the baselines (default: from --candidate).")
@click.option("--verbose", "-v", is_flag=True, help="List every tier test.")
@store_option
@report_options
def run(
    candidate: str,
    recipe: str | None,
    against: tuple[str, ...],
    tiers: str | None,
    json_out: Path | None,
    config: Path | None,
    thresholds: Path | None,
    strict: bool,
    model_slug: str | None,
    verbose: bool,
    store: Path,
    html_out: Path | None,
    junit_out: Path | None,
    markdown_out: Path | None,
) -> int:
    """Measure CANDIDATE (optionally compressed with --recipe) and gate it against baselines.

    Runs the packaged tier suites under pytest, compares the measurements with
    the baseline ref(s) and thresholds, prints the report and exits 0 (approved),
    1 (blocked or a tier failed), 3 (model could not be loaded), 4 (bad input)
    or 5 (nothing measured).

    \b
    Examples:
      gate run --candidate demo --recipe bnb-nf4
      gate run --candidate ./llama-8b --recipe quanto-int4 --against fp16 --against prod
      gate run --candidate demo --recipe prune-magnitude:0.3 --tiers fidelity --json out.json
    """
    from gate.runner import parse_tiers, run_pytest

    code = run_pytest(
        "run",
        candidate,
        recipe=recipe,
        tiers=parse_tiers(tiers),
        against=against,
        store=store,
        thresholds=thresholds,
        strict=strict,
        json_out=json_out,
        config=config,
        model_slug=model_slug,
        verbose=verbose,
        reports=ReportTargets(html=html_out, junit=junit_out, markdown=markdown_out),
    )
    return int(code)

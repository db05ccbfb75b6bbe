"""``gate compare``: gate a measurements file against one or more stored baselines."""

from __future__ import annotations

from pathlib import Path

import click

from gate import __version__
from gate.commands.options import (
    color_option,
    json_option,
    report_options,
    store_option,
    strict_option,
    thresholds_option,
)
from gate.errors import NothingMeasuredError, UsageError
from gate.gating.thresholds import load_thresholds
from gate.provenance import environment
from gate.report.console import make_console, render
from gate.report.outputs import ReportTargets, check_targets, write_reports
from gate.report.results import RunIdentity
from gate.session.judgement import JudgementInputs, baseline_titles, judge_run
from gate.store.baseline import Baseline, BaselineStore
from gate.store.measurements_file import load_measurements


@click.command("compare")
@click.argument("measurements", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--baseline",
    "-b",
    "refs",
    multiple=True,
    required=True,
    metavar="REF_OR_PATH",
    help="Baseline to compare with: a ref (prod, fp16), a number, 'latest', a label, "
    "SLUG/REF, or a baseline/measurements JSON file. Repeat to compare against several.",
)
@click.option("--model", "model_slug", metavar="SLUG", help="Model slug in the store.")
@store_option
@thresholds_option
@strict_option
@json_option
@color_option
@report_options
def compare(
    measurements: Path,
    refs: tuple[str, ...],
    model_slug: str | None,
    store: Path,
    thresholds: Path | None,
    strict: bool,
    json_out: Path | None,
    color: bool | None,
    html_out: Path | None,
    junit_out: Path | None,
    markdown_out: Path | None,
) -> int:
    """Gate MEASUREMENTS (a measurements JSON) against stored baselines.

    Prints one table per tier (worst findings first), the verdicts whose critical
    bound is below what their test can detect (UNDERPOWERED, a warning) and a
    verdict line, and exits 0 (APPROVED, warnings allowed), 1 (BLOCKED; also a
    warning or an underpowered verdict under --strict, or an underpowered one
    with require_power = true in thresholds.toml) or 4 (bad input). The
    results JSON names the candidate after the file's stem (``gate merge``).

    \b
    Examples:
      gate compare examples/candidate-critical.json --baseline examples/baseline.json
      gate compare cand.json --baseline prod --model llama-3.1-8b
      gate compare cand.json -b fp16 -b prod --strict --json results.json
    """
    if len(set(refs)) != len(refs):
        raise UsageError("the same --baseline was given twice", "give each ref once")
    targets = ReportTargets(json=json_out, html=html_out, junit=junit_out, markdown=markdown_out)
    check_targets(targets)
    candidate = load_measurements(measurements)
    limits = load_thresholds(thresholds)
    target = BaselineStore(store)
    if model_slug is None and candidate.model.slug in target.slugs():
        model_slug = candidate.model.slug  # the file names its model; use it
    baselines = _resolve_all(target, refs, model_slug)
    if not candidate.measurements:
        raise NothingMeasuredError(f"{measurements} has no metrics", "nothing to compare")
    judgement = judge_run(
        JudgementInputs(
            measurements=candidate.measurements,
            baselines=baselines,
            thresholds=limits,
            candidate=candidate.model,
            # the versions that measured the candidate: the file's own record
            environment=candidate.environment or environment(),
            run=RunIdentity(
                candidate=measurements.stem,
                gate_version=__version__,
                thresholds=limits.source,
                thresholds_sha256=limits.digest,
                strict=strict,
            ),
            strict=strict,
            tiers=candidate.tiers,
            subject=str(measurements),
        )
    )
    render(
        judgement.results,
        make_console(color=color),
        title=f"gate compare: {measurements} vs {baseline_titles(baselines)}",
    )
    write_reports(judgement.results, targets)
    return judgement.exit_code


def _resolve_all(
    store: BaselineStore, refs: tuple[str, ...], model_slug: str | None
) -> dict[str, Baseline]:
    return {ref: store.resolve(ref, model_slug) for ref in refs}

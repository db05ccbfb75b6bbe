"""``gate merge``: the results JSONs of a CI matrix's jobs, merged into one verdict."""

from __future__ import annotations

from pathlib import Path

import click

from gate.commands.options import color_option, file_option, json_option, report_options
from gate.report.outputs import ReportTargets


@click.command("merge")
@click.argument("results", nargs=-1, type=click.Path(path_type=Path))
@file_option(
    "--expect-from",
    metavar="GATE_TOML_OR_MATRIX_JSON",
    help="The candidates there should be: the run config (gate.toml) or the saved output "
    "of `gate run --config gate.toml --matrix`; a missing one is a MISSING row (exit 5).",
)
@json_option
@report_options
@color_option
def merge(
    results: tuple[Path, ...],
    expect_from: Path | None,
    json_out: Path | None,
    html_out: Path | None,
    junit_out: Path | None,
    markdown_out: Path | None,
    color: bool | None,
) -> int:
    """Merge the results JSONs of `gate run --config gate.toml --only NAME` jobs.

    RESULTS are results files (a directory stands for every *.json below it).
    Writes what one `gate run --config gate.toml` would have: the summary
    table, the report files (with several candidates --json out/results.json
    writes out/results-<name>.json, and --markdown also the combined comment
    at the given path), GitHub annotations and step summary under Actions.
    Exits with the worst exit code (an error, 3 4 5, outranks a block, 1).

    Refuses (exit 4, one line) results that do not belong together: another
    gate version, other thresholds or --strict, another run config, another
    stored baseline behind the same ref, or one candidate twice. With
    --expect-from, a candidate without results is a MISSING row (exit 5) and a
    result of a candidate it does not name is refused.

    \b
    Examples:
      gate merge results/ --expect-from gate.toml --markdown out/comment.md
      gate merge out/results-int8.json out/results-nf4.json --json merged/results.json
      gate merge results/ --expect-from matrix.json --junit out/junit.xml
    """
    from gate.report.console import make_console
    from gate.workflows.merge import merge_results

    targets = ReportTargets(json=json_out, html=html_out, junit=junit_out, markdown=markdown_out)
    return int(merge_results(results, targets, make_console(color=color), expect_from))

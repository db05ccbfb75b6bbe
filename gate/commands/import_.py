"""``gate import``: gate results produced by other tools (``gate import lm-eval``)."""

from __future__ import annotations

from pathlib import Path

import click

from gate.commands.options import json_option, strict_option, thresholds_option
from gate.data.lmeval_import import import_runs, task_name
from gate.errors import NothingMeasuredError
from gate.gating.compare import compare
from gate.gating.thresholds import load_thresholds
from gate.gating.verdict import decide
from gate.provenance import ModelProvenance, environment
from gate.report.console import make_console, render
from gate.report.results_json import build_results, write_results
from gate.store.writable import check_writable


@click.group("import")
def import_() -> None:
    """Gate results that another tool already produced."""


@import_.command("lm-eval")
@click.argument("base_samples", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("cand_samples", type=click.Path(dir_okay=False, path_type=Path))
@json_option
@thresholds_option
@strict_option
@click.option("--color/--no-color", default=None, help="Force colour on or off.")
def lm_eval(
    base_samples: Path,
    cand_samples: Path,
    json_out: Path | None,
    thresholds: Path | None,
    strict: bool,
    color: bool | None,
) -> int:
    """Gate two lm-evaluation-harness --log_samples files of one multiple-choice task.

    Joins BASE_SAMPLES and CAND_SAMPLES on (filter, doc_id, doc_hash) and reports
    the accuracy delta (acc, acc_norm, McNemar on the discordant documents),
    flips (correct <-> incorrect), all-flips (any change of the chosen option),
    choice-level KL and top margin, with the thresholds of thresholds.toml.
    No model is loaded. Exit 0 approved, 1 blocked, 4 bad or non-joining files.

    \b
    Examples:
      gate import lm-eval base/samples_arc_easy_2025-01-01T00-00-00.jsonl \\
                          cand/samples_arc_easy_2025-01-02T00-00-00.jsonl
      gate import lm-eval base.jsonl cand.jsonl --strict --json results.json
    """
    if json_out is not None:
        check_writable(json_out, "--json")
    candidate, baseline = import_runs(base_samples, cand_samples)
    limits = load_thresholds(thresholds)
    verdicts = compare(candidate, baseline, limits, against=f"lm-eval:{base_samples.name}")
    if not verdicts:
        raise NothingMeasuredError("no metric to compare", "the samples files held no documents")
    outcome = decide(verdicts, strict=strict, require_power=limits.require_power)
    task = task_name(base_samples)
    results = build_results(
        outcome,
        baselines={"lm-eval": {"source": "lm-evaluation-harness", "samples": str(base_samples)}},
        candidate=ModelProvenance.from_document(
            {"source": "lm-evaluation-harness", "samples": str(cand_samples)}
        ),
        environment=environment(),
    )
    render(
        results,
        make_console(color=color),
        title=f"gate import lm-eval ({task}): {cand_samples} vs {base_samples}",
    )
    if json_out is not None:
        write_results(json_out, results)
    return results.exit_code

"""``gate import``: gate results produced by other tools (``gate import lm-eval``)."""

from __future__ import annotations

from pathlib import Path

import click

from gate.commands.options import json_option, strict_option, thresholds_option
from gate.data.lmeval_runs import Imported, import_lmeval
from gate.errors import DataError, NothingMeasuredError
from gate.gating.compare import compare
from gate.gating.thresholds import load_thresholds, unbounded_metrics
from gate.gating.verdict import decide
from gate.metrics.registry import all_metrics
from gate.metrics.spec import MetricSpec, SampleKind
from gate.provenance import ModelProvenance, environment
from gate.report.console import make_console, render
from gate.report.results_json import build_results, write_results
from gate.store.writable import check_writable


@click.group("import")
def import_() -> None:
    """Gate results that another tool already produced."""


def _specs(imported: Imported) -> dict[str, MetricSpec]:
    """The registry plus the specs of the files' own metrics; a registered 0/1 metric
    whose values are not 0/1 is a :class:`DataError`."""
    known = dict(all_metrics())
    for name, spec in imported.specs.items():
        registered = known.get(name)
        if registered is None:
            known[name] = spec
        elif registered.sample_kind is SampleKind.PAIRED_BINARY and not imported.binary[name]:
            raise DataError(
                f"{name}: the files hold values other than 0 and 1",
                "give the harness's own --log_samples output",
            )
    return known


@import_.command("lm-eval")
@click.argument("base_samples", type=click.Path(path_type=Path))
@click.argument("cand_samples", type=click.Path(path_type=Path))
@click.option(
    "--filter",
    "filter_name",
    default=None,
    help="The lm-eval filter compared in generative tasks (default: each task's first).",
)
@json_option
@thresholds_option
@strict_option
@click.option("--color/--no-color", default=None, help="Force colour on or off.")
def lm_eval(
    base_samples: Path,
    cand_samples: Path,
    filter_name: str | None,
    json_out: Path | None,
    thresholds: Path | None,
    strict: bool,
    color: bool | None,
) -> int:
    """Gate two lm-evaluation-harness --log_samples runs, task by task.

    BASE_SAMPLES and CAND_SAMPLES are two samples files of one task, or two
    output directories (every samples_<task>_<time>.jsonl below them, paired by
    task). Documents are joined on (filter, doc_id, doc_hash).

    Multiple-choice tasks (one per run): the accuracy delta (acc, acc_norm,
    McNemar on the discordant documents), flips (correct <-> incorrect),
    all-flips (any change of the chosen option), choice-level KL and top margin.

    Generative tasks (generate_until, e.g. GSM8K; several per run): every
    per-document metric the files carry as accuracy.gen_<metric>, McNemar on
    the answers lost and gained for 0/1 metrics (exact_match), the paired
    bootstrap for scores (f1); accuracy.gen_flips counts the answers that
    changed. One filter per task (--filter; default the task's first).

    Bounds come from thresholds.toml. No model is loaded. Exit 0 approved,
    1 blocked, 4 bad, mismatched or non-joining files.

    \b
    Examples:
      gate import lm-eval base/samples_arc_easy_2025-01-01T00-00-00.jsonl \\
                          cand/samples_arc_easy_2025-01-02T00-00-00.jsonl
      gate import lm-eval base.jsonl cand.jsonl --strict --json results.json
      gate import lm-eval out/base-model out/cand-model --filter strict-match
    """
    if json_out is not None:
        check_writable(json_out, "--json")
    imported = import_lmeval(base_samples, cand_samples, filter_name=filter_name)
    limits = load_thresholds(thresholds)
    verdicts = compare(
        imported.candidate,
        imported.baseline,
        limits,
        against=f"lm-eval:{base_samples.name}",
        specs=_specs(imported),
    )
    if not verdicts:
        raise NothingMeasuredError("no metric to compare", "the samples files held no documents")
    outcome = decide(verdicts, strict=strict, require_power=limits.require_power)
    tasks = ", ".join(t.task for t in imported.tasks)
    for summary in imported.tasks:
        click.echo(summary.line)
    results = build_results(
        outcome,
        baselines={"lm-eval": {"source": "lm-evaluation-harness", "samples": str(base_samples)}},
        candidate=ModelProvenance.from_document(
            {"source": "lm-evaluation-harness", "samples": str(cand_samples)}
        ),
        environment=environment(),
        notes=[summary.line for summary in imported.tasks],
        unbounded=unbounded_metrics(limits, [m.name for m in imported.candidate]),
    )
    render(
        results,
        make_console(color=color),
        title=f"gate import lm-eval ({tasks}): {cand_samples} vs {base_samples}",
    )
    if json_out is not None:
        write_results(json_out, results)
    return results.exit_code

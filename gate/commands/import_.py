"""``gate import``: gate results produced by other tools (``gate import lm-eval``).

The samples files are read into measurements (:mod:`gate.data.lmeval_runs`); the
baseline's are an :class:`~gate.session.judgement.ExternalBaseline` (no model
provenance: no model, version or placement check), and the verdicts, exit code
and results come from the one judgement (:func:`gate.session.judgement.judge_run`),
as ``gate run``'s and ``gate compare``'s do; the console report and ``--json``
are rendered from those results.
"""

from __future__ import annotations

from pathlib import Path

import click

from gate import __version__
from gate.commands.options import json_option, strict_option, thresholds_option
from gate.data.lmeval_runs import Imported, import_lmeval
from gate.errors import DataError, NothingMeasuredError
from gate.gating.thresholds import load_thresholds
from gate.metrics.metric_spec import MetricSpec, SampleKind
from gate.metrics.registry import all_metrics
from gate.provenance import ModelProvenance, environment
from gate.report.console import make_console, render
from gate.report.results import RunIdentity
from gate.report.results_json import write_results
from gate.session import judgement
from gate.session.judgement import ExternalBaseline, JudgementInputs
from gate.store.writable import check_writable

#: Where the files come from, in the results' baseline and candidate descriptions.
SOURCE = "lm-evaluation-harness"


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
    if not imported.candidate:
        raise NothingMeasuredError("no metric to compare", "the samples files held no documents")
    # the verdicts' ``against``: the baseline's file or folder
    ref = f"lm-eval:{base_samples.name}"
    baseline = ExternalBaseline(
        source={"source": SOURCE, "samples": str(base_samples)},
        measurements={m.name: m for m in imported.baseline},
        display=str(base_samples),
    )
    # through the module: the one judgement, wherever it is looked up from
    judged = judgement.judge_run(
        JudgementInputs(
            measurements=imported.candidate,
            baselines={ref: baseline},
            thresholds=limits,
            candidate=ModelProvenance.from_document(
                {"source": SOURCE, "samples": str(cand_samples)}
            ),
            environment=environment(),
            run=RunIdentity(
                candidate=cand_samples.stem,
                gate_version=__version__,
                thresholds=limits.source,
                thresholds_sha256=limits.digest,
                strict=strict,
            ),
            strict=strict,
            notes=[summary.line for summary in imported.tasks],
            subject=str(cand_samples),
            specs=_specs(imported),
        )
    )
    tasks = ", ".join(t.task for t in imported.tasks)
    render(
        judged.results,
        make_console(color=color),
        title=f"gate import lm-eval ({tasks}): {cand_samples} vs {base_samples}",
    )
    if json_out is not None:
        write_results(json_out, judged.results)
    return judged.exit_code

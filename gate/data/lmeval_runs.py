"""Two lm-evaluation-harness runs, one or several tasks, as the gate's measurements.

``gate import lm-eval BASE CAND``: each side is one ``--log_samples`` file or a
directory of them (``samples_<task>_<timestamp>.jsonl``, searched below it, one
file per task). Tasks are paired by name; a task on one side only, two files
of one task in a directory, or two files of differently named tasks are
refused. Each task's file is a multiple-choice task
(:mod:`gate.data.lmeval_import`: one per run, its metrics are not task-sliced)
or a generative one (:mod:`gate.data.lmeval_generative`: any number, pooled
per metric with ``task:<name>`` slices), told apart by its first record.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gate.data import lmeval_generative as gen
from gate.data import lmeval_import as mcq
from gate.data.jsonl import read_jsonl
from gate.errors import DataError
from gate.measurement import Measurement
from gate.metrics.metric_spec import MetricSpec

_WHAT = "lm-eval samples file"


@dataclass(frozen=True)
class TaskSummary:
    """What one task contributed: documents compared and the answers lost and gained."""

    task: str
    kind: str  # "generative" or "multiple_choice"
    filter: str
    metric: str | None  # the 0/1 metric whose changes are counted
    n: int
    base_correct: int
    lost: int
    gained: int
    corpus_level: tuple[str, ...] = ()
    #: ``(filter, lost, gained)`` of the task's other filters, joined and counted, not gated.
    other_filters: tuple[tuple[str, int, int], ...] = ()

    @property
    def line(self) -> str:
        """``gsm8k (strict-match, exact_match): 300 documents, 30 answers lost, 5 gained``."""
        head = f"{self.task} ({self.filter}"
        if self.metric is None:
            return f"{head}): {self.n} documents, no 0/1 metric to count flips on"
        text = (
            f"{head}, {self.metric}): {self.n} documents, "
            f"{self.lost} answers lost, {self.gained} gained"
        )
        for name, lost, gained in self.other_filters:
            text += f"; {name} (not gated, --filter): {lost} lost, {gained} gained"
        if self.corpus_level:
            text += f"; corpus-level {', '.join(self.corpus_level)} not compared per document"
        return text


@dataclass(frozen=True)
class Imported:
    """The candidate's and the baseline's measurements, the specs of metrics the
    registry does not list, and one summary per task."""

    candidate: list[Measurement]
    baseline: list[Measurement]
    specs: dict[str, MetricSpec]
    binary: dict[str, bool]
    tasks: tuple[TaskSummary, ...]


def samples_files(path: Path) -> dict[str, Path]:
    """``{task: file}`` of one side: the file itself, or every samples file below a directory."""
    if not path.is_dir():
        return {mcq.task_name(path): path}
    found: dict[str, Path] = {}
    for p in sorted(path.rglob("samples_*.jsonl")):
        task = mcq.task_name(p)
        if task in found:
            raise DataError(
                f"{path} holds two samples files of task {task}: {found[task]} and {p}",
                "keep one run per task in each directory",
            )
        found[task] = p
    if not found:
        raise DataError(f"no samples_*.jsonl file below {path}", "give lm_eval's --output_path")
    return found


def pair_files(base: Path, cand: Path) -> list[tuple[str, Path, Path]]:
    """``(task, baseline file, candidate file)`` for every task (module docstring)."""
    if base.is_dir() != cand.is_dir():
        raise DataError(
            f"{base} and {cand}: one is a directory, the other a file", "give two files or two dirs"
        )
    if not base.is_dir():
        t_b, t_c = mcq.task_name(base), mcq.task_name(cand)
        named = mcq.is_samples_name(base) and mcq.is_samples_name(cand)
        if named and t_b != t_c:
            raise DataError(
                f"{base.name} is task {t_b}, {cand.name} task {t_c}",
                "compare two runs of the same task",
            )
        return [(t_b, base, cand)]
    b, c = samples_files(base), samples_files(cand)
    if set(b) != set(c):
        only_b, only_c = sorted(set(b) - set(c)), sorted(set(c) - set(b))
        raise DataError(
            f"the runs hold different tasks (baseline only: {only_b}, candidate only: {only_c})",
            "run the same tasks on both builds",
        )
    return [(t, b[t], c[t]) for t in sorted(b)]


def is_generative_file(path: Path) -> bool:
    """Whether the first record of ``path`` is a generative task's."""
    for line in read_jsonl(path, what=_WHAT):
        return gen.is_generative(line.value)
    raise DataError(f"{path} has no samples", "give a file written by lm_eval --log_samples")


def read_generative(path: Path, task: str) -> gen.GenTask:
    """Every document of a generative task's file, by filter."""
    out = gen.GenTask(task=task, source=str(path))
    for line in read_jsonl(path, what=_WHAT):
        if not gen.is_generative(line.value):
            raise DataError(
                f"{line.where}: not a generate_until record in a generative task's file",
                "give the harness's own --log_samples output of one task",
            )
        out.add(gen.parse_doc(line.value, task, line.where), line.where)
    if not out.by_filter:
        raise DataError(f"{path} has no samples", "give a file written by lm_eval --log_samples")
    return out


def _mcq_summary(task: str, base: Path, cand: Path) -> TaskSummary:
    pairs = mcq.join_samples(mcq.read_samples(base), mcq.read_samples(cand))
    return TaskSummary(
        task=task,
        kind="multiple_choice",
        filter=pairs[0][0].filter,
        metric="acc",
        n=len(pairs),
        base_correct=sum(b.acc for b, _ in pairs),
        lost=sum(b.acc and not c.acc for b, c in pairs),
        gained=sum(c.acc and not b.acc for b, c in pairs),
    )


def _gen_summary(c: gen.TaskComparison, others: Sequence[gen.TaskComparison] = ()) -> TaskSummary:
    lost, gained = c.lost_gained()
    m = c.primary
    return TaskSummary(
        task=c.task,
        kind="generative",
        filter=c.filter,
        metric=m,
        n=len(c.pairs),
        base_correct=0 if m is None else int(sum(p.base.scores[m] for p in c.pairs)),
        lost=lost,
        gained=gained,
        corpus_level=c.corpus_level,
        other_filters=tuple((o.filter, *o.lost_gained()) for o in others),
    )


def import_lmeval(base: Path, cand: Path, *, filter_name: str | None = None) -> Imported:
    """Read, join and measure two runs (module docstring); bad input is a :class:`DataError`."""
    files = pair_files(base, cand)
    generative: list[gen.TaskComparison] = []
    other_filters: list[list[gen.TaskComparison]] = []
    choice: list[tuple[str, Path, Path]] = []
    for task, b, c in files:
        kinds = (is_generative_file(b), is_generative_file(c))
        if kinds[0] != kinds[1]:
            raise DataError(
                f"task {task}: one file is a generative task's, the other a multiple-choice one's",
                "compare two runs of the same task",
            )
        if kinds[0]:
            b_task, c_task = read_generative(b, task), read_generative(c, task)
            chosen = gen.compare_task(b_task, c_task, filter_name=filter_name)
            generative.append(chosen)
            # every other filter must join too; its counts are shown, not gated
            other_filters.append(
                [
                    gen.compare_task(b_task, c_task, filter_name=f)
                    for f in b_task.by_filter
                    if f != chosen.filter
                ]
            )
        else:
            choice.append((task, b, c))
    if len(choice) > 1:
        raise DataError(
            f"{len(choice)} multiple-choice tasks ({', '.join(t for t, _, _ in choice)}) in one run",
            "import one multiple-choice task per run (generative tasks may be several)",
        )
    cand_m: list[Measurement] = []
    base_m: list[Measurement] = []
    summaries: list[TaskSummary] = []
    binary: dict[str, bool] = {}
    for task, b, c in choice:
        got_c, got_b = mcq.import_runs(b, c)
        cand_m += got_c
        base_m += got_b
        summaries.append(_mcq_summary(task, b, c))
    specs: dict[str, MetricSpec] = {}
    if generative:
        got_c, got_b, binary = gen.pooled_measurements(generative)
        cand_m += got_c
        base_m += got_b
        summaries += [
            _gen_summary(g, others) for g, others in zip(generative, other_filters, strict=True)
        ]
        for name, is_binary in binary.items():
            specs[name] = gen.metric_spec(name.removeprefix(gen.PREFIX), binary=is_binary)
    return Imported(cand_m, base_m, specs, binary, tuple(summaries))

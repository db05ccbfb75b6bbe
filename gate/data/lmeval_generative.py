"""Generative (``generate_until``) tasks of lm-evaluation-harness ``--log_samples`` files.

A generative task's samples file holds one JSON object per document and
filter, as the harness's evaluator writes it: ``doc_id``, ``doc``, ``target``,
``arguments`` (``{"gen_args_0": {"arg_0": <prompt>, "arg_1": <generation
kwargs>}}``), ``resps`` (``[[<generated text>]]``), ``filtered_resps``
(``[<extracted answer>]``), ``filter`` (GSM8K: ``strict-match`` and
``flexible-extract``, each document once per filter), ``metrics`` (the names
of the per-document metrics), ``doc_hash``, ``prompt_hash``, ``target_hash``
and, under each name in ``metrics``, the document's value.

Per-document values are either numbers (``exact_match``, ``acc``, ``f1``,
``em``: one score per document) or the harness's pass-through items for
corpus-level metrics (``bleu``, ``chrf``, ``ter``: a ``[reference,
prediction]`` pair aggregated over the whole corpus): only the numbers can be
paired document by document; the others are listed as skipped.

One filter per task is compared (the same document under two filters is the
same answer twice, not two items): the one named, else the first in the
baseline file (the order of the task's configuration). Baseline and candidate
must carry the same task, filters and metrics; documents are joined on
``(doc_id, doc_hash)``.

Measurements, one sample per document (``task/doc_id``), slices ``task:<name>``
when several tasks carry the metric:

* ``accuracy.gen_<metric>`` for every numeric metric: a 0/1 metric is per-item
  correctness (McNemar on the answers lost and gained), any other a per-item
  score (paired bootstrap) (:mod:`gate.gating.stats`);
* ``accuracy.gen_flips``: 1 where the primary 0/1 metric (``exact_match`` when
  present, else the first 0/1 metric) changed, with the counts of answers lost
  (``right_to_wrong``) and gained (``wrong_to_right``) in its details; the
  baseline's own value is 0 (ideal).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gate.errors import DataError
from gate.measurement import Measurement, from_samples
from gate.metrics.catalog import accuracy as accuracy_catalog
from gate.metrics.metric_spec import MetricSpec, SampleKind

_HINT = "give files written by lm_eval --log_samples"
#: The metric of a binary score that is preferred as the primary correctness.
PRIMARY = "exact_match"
#: Per-document metrics of common generative tasks for which lower is better.
LOWER_IS_BETTER = frozenset({"ter", "wer", "cer"})
#: Name prefix of the generative measurements.
PREFIX = "accuracy.gen_"
FLIPS = accuracy_catalog.GEN_FLIPS


@dataclass(frozen=True)
class GenDoc:
    """One document of a generative task under one filter: its numeric per-document metrics."""

    task: str
    doc_id: str
    doc_hash: str
    filter: str
    scores: Mapping[str, float]
    #: Metrics the record carries whose value is not a number (corpus-level items).
    corpus_level: tuple[str, ...] = ()

    @property
    def sample_id(self) -> str:
        return f"{self.task}/{self.doc_id}"


def is_generative(rec: Any) -> bool:
    """A record of a ``generate_until`` task: its filtered response is text, not log-likelihoods."""
    if not isinstance(rec, Mapping):
        return False
    resps = rec.get("filtered_resps")
    return isinstance(resps, list) and len(resps) >= 1 and isinstance(resps[0], str)


def _score(value: Any, where: str, name: str) -> float | None:
    """A per-document number (bools as 0/1); ``None`` for a corpus-level item (list, dict, text)."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        x = float(value)
        if not math.isfinite(x):
            raise DataError(f"{where}: {name} is {x}", "re-run lm_eval: a score must be finite")
        return x
    return None


def parse_doc(rec: Any, task: str, where: str) -> GenDoc:
    """One logged document of a generative task; :class:`DataError` names what is missing."""
    if not isinstance(rec, Mapping):
        raise DataError(f"{where}: not a JSON object", _HINT)
    for key in ("doc_id", "doc_hash", "filtered_resps", "metrics"):
        if key not in rec:
            raise DataError(f"{where}: missing field {key!r}", _HINT)
    where = f"{where} (doc {rec['doc_id']})"
    names = rec["metrics"]
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names) or not names:
        raise DataError(f"{where}: 'metrics' is {names!r}, not a list of metric names", _HINT)
    scores: dict[str, float] = {}
    corpus: list[str] = []
    for name in names:
        if name not in rec:
            raise DataError(f"{where}: metric {name!r} is listed but has no value", _HINT)
        x = _score(rec[name], where, name)
        if x is None:
            corpus.append(name)
        else:
            scores[name] = x
    return GenDoc(
        task=task,
        doc_id=str(rec["doc_id"]),
        doc_hash=str(rec["doc_hash"]),
        filter=str(rec.get("filter", "none")),
        scores=scores,
        corpus_level=tuple(corpus),
    )


@dataclass
class GenTask:
    """A generative task's documents, by filter in file order."""

    task: str
    source: str
    by_filter: dict[str, list[GenDoc]] = field(default_factory=dict)
    _seen: dict[str, set[str]] = field(default_factory=dict, repr=False)

    def add(self, doc: GenDoc, where: str) -> None:
        """Append a document; the same document twice under one filter is a :class:`DataError`."""
        docs = self.by_filter.setdefault(doc.filter, [])
        seen = self._seen.setdefault(doc.filter, set())
        if doc.doc_id in seen:
            raise DataError(
                f"{where}: document {doc.doc_id} appears twice under filter {doc.filter!r}", _HINT
            )
        seen.add(doc.doc_id)
        docs.append(doc)


@dataclass(frozen=True)
class GenPair:
    """One document of a task under the compared filter, baseline and candidate."""

    base: GenDoc
    cand: GenDoc


@dataclass(frozen=True)
class TaskComparison:
    """The joined documents of one task and what was compared."""

    task: str
    filter: str
    pairs: tuple[GenPair, ...]
    metrics: tuple[str, ...]
    binary: frozenset[str]
    corpus_level: tuple[str, ...]

    @property
    def primary(self) -> str | None:
        """The 0/1 metric whose changes are the flips (``exact_match`` first)."""
        if PRIMARY in self.binary:
            return PRIMARY
        return next((m for m in self.metrics if m in self.binary), None)

    def lost_gained(self) -> tuple[int, int]:
        """Documents right in the baseline and wrong in the candidate, and the reverse."""
        m = self.primary
        if m is None:
            return 0, 0
        lost = sum(p.base.scores[m] == 1.0 and p.cand.scores[m] == 0.0 for p in self.pairs)
        gained = sum(p.base.scores[m] == 0.0 and p.cand.scores[m] == 1.0 for p in self.pairs)
        return lost, gained


def _choose_filter(base: GenTask, cand: GenTask, wanted: str | None) -> str:
    b, c = list(base.by_filter), list(cand.by_filter)
    if set(b) != set(c):
        raise DataError(
            f"task {base.task}: the files carry different filters (baseline {sorted(b)}, "
            f"candidate {sorted(c)})",
            "compare runs of the same task configuration",
        )
    if wanted is None:
        return b[0]
    if wanted not in b:
        raise DataError(f"task {base.task} has no filter {wanted!r}", f"its filters: {sorted(b)}")
    return wanted


def compare_task(base: GenTask, cand: GenTask, *, filter_name: str | None = None) -> TaskComparison:
    """Join one task's two runs document by document (module docstring)."""
    chosen = _choose_filter(base, cand, filter_name)
    b_docs, c_docs = base.by_filter[chosen], cand.by_filter[chosen]
    by_key = {(d.doc_id, d.doc_hash): d for d in b_docs}
    c_keys = {(d.doc_id, d.doc_hash) for d in c_docs}
    only_c = [d for d in c_docs if (d.doc_id, d.doc_hash) not in by_key]
    only_b = [d for d in b_docs if (d.doc_id, d.doc_hash) not in c_keys]
    if only_c or only_b:
        first = (only_c or only_b)[0]
        side = "candidate" if only_c else "baseline"
        raise DataError(
            f"task {base.task}: samples do not join: {len(only_c)} candidate and {len(only_b)} "
            f"baseline document(s) have no partner (first: {side} doc {first.doc_id})",
            "compare runs of the same task, dataset version and --limit",
        )
    metrics = tuple(b_docs[0].scores)
    pairs = tuple(GenPair(by_key[(d.doc_id, d.doc_hash)], d) for d in c_docs)
    for p in pairs:
        for side, doc in (("baseline", p.base), ("candidate", p.cand)):
            if tuple(doc.scores) != metrics:
                raise DataError(
                    f"task {base.task}: {side} doc {doc.doc_id} carries metrics "
                    f"{sorted(doc.scores)}, not {sorted(metrics)}",
                    "compare runs of the same task configuration",
                )
    binary = frozenset(
        m
        for m in metrics
        if all(p.base.scores[m] in (0.0, 1.0) and p.cand.scores[m] in (0.0, 1.0) for p in pairs)
    )
    corpus = tuple(dict.fromkeys(n for d in b_docs for n in d.corpus_level))
    return TaskComparison(base.task, chosen, pairs, metrics, binary, corpus)


def metric_spec(metric: str, *, binary: bool) -> MetricSpec:
    """The spec of ``accuracy.gen_<metric>``: correctness (McNemar) or a score (paired bootstrap)."""
    return MetricSpec(
        name=PREFIX + metric,
        unit="fraction" if binary else "score",
        higher_is_better=metric not in LOWER_IS_BETTER,
        sample_kind=SampleKind.PAIRED_BINARY if binary else SampleKind.PAIRED_SCORE,
        description=f"lm-eval per-document {metric} of a generative task",
    )


def _groups(tasks: Sequence[str]) -> dict[str, list[int]]:
    groups: dict[str, list[int]] = {}
    for i, task in enumerate(tasks):
        groups.setdefault(f"task:{task}", []).append(i)
    return groups if len(groups) > 1 else {}


def pooled_measurements(
    comparisons: Sequence[TaskComparison],
) -> tuple[list[Measurement], list[Measurement], dict[str, bool]]:
    """``(candidate, baseline, binary)``: the measurements of every task, pooled per metric
    (module docstring); ``binary`` says which metric names are 0/1 in every task."""
    cand: list[Measurement] = []
    base: list[Measurement] = []
    kinds: dict[str, bool] = {}
    names = list(dict.fromkeys(m for c in comparisons for m in c.metrics))
    for metric in names:
        carrying = [c for c in comparisons if metric in c.metrics]
        is_binary = all(metric in c.binary for c in carrying)
        kinds[PREFIX + metric] = is_binary
        ids = [p.base.sample_id for c in carrying for p in c.pairs]
        groups = _groups([c.task for c in carrying for _ in c.pairs])
        cand.append(
            from_samples(
                PREFIX + metric,
                [p.cand.scores[metric] for c in carrying for p in c.pairs],
                ids,
                groups=groups,
            )
        )
        base.append(
            from_samples(
                PREFIX + metric,
                [p.base.scores[metric] for c in carrying for p in c.pairs],
                ids,
                groups=groups,
            )
        )
    with_flips = [c for c in comparisons if c.primary is not None]
    if with_flips:
        ids = [p.base.sample_id for c in with_flips for p in c.pairs]
        groups = _groups([c.task for c in with_flips for _ in c.pairs])
        flips = [
            float(p.base.scores[c.primary] != p.cand.scores[c.primary])  # type: ignore[index]
            for c in with_flips
            for p in c.pairs
        ]
        lost = sum(c.lost_gained()[0] for c in with_flips)
        gained = sum(c.lost_gained()[1] for c in with_flips)
        cand.append(
            from_samples(
                FLIPS,
                flips,
                ids,
                groups=groups,
                details={"right_to_wrong": lost, "wrong_to_right": gained},
            )
        )
        base.append(from_samples(FLIPS, [0.0] * len(flips), ids, groups=groups))
    return cand, base, kinds

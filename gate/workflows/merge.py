"""``gate merge``: the results of a CI matrix's jobs, one verdict (docs/self-hosted-runners.md).

Each job of the matrix (``gate run --config gate.toml --only NAME --json ...``)
writes one candidate's results JSON; :func:`merge_results` reads them back
(:meth:`gate.report.results.Results.from_document`, the one reader) and makes
what one ``gate run --config gate.toml`` would have made of the same
candidates: the summary table and the worst exit code
(:mod:`gate.workflows.multirun`: an error outranks a block), every candidate's
report files under the same names (``out/results.json`` ->
``out/results-<name>.json`` when there are several, the combined markdown at
the path given), the GitHub annotations and step summary, and the judge
tier's round robin.

Results merge only when they belong together (:func:`check_together`, else a
one-line :class:`~gate.errors.DataError`, exit 4): every document names its
candidate and what decided it (the ``run`` object, schema 2), and they must
agree on

* the gate version that compared them,
* the thresholds (the digest of what ``thresholds.toml`` says, not its path),
  and ``--strict``,
* the run config (the sha256 of its file; all from one, or none from any),
* the baselines: a ref of a model slug that two results were compared with
  must be the same stored baseline in both (the sha256 of the baseline file;
  a runner with a stale store, or a ref moved between two jobs, differs);

and no candidate may come twice. ``--expect-from`` names the candidates there
should be — a run config (``gate.toml``, whose digest must then be the one the
results were run from) or a saved ``--matrix`` document — so that a candidate
whose job failed before writing its results is a row of the summary
(``MISSING``, exit 5: nothing measured for it, never approved) instead of going
unnoticed; a result for a candidate it does not name is refused. Rows follow
the order of ``--expect-from``, else the order the files were given in.

Merging decides nothing again: every document was decided by the one judgement
(:func:`gate.session.judgement.judge_run`, in ``gate run``, ``gate compare`` or
``gate import``), and each candidate's row, report files and exit code are read
from its document as it stands (its ``exit_code``, verdict word and findings);
the merge's exit code is the worst of them, or the exit code of a problem it
meets itself (documents that do not belong together, a report it cannot write).
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from gate.errors import DataError, ExitCode, GateError, UsageError, decided
from gate.report.outputs import ReportTargets, check_targets, write_reports
from gate.report.results import Results, RunIdentity
from gate.session.run_config import Candidate, RunConfig
from gate.store.atomic import write_atomic
from gate.store.writable import writing
from gate.workflows.multirun import (
    CandidateOutcome,
    judge_round_robin,
    outcome_of,
    summary_markdown,
    summary_table,
    worst_exit,
)
from gate.workflows.plan import candidate_targets

#: The summary's verdict of a candidate without results.
MISSING = "MISSING"
#: Why a candidate has no results, in its row of the summary.
MISSING_WHY = "no results file: its matrix job failed or was cancelled (see that job's log)"


@dataclass(frozen=True)
class Merged:
    """One results file to merge: where it came from, what it says, whom it is of."""

    path: Path
    results: Results
    run: RunIdentity

    @property
    def name(self) -> str:
        """The candidate's name."""
        return self.run.candidate


@dataclass(frozen=True)
class Expected:
    """The candidates ``--expect-from`` names, in order."""

    source: Path
    candidates: tuple[Candidate, ...]
    #: sha256 of the run config file (``None``: a matrix document was given).
    config_sha256: str | None = None
    #: The run config itself, parsed (its judge settings are the round robin's).
    config: RunConfig | None = None


def results_files(paths: Sequence[Path]) -> list[Path]:
    """The files to merge: each path as given; a directory stands for every ``*.json``
    below it (sorted), as ``actions/download-artifact`` lays artifacts out."""
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            files += sorted(p for p in path.rglob("*.json") if p.is_file())
        else:
            files.append(path)
    return files


def read_merged(path: Path) -> Merged:
    """One results file; a file without a ``run`` object (written by a gate before schema 2)
    or with an exit code the gate does not have is a DataError."""
    from gate.report.results_json import results_from_json

    results = results_from_json(path)
    if results.run is None:
        raise DataError(
            f"{path} names no candidate and no thresholds (no 'run' object)",
            "merge the results of gate run/compare/import from this gate version",
        )
    try:
        ExitCode(results.exit_code)
    except ValueError:
        raise DataError(
            f"{path}: exit_code {results.exit_code} is no gate exit code", "the file is corrupt"
        ) from None
    return Merged(path, results, results.run)


def _baseline_identity(description: Mapping[str, Any]) -> str:
    """What tells two stored baselines apart: the sha256 of the baseline's file, else (older
    documents) a digest of its description less the ref and the machine's path."""
    digest = description.get("sha256")
    if isinstance(digest, str) and digest:
        return digest
    rest = {k: v for k, v in description.items() if k not in ("ref", "path")}
    text = json.dumps(rest, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _baseline_display(description: Mapping[str, Any]) -> str:
    number = description.get("number")
    created = description.get("created") or "no date"
    if isinstance(number, int) and number > 0:
        return f"{description.get('model_slug')}#{number:04d} ({created})"
    return f"{description.get('path')} ({created})"


def _short(digest: str | None) -> str:
    return digest[:12] if digest else "none"


def _config_shown(run: RunIdentity) -> str:
    return f"{run.config} sha256 {_short(run.config_sha256)}" if run.config else "no run config"


#: What results must share: ``(problem, key compared, key shown, what to rerun with)``.
#: A file's path may differ between runners; what it says (its digest) may not.
_RULES: tuple[tuple[str, Callable[[RunIdentity], Any], Callable[[RunIdentity], str], str], ...] = (
    (
        "were decided by different gate versions",
        lambda r: r.gate_version,
        lambda r: f"gate {r.gate_version}",
        "one gate version",
    ),
    (
        "were decided with different thresholds",
        lambda r: r.thresholds_sha256,
        lambda r: f"{r.thresholds} sha256 {_short(r.thresholds_sha256)}",
        "one thresholds.toml",
    ),
    (
        "differ in --strict",
        lambda r: r.strict,
        lambda r: "strict" if r.strict else "not strict",
        "one --strict setting",
    ),
    (
        "come from different run configs",
        lambda r: r.config_sha256,
        _config_shown,
        "one gate.toml",
    ),
)


def check_together(merged: Sequence[Merged]) -> None:
    """Refuse results that one ``gate run --config`` could not have made together (see the
    module docstring); the first problem is a one-line DataError (exit 4)."""
    seen: dict[str, Path] = {}
    for item in merged:
        if item.name in seen:
            raise DataError(
                f"candidate {item.name!r} is in both {seen[item.name]} and {item.path}",
                "merge each candidate's results once",
            )
        seen[item.name] = item.path
    if not merged:
        return
    first = merged[0]
    for problem, key, shown, fix in _RULES:
        for item in merged[1:]:
            if key(item.run) != key(first.run):
                raise DataError(
                    f"{first.path} and {item.path} {problem}"
                    f" ({shown(first.run)}; {shown(item.run)})",
                    f"rerun every candidate of the matrix with {fix}",
                )
    _check_baselines(merged)


def _check_baselines(merged: Sequence[Merged]) -> None:
    """A ref of a model slug is the same stored baseline in every result compared with it."""
    first_seen: dict[tuple[str, str], tuple[Merged, Mapping[str, Any]]] = {}
    for item in merged:
        for ref, description in item.results.baselines.items():
            key = (str(description.get("model_slug")), str(ref))
            if key not in first_seen:
                first_seen[key] = (item, description)
                continue
            other, seen = first_seen[key]
            if _baseline_identity(seen) != _baseline_identity(description):
                raise DataError(
                    f"{other.path} and {item.path} were compared with different baselines"
                    f" as ref {ref} of {key[0]}: {_baseline_display(seen)} and"
                    f" {_baseline_display(description)}",
                    "every job of the matrix must read the same baseline store; rerun the"
                    " candidates against one",
                )


def expected_from(path: Path) -> Expected:
    """The candidates ``--expect-from PATH`` names: a saved matrix (``.json``) or a run
    config (anything else), read without loading a model."""
    if path.suffix.lower() == ".json":
        from gate.workflows.matrix import expected_from_matrix

        return Expected(path, tuple(expected_from_matrix(path)))
    from gate.session.run_config import load_run_config

    config = load_run_config(path)
    return Expected(path, tuple(config.resolved()), config.sha256, config)


def check_expected(merged: Sequence[Merged], expected: Expected) -> None:
    """Every result is of a candidate ``expected`` names, run from that very run config."""
    from gate.config import suggest

    names = [c.name for c in expected.candidates]
    for item in merged:
        if item.name not in names:
            raise DataError(
                f"{item.path} is of candidate {item.name!r}, which {expected.source} does not name",
                suggest(item.name, names),
            )
        digest = item.run.config_sha256
        if expected.config_sha256 is not None and digest != expected.config_sha256:
            raise DataError(
                f"{item.path} was run from another {expected.source}"
                f" (sha256 {_short(digest)}, this one {_short(expected.config_sha256)})",
                "merge the results of one commit's gate.toml, or rerun that candidate",
            )


def _candidate_of(item: Merged) -> Candidate:
    """The candidate a results document describes (no run config to look it up in)."""
    provenance = item.results.candidate
    return Candidate(
        name=item.name,
        model=provenance.display_name or "?",
        recipe=provenance.recipe or None,
        against=tuple(item.results.baselines),
        tiers=None,
        calibration=None,
        model_slug=provenance.slug or None,
    )


def _reported(
    candidate: Candidate, item: Merged, targets: ReportTargets, several: bool
) -> CandidateOutcome:
    """Write one candidate's report files (and GitHub output) as its own session would
    have; a failed write is one line and, like a session's, turns 0 or 1 into 4."""
    mine = candidate_targets(targets, candidate.name, several)
    code = ExitCode(item.results.exit_code)
    error: str | None = None
    try:
        write_reports(item.results, mine)
    except GateError as exc:
        error = exc.format_line()
        print(f"gate: error: {error}", file=sys.stderr)
        if decided(code):  # an input error outranks a verdict
            code = exc.exit_code
    json_written = mine.json if mine.json is not None and mine.json.is_file() else None
    return outcome_of(candidate, code, item.results, mine.markdown, error, json_written)


def merge_results(
    paths: Sequence[Path],
    targets: ReportTargets,
    console: Console,
    expect_from: Path | None = None,
) -> ExitCode:
    """Merge the results files ``paths`` (see the module docstring); returns the worst exit
    code, a missing candidate counting as :attr:`ExitCode.NO_MEASUREMENTS`."""
    files = results_files(paths)
    expected = expected_from(expect_from) if expect_from is not None else None
    if not files and expected is None:
        raise UsageError("no results files to merge", "pass the results JSONs (or their directory)")
    merged = [read_merged(path) for path in files]
    check_together(merged)
    if expected is not None:
        check_expected(merged, expected)
    by_name = {item.name: item for item in merged}
    if expected is not None:
        order: list[tuple[Candidate, Merged | None]] = [
            (c, by_name.get(c.name)) for c in expected.candidates
        ]
    else:
        order = [(_candidate_of(item), item) for item in merged]
    several = len(order) > 1
    check_targets(targets)
    for candidate, _ in order:
        check_targets(candidate_targets(targets, candidate.name, several))
    outcomes: list[CandidateOutcome] = []
    for candidate, item in order:
        if item is None:
            outcomes.append(
                CandidateOutcome(candidate, ExitCode.NO_MEASUREMENTS, MISSING, (MISSING_WHY,))
            )
        else:
            outcomes.append(_reported(candidate, item, targets, several))
    worst = worst_exit(o.exit_code for o in outcomes)
    console.print(summary_table(outcomes))
    missing = [o.candidate.name for o in outcomes if o.headline == MISSING and o.results is None]
    if missing:
        console.print(
            f"gate: {len(missing)} candidate(s) missing: {', '.join(missing)} ({MISSING_WHY})",
            markup=False,
        )
    console.print(f"gate: worst exit code {int(worst)} over {len(outcomes)} candidate(s)")
    config = expected.config if expected is not None else None
    judge_round_robin(outcomes, config, targets.json, console)
    if several and targets.markdown is not None:
        with writing("the combined markdown report", targets.markdown):
            write_atomic(targets.markdown, summary_markdown(outcomes, worst).encode())
    return worst


__all__ = [
    "MISSING",
    "Expected",
    "Merged",
    "check_expected",
    "check_together",
    "expected_from",
    "merge_results",
    "read_merged",
    "results_files",
]

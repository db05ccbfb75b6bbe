"""The results JSON file (docs/contracts.md "Results JSON"): written by ``--json`` and the plugin.

Shape (``schema_version`` 3, :data:`~gate.report.results.SCHEMA_VERSION`)::

    {"schema_version": 3, "kind": "results", "verdict": "pass|warn|block|not_exercised",
     "headline": "APPROVED", "exit_code": 0,
     "baseline": {provenance of the first ref}, "baselines": {ref: {...}},
     "candidate": {provenance}, "environment": {...}, "notes": [...],
     "unmeasured": [{"name", "against"}], "unbounded": [name, ...],
     "version_drift": [{"package", "baseline", "candidate", "against"}],
     "not_exercised": [{"tier", "why"}], "underpowered": [{"name", "slice", "against", "message"}],
     "judge": [{"against", "judges", "tally", "stability", "templates", "examples",
                "elo", "candidate_outputs"}],
     "metrics": [{"name", "tier", "slice", "value", "baseline_value", "delta",
                  "relative_delta", "ci", "n", "higher_is_better", "severity",
                  "threshold", "breakdown", "against", "reason", "unit",
                  "p_value", "test", "details"}]}

One ``metrics`` entry per verdict (a metric, or one slice of it, against one
ref). ``unmeasured``: metrics a baseline holds, of the tiers that ran, that the
run did not measure (each a warning; ``--strict`` blocks); ``unbounded``:
measured metrics ``thresholds.toml`` sets no bound for (reported, not gated);
``version_drift``: torch, transformers, a kernel package or the serving engine
at another version on the candidate's side than baseline ``against`` was
measured with (each a warning; ``--strict`` blocks; :mod:`gate.gating.versions`).

The document and its typed form are :class:`gate.report.results.Results`
(its one reader and writer); this module builds it from a run's outcome and
moves it to and from a file. :func:`results_from_json` reads a file back so
that the markdown/HTML/GitHub reports can be produced from a finished run.
"""

from __future__ import annotations

from pathlib import Path

from gate.errors import DataError
from gate.report.results import KIND, SCHEMA_VERSION, Results, final_words
from gate.store.atomic import write_atomic
from gate.store.measurements_file import dump_json, read_json
from gate.store.writable import writing

__all__ = [
    "KIND",
    "SCHEMA_VERSION",
    "Results",
    "build_results",
    "final_words",
    "results_from_json",
    "write_results",
]


#: The results of one run from its outcome (:meth:`Results.of_run`: ``exit_code``
#: overrides the outcome's own, ``baselines`` maps each ref compared against to
#: its description).
build_results = Results.of_run


def write_results(path: Path, results: Results) -> None:
    """Write a results file atomically; a failed write is a one-line UsageError (exit 4)."""
    with writing("the results JSON", path):
        write_atomic(Path(path), dump_json(results.to_document()))


def results_from_json(path: Path) -> Results:
    """Read a results file; anything malformed or newer is a one-line DataError."""
    return Results.from_document(read_json(Path(path), DataError), str(path))

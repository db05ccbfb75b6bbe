"""The CI matrix of a run config: one job per candidate (docs/self-hosted-runners.md).

``gate run --config gate.toml --matrix`` prints :func:`matrix_json`, a GitHub
Actions matrix (``strategy.matrix: ${{ fromJSON(...) }}``)::

    {"include": [{"candidate": "int8", "model": "demo", "recipe": "bnb-int8",
                  "runs_on": ["self-hosted", "linux", "x64", "gpu"]}, ...]}

one entry per ``[[candidates]]`` table, in file order: ``candidate`` is the
name each job passes to ``gate run --config gate.toml --only NAME``,
``runs_on`` the runner labels its job asks for (the candidate's ``runs_on``,
else ``[run].runs_on``, else :data:`gate.session.run_config.DEFAULT_RUNS_ON`);
``model`` and ``recipe`` name the job in the Actions UI. Making it reads the
run config only: no model, no model library, no baseline store, so the plan
job can run on any machine.

The same document, saved as a file, tells ``gate merge --expect-from`` which
candidates to expect (:func:`expected_from_matrix`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gate.errors import DataError
from gate.session.run_config import DEFAULT_RUNS_ON, Candidate

#: The keys of one matrix entry, in the order they are written.
ENTRY_KEYS = ("candidate", "model", "recipe", "runs_on")


def matrix_entry(candidate: Candidate) -> dict[str, Any]:
    """The matrix entry of one candidate (keys :data:`ENTRY_KEYS`)."""
    return {
        "candidate": candidate.name,
        "model": candidate.model,
        "recipe": candidate.recipe_label,
        "runs_on": list(candidate.runs_on),
    }


def matrix_document(candidates: Sequence[Candidate]) -> dict[str, list[dict[str, Any]]]:
    """The matrix of ``candidates``: ``{"include": [entry, ...]}``, in their order."""
    return {"include": [matrix_entry(c) for c in candidates]}


def matrix_json(candidates: Sequence[Candidate]) -> str:
    """The matrix as one line of JSON (what a ``$GITHUB_OUTPUT`` line can hold)."""
    return json.dumps(matrix_document(candidates))


def expected_from_matrix(path: Path) -> list[Candidate]:
    """The candidates a saved matrix document (``--matrix``'s output) names, in its order.

    Only what the matrix says is filled in (name, model, recipe, runner labels);
    anything malformed is a one-line :class:`~gate.errors.DataError` (exit 4).
    """
    from gate.store.measurements_file import read_json

    doc = read_json(path, DataError, what="matrix")
    entries = doc.get("include") if isinstance(doc, dict) else None
    if not isinstance(entries, list):
        raise DataError(
            f"matrix {path} has no 'include' list",
            "save the output of gate run --config gate.toml --matrix",
        )
    out: list[Candidate] = []
    for index, entry in enumerate(entries):
        where = f"matrix {path}: include[{index}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("candidate"), str):
            raise DataError(f"{where} names no candidate", "each entry needs a 'candidate' name")
        unknown = [str(key) for key in entry if key not in ENTRY_KEYS]
        if unknown:
            raise DataError(f"{where}: unknown key(s) {', '.join(unknown)}", "see --matrix")
        recipe = str(entry.get("recipe") or "none")
        labels = entry.get("runs_on") or list(DEFAULT_RUNS_ON)
        out.append(
            Candidate(
                name=entry["candidate"],
                model=str(entry.get("model") or "?"),
                recipe=None if recipe == "none" else recipe,
                against=(),
                tiers=None,
                calibration=None,
                model_slug=None,
                runs_on=tuple(str(label) for label in labels),
            )
        )
    names = [c.name for c in out]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise DataError(f"matrix {path} names {', '.join(twice)} twice", "one entry per candidate")
    return out


__all__ = [
    "ENTRY_KEYS",
    "expected_from_matrix",
    "matrix_document",
    "matrix_entry",
    "matrix_json",
]

"""``gate import lm-eval`` reaches its verdicts through the one judgement.

The results documents in tests/lmeval/golden/ were written by ``gate import lm-eval``
when it still compared and decided on a route of its own (``compare`` + ``decide`` +
``build_results``, gate 0.x before :func:`gate.session.judgement.judge` took it over); the
import must still reach the very same verdicts, exit codes, notes and descriptions on the
same files. Regenerate them only for a deliberate change of the results:
``python -m tests.test_lmeval_one_judgement`` (from the repository root).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gate.cli import main
from tests.lmeval_support import REAL_SAMPLES, gsm8k_pair, gsm8k_records, lost_gained, write
from tests.test_lmeval_import import base_records, record

REPO = Path(__file__).resolve().parent.parent
GOLDEN = REPO / "tests" / "lmeval" / "golden"
SMOLLM2 = Path("tests") / "lmeval" / "smollm2"
#: Keys of the results document that name where and by whom it was made, not what it
#: decided: this machine's package versions and the ``run`` object.
NOT_COMPARED = ("environment", "run")


def _smollm2(*extra: str) -> Callable[[Path], list[str]]:
    def argv(_: Path) -> list[str]:
        (base,) = sorted((SMOLLM2 / "base").glob("samples_*.jsonl"))
        (cand,) = sorted((SMOLLM2 / "cand").glob("samples_*.jsonl"))
        return [str(base), str(cand), *extra]

    return argv


def _harness_file(_: Path) -> list[str]:
    real = REAL_SAMPLES.relative_to(REPO)
    return [str(real), str(real)]


def _mcq_flips(tmp: Path) -> list[str]:
    base = base_records()
    cand = [record(i, [-3.0, -0.1, -4.0, -5.0], 0) if i % 3 == 0 else r for i, r in enumerate(base)]
    for r, b in zip(cand, base, strict=True):
        r["doc"], r["doc_hash"] = b["doc"], b["doc_hash"]
    return [str(write(tmp / "b.jsonl", base)), str(write(tmp / "c.jsonl", cand))]


def _mcq_same(tmp: Path) -> list[str]:
    base = write(tmp / "samples_t_2025-01-01T00-00-00.jsonl", base_records())
    return [str(base), str(base)]


def _gsm8k(lost: int, gained: int, *extra: str) -> Callable[[Path], list[str]]:
    def argv(tmp: Path) -> list[str]:
        base, cand = gsm8k_pair(tmp, lost=lost, gained=gained)
        return [str(base), str(cand), *extra]

    return argv


def _scores(tmp: Path) -> list[str]:
    n = 80
    base_ok, cand_ok = lost_gained(n, 0, 0, 60)
    base = gsm8k_records(base_ok, extra={i: {"f1": 0.9, "rouge_x": 0.5} for i in range(n)})
    cand = gsm8k_records(
        cand_ok, extra={i: {"f1": 0.9 - 0.2 * (i % 2), "rouge_x": 0.5} for i in range(n)}
    )
    return [str(write(tmp / "b.jsonl", base)), str(write(tmp / "c.jsonl", cand))]


def _two_tasks(tmp: Path) -> list[str]:
    gsm8k_pair(tmp, lost=30, gained=5, task="gsm8k")
    gsm8k_pair(tmp, lost=0, gained=0, n=120, base_right=60, task="arith")
    return [str(tmp / "base"), str(tmp / "cand")]


#: case name -> the arguments after ``gate import lm-eval`` (files written under a folder).
CASES: dict[str, Callable[[Path], list[str]]] = {
    "harness-file-itself": _harness_file,
    "smollm2-default-filter": _smollm2(),
    "smollm2-flexible-extract": _smollm2("--filter", "flexible-extract"),
    "smollm2-flexible-extract-strict": _smollm2("--filter", "flexible-extract", "--strict"),
    "mcq-identical": _mcq_same,
    "mcq-many-flips": _mcq_flips,
    "gsm8k-30-lost-5-gained": _gsm8k(30, 5),
    "gsm8k-2-lost-1-gained-strict": _gsm8k(2, 1, "--strict"),
    "scores-bootstrap": _scores,
    "two-tasks": _two_tasks,
}


def results_of(case: str, tmp: Path) -> dict[str, Any]:
    """Run ``case`` in-process; its exit code and results document, with the folder the
    files were written to shown as ``<tmp>`` and :data:`NOT_COMPARED` left out."""
    out = tmp / "results.json"
    files = tmp / "files"
    files.mkdir(parents=True, exist_ok=True)
    argv = ["import", "lm-eval", *CASES[case](files), "--no-color", "--json", str(out)]
    code = main(argv)
    text = out.read_text(encoding="utf-8").replace(str(files), "<tmp>")
    doc = json.loads(text)
    for key in NOT_COMPARED:
        doc.pop(key, None)
    return {"exit_code_returned": code, "results": doc}


@pytest.mark.parametrize("case", list(CASES))
def test_import_reaches_the_recorded_results(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    golden = json.loads((GOLDEN / f"{case}.json").read_text(encoding="utf-8"))
    assert results_of(case, tmp_path) == golden


if __name__ == "__main__":
    import os
    import tempfile

    os.chdir(REPO)
    GOLDEN.mkdir(parents=True, exist_ok=True)
    for name in CASES:
        with tempfile.TemporaryDirectory() as folder:
            got = results_of(name, Path(folder))
        (GOLDEN / f"{name}.json").write_text(
            json.dumps(got, indent=1, sort_keys=True) + "\n", encoding="utf-8"
        )
        print(name, got["exit_code_returned"], file=sys.stderr)

"""``gate import lm-eval`` reaches its verdicts through the one judgement, and the same ones.

The results documents in tests/lmeval/golden/ were written by ``gate import lm-eval``
when it still compared and decided on a route of its own (``compare`` + ``decide`` +
``build_results``; this module's first version in the history wrote them, run on the
gate of that time); the import must still reach the very same verdicts, exit codes and
descriptions on the same files. One edit since, by hand: the paired bootstrap's p-value
is never below ``2^-m`` for ``m`` moved pairs (docs/metrics.md), so the two
``accuracy.choice_kl`` slices of ``mcq-many-flips`` (10 moved items of 30) read
p = 0.00098 (``2^-10``) where the bootstrap alone said 0.0005; their verdicts are as
recorded.
"""

from __future__ import annotations

import json
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


def results_of(case: str, tmp: Path) -> tuple[list[str], dict[str, Any]]:
    """Run ``case`` in-process: its arguments and exit code and results document, with the
    folder the files were written to shown as ``<tmp>`` and :data:`NOT_COMPARED` left out."""
    out = tmp / "results.json"
    files = tmp / "files"
    files.mkdir(parents=True, exist_ok=True)
    args = CASES[case](files)
    code = main(["import", "lm-eval", *args, "--no-color", "--json", str(out)])
    doc = json.loads(out.read_text(encoding="utf-8").replace(str(files), "<tmp>"))
    run = doc.pop("run")
    doc.pop("environment")
    return args, {"exit_code_returned": code, "results": doc, "run": run}


@pytest.mark.parametrize("case", list(CASES))
def test_import_reaches_the_recorded_results(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Verdicts, exit code, headline, descriptions as recorded; two deliberate changes, the
    judgement's own: the baseline is keyed by the ref its verdicts are ``against`` (was
    ``lm-eval``), and the note on metrics without a bound, which ``gate run`` and ``gate
    compare`` print, is printed by the import too."""
    monkeypatch.chdir(REPO)
    golden = json.loads((GOLDEN / f"{case}.json").read_text(encoding="utf-8"))
    before = golden["results"]
    args, got = results_of(case, tmp_path)
    after = got.pop("results")
    assert got.pop("exit_code_returned") == golden["exit_code_returned"] == after["exit_code"]
    ref = f"lm-eval:{Path(args[0]).name}"
    assert after.pop("baselines") == {ref: before.pop("baselines")["lm-eval"]}
    assert {m["against"] for m in after["metrics"]} == {ref}
    unbounded = after["unbounded"]
    note = (
        f"{len(unbounded)} measured metric(s) have no bound in {REPO / 'thresholds.toml'}"
        " (reported, not gated): " + ", ".join(unbounded)
    )
    assert after.pop("notes") == before.pop("notes") + ([note] if unbounded else [])
    # recorded at schema 2; schema 3 adds the typed judge panel (none here)
    assert (before.pop("schema_version"), after.pop("schema_version")) == (2, 3)
    assert after.pop("judge") == []
    assert after == before
    # the run object, which gate merge reads: the candidate file's stem, --strict
    assert got["run"]["candidate"] == Path(args[1]).stem
    assert got["run"]["strict"] == ("--strict" in args)


def test_the_judgement_is_the_one_route(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One import: one judgement, and the only decision is the judgement's."""
    import gate.gating.verdict
    import gate.session.judgement

    calls: list[str] = []

    def counted(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            calls.append(name)
            return real(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(
        gate.session.judgement, "judge_run", counted("judge", gate.session.judgement.judge_run)
    )
    monkeypatch.setattr(
        gate.gating.verdict, "decide", counted("decide", gate.gating.verdict.decide)
    )
    monkeypatch.chdir(REPO)
    _, got = results_of("gsm8k-30-lost-5-gained", tmp_path)
    assert calls == ["judge", "decide"]
    assert got["exit_code_returned"] == 1


def test_merge_reads_the_imports_decisions_and_decides_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Imported results merge (they name their candidate and thresholds); the merge's exit
    code is the worst of the documents' own, with the judgement and the decision out of
    reach, and a document's exit code stands as written even against its verdicts."""
    import gate.gating.verdict
    import gate.session.judgement

    monkeypatch.chdir(REPO)
    blocked, approved = tmp_path / "blocked", tmp_path / "approved"
    assert results_of("mcq-many-flips", blocked)[1]["exit_code_returned"] == 1
    assert results_of("smollm2-default-filter", approved)[1]["exit_code_returned"] == 0
    capsys.readouterr()

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("gate merge decided again")

    monkeypatch.setattr(gate.session.judgement, "judge_run", refused)
    monkeypatch.setattr(gate.gating.verdict, "decide", refused)
    files = [str(blocked / "results.json"), str(approved / "results.json")]
    assert main(["merge", *files, "--no-color"]) == 1
    out = capsys.readouterr().out
    assert "gate: worst exit code 1 over 2 candidate(s)" in out
    # the blocked document rewritten to say exit 0 (its verdicts still critical): read as is
    doc = json.loads(Path(files[0]).read_text(encoding="utf-8"))
    assert any(m["severity"] == "critical" for m in doc["metrics"])
    doc["exit_code"] = 0
    Path(files[0]).write_text(json.dumps(doc), encoding="utf-8")
    assert main(["merge", *files, "--no-color"]) == 0


def test_thresholds_that_bound_none_of_the_files_metrics_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The judgement's rule, now the import's too: such a file would approve any build."""
    limits = tmp_path / "thresholds.toml"
    limits.write_text('[metrics."fidelity.cga"]\nwarn = 0.01\ncritical = 0.02\nmode = "absolute"\n')
    out = tmp_path / "r.json"
    argv = ["import", "lm-eval", str(REAL_SAMPLES), str(REAL_SAMPLES), "--thresholds", str(limits)]
    assert main([*argv, "--json", str(out)]) == 4
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bounds none of the 2 metrics" in err[0]
    assert not out.exists()

"""``gate import lm-eval`` on generative (generate_until) tasks: the harness's own file, answers
lost and gained with McNemar, scores with the paired bootstrap, several tasks, refusals."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gate.cli import main
from gate.data.lmeval_runs import import_lmeval, read_generative
from tests.lmeval_support import (
    REAL_SAMPLES,
    gen_record,
    gsm8k_pair,
    gsm8k_records,
    lost_gained,
    write,
)

REPO = Path(__file__).resolve().parent.parent


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_harness_file_reads_and_matches_the_test_records_shape() -> None:
    """A file lm-eval 0.4 wrote for the demo model: both filters, exact_match a number, bleu
    a corpus-level pair; the test helper builds the same keys and hashes for the same doc."""
    task = read_generative(REAL_SAMPLES, "gate_arith")
    assert list(task.by_filter) == ["strict-match", "flexible-extract"]
    docs = task.by_filter["strict-match"]
    assert len(docs) == 12 and all(set(d.scores) == {"exact_match"} for d in docs)
    assert docs[0].corpus_level == ("bleu",)
    real = json.loads(REAL_SAMPLES.read_text(encoding="utf-8").splitlines()[0])
    made = gen_record(
        real["doc"],
        real["doc_id"],
        target=real["target"],
        generated=real["resps"][0][0],
        answer=real["filtered_resps"][0],
        filter_name=real["filter"],
        scores={"exact_match": real["exact_match"], "bleu": real["bleu"]},
    )
    assert list(made) == list(real)
    assert made == real


def test_harness_file_against_itself_is_approved_and_names_bleu_skipped(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(
        ["import", "lm-eval", str(REAL_SAMPLES), str(REAL_SAMPLES), "--no-color"], capsys
    )
    assert code == 0
    words = " ".join(out.split())  # the report's note, as the console wraps it
    assert "gate_arith (strict-match, exact_match): 12 documents, 0 answers lost, 0 gained" in words
    assert "corpus-level bleu not compared per document" in words


SMOLLM2 = REPO / "tests" / "lmeval" / "smollm2"


def _count_by_hand(base: Path, cand: Path, filter_name: str) -> tuple[int, int, int]:
    """(documents, lost, gained) of exact_match under one filter, read straight from the files."""

    def scores(path: Path) -> dict[int, float]:
        records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        return {r["doc_id"]: r["exact_match"] for r in records if r["filter"] == filter_name}

    b, c = scores(base), scores(cand)
    lost = sum(b[i] == 1.0 and c[i] == 0.0 for i in b)
    gained = sum(b[i] == 0.0 and c[i] == 1.0 for i in b)
    return len(b), lost, gained


def test_real_smollm2_regression_is_blocked_under_the_filter_that_sees_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """lm-eval runs of SmolLM2-135M and of it with three layers removed
    (scripts/lmeval_generative_fixture.py): the answers the candidate lost, counted from the
    files by hand, are what the import reports; under flexible-extract the gate blocks.
    Under strict-match neither model ever writes '#### n', so nothing changes there - the
    line says what the other filter saw."""
    (base,) = (SMOLLM2 / "base").glob("samples_*.jsonl")
    (cand,) = (SMOLLM2 / "cand").glob("samples_*.jsonl")
    n, lost, gained = _count_by_hand(base, cand, "flexible-extract")
    assert n == 60 and lost > 10
    out_json = tmp_path / "r.json"
    argv = ["import", "lm-eval", str(base), str(cand), "--filter", "flexible-extract"]
    code, out, _ = run([*argv, "--no-color", "--json", str(out_json)], capsys)
    assert code == 1
    assert f"60 documents, {lost} answers lost, {gained} gained" in out
    by = {m["name"]: m for m in json.loads(out_json.read_text())["metrics"] if m["slice"] is None}
    assert by["accuracy.gen_exact_match"]["delta"] == pytest.approx((gained - lost) / n)
    assert by["accuracy.gen_exact_match"]["severity"] == "critical"
    code, out, _ = run(["import", "lm-eval", str(base), str(cand), "--no-color"], capsys)
    assert code == 0
    assert f"flexible-extract (not gated, --filter): {lost} lost, {gained} gained" in out
    assert main(["import", "lm-eval", str(base), str(base), "--filter", "flexible-extract"]) == 0


def test_thirty_lost_five_gained_blocks_and_names_the_flips(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base, cand = gsm8k_pair(tmp_path, lost=30, gained=5)
    out_json = tmp_path / "r.json"
    code, out, _ = run(
        ["import", "lm-eval", str(base), str(cand), "--no-color", "--json", str(out_json)], capsys
    )
    assert code == 1
    assert "gsm8k (strict-match, exact_match): 300 documents, 30 answers lost, 5 gained" in out
    assert "accuracy.gen_flips" in out and "b=30, c=5" in out
    doc = json.loads(out_json.read_text())
    by = {m["name"]: m for m in doc["metrics"] if m["slice"] is None}
    em = by["accuracy.gen_exact_match"]
    assert em["value"] == pytest.approx(209 / 300) and em["baseline_value"] == pytest.approx(
        234 / 300
    )
    # McNemar's one-sided p: P[Binom(35, 1/2) >= 30], summed by hand
    p = sum(math.comb(35, k) for k in range(30, 36)) / 2**35
    assert em["p_value"] == pytest.approx(p, rel=1e-9)
    assert em["severity"] == "critical" and em["mde"]["test"] == "McNemar exact"
    assert by["accuracy.gen_flips"]["value"] == pytest.approx(35 / 300)
    assert doc["verdict"] == "block"
    # the same file against itself
    assert main(["import", "lm-eval", str(base), str(base), "--no-color"]) == 0


def test_a_few_flips_pass_and_small_runs_are_underpowered(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base, cand = gsm8k_pair(tmp_path, lost=2, gained=1)
    code, out, _ = run(["import", "lm-eval", str(base), str(cand), "--no-color"], capsys)
    assert code == 0 and "UNDERPOWERED" not in out
    base, cand = gsm8k_pair(tmp_path / "small", lost=1, gained=1, n=60, base_right=45)
    code, out, _ = run(["import", "lm-eval", str(base), str(cand), "--no-color"], capsys)
    assert code == 0
    assert "accuracy.gen_exact_match: n = 60 can only detect a drop of 0.19" in out
    assert "UNDERPOWERED" in out


def test_scores_use_the_paired_bootstrap_and_unknown_numeric_metrics_are_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    n = 80
    base_ok, cand_ok = lost_gained(n, 0, 0, 60)
    base = gsm8k_records(base_ok, extra={i: {"f1": 0.9, "rouge_x": 0.5} for i in range(n)})
    cand = gsm8k_records(
        cand_ok, extra={i: {"f1": 0.9 - 0.2 * (i % 2), "rouge_x": 0.5} for i in range(n)}
    )
    b = write(tmp_path / "b.jsonl", base)
    c = write(tmp_path / "c.jsonl", cand)
    imported = import_lmeval(b, c)
    assert imported.binary == {
        "accuracy.gen_exact_match": True,
        "accuracy.gen_f1": False,
        "accuracy.gen_rouge_x": False,
    }
    out_json = tmp_path / "r.json"
    code, _, _ = run(
        ["import", "lm-eval", str(b), str(c), "--no-color", "--json", str(out_json)], capsys
    )
    assert code == 1  # F1 fell by 0.1 on average, past its critical 0.04
    by = {m["name"]: m for m in json.loads(out_json.read_text())["metrics"] if m["slice"] is None}
    assert by["accuracy.gen_f1"]["test"].startswith("paired bootstrap")
    assert by["accuracy.gen_f1"]["delta"] == pytest.approx(-0.1)
    assert by["accuracy.gen_f1"]["severity"] == "critical"
    assert not by["accuracy.gen_rouge_x"]["threshold"]  # reported, not gated
    assert by["accuracy.gen_rouge_x"]["severity"] == "pass"


def test_several_tasks_from_two_directories_get_task_slices(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gsm8k_pair(tmp_path, lost=30, gained=5, task="gsm8k")
    gsm8k_pair(tmp_path, lost=0, gained=0, n=120, base_right=60, task="arith")
    out_json = tmp_path / "r.json"
    code, out, _ = run(
        ["import", "lm-eval", str(tmp_path / "base"), str(tmp_path / "cand"), "--no-color",
         "--json", str(out_json)], capsys,
    )  # fmt: skip
    assert code == 1
    assert "arith (strict-match, exact_match): 120 documents, 0 answers lost, 0 gained" in out
    assert "gsm8k (strict-match, exact_match): 300 documents, 30 answers lost, 5 gained" in out
    metrics = json.loads(out_json.read_text())["metrics"]
    slices = {(m["name"], m["slice"]): m for m in metrics}
    assert slices[("accuracy.gen_exact_match", "task:gsm8k")]["severity"] == "critical"
    assert slices[("accuracy.gen_exact_match", "task:arith")]["severity"] == "pass"
    assert slices[("accuracy.gen_exact_match", None)]["n"] == 420


def test_the_filter_option_picks_another_filter(tmp_path: Path) -> None:
    base, cand = gsm8k_pair(tmp_path, lost=30, gained=5)
    records = [json.loads(line) for line in cand.read_text().splitlines()]
    for r in records:  # under flexible-extract the candidate answers like the baseline
        if r["filter"] == "flexible-extract":
            r["exact_match"] = 1.0 if r["doc_id"] < 234 else 0.0
    write(cand, records)
    assert import_lmeval(base, cand).tasks[0].lost == 30
    chosen = import_lmeval(base, cand, filter_name="flexible-extract").tasks[0]
    assert (chosen.filter, chosen.lost, chosen.gained) == ("flexible-extract", 0, 0)
    assert main(["import", "lm-eval", str(base), str(cand), "--filter", "flexible-extract"]) == 0


def _one_filter(path: Path) -> None:
    keep = [line for line in path.read_text().splitlines() if '"strict-match"' in line]
    path.write_text("\n".join(keep) + "\n")


@pytest.mark.parametrize(
    ("spoil", "message"),
    [
        (lambda b, c: c.rename(c.with_name("samples_arc_easy_2026-01-02T00-00-00.jsonl")),
         "is task gsm8k"),
        (lambda b, c: _one_filter(c), "different filters"),
        (lambda b, c: None, "has no filter 'nope'"),
        (lambda b, c: write(c, [json.loads(x) for x in c.read_text().splitlines()][1:]),
         "do not join"),
        (lambda b, c: write(c, [{**json.loads(x), "exact_match": float("nan")}
                                for x in c.read_text().splitlines()]), "exact_match is nan"),
        (lambda b, c: write(c, [{**json.loads(x), "exact_match": 0.5}
                                for x in c.read_text().splitlines()]), "other than 0 and 1"),
        (lambda b, c: write(c, [json.loads(x) for x in c.read_text().splitlines()][:1]
                            + [json.loads(x) for x in c.read_text().splitlines()][:1]),
         "appears twice"),
    ],
)  # fmt: skip
def test_mismatched_files_are_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], spoil: Any, message: str
) -> None:
    base, cand = gsm8k_pair(tmp_path, lost=3, gained=1, n=40, base_right=30)
    spoil(base, cand)
    cand = next((tmp_path / "cand").glob("*.jsonl"))
    extra = ["--filter", "nope"] if "nope" in message else []
    code, out, err = run(["import", "lm-eval", str(base), str(cand), *extra], capsys)
    assert code == 4, err
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "APPROVED" not in out


def test_tasks_on_one_side_only_and_mixed_kinds_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gsm8k_pair(tmp_path, lost=0, gained=0, n=20, base_right=10)
    write(tmp_path / "base" / "samples_extra_2026-01-01T00-00-00.jsonl", gsm8k_records([True] * 5))
    code, _, err = run(
        ["import", "lm-eval", str(tmp_path / "base"), str(tmp_path / "cand")], capsys
    )
    assert code == 4 and "baseline only: ['extra']" in err
    from tests.test_lmeval_import import base_records

    mcq = write(tmp_path / "m.jsonl", base_records(5))
    gen = write(tmp_path / "g.jsonl", gsm8k_records([True] * 5))
    code, _, err = run(["import", "lm-eval", str(mcq), str(gen)], capsys)
    assert code == 4 and "generative" in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("lm_eval") is None, reason="lm-eval not installed")
def test_a_file_the_harness_writes_now_imports(tiny_model_dir: Path, tmp_path: Path) -> None:
    """lm-eval runs the generate_until task on a tiny model offline; its own samples file is
    read, and against itself it is approved with no answer lost or gained."""
    data = REPO / "tests" / "lmeval" / "gate_arith.jsonl"
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    yaml = (REPO / "tests" / "lmeval" / "gate_arith.yaml").read_text(encoding="utf-8")
    (tasks / "gate_arith.yaml").write_text(yaml.replace("DATA_FILE", str(data)), encoding="utf-8")
    env = dict(
        os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TOKENIZERS_PARALLELISM="false"
    )
    cmd = [
        sys.executable, "-m", "lm_eval", "--model", "hf",
        "--model_args", f"pretrained={tiny_model_dir},dtype=float32",
        "--tasks", "gate_arith", "--include_path", str(tasks), "--device", "cpu",
        "--batch_size", "4", "--limit", "4", "--output_path", str(tmp_path / "out"), "--log_samples",
    ]  # fmt: skip
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (path,) = sorted((tmp_path / "out").rglob("samples_gate_arith_*.jsonl"))
    imported = import_lmeval(path, path)
    (summary,) = imported.tasks
    assert (summary.n, summary.lost, summary.gained) == (4, 0, 0)
    assert summary.corpus_level == ("bleu",)
    assert main(["import", "lm-eval", str(path), str(path), "--no-color"]) == 0

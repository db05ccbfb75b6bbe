"""``gate import lm-eval``: joining two --log_samples files, flips, bad input; lm-eval agreement."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from gate.cli import main
from gate.data.lmeval_import import import_runs, read_samples, task_name
from gate.errors import DataError

REPO = Path(__file__).resolve().parent.parent


def record(doc_id: int, lls: Sequence[float], gold: int, *, subject: str = "s") -> dict[str, Any]:
    """One document as lm-eval 0.4 logs it (numbers written as strings in resps)."""
    choices = ["a", "bb", "ccc", "dd"][: len(lls)]
    doc = {"id": f"d{doc_id}", "subject": subject, "choices": choices, "answer": gold}
    pred = max(range(len(lls)), key=lambda j: lls[j])
    pred_norm = max(range(len(lls)), key=lambda j: lls[j] / len(choices[j]))
    pairs = [[str(x), "False"] for x in lls]
    return {
        "doc_id": doc_id,
        "doc": doc,
        "target": str(gold),
        "arguments": {
            f"gen_args_{j}": {"arg_0": "Q:", "arg_1": f" {c}"} for j, c in enumerate(choices)
        },
        "resps": [[p] for p in pairs],
        "filtered_resps": pairs,
        "filter": "none",
        "metrics": ["acc", "acc_norm"],
        "doc_hash": hashlib.sha256(
            json.dumps(doc, indent=2, ensure_ascii=False).encode()
        ).hexdigest(),
        "prompt_hash": "0" * 64,
        "target_hash": "1" * 64,
        "acc": float(pred == gold),
        "acc_norm": float(pred_norm == gold),
    }


def write(path: Path, records: Sequence[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def base_records(n: int = 60) -> list[dict[str, Any]]:
    # Every baseline answer right with a wide margin.
    return [record(i, [-0.1, -3.0, -4.0, -5.0], 0, subject="s" if i % 2 else "t") for i in range(n)]


def test_task_name_from_file_name() -> None:
    assert task_name(Path("samples_arc_easy_2025-01-02T10-11-12.123.jsonl")) == "arc_easy"
    assert task_name(Path("x.jsonl")) == "x"


def test_identical_runs_pass_with_zero_flips(tmp_path: Path) -> None:
    base = write(tmp_path / "samples_t_2025-01-01T00-00-00.jsonl", base_records())
    cand, _ = import_runs(base, base)
    by = {m.name: m for m in cand}
    assert by["accuracy.flips"].value == 0.0 and by["accuracy.all_flips"].value == 0.0
    assert by["accuracy.choice_kl"].value == 0.0
    assert by["accuracy.mcq_acc"].value == 1.0
    out = tmp_path / "r.json"
    assert main(["import", "lm-eval", str(base), str(base), "--json", str(out), "--no-color"]) == 0
    assert json.loads(out.read_text())["verdict"] == "pass"


def test_hand_counted_flips(tmp_path: Path) -> None:
    base = [
        record(0, [-0.1, -3.0], 0),  # right
        record(1, [-0.1, -3.0], 0),  # right
        record(2, [-3.0, -0.1, -4.0], 0),  # wrong (picks 1)
        record(3, [-3.0, -0.1, -4.0], 0),  # wrong (picks 1)
    ]
    cand = [
        record(0, [-0.2, -3.0], 0),  # right -> right
        record(1, [-3.0, -0.1], 0),  # right -> wrong: flip
        record(2, [-3.0, -4.0, -0.1], 0),  # wrong -> other wrong: all-flip only
        record(3, [-0.1, -3.0, -4.0], 0),  # wrong -> right: flip
    ]
    c, _ = import_runs(write(tmp_path / "b.jsonl", base), write(tmp_path / "c.jsonl", cand))
    by = {m.name: m for m in c}
    assert by["accuracy.flips"].samples == (0.0, 1.0, 0.0, 1.0)
    assert by["accuracy.all_flips"].samples == (0.0, 1.0, 1.0, 1.0)
    assert by["accuracy.mcq_acc"].value == 0.5
    assert by["accuracy.mcq_acc"].sample_ids == ("b/0", "b/1", "b/2", "b/3")


def test_many_flips_block(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = base_records()
    cand = [record(i, [-3.0, -0.1, -4.0, -5.0], 0) if i % 3 == 0 else r for i, r in enumerate(base)]
    for r, b in zip(cand, base, strict=True):
        r["doc"], r["doc_hash"] = b["doc"], b["doc_hash"]
    code = main(
        ["import", "lm-eval", str(write(tmp_path / "b.jsonl", base)),
         str(write(tmp_path / "c.jsonl", cand)), "--no-color"]
    )  # fmt: skip
    assert code == 1
    assert "accuracy.flips" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda recs: recs.__setitem__(1, "{broken"), "not valid JSON"),
        (lambda recs: recs[1].__setitem__("doc_hash", "f" * 64), "do not join"),
        (lambda recs: recs[1].__setitem__("filtered_resps", []), "missing choices"),
        (lambda recs: recs[1].pop("acc"), "acc"),
        (lambda recs: recs.pop(), "do not join"),
    ],
)
def test_bad_files_exit_4_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], mutate: Any, message: str
) -> None:
    base = base_records(5)
    cand: list[Any] = json.loads(json.dumps(base))
    mutate(cand)
    lines = [c if isinstance(c, str) else json.dumps(c) for c in cand]
    (tmp_path / "c.jsonl").write_text("\n".join(lines) + "\n")
    code = main(
        ["import", "lm-eval", str(write(tmp_path / "b.jsonl", base)), str(tmp_path / "c.jsonl")]
    )
    err = capsys.readouterr().err
    assert code == 4
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("inf", "log-likelihood is inf"),
        ("-inf", "log-likelihood is -inf"),
        ("nan", "log-likelihood is nan"),
        ("Infinity", "log-likelihood is inf"),
        ("1e400", "log-likelihood is inf"),
        ("0.5", "log-likelihood is 0.5 > 0"),
        (3, "log-likelihood is 3 > 0"),
        (True, "log-likelihood True is not a number"),
        ("abc", "log-likelihood 'abc' is not a number"),
    ],
)
def test_impossible_log_likelihood_is_exit_4_naming_file_doc_and_value(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: Any, shown: str
) -> None:
    """A log-likelihood is a finite number <= 0; anything else is refused, not approved."""
    base = base_records(5)
    cand: list[dict[str, Any]] = json.loads(json.dumps(base))
    cand[2]["filtered_resps"][1][0] = value
    cand[2]["resps"][1][0][0] = value
    path = write(tmp_path / "c.jsonl", cand)
    code = main(["import", "lm-eval", str(write(tmp_path / "b.jsonl", base)), str(path)])
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert code == 4, captured.err
    assert len(lines) == 1 and "Traceback" not in captured.err, captured.err
    assert f"{path}:3 (doc 2) choice 1: {shown}" in lines[0]
    assert "(re-run lm_eval" in lines[0] or "(give " in lines[0]
    assert lines[0].endswith("ERROR (input, exit 4)")
    assert "APPROVED" not in captured.out


def test_log_likelihood_bounds_in_process(tmp_path: Path) -> None:
    """The reader itself: 0 (and float rounding just above it) is fine, +/-inf, NaN, > 0 not."""
    records = base_records(2)
    records[0]["filtered_resps"][0][0] = "0.0"
    records[1]["filtered_resps"][0][0] = "5e-7"
    assert read_samples(write(tmp_path / "ok.jsonl", records))[0].option_logprobs[0] == 0.0
    for value in ("inf", "-inf", "nan", "0.01"):
        records[1]["filtered_resps"][0][0] = value
        with pytest.raises(DataError, match=r"ok\.jsonl:2 \(doc 1\) choice 0: log-likelihood"):
            read_samples(write(tmp_path / "ok.jsonl", records))


@pytest.mark.parametrize("value", [float("nan"), 2, 0.5, "1"])
def test_impossible_acc_flag_is_a_data_error(tmp_path: Path, value: Any) -> None:
    records = base_records(3)
    records[1]["acc"] = value
    with pytest.raises(DataError, match=r"f\.jsonl:2 \(doc 1\): acc is .*, not 0 or 1"):
        read_samples(write(tmp_path / "f.jsonl", records))


def test_missing_file_is_a_data_error(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="not found"):
        read_samples(tmp_path / "nope.jsonl")


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("lm_eval") is None, reason="lm-eval not installed")
def test_gate_agrees_with_lm_eval_harness(tiny_model_dir: Path, tmp_path: Path) -> None:
    """acc and acc_norm per question equal lm-evaluation-harness's on the same model and JSONL."""
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import compare_lm_eval
    finally:
        sys.path.remove(str(REPO / "scripts"))
    mcq = REPO / "gate" / "assets" / "mcq" / "facts.jsonl"
    samples = compare_lm_eval.run_lm_eval(tiny_model_dir, mcq, tmp_path, limit=24)
    report = compare_lm_eval.compare(samples, compare_lm_eval.gate_scores(tiny_model_dir, mcq, 24))
    assert report["acc_mismatches"] == [] and report["acc_norm_mismatches"] == []
    assert report["gate_acc"] == report["lm_eval_acc"]
    assert report["max_abs_loglik_diff"] < 1e-3
    # The harness's own samples file imports, and a run against itself has no flips.
    (path,) = sorted(tmp_path.rglob("samples_gate_mcq_*.jsonl"))
    cand, _ = import_runs(path, path)
    assert {m.name: m.value for m in cand}["accuracy.flips"] == 0.0

"""Check that gate's MCQ acc / acc_norm agree with lm-evaluation-harness on a local model.

Usage::

    python scripts/compare_lm_eval.py --model DIR [--mcq gate/assets/mcq/facts.jsonl]
        [--limit N] [--workdir DIR] [--json OUT]

It writes the task YAML of ``tests/lmeval/gate_mcq.yaml`` pointing at the MCQ
file, runs ``lm_eval --model hf --model_args pretrained=DIR`` offline
(``HF_HUB_OFFLINE=1``, ``HF_DATASETS_OFFLINE=1``) with ``--log_samples``, reads
its per-document samples, scores the same questions with gate's transformers
backend, and compares per question: the option log-likelihoods, the acc and
acc_norm flags, and the two means. Exit status 0 when acc and acc_norm agree on
every question, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
TEMPLATE = REPO / "tests" / "lmeval" / "gate_mcq.yaml"


def run_lm_eval(model: Path, mcq: Path, workdir: Path, limit: int | None) -> list[dict[str, Any]]:
    """Run the harness on ``mcq`` and return its logged samples, ordered by doc_id."""
    tasks = workdir / "tasks"
    tasks.mkdir(parents=True, exist_ok=True)
    yaml = TEMPLATE.read_text(encoding="utf-8").replace("DATA_FILE", str(mcq.resolve()))
    (tasks / "gate_mcq.yaml").write_text(yaml, encoding="utf-8")
    out = workdir / "out"
    cmd = [
        sys.executable, "-m", "lm_eval",
        "--model", "hf",
        "--model_args", f"pretrained={model.resolve()},dtype=float32",
        "--tasks", "gate_mcq",
        "--include_path", str(tasks),
        "--device", "cpu",
        "--batch_size", "8",
        "--output_path", str(out),
        "--log_samples",
    ]  # fmt: skip
    if limit is not None:
        cmd += ["--limit", str(limit)]
    env = dict(
        os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TOKENIZERS_PARALLELISM="false"
    )
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"lm_eval failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    files = sorted(out.rglob("samples_gate_mcq_*.jsonl"))
    if not files:
        raise SystemExit(f"lm_eval wrote no samples file under {out}")
    samples = [json.loads(line) for line in files[-1].read_text().splitlines() if line.strip()]
    return sorted(samples, key=lambda s: int(s["doc_id"]))


def gate_scores(model: Path, mcq: Path, limit: int | None) -> list[Any]:
    """gate's per-question results on the same file, through the transformers backend."""
    from gate.data.mcq import load_mcq_jsonl
    from gate.models.backends.loading import load_backend
    from gate.models.model_spec import ModelSpec
    from gate.tiers.accuracy import score_questions

    backend = load_backend(ModelSpec.parse(str(model), dtype="float32", device="cpu"))
    questions = load_mcq_jsonl(mcq, fmt="native", limit=limit)
    return score_questions(backend, questions, batch_size=8)


def compare(samples: list[dict[str, Any]], results: list[Any]) -> dict[str, Any]:
    """Per-question agreement and the aggregate figures of both tools."""
    if len(samples) != len(results):
        raise SystemExit(f"lm_eval logged {len(samples)} docs, gate scored {len(results)}")
    max_ll_diff = 0.0
    acc_mismatch, norm_mismatch = [], []
    for s, r in zip(samples, results, strict=True):
        lls = [float(resp[0]) for resp in s["filtered_resps"]]
        max_ll_diff = max(
            max_ll_diff, *(abs(a - b) for a, b in zip(lls, r.option_logprobs, strict=True))
        )
        if float(s["acc"]) != float(r.correct):
            acc_mismatch.append(r.id)
        if float(s["acc_norm"]) != float(r.correct_norm):
            norm_mismatch.append(r.id)
    n = len(results)
    return {
        "n": n,
        "lm_eval_acc": sum(float(s["acc"]) for s in samples) / n,
        "gate_acc": sum(r.correct for r in results) / n,
        "lm_eval_acc_norm": sum(float(s["acc_norm"]) for s in samples) / n,
        "gate_acc_norm": sum(r.correct_norm for r in results) / n,
        "acc_mismatches": acc_mismatch,
        "acc_norm_mismatches": norm_mismatch,
        "max_abs_loglik_diff": max_ll_diff,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, required=True, help="local model directory")
    parser.add_argument(
        "--mcq", type=Path, default=REPO / "gate" / "assets" / "mcq" / "facts.jsonl"
    )
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None, help="write the comparison here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="gate-lmeval-") as tmp:
        workdir = args.workdir or Path(tmp)
        samples = run_lm_eval(args.model, args.mcq, workdir, args.limit)
        report = compare(samples, gate_scores(args.model, args.mcq, args.limit))
    text = json.dumps(report, indent=2)
    print(text)
    if args.json is not None:
        args.json.write_text(text + "\n", encoding="utf-8")
    agree = not report["acc_mismatches"] and not report["acc_norm_mismatches"]
    return 0 if agree else 1


if __name__ == "__main__":
    raise SystemExit(main())

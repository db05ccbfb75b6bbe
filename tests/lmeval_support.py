"""Generative lm-eval samples files for tests, in the shape lm-eval 0.4 writes with --log_samples.

The shape (keys, ``arguments`` as ``gen_args_0``/``arg_0``/``arg_1``, ``resps`` as
``[[text]]``, ``filtered_resps`` as ``[answer]``, one record per document and
filter, the three sha256 hashes) is checked against a file the harness itself
wrote (tests/lmeval/samples_gate_arith_*.jsonl) by tests/test_lmeval_generative.py.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REAL_SAMPLES = next((Path(__file__).resolve().parent / "lmeval").glob("samples_gate_arith_*.jsonl"))
FILTERS = ("strict-match", "flexible-extract")
GEN_KWARGS = {"until": ["Question:", "\n\n"], "do_sample": False, "max_gen_toks": 12}


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def gen_record(
    doc: dict[str, Any],
    doc_id: int,
    *,
    target: str,
    generated: str,
    answer: str,
    filter_name: str,
    scores: dict[str, Any],
) -> dict[str, Any]:
    """One document under one filter, keys in the harness's order, metric values last."""
    prompt = f"Question: {doc['question']}\nAnswer:"
    return {
        "doc_id": doc_id,
        "doc": doc,
        "target": target,
        "arguments": {"gen_args_0": {"arg_0": prompt, "arg_1": GEN_KWARGS}},
        "resps": [[generated]],
        "filtered_resps": [answer],
        "filter": filter_name,
        "metrics": list(scores),
        "doc_hash": _sha(json.dumps(doc, indent=2, ensure_ascii=False)),
        "prompt_hash": _sha(prompt),
        "target_hash": _sha(str(target)),
        **scores,
    }


def gsm8k_records(
    correct: Sequence[bool], *, extra: dict[int, dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """GSM8K-style records: document ``i`` answered right when ``correct[i]``, under both
    filters (strict-match first, as the task lists them)."""
    out = []
    for f in FILTERS:
        for i, right in enumerate(correct):
            a, b = 3 + i % 17, 5 + i // 17
            truth = str(a * b)
            doc = {
                "question": f"What is {a} times {b}?",
                "answer": f"{a} * {b} = {truth}\n#### {truth}",
            }
            given = truth if right else str(a * b + 1)
            scores: dict[str, Any] = {"exact_match": 1.0 if right else 0.0}
            scores.update((extra or {}).get(i, {}))
            out.append(
                gen_record(
                    doc,
                    i,
                    target=truth,
                    generated=f" {a} * {b} = {given}\n#### {given}",
                    answer=given,
                    filter_name=f,
                    scores=scores,
                )
            )
    return out


def write(path: Path, records: Sequence[Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "".join(
            (r if isinstance(r, str) else json.dumps(r, ensure_ascii=False)) + "\n" for r in records
        ),
        encoding="utf-8",
    )
    return path


def lost_gained(n: int, lost: int, gained: int, base_right: int) -> tuple[list[bool], list[bool]]:
    """Baseline and candidate correctness over ``n`` documents: ``base_right`` right in the
    baseline, of which the first ``lost`` go wrong; ``gained`` of the wrong ones go right."""
    base = [i < base_right for i in range(n)]
    cand = list(base)
    for i in range(lost):
        cand[i] = False
    for i in range(base_right, base_right + gained):
        cand[i] = True
    return base, cand


def gsm8k_pair(
    tmp_path: Path,
    *,
    lost: int,
    gained: int,
    n: int = 300,
    base_right: int = 234,
    task: str = "gsm8k",
) -> tuple[Path, Path]:
    """Baseline and candidate samples files of one GSM8K-style task."""
    base, cand = lost_gained(n, lost, gained, base_right)
    name = f"samples_{task}_2026-01-0{{}}T00-00-00.000000.jsonl"
    return (
        write(tmp_path / "base" / name.format(1), gsm8k_records(base)),
        write(tmp_path / "cand" / name.format(2), gsm8k_records(cand)),
    )

"""Regenerate the example measurements files (deterministic, seeded).

    python examples/make_examples.py

Writes ``baseline.json`` and three candidates that ``gate compare`` judges
against it with ``examples/thresholds.toml``:

* ``candidate-equal.json``    — the same build re-measured: APPROVED (exit 0);
* ``candidate-warn.json``     — MCQ accuracy 3 points down (warn bound 2,
  critical 5): APPROVED WITH WARNINGS (exit 0; exit 1 with ``--strict``);
* ``candidate-critical.json`` — accuracy 9 points down (worst on math), time to
  first token 50 % up: BLOCKED (exit 1).

The numbers are synthetic but shaped like real runs: per-question 0/1
correctness with ids (paired by McNemar's test), per-document perplexity
(paired bootstrap), per-prompt CGA against the baseline's own outputs, and 20
repeated latency runs (Mann-Whitney U).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gate.measurement import Measurement, from_samples
from gate.provenance import ModelProvenance
from gate.store.measurements_file import save_measurements

HERE = Path(__file__).resolve().parent
QUESTIONS = 400
DOCUMENTS = 50
PROMPTS = 60
RUNS = 20
CATEGORIES = ("math", "law", "medicine", "code")


def _groups(ids: list[str]) -> dict[str, list[int]]:
    return {f"category:{c}": [i for i, q in enumerate(ids) if q.startswith(c)] for c in CATEGORIES}


def _flip(correct: np.ndarray, rng: np.random.Generator, down: int, up: int, pool: slice) -> None:
    """Turn ``down`` correct answers wrong and ``up`` wrong answers right within ``pool``."""
    idx = np.arange(len(correct))[pool]
    right = idx[correct[idx] == 1]
    wrong = idx[correct[idx] == 0]
    correct[rng.choice(right, size=down, replace=False)] = 0
    correct[rng.choice(wrong, size=up, replace=False)] = 1


def _mcq(correct: np.ndarray, ids: list[str]) -> Measurement:
    return from_samples(
        "accuracy.mcq_acc", correct.astype(float).tolist(), ids, groups=_groups(ids)
    )


def _model(name: str, recipe: str) -> ModelProvenance:
    return ModelProvenance.from_document(
        {
            "id": "example-org/example-7b",
            "slug": "example-7b",
            "revision": "0" * 40,
            "recipe": recipe,
            "model_family": "llama",
            "tokenizer_sha256": "4f" * 32,
            "note": f"synthetic example measurements: {name}",
        }
    )


def main() -> None:
    rng = np.random.default_rng(20240601)
    ids = [f"{CATEGORIES[i % 4]}-{i:03d}" for i in range(QUESTIONS)]
    base_correct = (rng.random(QUESTIONS) < 0.7).astype(int)
    doc_ids = [f"doc-{i:02d}" for i in range(DOCUMENTS)]
    base_ppl = rng.lognormal(np.log(8.0), 0.2, DOCUMENTS)
    prompt_ids = [f"prompt-{i:02d}" for i in range(PROMPTS)]
    ttft = rng.lognormal(np.log(0.050), 0.03, RUNS)
    tps = rng.lognormal(np.log(42.0), 0.03, RUNS)

    def latency(scale_ttft: float, scale_tps: float, seed: int) -> list[Measurement]:
        r = np.random.default_rng(seed)
        return [
            from_samples(
                "latency.ttft_p50",
                (r.lognormal(np.log(0.050), 0.03, RUNS) * scale_ttft).tolist(),
                details={"statistic": "median of per-run TTFT"},
            ),
            from_samples(
                "latency.tokens_per_s",
                (r.lognormal(np.log(42.0), 0.03, RUNS) * scale_tps).tolist(),
            ),
        ]

    baseline = [
        _mcq(base_correct, ids),
        from_samples("accuracy.perplexity", base_ppl.tolist(), doc_ids),
        from_samples("latency.ttft_p50", ttft.tolist()),
        from_samples("latency.tokens_per_s", tps.tolist()),
    ]
    save_measurements(HERE / "baseline.json", baseline, model=_model("baseline", "none"))

    equal = [
        _mcq(base_correct.copy(), ids),
        from_samples("accuracy.perplexity", base_ppl.tolist(), doc_ids),
        from_samples("fidelity.cga", [1.0] * PROMPTS, prompt_ids),
        *latency(1.0, 1.0, seed=1),
    ]
    save_measurements(HERE / "candidate-equal.json", equal, model=_model("equal", "none"))

    warn_correct = base_correct.copy()
    _flip(warn_correct, rng, down=14, up=2, pool=slice(None))
    warn = [
        _mcq(warn_correct, ids),
        from_samples(
            "accuracy.perplexity",
            (base_ppl * rng.normal(1.01, 0.003, DOCUMENTS)).tolist(),
            doc_ids,
        ),
        from_samples(
            "fidelity.cga",
            np.clip(rng.normal(0.995, 0.004, PROMPTS), 0, 1).tolist(),
            prompt_ids,
        ),
        *latency(1.0, 1.02, seed=2),
    ]
    save_measurements(HERE / "candidate-warn.json", warn, model=_model("warn", "bnb-int8"))

    crit_correct = base_correct.copy()
    _flip(crit_correct, rng, down=26, up=2, pool=slice(0, QUESTIONS, 4))  # math questions
    _flip(crit_correct, rng, down=14, up=2, pool=slice(1, QUESTIONS, 1))
    critical = [
        _mcq(crit_correct, ids),
        from_samples(
            "accuracy.perplexity",
            (base_ppl * rng.normal(1.08, 0.01, DOCUMENTS)).tolist(),
            doc_ids,
        ),
        from_samples(
            "fidelity.cga",
            np.clip(rng.normal(0.93, 0.03, PROMPTS), 0, 1).tolist(),
            prompt_ids,
        ),
        *latency(1.5, 0.7, seed=3),
    ]
    save_measurements(
        HERE / "candidate-critical.json", critical, model=_model("critical", "quanto-int2")
    )


if __name__ == "__main__":
    main()

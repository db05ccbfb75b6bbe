"""KL from a reference pack against the exact KL, per candidate build.

Records a version-3 reference pack of the baseline (the fidelity tier's own
recorder, at the demo's fidelity settings unless told otherwise), scores each
candidate once, and reads its per-token KL three ways from the same rows:

* **exact**: against the baseline's full rows, scored live (``--live-baseline``);
* **estimate**: from the pack, top-k exact plus the sampled tail (format v3);
* **bound**: from the pack, top-k plus one tail bucket (what v1/v2 packs give).

Prints a markdown table: mean KL (the tier's ``fidelity.kl_mean``: per-prompt
means, then the mean over prompts) and pooled p99, with the estimate's
standard error and relative errors, for the pack's tail seed and for
``--extra-seeds`` more (samples drawn from the same rows exactly as the
recorder draws them). Also the baseline's mean entropy and tail mass beyond
its top-k on its own outputs, the pack's bytes per output token, and CGA of
the ``category:math`` slice with every position vs from the second one.

Run (about 5 minutes on two CPU cores)::

    python scripts/measure_pack_kl.py
    python scripts/measure_pack_kl.py --model build/confident_model --json build/kl.json
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import argparse
import json
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gate.measurement import Measurement
from gate.metrics import fidelity as fm
from gate.models.backends.base import Backend, ScoreRequest
from gate.models.backends.loading import load_backend
from gate.models.model_spec import ModelSpec
from gate.store.reference import (
    LOGPROB_DTYPES,
    ReferencePack,
    full_logits_bytes_per_token,
    load_pack,
    pack_bytes_per_token,
    payload_bytes_per_token,
)
from gate.tiers import fidelity as tier
from gate.workflows.demo import DEMO_SETTINGS

DEFAULT_RECIPES = ("bnb-int8", "quanto-int4", "quanto-int2")


@dataclass(frozen=True)
class Reading:
    """One way of reading the KL of one candidate: its aggregated measurements."""

    kl_mean: float
    kl_p99: float
    se: float | None
    cga_math: float | None


def _by_name(ms: list[Measurement]) -> dict[str, Measurement]:
    return {m.name: m for m in ms}


def _read(scores: list[tier.PromptScores], pack: ReferencePack, exact: bool) -> Reading:
    ms = _by_name(tier.measurements(scores, k=pack.k, exact=exact, m=0 if exact else pack.m))
    mean = ms["fidelity.kl_mean"]
    math = ms["fidelity.cga"].breakdown.get("category:math")
    return Reading(
        kl_mean=mean.value,
        kl_p99=ms["fidelity.kl_p99"].value,
        se=mean.details.get("standard_error"),
        cga_math=None if math is None else math.value,
    )


def _bound(scores: list[tier.PromptScores]) -> tuple[float, float]:
    """(mean over prompts of per-prompt mean bound, pooled p99 of the bound)."""
    per_prompt = [float(s.positions.kl_bound.mean()) for s in scores]
    pooled = np.concatenate([s.positions.kl_bound for s in scores])
    return float(np.mean(per_prompt)), float(np.percentile(pooled, 99))


def _samples(
    pack: ReferencePack, base_rows: dict[int, np.ndarray], j: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Prompt ``j``'s sampled tail for ``seed``, drawn exactly as the recorder draws it."""
    if seed == pack.sample_seed:
        return pack.samples(j)
    rows = base_rows[j]
    ids = pack.topk(j)[0]
    rng = np.random.default_rng([seed, j])
    drawn = np.sort(fm.draw_tail_samples(rows, ids, pack.m, rng), axis=-1)
    return drawn, np.take_along_axis(rows, drawn, -1).astype(LOGPROB_DTYPES[pack.logprob_dtype])


def _score(
    cand: Backend,
    pack: ReferencePack,
    requests: list[ScoreRequest],
    base_rows: dict[int, np.ndarray],
    settings: tier.FidelitySettings,
    seeds: list[int],
) -> tuple[list[tier.PromptScores], dict[int, list[tier.PromptScores]]]:
    """Exact scores and, per tail seed, pack scores of one candidate (one pass over its rows)."""
    exact: list[tier.PromptScores] = []
    by_seed: dict[int, list[tier.PromptScores]] = {s: [] for s in seeds}
    dtype = LOGPROB_DTYPES[pack.logprob_dtype]
    for j, rows in tier.score_rows(cand, requests, batch_size=settings.batch_size, top_k=1):
        ids, lps, tail = pack.topk(j)
        y = pack.output_ids(j)
        live = fm.score_positions(
            fm.BaselineReference(y, ids, lps, tail, full_logprobs=base_rows[j]), rows
        )
        exact.append(tier.PromptScores(j, pack.prompts[j], live))
        for seed in seeds:
            sample_ids, sample_lps = _samples(pack, base_rows, j, seed)
            positions = fm.score_positions(
                fm.BaselineReference(
                    y, ids, lps, tail, sample_ids=sample_ids, sample_logprobs=sample_lps
                ),
                rows,
                logprob_dtype=dtype,
            )
            by_seed[seed].append(tier.PromptScores(j, pack.prompts[j], positions))
    exact.sort(key=lambda s: s.index)
    for scores in by_seed.values():
        scores.sort(key=lambda s: s.index)
    return exact, by_seed


def _entropy_and_tail(base_rows: dict[int, np.ndarray], k: int) -> tuple[float, float]:
    """The baseline's mean entropy (nats) and mean mass beyond its top-k on its outputs."""
    entropies, tails = [], []
    for rows in base_rows.values():
        lp = rows.astype(np.float64)
        entropies.append(-(np.exp(lp) * lp).sum(-1))
        ids, _ = fm.topk_of_rows(lp, k)
        tails.append(np.exp(fm.tail_logmass(lp, ids)))
    return float(np.concatenate(entropies).mean()), float(np.concatenate(tails).mean())


def _pct(value: float, reference: float) -> str:
    return f"{100 * (value / reference - 1):+.2f} %" if reference else "-"


def main(argv: list[str] | None = None) -> int:
    demo = DEMO_SETTINGS["fidelity"]
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="demo", help="baseline model (demo, a path or hub id)")
    ap.add_argument("--recipes", default=",".join(DEFAULT_RECIPES), help="candidate recipes")
    ap.add_argument("--limit", type=int, default=int(demo["limit"]))
    ap.add_argument("--max-new-tokens", type=int, default=int(demo["max_new_tokens"]))
    ap.add_argument("--batch-size", type=int, default=int(demo["batch_size"]))
    ap.add_argument("--top-k", type=int, default=tier.FidelitySettings.top_k)
    ap.add_argument("--tail-samples", type=int, default=tier.FidelitySettings.tail_samples)
    ap.add_argument("--extra-seeds", type=int, default=4, help="tail seeds beyond the pack's")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    ap.add_argument("--show", type=Path, default=None, help="print the figures of a --json file")
    args = ap.parse_args(argv)
    if args.show is not None:
        _print(json.loads(args.show.read_text()))
        return 0
    torch.set_num_threads(args.threads)

    settings = tier.FidelitySettings(
        limit=args.limit,
        max_new_tokens=args.max_new_tokens,
        batch_size=args.batch_size,
        top_k=args.top_k,
        tail_samples=args.tail_samples,
    )
    base = load_backend(ModelSpec.parse(args.model, device="cpu"))
    with tempfile.TemporaryDirectory(prefix="gate-kl-") as tmp:
        path = tier.record(base, tier.load_prompts(settings), settings, Path(tmp) / "ref.st")
        pack = load_pack(path)
        file_bytes = pack_bytes_per_token(path, pack.n_output_tokens)
    if pack.m == 0:
        print("the pack has no sampled tail (top_k covers the vocabulary)", file=sys.stderr)
        return 1
    requests = [
        ScoreRequest(pack.prompt_ids(j).tolist(), pack.output_ids(j).tolist())
        for j in range(len(pack))
    ]
    base_rows = dict(tier.score_rows(base, requests, batch_size=settings.batch_size, top_k=1))
    vocab = int(next(iter(base_rows.values())).shape[-1])
    entropy, tail_mass = _entropy_and_tail(base_rows, pack.k)
    seeds = [settings.tail_seed] + [settings.tail_seed + 1 + s for s in range(args.extra_seeds)]
    summary = pack.recording_summary()
    figures: dict[str, Any] = {
        "model": args.model,
        "prompts": len(pack),
        "tokens": pack.n_output_tokens,
        "prompts_truncated": summary.truncated,
        "prompts_empty": summary.empty,
        "k": pack.k,
        "m": pack.m,
        "vocab": vocab,
        "mean_entropy_nats": entropy,
        "tail_mass_mean": tail_mass,
        "payload_bytes_per_token": payload_bytes_per_token(pack.k, pack.m, vocab),
        "file_bytes_per_token": file_bytes,
        "full_fp16_logits_bytes_per_token": full_logits_bytes_per_token(vocab),
        "tail_seeds": seeds,
        "candidates": {},
    }
    for recipe in [r for r in args.recipes.split(",") if r]:
        cand = load_backend(ModelSpec.parse(args.model, device="cpu"), recipe)
        exact_scores, by_seed = _score(cand, pack, requests, base_rows, settings, seeds)
        exact = _read(exact_scores, pack, exact=True)
        estimates = {seed: _read(scores, pack, exact=False) for seed, scores in by_seed.items()}
        bound_mean, bound_p99 = _bound(exact_scores)
        later = [
            tier.PromptScores(s.index, s.meta, s.positions.from_position(1))
            for s in exact_scores
            if s.positions.length > 1
        ]
        figures["candidates"][recipe] = {
            "exact_mean": exact.kl_mean,
            "exact_p99": exact.kl_p99,
            # per tail seed, in the order of "tail_seeds"
            "estimate_mean": [estimates[s].kl_mean for s in seeds],
            "estimate_se": [estimates[s].se for s in seeds],
            "estimate_p99": [estimates[s].kl_p99 for s in seeds],
            "bound_mean": bound_mean,
            "bound_p99": bound_p99,
            "cga_math_every_position": exact.cga_math,
            "cga_math_from_second": _read(later, pack, exact=True).cga_math,
        }
        del cand
    _print(figures)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


def _print(f: dict[str, Any]) -> None:
    """The figures as text and a markdown table (also from a ``--json`` file: ``--show``)."""
    print(
        f"model {f['model']}: {f['prompts']} prompts, {f['tokens']} output tokens "
        f"({f['prompts_truncated']} cut, {f['prompts_empty']} empty); mean entropy "
        f"{f['mean_entropy_nats']:.2f} nats, mass beyond the top {f['k']} "
        f"{100 * f['tail_mass_mean']:.1f} %"
    )
    print(
        f"pack v3: k = {f['k']}, m = {f['m']}, {f['payload_bytes_per_token']} B per output token "
        f"by the format, {f['file_bytes_per_token']:.0f} B in the file "
        f"(full fp16 logits: {f['full_fp16_logits_bytes_per_token']} B); "
        f"tail seeds {f['tail_seeds']}\n"
    )
    print(
        "| candidate | exact mean KL | v3 estimate ± SE (seed 0) | its error | worst of "
        f"{len(f['tail_seeds'])} seeds | v2 bound / exact | exact p99 | v3 p99 error (worst) "
        "| v2 bound p99 / exact | CGA math: every position / from the 2nd |"
    )
    print("|" + " --- |" * 10)
    for recipe, c in f["candidates"].items():
        means, p99s, se = c["estimate_mean"], c["estimate_p99"], c["estimate_se"][0]
        worst = max(abs(v / c["exact_mean"] - 1) for v in means)
        worst_p99 = max(abs(v / c["exact_p99"] - 1) for v in p99s)
        print(
            f"| {recipe} | {c['exact_mean']:.3e} | {means[0]:.3e} ± {se:.1e} "
            f"| {_pct(means[0], c['exact_mean'])} | {100 * worst:.2f} % "
            f"| {c['bound_mean'] / c['exact_mean']:.3f} | {c['exact_p99']:.4f} "
            f"| {_pct(p99s[0], c['exact_p99'])} ({100 * worst_p99:.2f} %) "
            f"| {c['bound_p99'] / c['exact_p99']:.3f} "
            f"| {c['cga_math_every_position']:.3f} / {c['cga_math_from_second']:.3f} |"
        )


if __name__ == "__main__":
    sys.exit(main())

"""Evaluate a judge model on held-out pairs with a known truth, and on real damaged builds.

Everything here is held out from the judge's training (``scripts/train_judge_model.py``):
synthetic dialogues drawn with another seed, the held-out ShareGPT split, and the
demo model's replies to the fidelity prompts (themselves held-out ShareGPT prompts).
The judge is asked exactly as the judge tier asks it (:func:`gate.judge.panel.judge_pairs`:
normalization, both orders, one retry, the cache).

Figures (JSON on stdout and in ``--out``):

* ``agreement`` per damage kind and for ties: the share of pairs whose outcome (both
  orders agreeing) is the known truth (intact wins, or tie); a swap-inconsistent or
  unparsed pair counts as a miss. Tie pairs (identical replies) are put to the judge
  here, although the tier scores them as ties without asking. ``agreement_if_consistent``: the same among
  swap-consistent pairs; ``single_order_accuracy``: each of the two questions alone;
* ``swap_consistency``: the share of pairs whose verdict is the same in both orders;
* ``validity_accuracy``: intact replies called valid, corrupted ones corrupted;
* ``builds``: damaged builds of the demo model (``--builds``) judged against the demo
  model itself on the fidelity prompts, as the tier will score them (validity
  included): the build's wins, losses and ties and its Elo delta. There is no known
  truth per pair, so this is a preference, not an accuracy; ``none`` is the baseline
  against itself (every pair should be a tie).

Run:
    OMP_WAIT_POLICY=PASSIVE python scripts/eval_judge_model.py --judge gate/assets/judge_model
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch
from train_judge_model import (
    DEFAULT_KINDS,
    DEMO_MODEL,
    greedy_replies,
    parse_weights,
    sharegpt_sources,
    synthetic_sources,
)
from transformers import AutoTokenizer, LlamaForCausalLM

from gate.data.prompt_set import load_prompt_set
from gate.data.sharegpt import load_sharegpt, split_conversations, usable
from gate.judge.cache import CachedJudge, JudgeCache
from gate.judge.elo import elo_result
from gate.judge.judges import TransformersJudge
from gate.judge.normalize import normalize_response
from gate.judge.pairs import Source, ValidityCase, draw_cases
from gate.judge.panel import JudgeTemplates, Pair, judge_pairs, validity_question
from gate.judge.protocol import Outcome, PairStatus, panel_outcome, parse_validity, tally
from gate.judge.template import default_template
from gate.models.compress import apply_recipe
from gate.models.recipes import parse_recipe

#: Seed of the held-out draws (training uses its own ``--seed``).
EVAL_SEED = 20_000


def model_replies(
    work: Path, recipe: str, prompts: list[str], max_new: int, batch: int
) -> list[str]:
    """The demo model's greedy replies under ``recipe``, cached in ``work``."""
    digest = hashlib.sha256("\x00".join(prompts).encode()).hexdigest()[:12]
    path = work / f"replies-{recipe.replace(':', '_')}-{max_new}-{digest}.json"
    if path.is_file():
        data = json.loads(path.read_text(encoding="utf-8"))
        if data["prompts"] == prompts:
            return [str(r) for r in data["replies"]]
    tokenizer = AutoTokenizer.from_pretrained(DEMO_MODEL)
    model = LlamaForCausalLM.from_pretrained(DEMO_MODEL, dtype=torch.float32)
    apply_recipe(model, parse_recipe(recipe))
    replies = greedy_replies(model, tokenizer, prompts, max_new, 192, batch)
    work.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"prompts": prompts, "replies": replies}), encoding="utf-8")
    return replies


def rate(num: int, den: int) -> float | None:
    return round(num / den, 4) if den else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--judge", type=Path, required=True)
    ap.add_argument("--pairs-per-origin", type=int, default=60)
    ap.add_argument("--validity-per-origin", type=int, default=40)
    ap.add_argument("--builds", default="drop-layers:2,prune-magnitude:0.5,drop-layers:1")
    ap.add_argument(
        "--model-prompts",
        type=int,
        default=96,
        help="fidelity prompts the demo model (and each build) answers",
    )
    ap.add_argument("--build-prompts", type=int, default=48)
    ap.add_argument("--gen-tokens", type=int, default=96)
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "gate-judge-eval")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()

    judge = TransformersJudge(args.judge)
    cached = CachedJudge(judge, JudgeCache(args.work / "cache"))
    templates = JudgeTemplates(default_template("pairwise"), default_template("validity"))
    pair_only = JudgeTemplates(templates.pairwise)

    convs, _ = load_sharegpt(warn=False)
    _, held = split_conversations(usable(convs))
    held = sorted(held, key=lambda c: c.id)
    fidelity = [p.text for p in load_prompt_set()][: args.model_prompts]
    base_replies = model_replies(args.work, "none", fidelity, args.gen_tokens, 16)
    sources = {
        "synthetic": synthetic_sources(2000, EVAL_SEED),
        "sharegpt": sharegpt_sources(held, 2000, 1500),
        "model": [Source(p, r, "model") for p, r in zip(fidelity, base_replies, strict=True) if r],
    }
    rng = random.Random(EVAL_SEED)
    kinds = parse_weights(DEFAULT_KINDS)

    # pairwise agreement and swap-consistency, per kind and origin
    cases = []
    validity_cases: list[ValidityCase] = []
    for origin in sorted(sources):
        groups, vcases = draw_cases(
            sources[origin], args.pairs_per_origin, args.validity_per_origin, rng, kinds
        )
        cases += [g[0] for g in groups]
        validity_cases += vcases
    pairs = [Pair(c.prompt, c.response_a, c.response_b) for c in cases]
    outcomes = judge_pairs(cached, pair_only, pairs, ask_identical=True)
    per: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for case, out in zip(cases, outcomes, strict=True):
        truth = Outcome.TIE if case.label == "tie" else Outcome.WIN
        for key in (case.kind, f"origin:{case.origin.split(':')[0]}", "all"):
            row = per[key]
            row["pairs"] += 1
            row["agree"] += out.outcome is truth
            row["consistent"] += out.status is PairStatus.SCORED
            row["agree_consistent"] += out.status is PairStatus.SCORED and out.outcome is truth
            for o in (out.candidate_first, out.candidate_second):
                row["single"] += 1
                row["single_right"] += o is truth
            if out.status is PairStatus.UNPARSED:
                row["unparsed"] += 1
    pairwise = {
        key: {
            "pairs": row["pairs"],
            "agreement": rate(row["agree"], row["pairs"]),
            "swap_consistency": rate(row["consistent"], row["pairs"]),
            "agreement_if_consistent": rate(row["agree_consistent"], row["consistent"]),
            "single_order_accuracy": rate(row["single_right"], row["single"]),
            "unparsed": row["unparsed"],
        }
        for key, row in sorted(per.items())
    }

    # validity accuracy
    assert templates.validity is not None
    questions = [
        validity_question(cached, templates.validity, c.prompt, normalize_response(c.response))
        for c in validity_cases
    ]
    answers = cached.ask(questions)
    vrow: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for case, ans in zip(validity_cases, answers, strict=True):
        got = parse_validity(ans.text)
        origin = f"origin:{case.origin.split(':')[0]}"
        for key in (case.kind, case.label, origin, f"{case.label}:{origin}", "all"):
            vrow[key]["n"] += 1
            vrow[key]["right"] += got is not None and got.value == case.label
            vrow[key]["unparsed"] += got is None
    validity = {
        key: {"n": r["n"], "accuracy": rate(r["right"], r["n"]), "unparsed": r["unparsed"]}
        for key, r in sorted(vrow.items())
    }

    # real damaged builds against the baseline, as the tier scores them
    builds: dict[str, Any] = {}
    prompts = fidelity[: args.build_prompts]
    base = base_replies[: len(prompts)]
    for recipe in ["none", *[b for b in args.builds.split(",") if b]]:
        cand = (
            base
            if recipe == "none"
            else model_replies(args.work, recipe, prompts, args.gen_tokens, 16)
        )
        outs = judge_pairs(
            cached, templates, [Pair(p, c, b) for p, c, b in zip(prompts, cand, base, strict=True)]
        )
        panel = [panel_outcome([o]) for o in outs]
        t = tally(panel)
        scored = [p.outcome for p in panel if p.outcome is not None]
        entry: dict[str, Any] = {
            "prompts": len(prompts),
            "identical_replies": t.identical,
            "candidate_wins": t.wins,
            "candidate_losses": t.losses,
            "ties": t.ties,
            "swap_inconsistent": t.swap_inconsistent,
            "unparsed": t.unparsed,
            "candidate_corrupted": sum(
                o.candidate_valid is not None and o.candidate_valid.value == "corrupted"
                for o in outs
            ),
            "baseline_corrupted": sum(
                o.baseline_valid is not None and o.baseline_valid.value == "corrupted" for o in outs
            ),
        }
        if scored:
            elo = elo_result(scored)
            entry.update(
                elo_delta=round(elo.delta, 1),
                elo_ci=[round(elo.ci[0], 1), round(elo.ci[1], 1)],
                p_worse=elo.p_worse,
                clamped=elo.clamped,
            )
        builds[recipe] = entry

    report = {
        "judge": str(args.judge),
        "model_id": judge.model_id,
        "pairwise": pairwise,
        "validity": validity,
        "builds": builds,
        "judge_calls": cached.stats.calls,
        "cache_hits": cached.stats.hits,
        "parse_failures": cached.stats.parse_failures,
        "seconds": round(time.perf_counter() - t0, 1),
    }
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The generation tier's figures at several caps, and greedy decoding's cost per thread count.

For a stored reference pack's prompts (default: the committed demo pack), the
baseline answers greedily at each cap (``--caps``), then each candidate build
(``--recipes``); per build: the stop rate, the loop rate, the mean length, the
geometric mean length ratio against the baseline at the same cap, and the
discordant counts of the stop and loop outcomes (candidate only, baseline
only) with McNemar's two-sided p-value, all through
:mod:`gate.metrics.generation` and :func:`gate.gating.stats.mcnemar`. The
baseline's answers at the pack's own cap are checked against the pack.
``--probes N`` asks ``N`` capability probes of each family instead (drawn with the
probes' default seed, through the chat template): short-answer prompts on which the
demo model's baseline ends by itself, so that a build that stops differently there shows.
``--threads`` sets torch's thread count before anything runs; ``--time-threads`` times the
baseline's answers at the pack's cap and teacher-forced scoring of the pack's
answers on one and on two threads, decoding by transformers directly.

Run (demo model, minutes on two CPU cores)::

    python scripts/measure_generation_caps.py --caps 64,128,256 --recipes quanto-int2,drop-layers:2
    python scripts/measure_generation_caps.py --model DIR --pack PACK --limit 32 --time-threads
    python scripts/measure_generation_caps.py --probes 40 --caps 64 --recipes quanto-int2,drop-layers:2
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from gate.data.probes import FAMILIES, build_probes
from gate.gating.stats import mcnemar
from gate.metrics import generation as gm
from gate.models.backends.base import ScoreRequest
from gate.models.backends.hf import HFBackend
from gate.models.backends.loading import load_backend
from gate.models.backends.tokens import encode_prompt
from gate.models.model_spec import ModelSpec
from gate.store.reference import load_pack
from gate.tiers.generation import GenerationSettings

DEMO_PACK = (
    Path(__file__).resolve().parents[1]
    / "gate"
    / "assets"
    / "baselines"
    / "demo"
    / "0001-fp32.reference.safetensors"
)


def _greedy(
    backend: HFBackend, prompts: Sequence[Sequence[int]], cap: int, batch: int
) -> list[list[int]]:
    """Batched greedy answers by transformers' ``generate`` at torch's current thread count."""
    config = backend.generation_config(cap)
    out: list[list[int]] = []
    with torch.no_grad():
        for start in range(0, len(prompts), batch):
            ids, mask = backend._left_padded([*prompts[start : start + batch]])
            rows = backend.model.generate(
                input_ids=ids, attention_mask=mask, generation_config=config
            )
            out += [backend.cut_at_eos(r) for r in rows[:, ids.shape[1] :].tolist()]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--model", default="demo")
    parser.add_argument("--pack", type=Path, default=DEMO_PACK)
    parser.add_argument("--caps", default="")
    parser.add_argument("--recipes", default="")
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--time-threads", action="store_true")
    parser.add_argument("--probes", type=int, default=0)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    pack = load_pack(args.pack)
    count = len(pack) if args.limit is None else min(args.limit, len(pack))
    prompts = [pack.prompt_ids(j).tolist() for j in range(count)]
    stored = [pack.output_ids(j).tolist() for j in range(count)]
    spec = ModelSpec.parse(args.model)
    base = load_backend(spec, None)
    rule = GenerationSettings().loop_rule
    if args.probes:
        texts = [p.prompt for family in FAMILIES for p in build_probes(family, args.probes)]
        prompts = [encode_prompt(base.tokenizer, text) for text in texts]
        count = len(prompts)
        print(f"probes: {args.probes} of each of {len(FAMILIES)} families, {count} prompts")
    else:
        print(f"pack: {count} prompts, cap {pack.max_new_tokens}")
    print(f"torch threads {torch.get_num_threads()}")
    if args.time_threads:
        saved = torch.get_num_threads()
        for threads in (1, 2):
            torch.set_num_threads(threads)
            t = time.perf_counter()
            answers = _greedy(base, prompts, pack.max_new_tokens, args.batch_size)
            gen = time.perf_counter() - t
            requests = [ScoreRequest(p, s) for p, s in zip(prompts, stored, strict=True)]
            t = time.perf_counter()
            base.score(requests, top_k=32, batch_size=args.batch_size)
            score = time.perf_counter() - t
            same = sum(a == s for a, s in zip(answers, stored, strict=True))
            print(
                f"threads {threads}: generate {count} x {pack.max_new_tokens} {gen:.1f} s "
                f"(equal to the pack: {same}/{count}); score {score:.1f} s"
            )
        torch.set_num_threads(saved)
    for cap in [int(c) for c in args.caps.split(",") if c]:
        t = time.perf_counter()
        b = base.generate(prompts, max_new_tokens=cap, batch_size=args.batch_size)
        took = time.perf_counter() - t
        if cap == pack.max_new_tokens and not args.probes:
            same = sum(x == s for x, s in zip(b, stored, strict=True))
            print(f"  the baseline reproduces the pack: {same}/{count}")
        b_stop = [gm.stopped(len(x), cap) for x in b]
        b_loop = [gm.is_loop(x, rule) for x in b]
        print(
            f"cap {cap}: baseline stop {sum(b_stop) / count:.3f} loop {sum(b_loop) / count:.3f} "
            f"mean length {sum(map(len, b)) / count:.1f} ({took:.1f} s)"
        )
        for recipe in [r for r in args.recipes.split(",") if r]:
            build = load_backend(spec, recipe)
            t = time.perf_counter()
            c = build.generate(prompts, max_new_tokens=cap, batch_size=args.batch_size)
            took = time.perf_counter() - t
            c_stop = [gm.stopped(len(x), cap) for x in c]
            c_loop = [gm.is_loop(x, rule) for x in c]
            ratio = gm.geometric_mean_ratio(
                [gm.log_length_ratio(max(len(x), 1), len(y)) for x, y in zip(c, b, strict=True)]
            )
            stop = mcnemar(c_stop, b_stop, higher_is_better=False)
            loop = mcnemar(c_loop, b_loop, higher_is_better=False)
            print(
                f"  {recipe}: stop {sum(c_stop) / count:.3f} (discordant {stop.b}/{stop.c}, "
                f"p {stop.p_value:.3g}) loop {sum(c_loop) / count:.3f} (discordant "
                f"{loop.b}/{loop.c}, p {loop.p_value:.3g}) mean length "
                f"{sum(map(len, c)) / count:.1f} length ratio {ratio:.3f} ({took:.1f} s)"
            )


if __name__ == "__main__":
    main()

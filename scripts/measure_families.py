"""Measure the compression families of the CGA paper on the demo model, one row per candidate.

    .venv/bin/python scripts/measure_families.py                 # panel + sweeps
    .venv/bin/python scripts/measure_families.py --limit 16 --json out.json

Each candidate runs through the code path that runs it in deployment:

* weight checkpoints (``gate/assets/checkpoints/<name>``, made by
  scripts/make_compressed_checkpoints.py) load through transformers'
  compressed-tensors loader and are scored in one batched pass;
* attention replacements are installed through the attention interface; Top-k
  is position-consistent and scored in one pass, FP8 and Sage take their
  scales from each call's tensors, so they are scored as generation runs them
  (prefill, then one token per call);
* KV-cache methods are scored through their cache (chunked teacher forcing,
  exact chunk size).

Columns: CGA and mean KL against the committed demo reference pack (the
fidelity tier's own functions), perplexity on the held-out corpus twice: in
one batched pass (what a harness that never builds a cache sees) and through
the candidate's path (sliding windows: the context part prefilled through the
cache, the rest teacher-forced through it).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gate.models import checkpoints  # noqa: E402
from gate.models.backends.base import Backend  # noqa: E402
from gate.models.backends.chunked import CacheBackend  # noqa: E402
from gate.models.backends.loading import cache_method_of as cache_method  # noqa: E402
from gate.models.backends.loading import load_backend  # noqa: E402
from gate.models.compress import attention as attn  # noqa: E402
from gate.models.compress.kvcache import CacheMethod  # noqa: E402
from gate.models.model_spec import ModelSpec  # noqa: E402
from gate.models.recipes import parse_recipe  # noqa: E402
from gate.store.reference import load_pack  # noqa: E402
from gate.tiers import accuracy, fidelity  # noqa: E402

PACK = ROOT / "gate/assets/baselines/demo/0001-fp32.reference.safetensors"
#: SnapKV's observation window at the demo's scale (prompts of 16-196 tokens).
DEMO_SNAPKV_WINDOW = 16

PANEL = [
    ("gptq-w4a16", "weights: INT4"),
    ("awq-w4a16", "weights: INT4"),
    ("sparsegpt-0.5", "weights: pruning"),
    ("attn-fp8", "attention: low precision"),
    ("attn-sage", "attention: low precision"),
    ("attn-topk:0.1", "attention: sparse"),
    ("kv-snapkv:0.5", "KV cache: eviction"),
    ("kv-h2o:0.5", "KV cache: eviction"),
    ("kv-streaming:sinks=4,window=32", "KV cache: eviction"),
    ("kv-quant:int4", "KV cache: quantization"),
]
SWEEPS = [
    "kv-snapkv:0.25",
    "kv-snapkv:0.75",
    "kv-h2o:0.25",
    "kv-h2o:0.75",
    "kv-streaming:sinks=4,window=128",
    "kv-streaming:sinks=4,window=64",
    "kv-quant:int2",
    "attn-topk:0.5",
    "attn-topk:0.25",
]


class Candidate:
    """A backend for one recipe plus the one-pass backend for the naive perplexity."""

    def __init__(self, backend: Backend, one_pass: Backend, release: Callable[[], None]) -> None:
        self.backend, self.one_pass, self.release = backend, one_pass, release


def build(recipe: str, base: Any) -> Candidate:
    name, _, argument = recipe.partition(":")
    if name == "none":
        return Candidate(base, base, lambda: None)
    if name in checkpoints.METHODS:
        path = checkpoints.find(name)
        if path is None:
            raise SystemExit(f"no {name} checkpoint: run scripts/make_compressed_checkpoints.py")
        backend = load_backend(ModelSpec.parse(str(path), device="cpu"))
        return Candidate(backend, backend, lambda: None)
    model = base.model
    default = model.config._attn_implementation
    if name.startswith("attn-"):
        attn.install(model, attn.parse_method(name, argument or None))
        release = lambda: model.set_attn_implementation(default)  # noqa: E731
        if name == "attn-topk":
            return Candidate(base, base, release)
        per_call = CacheBackend(base, CacheMethod(), label=recipe, chunk_size=1)
        return Candidate(per_call, base, release)
    if name == "kv-snapkv" and "=" not in argument:
        argument = f"ratio={argument},window={DEMO_SNAPKV_WINDOW}"
    method = cache_method(parse_recipe(f"{name}:{argument}"))
    return Candidate(CacheBackend(base, method, label=recipe), base, lambda: None)


def measure(recipe: str, base: Any, pack: Any, limit: int, ppl_tokens: int) -> dict[str, Any]:
    started = time.perf_counter()
    candidate = build(recipe, base)
    try:
        settings = fidelity.FidelitySettings(limit=limit)
        values = {m.name: m.value for m in fidelity.measure(candidate.backend, pack, settings)}
        acc = accuracy.AccuracySettings(perplexity_max_tokens=ppl_tokens)
        through = accuracy.measure_perplexity(candidate.backend, acc).value
        one_pass = accuracy.measure_perplexity(candidate.one_pass, acc).value
    finally:
        candidate.release()
    return {
        "recipe": recipe,
        "cga": values["fidelity.cga"],
        "cga_at_5": values["fidelity.cga_at_5"],
        "kl_mean": values["fidelity.kl_mean"],
        "ppl_one_pass": one_pass,
        "ppl_through_path": through,
        "seconds": time.perf_counter() - started,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recipes", nargs="*", help="default: the panel and the sweeps")
    parser.add_argument("--limit", type=int, default=32, help="reference-pack prompts scored")
    parser.add_argument(
        "--ppl-tokens", type=int, default=2048, help="held-out tokens for perplexity"
    )
    parser.add_argument("--json", type=Path, help="write the rows here too")
    args = parser.parse_args(argv)
    family = dict(PANEL)
    recipes = args.recipes or [r for r, _ in PANEL] + SWEEPS
    base = load_backend(ModelSpec.parse("demo", device="cpu"))
    pack = load_pack(PACK)
    rows = [measure("none", base, pack, args.limit, args.ppl_tokens)]
    for recipe in recipes:
        rows.append(measure(recipe, base, pack, args.limit, args.ppl_tokens))
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    print("| recipe | family | CGA | CGA@5 | mean KL | ppl (one pass) | ppl (its path) | s |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        kind = family.get(r["recipe"], family.get(r["recipe"].split(":")[0] + ":0.5", "sweep"))
        kind = "baseline" if r["recipe"] == "none" else kind
        print(
            f"| {r['recipe']} | {kind} | {r['cga']:.3f} | {r['cga_at_5']:.3f} | {r['kl_mean']:.4f}"
            f" | {r['ppl_one_pass']:.2f} | {r['ppl_through_path']:.2f} | {r['seconds']:.0f} |"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

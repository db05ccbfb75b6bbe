"""Make GPTQ W4A16, AWQ W4A16 and SparseGPT 50 % checkpoints of the demo model with llm-compressor.

Runs in llm-compressor's own environment (it pins transformers and
compressed-tensors versions gate does not run), made with:

    PY=$(bash scripts/setup_tool_env.sh llmcompressor | tail -n 1)
    $PY scripts/make_compressed_checkpoints.py            # all three
    $PY scripts/make_compressed_checkpoints.py gptq-w4a16 --out /some/dir
    # the packaged AWQ one (OMP_NUM_THREADS=1, nothing else running is fastest)
    OMP_NUM_THREADS=1 $PY scripts/make_compressed_checkpoints.py awq-w4a16 --samples 128

Each checkpoint is calibrated on the packaged calibration texts
(``gate/assets/calibration/sharegpt_calibration.jsonl``, tokenized with the
demo tokenizer, at most ``--max-seq-length`` tokens each) and saved in the
compressed-tensors format (``quantization_config.quant_method =
"compressed-tensors"`` in config.json): INT4 weights packed eight to an int32
with a float scale per group of 128 input channels (``pack-quantized``), or,
for SparseGPT, the kept weights plus a bitmask (``sparse-bitmask``).
transformers loads them with its compressed-tensors quantizer, as it loads
such a checkpoint from the hub.

Methods (``lm_head`` and the embeddings stay dense in all three):

* ``gptq-w4a16`` -- GPTQ (Frantar et al. 2022): each linear layer's weights are
  rounded to symmetric INT4 column by column, the rounding error of each column
  compensated on the columns not yet rounded through the inverse Hessian of
  the layer's calibration inputs, ``H = 2 X X^T``.
* ``awq-w4a16`` -- AWQ (Lin et al. 2023): per input channel, scales
  ``s = mean|x|^alpha`` searched on the calibration activations (a grid of 20
  ``alpha`` values per smoothed layer) so that ``Q(W diag(s)) diag(s)^-1 x``
  best matches ``W x``, folded into the preceding norm or linear layer, then
  INT4 round-to-nearest per group. Symmetric (the ``W4A16`` scheme, as GPTQ):
  compressed-tensors 0.20, which gate loads checkpoints with, cannot load an
  asymmetric pack-quantized checkpoint written by 0.19 (its packed zero points
  do not match the shape it allocates; transformers stops on the mismatch).
  The packaged one took 3 min 14 s of CPU time (one thread, 128 texts x 256
  tokens; 11 min 46 s wall on a shared 2-core machine); with ``--samples 16``
  an asymmetric run took 34 s wall.
* ``sparsegpt-0.5`` -- SparseGPT (Frantar & Alistarh 2023): 50 % of each
  linear layer's weights set to zero (unstructured), chosen and compensated
  with the same inverse-Hessian update as GPTQ. compressed-tensors 0.19 no
  longer writes sparse formats, so this checkpoint is a dense safetensors file
  (18 MB) without a quantization config.

All three go to ``gate/assets/checkpoints/<name>`` (the INT4 ones 6 MB,
SparseGPT 18 MB; see ``gate.models.checkpoints``), packaged with gate. Each directory gets the checkpoint, the demo
tokenizer files and ``gate_checkpoint.json``: the tool's version, the demo
model's and the calibration file's sha256, and the settings.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gate.models import checkpoints  # noqa: E402  (standard library only)

DEMO = ROOT / "gate" / "assets" / "demo_model"
CALIBRATION = checkpoints.CALIBRATION
METHODS = checkpoints.METHODS
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


def recipe(method: str) -> Any:
    """The llm-compressor modifier of ``method``."""
    if method == "gptq-w4a16":
        from llmcompressor.modifiers.quantization import GPTQModifier

        return GPTQModifier(targets="Linear", scheme="W4A16", ignore=["lm_head"])
    if method == "awq-w4a16":
        from llmcompressor.modifiers.awq import AWQModifier

        # symmetric INT4: compressed-tensors 0.20 (gate's loader) cannot load an asymmetric
        # pack-quantized checkpoint (its packed zero points mismatch the shape it allocates)
        return AWQModifier(targets="Linear", scheme="W4A16", ignore=["lm_head"])
    if method == "sparsegpt-0.5":
        from llmcompressor.modifiers.pruning import SparseGPTModifier

        # targets must be a list here: a bare string is iterated character by character
        # by the pruning modifiers' module matching, which then prunes nothing
        return SparseGPTModifier(
            sparsity=0.5, mask_structure="0:0", targets=["Linear"], ignore=["re:.*lm_head"]
        )
    raise SystemExit(f"unknown method {method!r}: choose from {', '.join(METHODS)}")


def calibration_dataset(tokenizer: Any, max_seq_length: int, samples: int) -> Any:
    from datasets import Dataset

    texts = [json.loads(line)["text"] for line in CALIBRATION.read_text().splitlines() if line]
    rows = [
        tokenizer(text, add_special_tokens=True, truncation=True, max_length=max_seq_length)
        for text in texts[:samples]
    ]
    return Dataset.from_dict(
        {
            "input_ids": [r["input_ids"] for r in rows],
            "attention_mask": [r["attention_mask"] for r in rows],
        }
    )


def allow_cpu_only() -> None:
    """Let llm-compressor's AWQ run on a torch without an accelerator.

    llm-compressor 0.14's AWQ pins its cached calibration activations
    (``IntermediatesCache.pin_memory``) for faster host-to-device copies;
    ``Tensor.pin_memory`` raises on a torch that has no accelerator. Pinning
    changes no value, so without an accelerator it is skipped.
    """
    import torch

    if torch.accelerator.is_available():
        return
    from llmcompressor.pipelines.cache import IntermediatesCache

    def no_pinning(self: Any, batch_index: int, input_names: Any = None) -> None:
        return None

    IntermediatesCache.pin_memory = no_pinning  # type: ignore[method-assign]


def make(method: str, out: Path, *, max_seq_length: int, samples: int) -> Path:
    import llmcompressor
    import torch
    import transformers
    from llmcompressor import oneshot
    from transformers import AutoModelForCausalLM, AutoTokenizer

    allow_cpu_only()
    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(DEMO)
    model = AutoModelForCausalLM.from_pretrained(DEMO, dtype=torch.float32)
    dataset = calibration_dataset(tokenizer, max_seq_length, samples)
    oneshot(
        model=model,
        dataset=dataset,
        recipe=recipe(method),
        max_seq_length=max_seq_length,
        num_calibration_samples=len(dataset),
        shuffle_calibration_samples=False,
    )
    if out.exists():
        shutil.rmtree(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, save_compressed=True)
    for name in TOKENIZER_FILES:
        if (DEMO / name).is_file():
            shutil.copy2(DEMO / name, out / name)
    (out / "gate_checkpoint.json").write_text(
        json.dumps(
            {
                "method": method,
                "tool": f"llmcompressor {llmcompressor.__version__}",
                "transformers": transformers.__version__,
                "base_model_sha256": checkpoints.file_sha256(DEMO / "model.safetensors"),
                "calibration_sha256": checkpoints.file_sha256(CALIBRATION),
                "calibration_samples": len(dataset),
                "max_seq_length": max_seq_length,
            },
            indent=2,
        )
        + "\n"
    )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("methods", nargs="*", default=list(METHODS), help=", ".join(METHODS))
    parser.add_argument(
        "--out", type=Path, help="parent directory of the checkpoints (default: packaged / cache)"
    )
    parser.add_argument("--max-seq-length", type=int, default=256)
    parser.add_argument("--samples", type=int, default=128, help="calibration texts used")
    args = parser.parse_args(argv)
    try:
        import llmcompressor  # noqa: F401
    except ImportError:
        print(
            "llm-compressor is not installed in this Python: run me with the python that"
            " 'bash scripts/setup_tool_env.sh llmcompressor' prints",
            file=sys.stderr,
        )
        return 3
    for method in args.methods:
        recipe(method)  # unknown names fail before any work
    for method in args.methods:
        out = args.out / method if args.out else checkpoints.default_dir(method)
        path = make(method, out, max_seq_length=args.max_seq_length, samples=args.samples)
        size = sum(f.stat().st_size for f in path.iterdir())
        print(f"{method}: {path} ({size / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Where bnb-int8's KL on SmolLM2 comes from: LLM.int8()'s activations or bitsandbytes' CPU path.

Loads SmolLM2-135M-Instruct (the packaged GGUF, dequantized once by
:func:`gate.models.gguf.dequantized_dir`), lets it answer 8 chat-templated
prompts greedily (48 tokens), then teacher-forces every build on those
sequences and prints, per build, the mean KL(base || build) per continuation
token (nats) and the top-1 agreement with the base:

* bitsandbytes' LLM.int8() on the CPU (gate's ``bnb-int8`` recipe config);
* independent simulations in float32: int8 weights only (per-row absmax round
  trip); int8 weights and per-token int8 activations with the outlier feature
  columns (any |x| > 6) multiplied in full precision (LLM.int8(), Dettmers et
  al. 2022); the same without the outlier split; the same after casting the
  inputs to float16 as bitsandbytes does.

    python scripts/measure_int8_activations.py [--json out.json]
"""

from __future__ import annotations

import argparse
import copy
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

PROMPTS = (
    "The history of the Roman Empire spans many centuries, beginning with",
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return",
    "Photosynthesis is the process by which plants convert light energy into",
    "To compute 17 times 23, first multiply 17 by 20 to get 340, then",
    "Paris is the capital of France, and Berlin is the capital of",
    "In machine learning, overfitting happens when a model",
    "The quick brown fox jumps over the lazy dog. This sentence is famous because",
    "Water boils at 100 degrees Celsius at sea level, but at higher altitudes",
)


def row_int8(weight: torch.Tensor) -> torch.Tensor:
    """Per-output-row absmax int8 round trip."""
    scale = weight.abs().amax(1, keepdim=True).clamp_min(1e-12) / 127
    return (weight / scale).round().clamp(-127, 127) * scale


class SimulatedInt8(torch.nn.Module):
    """int8 weights, and optionally per-token int8 activations with outlier columns kept."""

    def __init__(self, linear: torch.nn.Linear, activations: bool, threshold: float, half: bool):
        super().__init__()
        self.linear, self.activations, self.threshold, self.half = (
            linear,
            activations,
            threshold,
            half,
        )
        self.quantized = row_int8(linear.weight.data)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.linear.weight
        if self.half:
            x = x.half().float()
        if not self.activations:
            out = x @ self.quantized.T
        else:
            flat = x.reshape(-1, x.shape[-1])
            outliers = (
                (flat.abs() > self.threshold).any(0)
                if self.threshold > 0
                else torch.zeros(flat.shape[1], dtype=torch.bool)
            )
            inliers = flat.masked_fill(outliers, 0.0)
            scale = inliers.abs().amax(1, keepdim=True).clamp_min(1e-12) / 127
            rounded = (inliers / scale).round().clamp(-127, 127) * scale
            out = rounded @ self.quantized.masked_fill(outliers, 0.0).T
            if outliers.any():
                out = out + flat[:, outliers] @ weight[:, outliers].T
            out = out.reshape(*x.shape[:-1], -1)
        return out if self.linear.bias is None else out + self.linear.bias


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from gate.models.compress.bnb import quantization_config
    from gate.models.gguf import dequantized_dir
    from gate.models.model_spec import ModelSpec

    torch.manual_seed(0)
    started = time.perf_counter()
    gguf = ModelSpec.parse("smollm2").gguf_file
    assert gguf is not None
    with tempfile.TemporaryDirectory(prefix="gate-int8-") as tmp:
        directory = dequantized_dir(gguf, Path(tmp))
        tokenizer = AutoTokenizer.from_pretrained(directory)
        base = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32).eval()
        prompts = []
        for text in PROMPTS:
            enc = tokenizer.apply_chat_template(
                [{"role": "user", "content": text}], add_generation_prompt=True, return_tensors="pt"
            )
            prompts.append(enc if isinstance(enc, torch.Tensor) else enc["input_ids"])
        with torch.no_grad():
            sequences = [base.generate(p, max_new_tokens=48, do_sample=False)[0] for p in prompts]
        starts = [p.shape[1] for p in prompts]

        @torch.no_grad()
        def logprobs(model: Any) -> list[torch.Tensor]:
            return [
                F.log_softmax(model(s[None]).logits[0, start - 1 : -1].float(), -1)
                for s, start in zip(sequences, starts, strict=True)
            ]

        reference = logprobs(base)

        def compare(model: Any) -> dict[str, float]:
            rows = logprobs(model)
            kl = torch.cat(
                [(p.exp() * (p - q)).sum(-1) for p, q in zip(reference, rows, strict=True)]
            )
            agree = torch.cat(
                [
                    (p.argmax(-1) == q.argmax(-1)).float()
                    for p, q in zip(reference, rows, strict=True)
                ]
            )
            return {"mean_kl": float(kl.mean()), "top1_agreement": float(agree.mean())}

        def simulated(activations: bool, threshold: float, half: bool) -> Any:
            model = copy.deepcopy(base)
            for module in list(model.model.layers.modules()):
                for name, child in list(module.named_children()):
                    if isinstance(child, torch.nn.Linear):
                        setattr(module, name, SimulatedInt8(child, activations, threshold, half))
            return model

        figures = {
            "int8 weights only (simulated)": compare(simulated(False, 0.0, False)),
            "LLM.int8: int8 weights + activations, outliers > 6 kept (simulated)": compare(
                simulated(True, 6.0, False)
            ),
            "int8 weights + activations, no outlier split (simulated)": compare(
                simulated(True, 0.0, False)
            ),
            "LLM.int8 with float16 inputs, as bitsandbytes casts them (simulated)": compare(
                simulated(True, 6.0, True)
            ),
        }
        bnb = AutoModelForCausalLM.from_pretrained(
            directory, quantization_config=quantization_config("int8"), device_map={"": "cpu"}
        ).eval()
        figures["bitsandbytes LLM.int8 on the CPU (gate's bnb-int8)"] = compare(bnb)
    positions = sum(s.shape[0] - start for s, start in zip(sequences, starts, strict=True))
    for name, row in figures.items():
        print(f"{row['mean_kl']:.4f} nats  top-1 {row['top1_agreement']:.3f}  {name}")
    print(f"{len(PROMPTS)} prompts, {positions} positions, {time.perf_counter() - started:.0f} s")
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()

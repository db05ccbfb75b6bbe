"""The committed demo model: files, architecture, chat template, perplexity and arithmetic.

Perplexity here is computed independently of the gate's metric code: exp of the mean
next-token negative log-likelihood over the first 256 tokens of each held-out text.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

from gate.data.synthetic import ARITH_EASY_PROMPT

DEMO = Path(__file__).resolve().parents[1] / "gate/assets/demo_model"
HELDOUT = Path(__file__).resolve().parents[1] / "gate/assets/data/heldout_sharegpt.jsonl"

#: Held-out perplexity bound. The committed model (600 steps, see TRAINING.md) measures
#: 267 on this slice; the vocabulary is 4096, a uniform guess. Tighten to 200 with the
#: longer retrain.
MAX_HELDOUT_PPL = 200.0
#: Multiplication-table prompts, and how many the trained model must get right.
MUL_PAIRS = [(3, 4), (7, 8), (6, 6), (9, 5), (2, 11), (12, 3), (8, 4), (5, 5), (7, 7), (4, 9)]
# The committed model gets 4 of these 10 right (it learned part of the table; the probes
# measure 0.36 on `a * b`); the floor is set below that so the test checks training happened.
MIN_MUL_CORRECT = 3


@pytest.fixture(scope="module")
def demo() -> tuple[Any, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(1)
    tok = AutoTokenizer.from_pretrained(DEMO)
    model = AutoModelForCausalLM.from_pretrained(DEMO, dtype=torch.float32)
    model.eval()
    return model, tok


def test_files_and_size() -> None:
    names = {p.name for p in DEMO.iterdir()}
    assert {"model.safetensors", "config.json", "generation_config.json", "tokenizer.json"} <= names
    assert not any(n.endswith((".bin", ".pt", ".pkl")) for n in names)
    total = sum(p.stat().st_size for p in DEMO.iterdir() if p.is_file())
    assert total <= 25 * 1024 * 1024


def test_architecture_fits_4bit_blocks() -> None:
    cfg = json.loads((DEMO / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLM"]
    assert cfg["vocab_size"] == 4096
    for key in ("hidden_size", "intermediate_size", "head_dim"):
        assert cfg[key] % 64 == 0, key  # bitsandbytes NF4/FP4 default blocksize is 64
    assert (cfg["num_hidden_layers"], cfg["num_attention_heads"]) == (4, 4)


def test_tokenizer_chat_template_and_digits(demo: tuple[Any, Any]) -> None:
    _, tok = demo
    text = tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False
    )
    assert text == "<s><|user|>hi<|end|><|assistant|>"
    assert tok.eos_token == "<|end|>"
    pieces = tok.tokenize("12345")
    assert pieces == ["1", "2", "3", "4", "5"]


def _heldout_ppl(model: Any, tok: Any, n_texts: int = 24, max_len: int = 256) -> float:
    import torch

    nll, count = 0.0, 0
    lines = HELDOUT.read_text(encoding="utf-8").splitlines()[:n_texts]
    with torch.no_grad():
        for line in lines:
            text = json.loads(line)["text"]
            body = tok(text, add_special_tokens=False)["input_ids"][: max_len - 1]
            ids = [tok.bos_token_id, *body]
            x = torch.tensor([ids])
            logp = torch.log_softmax(model(input_ids=x).logits[0, :-1].float(), dim=-1)
            nll -= float(logp.gather(1, x[0, 1:, None]).sum())
            count += len(ids) - 1
    return math.exp(nll / count)


@pytest.mark.slow
def test_heldout_perplexity_far_below_vocab(demo: tuple[Any, Any]) -> None:
    model, tok = demo
    ppl = _heldout_ppl(model, tok)
    assert ppl < MAX_HELDOUT_PPL, ppl


@pytest.mark.slow
def test_damaged_model_perplexity_is_worse(demo: tuple[Any, Any]) -> None:
    """The measurement can fail: noise as large as the weights (a crude stand-in for a broken
    quantizer) in every matrix, embeddings included, must at least double perplexity
    (measured: 245 -> 519 on this slice)."""
    import copy

    import torch

    model, tok = demo
    broken = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in broken.parameters():
            if p.dim() == 2:
                p.add_(torch.randn(p.shape, generator=gen) * p.std())
    assert _heldout_ppl(broken, tok, n_texts=8) > 2.0 * _heldout_ppl(model, tok, n_texts=8)


def _greedy(model: Any, tok: Any, prompt: str, max_new: int = 16) -> str:
    import torch

    ids = tok.apply_chat_template(
        [{"role": "user", "content": prompt}], add_generation_prompt=True, return_dict=True
    )["input_ids"]
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=max_new, do_sample=False)
    return str(tok.decode(out[0, len(ids) :], skip_special_tokens=True))


@pytest.mark.slow
def test_multiplication_table_replies(demo: tuple[Any, Any]) -> None:
    model, tok = demo
    correct = 0
    for a, b in MUL_PAIRS:
        reply = _greedy(model, tok, ARITH_EASY_PROMPT.format(a=a, op="*", b=b))
        m = re.search(r"=\s*(\d+)", reply)
        correct += bool(m and int(m.group(1)) == a * b)
    assert correct >= MIN_MUL_CORRECT, correct

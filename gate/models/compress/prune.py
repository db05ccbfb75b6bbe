"""Unstructured pruning of the decoder's linear weights: magnitude and Wanda.

Both zero a fraction ``f`` of the weights of every ``nn.Linear`` inside the
decoder layers (embeddings and ``lm_head`` are left alone).

* ``prune-magnitude:f`` — per weight matrix ``W``, the ``floor(f * numel(W))``
  entries of smallest ``|W_ij|`` are set to zero (layer-wise magnitude pruning).
* ``prune-wanda:f`` — Wanda (Sun et al. 2023, "A Simple and Effective Pruning
  Approach for Large Language Models"): the score of a weight is
  ``S_ij = |W_ij| * ||X_j||_2`` where ``X_j`` is input channel ``j`` of the
  layer over all tokens of the activation prompts; in every output row ``i`` the
  ``floor(f * in_features)`` lowest-scoring weights are zeroed. As in the
  paper, decoder layers are pruned in order and the activations of layer ``l``
  are collected on the model whose layers ``< l`` are already pruned; they
  are propagated layer by layer (:mod:`gate.models.compress.propagate`), so
  reading the activations costs about two forward passes whatever the depth.
"""

from __future__ import annotations

from collections.abc import Container, Sequence

import torch
from torch import nn

from gate.errors import DataError
from gate.models.compress.layers import decoder_layers
from gate.models.compress.propagate import ActivationPrompts, Propagation


def decoder_linear_names(model: nn.Module) -> list[str]:
    """Full names of the ``nn.Linear`` modules inside the decoder blocks (what pruning changes)."""
    blocks = {id(block) for block in decoder_layers(model)}
    names: list[str] = []
    for name, module in model.named_modules():
        if id(module) in blocks:
            names.extend(
                f"{name}.{sub}" for sub, m in module.named_modules() if isinstance(m, nn.Linear)
            )
    return names


def _decoder_linears(block: nn.Module, chosen: Container[nn.Module] | None) -> list[nn.Linear]:
    return [
        m for m in block.modules() if isinstance(m, nn.Linear) and (chosen is None or m in chosen)
    ]


def _chosen(model: nn.Module, modules: Sequence[str] | None) -> set[nn.Module] | None:
    if modules is None:
        return None
    return {model.get_submodule(name) for name in modules}


@torch.no_grad()
def prune_magnitude(
    model: nn.Module, fraction: float, modules: Sequence[str] | None = None
) -> None:
    """Zero the smallest-magnitude ``fraction`` of each decoder linear weight, in place
    (``modules``: only the linears of these names)."""
    chosen = _chosen(model, modules)
    for block in decoder_layers(model):
        for linear in _decoder_linears(block, chosen):
            weight = linear.weight
            k = int(fraction * weight.numel())
            if k == 0:
                continue
            order = weight.detach().abs().flatten().argsort()
            weight.view(-1)[order[:k]] = 0


@torch.no_grad()
def _input_norms(
    propagation: Propagation, index: int, linears: list[nn.Linear]
) -> list[torch.Tensor]:
    """``||X_j||_2`` per input channel of each linear of layer ``index`` over the activation
    prompts' tokens: the layer runs on the propagated inputs while forward pre-hooks sum ``x_j**2``."""
    sumsq = [torch.zeros(lin.in_features, dtype=torch.float64) for lin in linears]
    handles = []
    for position, lin in enumerate(linears):

        def collect(module: nn.Module, args: tuple[torch.Tensor, ...], at: int = position) -> None:
            x = args[0].detach().reshape(-1, args[0].shape[-1]).to(torch.float64)
            sumsq[at] += (x * x).sum(dim=0).cpu()

        handles.append(lin.register_forward_pre_hook(collect))
    try:
        propagation.run(index)
    finally:
        for handle in handles:
            handle.remove()
    return [s.sqrt() for s in sumsq]


@torch.no_grad()
def prune_wanda(
    model: nn.Module,
    fraction: float,
    prompts: ActivationPrompts,
    modules: Sequence[str] | None = None,
) -> None:
    """Wanda pruning of the decoder linears with the token ids of activation prompts (one
    list per prompt);
    ``modules``: only the linears of these names (the activations still flow through all).

    Layer-wise (:class:`~gate.models.compress.propagate.Propagation`): the
    norms of layer ``l`` come from running it on the outputs of the already
    pruned layers ``< l``, then the pruned layer ``l`` produces the inputs of
    layer ``l + 1``; about two forward passes over the prompts.
    """
    chosen = _chosen(model, modules)
    prompts = [ids for ids in prompts if len(ids) > 0]
    if not prompts:
        raise DataError(
            "prune-wanda got no calibration tokens", "pass non-empty calibration prompts"
        )
    propagation = Propagation(model, prompts)
    blocks = decoder_layers(model)
    for index, block in enumerate(blocks):
        linears = _decoder_linears(block, chosen)
        if not linears:
            if index + 1 < len(blocks):
                propagation.advance(index)
            continue
        norms = _input_norms(propagation, index, linears)
        for lin, norm in zip(linears, norms, strict=True):
            weight = lin.weight
            k = int(fraction * lin.in_features)
            if k == 0:
                continue
            score = weight.detach().abs().to(torch.float64) * norm.to(weight.device).unsqueeze(0)
            lowest = score.argsort(dim=1)[:, :k]
            weight.scatter_(1, lowest, 0)
        if index + 1 < len(blocks):
            propagation.advance(index)

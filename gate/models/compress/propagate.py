"""Layer-by-layer activations: the decoder's inputs propagated one block at a time.

A recipe that reads activations (Wanda) needs, for decoder layer ``l``, the activations
that reach it when layers ``< l`` are already compressed. Running the model
from its input up to layer ``l`` for every ``l`` costs ``L (L + 1) / 2`` block
passes per activation prompt, quadratic in depth. Here the inputs of layer 0
are captured once (a forward pre-hook that stops the forward), then for each
layer in order:

1. the layer runs on the current inputs while the recipe's hooks gather
   statistics (:meth:`Propagation.run`);
2. the recipe compresses the layer;
3. the compressed layer runs again and its outputs replace the current inputs
   (:meth:`Propagation.advance`): they are what layer ``l + 1`` receives from
   the model whose layers ``<= l`` are compressed.

So reading the activations costs ``2 L`` block passes, about two forward passes of the
model, whatever its depth. The hidden states of every prompt are
held between layers (``prompts x tokens x hidden`` floats).

The other arguments a block receives (attention mask, rotary position
embeddings, position ids, cache position) do not depend on the hidden states.
They are captured with the inputs, once per attention type where the config
lists ``layer_types`` (sliding and full attention get different masks), and
handed unchanged to every layer of that type.
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from gate.errors import ModelLoadError
from gate.models.compress.layers import decoder_layers
from gate.models.methods.base import ActivationPrompts


class _StopForward(Exception):
    """Raised by the capture hook once every block input it needs is recorded."""


@dataclass
class _BlockCall:
    """What one block received besides its hidden states: the other positional arguments
    and the keyword arguments."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any]


def layer_types(model: nn.Module, count: int) -> list[str | None]:
    """The attention type of each of the ``count`` decoder layers (``config.layer_types``),
    or ``None`` for all when the config does not list them."""
    listed = getattr(getattr(model, "config", None), "layer_types", None)
    if isinstance(listed, list) and len(listed) >= count:
        return [str(t) for t in listed[:count]]
    return [None] * count


def _hidden_of(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[torch.Tensor, _BlockCall]:
    """Split a block's call into its hidden states and the rest."""
    if args:
        return args[0], _BlockCall(tuple(args[1:]), dict(kwargs))
    rest = dict(kwargs)
    hidden = rest.pop("hidden_states", None)
    if not isinstance(hidden, torch.Tensor):
        raise ModelLoadError(
            "cannot find the hidden states a decoder layer receives",
            "layer-wise calibration supports Llama/Mistral/Qwen-style decoder layers",
        )
    return hidden, _BlockCall((), rest)


def _record(
    module: nn.Module,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    seen: dict[int, tuple[torch.Tensor, _BlockCall]],
    index: int,
    last: int,
) -> None:
    """Forward pre-hook: keep what block ``index`` receives; stop the forward after ``last``."""
    seen[index] = _hidden_of(args, kwargs)
    if index == last:
        raise _StopForward


def _output_hidden(output: Any) -> torch.Tensor:
    """The hidden states a block returns (a tensor, or the first item of a tuple)."""
    hidden = output[0] if isinstance(output, tuple) else output
    if not isinstance(hidden, torch.Tensor):
        raise ModelLoadError(
            f"a decoder layer returned {type(output).__name__}, not hidden states",
            "layer-wise calibration supports Llama/Mistral/Qwen-style decoder layers",
        )
    return hidden


class Propagation:
    """The inputs of one decoder layer for every activation prompt, advanced layer by layer.

    Built from the model and the prompts' token ids (one list per prompt);
    starts at layer 0. :meth:`run` runs a layer on the current inputs (for the
    hooks of a recipe), :meth:`advance` replaces the current inputs by that
    layer's outputs.
    """

    def __init__(self, model: nn.Module, prompts: ActivationPrompts) -> None:
        self.blocks = decoder_layers(model)
        self.types = layer_types(model, len(self.blocks))
        self.hidden: list[torch.Tensor] = []
        self.calls: list[dict[str | None, _BlockCall]] = []
        self._capture(model, prompts)

    def _capture(self, model: nn.Module, prompts: ActivationPrompts) -> None:
        """One partial forward per prompt, stopped at the first layer of the last attention type."""
        first: dict[str | None, int] = {}
        for index, kind in enumerate(self.types):
            first.setdefault(kind, index)
        targets = sorted(first.values())
        device = model.get_input_embeddings().weight.device  # type: ignore[operator]
        for ids in prompts:
            seen: dict[int, tuple[torch.Tensor, _BlockCall]] = {}
            handles = [
                self.blocks[i].register_forward_pre_hook(
                    functools.partial(_record, seen=seen, index=i, last=targets[-1]),
                    with_kwargs=True,
                )
                for i in targets
            ]
            try:
                with contextlib.suppress(_StopForward):
                    model(input_ids=torch.tensor([list(ids)], device=device), use_cache=False)
            finally:
                for handle in handles:
                    handle.remove()
            if set(seen) != set(targets):
                raise ModelLoadError(
                    f"the forward of {type(model).__name__} skipped decoder layers"
                    f" {sorted(set(targets) - set(seen))}",
                    "layer-wise calibration needs every decoder layer to run",
                )
            self.hidden.append(seen[0][0].detach())
            self.calls.append({kind: seen[i][1] for kind, i in first.items()})

    def _run(self, index: int) -> list[torch.Tensor]:
        block, kind = self.blocks[index], self.types[index]
        outputs = []
        for hidden, calls in zip(self.hidden, self.calls, strict=True):
            call = calls[kind]
            outputs.append(_output_hidden(block(hidden, *call.args, **call.kwargs)).detach())
        return outputs

    @torch.no_grad()
    def run(self, index: int) -> None:
        """Run layer ``index`` on the current inputs (they stay the current inputs)."""
        self._run(index)

    @torch.no_grad()
    def advance(self, index: int) -> None:
        """Run layer ``index`` and make its outputs the current inputs (of layer ``index + 1``)."""
        self.hidden = self._run(index)

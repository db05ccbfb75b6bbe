"""The forward passes of ``gate localize``: hidden-state divergence and swap-back losses.

Both builds run teacher-forced on the reference pack's prompts followed by
the baseline's recorded outputs ``X + y`` (the fidelity tier's inputs), with
``output_hidden_states=True``:

* **layerwise divergence**: for decoder layer ``l`` and prompt ``j``,
  ``e_l = ||h_cand - h_base||_F / ||h_base||_F`` over every position of the
  layer's output hidden states (transformers hands the last layer's output
  after the final norm; the ratio is what the report reads), averaged over
  the prompts;
* **losses**: the candidate's rows scored against the live baseline's full
  rows by :func:`gate.metrics.fidelity.score_positions` (exact KL, CGA,
  CGA@5), one :class:`~gate.localize.attribution.Losses` per build;
* **swap-back**: the candidate with some decoder blocks replaced by the
  baseline's own block objects (the block is the unit a recipe's
  ``keep=model.layers.<i>`` leaves uncompressed, and the unit a checkpoint of
  the same architecture can take back), run on a prompt subset.

Replacing the block object restores exactly what ``keep=`` would for recipes
that compress each module on its own (quanto, bitsandbytes, magnitude
pruning); for Wanda, whose later layers see the pruned activations, it is the
first-order answer, and the repaired build is measured again by the real gate.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from gate import progress
from gate.errors import ConfigError
from gate.localize.attribution import Losses, relative_errors
from gate.metrics.fidelity import BaselineReference, score_positions
from gate.models.compress.layers import decoder_layers
from gate.models.provenance import parameter_bytes
from gate.store.reference import ReferencePack

#: CGA@k of the top-k loss (the fidelity tier's k).
TOP_K = 5
#: Baseline rows kept in memory between swaps (beyond: the baseline runs again).
ROW_CACHE_BYTES = 1 << 30


@dataclass(frozen=True)
class PackInput:
    """One reference prompt as the forward passes need it."""

    index: int
    prompt_id: str
    ids: list[int]
    #: Row of the logits that predicts the first output token (``len(prompt) - 1``).
    start: int
    targets: np.ndarray
    topk_ids: np.ndarray
    topk_logprobs: np.ndarray
    tail: np.ndarray
    #: The breakdown slices the prompt belongs to (``category:code``, ``length:short``).
    slices: tuple[str, ...] = ()


def pack_inputs(pack: ReferencePack, limit: int | None = None) -> list[PackInput]:
    """The pack's prompts with a non-empty prompt and output (the first ``limit``)."""
    out: list[PackInput] = []
    for j in range(len(pack)):
        prompt = pack.prompt_ids(j).tolist()
        output = pack.output_ids(j)
        if not prompt or output.size == 0:
            continue
        ids, lps, tail = pack.topk(j)
        prompt_info = pack.prompts[j]
        slices = (f"category:{prompt_info.category}", f"length:{prompt_info.length}")
        out.append(
            PackInput(
                j,
                pack.prompts[j].id,
                prompt + output.tolist(),
                len(prompt) - 1,
                output,
                ids,
                lps,
                tail,
                slices,
            )
        )
        if limit is not None and len(out) >= limit:
            break
    if not out:
        raise ConfigError(
            "the baseline's reference pack has no prompt with an output to localize on",
            "record the baseline again with the fidelity tier",
        )
    return out


@dataclass
class LayerProbe:
    """The baseline and candidate models side by side, and the forwards run so far."""

    base: nn.Module
    cand: nn.Module
    inputs: Sequence[PackInput]
    forwards: int = 0
    _rows: dict[int, np.ndarray] = field(default_factory=dict)
    _cached_bytes: int = 0

    def __post_init__(self) -> None:
        n_base, n_cand = len(decoder_layers(self.base)), len(decoder_layers(self.cand))
        if n_base != n_cand:
            raise ConfigError(
                f"the candidate has {n_cand} decoder layers and the baseline {n_base}",
                "localize compares builds of the same architecture (not drop-layers)",
            )

    @property
    def n_layers(self) -> int:
        """Decoder layers of both builds."""
        return len(decoder_layers(self.cand))

    def layer_names(self) -> list[str]:
        """The module name of each decoder block (``model.layers.3``)."""
        blocks = {id(b): i for i, b in enumerate(decoder_layers(self.cand))}
        names = [""] * len(blocks)
        for name, module in self.cand.named_modules():
            if id(module) in blocks:
                names[blocks[id(module)]] = name
        return names

    @torch.no_grad()
    def _forward(self, model: nn.Module, item: PackInput, hidden: bool) -> tuple[np.ndarray, list]:
        device = next(model.parameters()).device
        ids = torch.tensor([item.ids], device=device)
        out = model(input_ids=ids, use_cache=False, output_hidden_states=hidden)
        self.forwards += 1
        rows = out.logits[0, item.start : item.start + len(item.targets)].float()
        logprobs = torch.log_softmax(rows, dim=-1).cpu().numpy()
        states = list(out.hidden_states[1:]) if hidden else []
        return logprobs, states

    def _base_rows(self, item: PackInput) -> np.ndarray:
        cached = self._rows.get(item.index)
        if cached is not None:
            return cached
        rows, _ = self._forward(self.base, item, hidden=False)
        self._keep(item, rows)
        return rows

    def _keep(self, item: PackInput, rows: np.ndarray) -> None:
        if self._cached_bytes + rows.nbytes <= ROW_CACHE_BYTES:
            self._rows[item.index] = rows
            self._cached_bytes += rows.nbytes

    @staticmethod
    def _losses(item: PackInput, base_rows: np.ndarray, cand_rows: np.ndarray) -> tuple[float, ...]:
        scores = score_positions(
            BaselineReference(
                item.targets,
                item.topk_ids,
                item.topk_logprobs,
                item.tail,
                full_logprobs=base_rows,
            ),
            cand_rows,
            cga_k=TOP_K,
        )
        return (
            1.0 - float(scores.cga.mean()),
            1.0 - float(scores.cga_at_k.mean()),
            float(scores.kl.mean()),
        )

    def divergence(self) -> tuple[np.ndarray, Losses]:
        """Per-layer mean relative hidden-state error ``[L]`` and the candidate's losses,
        over every input (one forward of each build per prompt; each prompt done is one
        :func:`gate.progress.advance`)."""
        errors = np.zeros(self.n_layers)
        losses: list[tuple[float, ...]] = []
        for item in self.inputs:
            base_rows, base_states = self._forward(self.base, item, hidden=True)
            cand_rows, cand_states = self._forward(self.cand, item, hidden=True)
            self._keep(item, base_rows)
            diff_sq = [
                float((c.float() - b.float()).pow(2).sum())
                for b, c in zip(base_states, cand_states, strict=True)
            ]
            base_sq = [float(b.float().pow(2).sum()) for b in base_states]
            errors += relative_errors(np.array(diff_sq), np.array(base_sq))
            losses.append(self._losses(item, base_rows, cand_rows))
            progress.advance()
        return errors / len(self.inputs), _as_losses(losses)

    @contextmanager
    def restored(self, layers: Sequence[int]) -> Iterator[None]:
        """The candidate with the baseline's blocks ``layers`` in place, for the block."""
        cand_blocks, base_blocks = decoder_layers(self.cand), decoder_layers(self.base)
        saved = {i: cand_blocks[i] for i in layers}
        try:
            for i in layers:
                cand_blocks[i] = base_blocks[i]
            yield
        finally:
            for i, block in saved.items():
                cand_blocks[i] = block

    def swapped_losses(self, layers: Sequence[int], n: int) -> Losses:
        """The losses of the candidate with ``layers`` restored, on the first ``n`` inputs."""
        losses = []
        with self.restored(layers):
            for item in self.inputs[:n]:
                base_rows = self._base_rows(item)
                cand_rows, _ = self._forward(self.cand, item, hidden=False)
                losses.append(self._losses(item, base_rows, cand_rows))
        return _as_losses(losses)

    def layer_bytes(self, index: int) -> tuple[int, int]:
        """Parameter bytes of decoder block ``index`` as stored: ``(baseline, candidate)``."""
        return (
            parameter_bytes(decoder_layers(self.base)[index]),
            parameter_bytes(decoder_layers(self.cand)[index]),
        )

    def total_bytes(self) -> int:
        """Parameter bytes of the whole candidate as stored."""
        return parameter_bytes(self.cand)


def _as_losses(rows: list[tuple[float, ...]]) -> Losses:
    table = np.asarray(rows, dtype=np.float64).reshape(-1, 3)
    return Losses(table[:, 0], table[:, 1], table[:, 2])


__all__ = ["ROW_CACHE_BYTES", "TOP_K", "LayerProbe", "PackInput", "pack_inputs"]

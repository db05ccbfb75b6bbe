"""The in-process transformers backend (:class:`HFBackend`).

Implements :class:`gate.models.backends.base.Backend` on a loaded causal LM:

* ``generate`` — batched greedy decoding (``do_sample=False``) with LEFT
  padding and an attention mask; transformers derives position ids from the
  mask (``cumsum(mask) - 1``), so a padded prompt sees the same positions as
  alone. Returns the new ids of each prompt up to and including the first EOS.
* ``score`` — teacher forcing with LEFT padding: request ``r`` with context
  ``c`` (``|c| >= 1``) and continuation ``y`` (``|y| = T``) is run as
  ``c + y``; row ``i`` of its scores is
  ``log_softmax(logits[|c| - 1 + i])`` in float32, i.e.
  ``log p(y_i | c, y_<i)``. The attention mask hides the padding and position
  ids ``cumsum(mask) - 1`` give every token the position it has unpadded.
  Left padding ends every row at the same column, so all continuations lie in
  the last ``max T + 1`` columns and only those reach the LM head
  (``logits_to_keep``): the context positions, often most of the sequence,
  never become ``vocab``-wide logits (at a 128k vocabulary a 1,000-token
  prompt would otherwise cost 256 MB of bf16 logits per row).
* ``generate_timed`` — exactly ``new_tokens`` tokens for ``batch_size`` copies
  of one prompt (``min_new_tokens == max_new_tokens``, EOS cannot end it), with
  ``clock.mark()`` after every decoding step from a stopping criterion, which
  transformers calls once per step after the step's tokens exist.

``generate`` and ``score`` run their batches through a
:class:`~gate.models.backends.batch_fit.BatchFitter`: out of memory halves the
batch and retries (``generate_timed`` does not: a timing is taken at the shape
asked for, and the latency tier decides what an out-of-memory batch means).

NaN logits are passed through (the fidelity tier reports them); nothing here
raises on them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gate.measurement import TimedGeneration
from gate.models.activity import Activity, StackActivity
from gate.models.backends import tokens
from gate.models.backends.base import (
    ScoreRequest,
    StepClock,
    TokenScores,
    nothing_to_generate,
    nothing_to_score,
    require_timed,
)
from gate.models.backends.batch_fit import BatchFitter
from gate.models.backends.sampling import CoupledSampler, Sampling
from gate.models.compress.delay import HANDLE_ATTR
from gate.models.gguf import GGUFSummary
from gate.models.model_spec import ModelSpec
from gate.models.provenance import (
    combined_digest,
    hash_files,
    linear_class_counts,
    parameter_bytes,
    tokenizer_files,
    vocabulary_digest,
    weight_files,
)
from gate.models.recipes import Recipe
from gate.models.stack import RecipeStack
from gate.provenance import ModelProvenance

#: The facts an in-process model's provenance records, in this order (unknown ones as null).
HF_FACTS: tuple[str, ...] = (
    "name",
    "source",
    "slug",
    "path",
    "revision",
    "recipe",
    "model_type",
    "vocab_size",
    "model_family",
    "num_layers",
    "dtype_requested",
    "dtypes",
    "compute_dtype",
    "device",
    "device_map",
    "quantization",
    "weights_sha256",
    "weight_files",
    "tokenizer_sha256",
    "tokenizer_files",
    "tokenizer_vocab_sha256",
    "parameter_bytes",
    "linear_classes",
    "linear_class_counts",
    "forward_delay",
    "incomplete_weights",
    "batch_backoffs",
)


class HFBackend(tokens.TokenizerMethods):
    """A transformers causal LM and its tokenizer behind the gate's backend protocol."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        spec: ModelSpec,
        recipe: Recipe | RecipeStack,
        files_dir: Path | None = None,
        quant_method: str | None = None,
        incomplete_weights: Mapping[str, Any] | None = None,
        gguf: GGUFSummary | None = None,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.spec = spec
        #: The recipe it was built with (a stack's loader sets the whole stack).
        self.recipe: Recipe | RecipeStack = recipe
        self.files_dir = files_dir
        self.quant_method = quant_method
        #: The ``.gguf`` file the weights were dequantized from (None: not a GGUF model).
        self.gguf = gguf
        #: Tensors the checkpoint lacked / had unused / had in another shape, when the
        #: loader was told to allow that (None: the weights matched the config).
        self.incomplete_weights = dict(incomplete_weights) if incomplete_weights else None
        #: What the recipe changed, counted while the build runs (set by the loader after
        #: the warm-up, so only the gate's own requests count; None: nothing to prove).
        self.activity: Activity | StackActivity | None = None
        #: Facts of a ``gguf-*`` recipe's made file, stated over the rest of the provenance
        #: (``gguf_runtime``, ``gguf_made_with``; :mod:`gate.engines.llama_cpp.make`).
        self.made_facts: Mapping[str, Any] = {}
        recipe_text = str(recipe)
        self.name = spec.source if recipe_text == "none" else f"{spec.source}[{recipe_text}]"
        self.device = model.get_input_embeddings().weight.device
        self.pad_id = int(tokenizer.pad_token_id)
        eos = model.generation_config.eos_token_id
        if eos is None:
            eos = tokenizer.eos_token_id
        self.eos_ids: list[int] = (
            [] if eos is None else [int(e) for e in (eos if isinstance(eos, list) else [eos])]
        )
        #: Runs the batches of ``score`` and ``generate``, halving a batch that runs out
        #: of memory (:mod:`gate.models.backends.batch_fit`); its back-offs are provenance.
        self.fitter = BatchFitter(str(self.device))
        self._warm_up()
        #: Storage bytes of parameters and buffers, measured once after the warm-up.
        self.parameter_bytes = parameter_bytes(model)

    @torch.no_grad()
    def _warm_up(self) -> None:
        """One single-token forward pass.

        Some kernels settle their storage on first use (bitsandbytes on the CPU
        repacks 4-bit weights and stores absmax in bfloat16), so bytes are
        measured after it, in the layout that actually runs.
        """
        token = torch.tensor([[self.pad_id]], device=self.device)
        self.model(input_ids=token, use_cache=False)

    # -- tokens ---------------------------------------------------------------

    # -- greedy generation ----------------------------------------------------

    def _left_padded(self, rows: list[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for b, row in enumerate(rows):
            if len(row):
                ids[b, width - len(row) :] = torch.tensor(list(row), dtype=torch.long)
                mask[b, width - len(row) :] = 1
        return ids.to(self.device), mask.to(self.device)

    def generation_config(self, max_new_tokens: int, min_new_tokens: int = 0) -> Any:
        """The greedy ``GenerationConfig`` of every generation of this build."""
        from transformers import GenerationConfig

        return GenerationConfig(
            max_new_tokens=max_new_tokens,
            min_new_tokens=min_new_tokens,
            do_sample=False,
            num_beams=1,
            # neutral values, so a checkpoint's generation_config cannot bend greedy decoding
            repetition_penalty=1.0,
            no_repeat_ngram_size=0,
            temperature=1.0,
            top_p=1.0,
            pad_token_id=self.pad_id,
            eos_token_id=self.eos_ids or None,
        )

    def cut_at_eos(self, row: list[int]) -> list[int]:
        """``row`` up to and including its first EOS."""
        for i, token in enumerate(row):
            if token in self.eos_ids:
                return row[: i + 1]
        return row

    @torch.no_grad()
    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        *,
        max_new_tokens: int,
        batch_size: int = 8,
    ) -> list[list[int]]:
        """Greedy continuations of each prompt: new ids only, up to and including EOS."""
        return self._continue(prompts, max_new_tokens, batch_size, None)

    @torch.no_grad()
    def generate_sampled(
        self,
        prompts: Sequence[Sequence[int]],
        keys: Sequence[int],
        *,
        max_new_tokens: int,
        sampling: Sampling,
        batch_size: int = 8,
    ) -> list[list[int]]:
        """Coupled samples of each prompt (:mod:`gate.models.backends.sampling`), prompt
        ``i`` drawing the random numbers keyed ``keys[i]``: new ids only, up to and
        including EOS. The draws do not depend on the batch a prompt is answered in."""
        if len(keys) != len(prompts):
            raise ValueError(f"{len(keys)} keys for {len(prompts)} prompts")
        return self._continue(prompts, max_new_tokens, batch_size, (keys, sampling))

    def _continue(
        self,
        prompts: Sequence[Sequence[int]],
        max_new_tokens: int,
        batch_size: int,
        sampled: tuple[Sequence[int], Sampling] | None,
    ) -> list[list[int]]:
        """Each prompt's continuation, greedy or (``sampled``: keys and sampling) coupled."""
        if nothing_to_generate(prompts, max_new_tokens):
            return [[] for _ in prompts]
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
        results: list[list[int]] = [[] for _ in prompts]
        config = self.generation_config(max_new_tokens)

        def run(batch: list[int]) -> list[list[int]]:
            ids, mask = self._left_padded([prompts[i] for i in batch])
            extra: dict[str, Any] = {}
            if sampled is not None:
                from transformers import LogitsProcessorList

                keys, sampling = sampled
                sampler = CoupledSampler([keys[i] for i in batch], int(ids.shape[1]), sampling)
                extra["logits_processor"] = LogitsProcessorList([sampler])
            out = self.model.generate(
                input_ids=ids, attention_mask=mask, generation_config=config, **extra
            )
            new = out[:, ids.shape[1] :].cpu().tolist()
            return [self.cut_at_eos([int(t) for t in row]) for row in new]

        for i, row in zip(order, self.fitter.run("generate", order, batch_size, run), strict=True):
            results[i] = row
        return results

    # -- teacher-forced scoring -----------------------------------------------

    @torch.no_grad()
    def score(
        self,
        requests: Sequence[ScoreRequest],
        *,
        top_k: int = 32,
        full: bool = False,
        batch_size: int = 8,
    ) -> list[TokenScores]:
        """Log-probs of each continuation given its context, with the top-k per position."""
        if nothing_to_score(requests):
            return []
        order = sorted(range(len(requests)), key=lambda i: -self._length(requests[i]))
        results: list[TokenScores | None] = [None] * len(requests)

        def run(batch: list[int]) -> list[TokenScores]:
            return self._score_batch([requests[i] for i in batch], top_k, full)

        for i, scores in zip(order, self.fitter.run("score", order, batch_size, run), strict=True):
            results[i] = scores
        return [r for r in results if r is not None]

    @cached_property
    def _keeps_logits(self) -> bool:
        """Whether the model's forward takes ``logits_to_keep`` (transformers' causal LMs do)."""
        import inspect

        return "logits_to_keep" in inspect.signature(self.model.forward).parameters

    @staticmethod
    def _length(request: ScoreRequest) -> int:
        return len(request.context) + len(request.continuation)

    def _score_batch(
        self, requests: list[ScoreRequest], top_k: int, full: bool
    ) -> list[TokenScores]:
        width = max(self._length(r) for r in requests)
        ids = torch.full((len(requests), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(requests), width), dtype=torch.long)
        for b, r in enumerate(requests):
            row = list(r.context) + list(r.continuation)
            ids[b, width - len(row) :] = torch.tensor(row, dtype=torch.long)
            mask[b, width - len(row) :] = 1
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        # column width - 1 - j predicts the j-th token from the end; continuations need
        # columns width - 1 - T .. width - 2, all inside the last max T + 1 columns
        keep = max(len(r.continuation) for r in requests) + 1
        extra = {"logits_to_keep": keep} if self._keeps_logits else {}
        logits = self.model(
            input_ids=ids.to(self.device),
            attention_mask=mask.to(self.device),
            position_ids=positions.to(self.device),
            use_cache=False,
            **extra,
        ).logits
        kept = logits.shape[1]  # keep, or width where the model has no logits_to_keep
        out = []
        for b, r in enumerate(requests):
            steps = len(r.continuation)
            start = kept - 1 - steps
            rows = logits[b, start : start + steps].float().log_softmax(dim=-1).cpu()
            k = min(top_k, rows.shape[-1])
            top = rows.topk(k, dim=-1) if steps else None
            target = torch.tensor(list(r.continuation), dtype=torch.long)
            out.append(
                TokenScores(
                    target_logprobs=rows.gather(1, target.unsqueeze(1)).squeeze(1).numpy()
                    if steps
                    else np.zeros(0, dtype=np.float32),
                    topk_ids=top.indices.numpy() if top is not None else np.zeros((0, k), np.int64),
                    topk_logprobs=top.values.numpy()
                    if top is not None
                    else np.zeros((0, k), np.float32),
                    full_logprobs=rows if full else None,
                )
            )
        return out

    # -- timed generation -----------------------------------------------------

    @torch.no_grad()
    def generate_timed(
        self,
        prompt: Sequence[int],
        *,
        batch_size: int,
        new_tokens: int,
        clock: StepClock,
    ) -> TimedGeneration:
        """Exactly ``new_tokens`` greedy tokens for ``batch_size`` copies of ``prompt``, one mark per step."""
        from gate.models.backends.step_marks import marking_each_step

        require_timed(prompt, batch_size, new_tokens)
        ids = torch.tensor([list(prompt)] * batch_size, dtype=torch.long, device=self.device)
        mask = torch.ones_like(ids)
        config = self.generation_config(new_tokens, min_new_tokens=new_tokens)
        clock.start()
        out = self.model.generate(
            input_ids=ids,
            attention_mask=mask,
            generation_config=config,
            stopping_criteria=marking_each_step(clock),
        )
        steps = tuple(clock.elapsed())
        generated = int(out.shape[1] - ids.shape[1])
        return TimedGeneration(
            batch_size=batch_size,
            prompt_tokens=len(prompt),
            new_tokens=generated,
            step_times=steps,
            end_to_end=steps[-1] if steps else 0.0,
            details={"device": str(self.device), "recipe": str(self.recipe)},
        )

    # -- identity -------------------------------------------------------------

    @cached_property
    def _file_hashes(self) -> tuple[dict[str, str], dict[str, str]]:
        if self.gguf is not None:  # weights, tokenizer and metadata in one file
            return {self.gguf.path.name: self.gguf.sha256}, {}
        if self.files_dir is None:
            return {}, {}
        return hash_files(weight_files(self.files_dir)), hash_files(tokenizer_files(self.files_dir))

    def provenance(self) -> ModelProvenance:
        """Source, revision, file hashes, recipe, dtype, device, bytes and linear classes."""
        config = self.model.config
        weights, tokenizer = self._file_hashes
        counts = linear_class_counts(self.model)
        dtypes = sorted({str(p.dtype).removeprefix("torch.") for p in self.model.parameters()})
        vocab = int(getattr(config, "vocab_size", 0) or len(self.tokenizer))
        model_type = str(getattr(config, "model_type", "unknown"))
        layers = getattr(config, "num_hidden_layers", None)
        provenance = ModelProvenance(
            name=self.name,
            source=self.spec.source,
            slug=self.spec.slug,
            path=str(self.gguf.path if self.gguf is not None else self.files_dir)
            if self.gguf is not None or self.files_dir is not None
            else None,
            revision=self.spec.revision,
            recipe=str(self.recipe),
            model_type=model_type,
            vocab_size=vocab,
            model_family=f"{model_type}-v{vocab}",
            num_layers=int(layers) if layers is not None else None,
            dtype_requested=self.spec.dtype,
            dtypes=tuple(dtypes),
            compute_dtype=str(getattr(self.model, "dtype", "")).removeprefix("torch.") or None,
            device=str(self.device),
            device_map=getattr(self.model, "hf_device_map", None),
            quantization=self.quant_method,
            weights_sha256=combined_digest(weights) if weights else None,
            weight_files=weights,
            tokenizer_sha256=combined_digest(tokenizer) if tokenizer else None,
            tokenizer_files=tokenizer,
            parameter_bytes=self.parameter_bytes,
            linear_classes=tuple(sorted(counts)),
            linear_class_counts=counts,
            forward_delay=hasattr(self.model, HANDLE_ATTR),
            incomplete_weights=self.incomplete_weights,
            batch_backoffs=tuple(b.to_dict() for b in self.fitter.backoffs) or None,
            tokenizer_vocab_sha256=vocabulary_digest(self.tokenizer, vocab),
            gguf_sha256=self.gguf.sha256 if self.gguf is not None else None,
            gguf_architecture=self.gguf.architecture if self.gguf is not None else None,
            gguf_tensor_types=self.gguf.tensor_types if self.gguf is not None else None,
            document_keys=HF_FACTS,
        )
        return provenance.with_facts(self.made_facts) if self.made_facts else provenance

"""Teacher forcing through a compressed KV cache, in chunks.

One batched pass over ``context + continuation`` is exact for compressed
weights and replaced attention, but a KV-cache method only acts while the
cache is built. Here each request runs as generation would:

1. **prefill** ``context`` into an empty cache of the method, with its press
   active (it compresses the prompt's cache after each layer's attention, as
   in generation). Row 0 is ``log_softmax`` of the last prompt position:
   ``log p(y_0 | c)``, computed from the uncompressed prompt, as the first
   generated token is.
2. **teacher-force** ``y_0 .. y_{T-2}`` through that cache, ``chunk_size``
   tokens per forward call. A chunk's queries see the held (compressed) pairs
   and the chunk's own earlier tokens; after each call the press acts again
   when it acts during decoding. Row ``i`` is ``log p(y_i | c, y_<i)`` as the
   compressed cache gives it.

``chunk_size = 1`` is the per-token definition: exactly the step-by-step
generation loop. Larger chunks are exact too (to float rounding) for methods
that only act at the prefill (SnapKV, observed attention, a prefill-only
StreamingLLM), because nothing changes the cache between steps; for methods
that act during decoding (a rolling window, the quantized cache's residual)
a chunk sees up to ``chunk_size - 1`` pairs the per-token loop would already
have evicted or quantized. The default (``chunk_size=None``) is therefore the
exact one for every method: the whole continuation in one chunk for methods
that act only at the prefill; for the quantized cache too while the tokens fed
after the prompt (``T - 1``) fit its full-precision residual (at most
``KV_QUANT_RESIDUAL`` = 128: the residual is quantized only when it fills, so
up to then every query, per token or chunked, sees the quantized prompt and the
unquantized continuation); 1 otherwise (a rolling window, a longer
continuation through the quantized cache).

Requests run one at a time (batch 1, no padding), as a press selects pairs per
sequence.

**What the scores saw.** A request *exercised* the method when at least one
of its scored rows was computed while the cache was compressed: a press had
evicted pairs (held < seen) or the quantized cache held quantized pairs. A
continuation of one token never does (row 0 comes from the uncompressed
prompt), nor does a StreamingLLM whose budget exceeds prompt + continuation.
:class:`CacheBackend` counts, in its :class:`~gate.models.activity.Activity`,
every request scored or generated, whether the method acted on it (for a
generation: whether its cache ended compressed), and the key/value pairs the
method evicted or quantized (:func:`~gate.models.compress.kvcache.acted_pairs`);
the session puts each tier's share into its measurements, and a tier the method
never touched is NOT EXERCISED (:mod:`gate.tiers.exercised`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from gate import progress
from gate.errors import DataError
from gate.models.activity import Activity, Counting, Footprint, StackActivity, request_key
from gate.models.backends.base import (
    ScoreRequest,
    StepClock,
    TimedGeneration,
    TokenScores,
    nothing_to_generate,
    require_contexts,
    require_timed,
)
from gate.models.backends.capabilities import activity_of
from gate.models.backends.sampling import CoupledSampler, Sampling
from gate.models.backends.tokens import InnerTokens
from gate.models.compress.kvcache import (
    KV_QUANT_RESIDUAL,
    CacheMethod,
    PressCache,
    PressLayer,
    acted_pairs,
    cache_argument,
    cache_bytes,
)
from gate.provenance import ModelProvenance


def compressed(cache: Any) -> bool:
    """Whether ``cache`` now holds fewer pairs than tokens seen, or quantized pairs."""
    if isinstance(cache, PressCache):
        return any(
            isinstance(layer, PressLayer) and layer.held() < layer.cumulative_length
            for layer in cache.layers
        )
    return any(getattr(layer, "_quantized_keys", None) is not None for layer in cache.layers)


def token_scores(
    rows: torch.Tensor, continuation: Sequence[int], top_k: int, full: bool
) -> TokenScores:
    """:class:`TokenScores` from ``[T, V]`` float32 log-softmax rows of a continuation."""
    steps = len(continuation)
    k = min(top_k, int(rows.shape[-1]))
    if steps == 0:
        return TokenScores(
            target_logprobs=np.zeros(0, dtype=np.float32),
            topk_ids=np.zeros((0, k), np.int64),
            topk_logprobs=np.zeros((0, k), np.float32),
            full_logprobs=rows if full else None,
        )
    top = rows.topk(k, dim=-1)
    target = torch.tensor(list(continuation), dtype=torch.long)
    return TokenScores(
        target_logprobs=rows.gather(1, target.unsqueeze(1)).squeeze(1).numpy(),
        topk_ids=top.indices.numpy(),
        topk_logprobs=top.values.numpy(),
        full_logprobs=rows if full else None,
    )


def exact_chunk_size(method: CacheMethod, steps: int) -> int:
    """The default chunk: the whole continuation where that is exact (see the module doc), else 1."""
    if method.bits is not None and method.press is None:
        return max(1, steps) if steps - 1 <= KV_QUANT_RESIDUAL else 1
    return 1 if method.acts_in_decoding else max(1, steps)


def _forward(
    model: Any, ids: Sequence[int], cache: Any, device: Any, last_only: bool
) -> torch.Tensor:
    extra = {"logits_to_keep": 1} if last_only else {}
    out = model(
        input_ids=torch.tensor([list(ids)], dtype=torch.long, device=device),
        **cache_argument(model, cache),
        use_cache=True,
        **extra,
    )
    return out.logits[0]


@torch.no_grad()
def cache_logprobs(
    model: Any,
    method: CacheMethod,
    request: ScoreRequest,
    *,
    chunk_size: int | None = None,
    activity: Activity | None = None,
) -> torch.Tensor:
    """``[T, V]`` float32 log-probs of ``request.continuation`` through ``method``'s cache.

    ``activity`` counts the request, as exercised when a chunk was fed to a
    compressed cache, and the pairs the method changed (see the module doc).
    """
    require_contexts([request])
    steps = len(request.continuation)
    chunk = chunk_size if chunk_size is not None else exact_chunk_size(method, steps)
    if chunk < 1:
        raise DataError(f"chunk size {chunk} is not >= 1", "give a chunk size of 1 or more")
    device = model.get_input_embeddings().weight.device
    cache = method.new_cache(model)
    rows: list[torch.Tensor] = []
    with method.active(model):
        rows.append(_forward(model, request.context, cache, device, last_only=True)[-1:])
        feed = list(request.continuation[: max(0, steps - 1)])
        exercised = False
        for start in range(0, len(feed), chunk):
            exercised = exercised or compressed(cache)
            rows.append(
                _forward(model, feed[start : start + chunk], cache, device, last_only=False)
            )
    if activity is not None:
        activity.count(acted_pairs(cache))
        activity.request(exercised, request_key(request.context, request.continuation))
    logits = torch.cat(rows, dim=0)[:steps]
    return logits.float().log_softmax(dim=-1).cpu()


def score_through_cache(
    model: Any,
    method: CacheMethod,
    requests: Sequence[ScoreRequest],
    *,
    top_k: int = 32,
    full: bool = False,
    chunk_size: int | None = None,
    activity: Activity | None = None,
) -> list[TokenScores]:
    """Teacher-forced scores of each request through ``method``'s cache (see the module doc)."""
    method.check(model)
    out = []
    for r in requests:
        logprobs = cache_logprobs(model, method, r, chunk_size=chunk_size, activity=activity)
        out.append(token_scores(logprobs, r.continuation, top_k, full))
        progress.advance(1)
    return out


@torch.no_grad()
def generate_through_cache(
    model: Any,
    method: CacheMethod,
    prompt: Sequence[int],
    *,
    max_new_tokens: int,
    eos_ids: Sequence[int] = (),
    activity: Activity | None = None,
    sampled: tuple[int, Sampling] | None = None,
) -> list[int]:
    """Greedy continuation of ``prompt`` with ``method``'s cache (transformers' ``generate``),
    or with ``sampled`` (a key and a sampling) its coupled sample
    (:mod:`gate.models.backends.sampling`).

    ``activity`` counts the request, as exercised when the cache ended compressed.
    """
    from transformers import GenerationConfig, LogitsProcessorList

    method.check(model)
    device = model.get_input_embeddings().weight.device
    ids = torch.tensor([list(prompt)], dtype=torch.long, device=device)
    config = GenerationConfig(
        max_new_tokens=max_new_tokens,
        do_sample=False,
        num_beams=1,
        repetition_penalty=1.0,
        no_repeat_ngram_size=0,
        eos_token_id=list(eos_ids) or None,
        pad_token_id=(list(eos_ids) or [0])[0],
    )
    extra: dict[str, Any] = {}
    if sampled is not None:
        key, sampling = sampled
        sampler = CoupledSampler([key], int(ids.shape[1]), sampling)
        extra["logits_processor"] = LogitsProcessorList([sampler])
    cache = method.new_cache(model)
    with method.active(model):
        out = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            **cache_argument(model, cache),
            generation_config=config,
            **extra,
        )
    if activity is not None:
        activity.count(acted_pairs(cache))
        activity.request(compressed(cache), request_key(prompt))
    new = [int(t) for t in out[0, ids.shape[1] :].tolist()]
    for i, token in enumerate(new):
        if token in eos_ids:
            return new[: i + 1]
    return new


def kv_bytes_per_token(config: Any, dtype: torch.dtype) -> float:
    """Bytes per token of an uncompressed cache: ``2 L H_kv d`` elements of ``dtype``."""
    text = config.get_text_config(decoder=True)
    heads = int(getattr(text, "num_key_value_heads", None) or text.num_attention_heads)
    head_dim = int(getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads)
    item = torch.empty(0, dtype=dtype).element_size()
    return float(2 * int(text.num_hidden_layers) * heads * head_dim * item)


@torch.no_grad()
def timed_through_cache(
    model: Any,
    method: CacheMethod,
    prompt: Sequence[int],
    *,
    batch_size: int,
    new_tokens: int,
    clock: StepClock,
    recipe: str,
    activity: Activity | None = None,
) -> TimedGeneration:
    """Exactly ``new_tokens`` greedy tokens for ``batch_size`` copies of ``prompt`` through the cache.

    One clock mark per step, as the in-process backend's timed generation. The
    details carry what a cache method is for: ``kv_cache_bytes`` held at the end
    (keys and values, or quantized codes with their scales), ``kv_tokens`` seen,
    their ratio per token and sequence (``kv_bytes_per_token``) and the same
    figure for an uncompressed cache of the model's dtype
    (``kv_bytes_per_token_uncompressed``).
    """
    from transformers import GenerationConfig

    from gate.models.backends.step_marks import marking_each_step

    require_timed(prompt, batch_size, new_tokens)
    method.check(model)
    device = model.get_input_embeddings().weight.device
    ids = torch.tensor([list(prompt)] * batch_size, dtype=torch.long, device=device)
    config = GenerationConfig(
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        do_sample=False,
        num_beams=1,
        repetition_penalty=1.0,
        no_repeat_ngram_size=0,
        pad_token_id=0,
    )
    cache = method.new_cache(model)
    with method.active(model):
        clock.start()
        out = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            **cache_argument(model, cache),
            generation_config=config,
            stopping_criteria=marking_each_step(clock),
        )
    if activity is not None:
        activity.count(acted_pairs(cache))
        activity.request(compressed(cache))
    steps = tuple(clock.elapsed())
    generated = int(out.shape[1] - ids.shape[1])
    held = cache_bytes(cache)
    seen = int(cache.get_seq_length())
    dtype = model.get_input_embeddings().weight.dtype
    return TimedGeneration(
        batch_size=batch_size,
        prompt_tokens=len(prompt),
        new_tokens=generated,
        step_times=steps,
        end_to_end=steps[-1] if steps else 0.0,
        details={
            "device": str(device),
            "recipe": recipe,
            "kv_cache_bytes": held,
            "kv_tokens": seen,
            "kv_bytes_per_token": held / max(seen * batch_size, 1),
            "kv_bytes_per_token_uncompressed": kv_bytes_per_token(model.config, dtype),
        },
    )


def cache_activity(label: str, method: CacheMethod) -> Activity:
    """A fresh per-request :class:`Activity` of a press or a quantized cache."""
    unit = "KV pairs quantized" if method.bits is not None else "KV pairs evicted"
    return Activity(label, Footprint(unit, Counting.PER_REQUEST))


class CacheBackend(InnerTokens):
    """A backend whose scoring and greedy generation run through a KV-cache method.

    Wraps an in-process backend: ``score`` is :func:`score_through_cache`,
    ``generate`` is :func:`generate_through_cache` one prompt at a time (a
    press selects pairs per sequence, so prompts are not padded together),
    ``generate_timed`` is :func:`timed_through_cache`; tokenization and
    identity are the inner backend's, with the method's description added to
    the provenance. With the identity method (an attention recipe scored one
    call at a time) generation is the inner backend's, which runs the same
    computation batched. ``activity`` counts the requests and the ones the
    method touched (the inner backend's own for the identity method).
    """

    def __init__(
        self,
        inner: Any,
        method: CacheMethod,
        *,
        label: str,
        chunk_size: int | None = None,
    ) -> None:
        self.inner = inner
        self.model = inner.model
        self.method = method
        self.label = label
        self.chunk_size = chunk_size
        self.name = inner.name if label in inner.name else f"{inner.name}[{label}]"
        #: The method's own count (KV pairs evicted or quantized; None for the identity).
        self.method_activity: Activity | None = (
            None if self.identity else cache_activity(label, method)
        )
        #: What the session reads: the method's count, the inner build's for the identity
        #: (a stack's loader replaces it with the stack's activity).
        self.activity: Activity | StackActivity | None = (
            activity_of(inner) if self.identity else self.method_activity
        )
        #: The KV-cache figures of the last timed generation (read by the latency tier).
        self.last_kv_cache: dict[str, Any] | None = None
        method.check(self.model)

    @property
    def identity(self) -> bool:
        """Whether the cache is uncompressed (the wrapper only changes how scoring is chunked)."""
        return self.method.press is None and self.method.bits is None

    @contextlib.contextmanager
    def scoring_chunk(self, chunk_size: int | None) -> Iterator[None]:
        """Score with ``chunk_size`` inside the block (None keeps the backend's own)."""
        if chunk_size is not None and chunk_size < 1:
            raise DataError(
                f"chunk size {chunk_size} is not >= 1", "give a chunk size of 1 or more"
            )
        saved = self.chunk_size
        if chunk_size is not None:
            self.chunk_size = chunk_size
        try:
            yield
        finally:
            self.chunk_size = saved

    def generate(
        self, prompts: Sequence[Sequence[int]], *, max_new_tokens: int, batch_size: int = 8
    ) -> list[list[int]]:
        """Greedy continuations through the method's cache, one prompt at a time."""
        if nothing_to_generate(prompts, max_new_tokens):
            return [[] for _ in prompts]
        if self.identity:
            return [
                list(row)
                for row in self.inner.generate(
                    prompts, max_new_tokens=max_new_tokens, batch_size=batch_size
                )
            ]
        return self._through_cache(prompts, max_new_tokens, None)

    def generate_sampled(
        self,
        prompts: Sequence[Sequence[int]],
        keys: Sequence[int],
        *,
        max_new_tokens: int,
        sampling: Sampling,
        batch_size: int = 8,
    ) -> list[list[int]]:
        """Coupled samples through the method's cache (prompt ``i`` keyed ``keys[i]``), one
        prompt at a time; the identity method's are the inner backend's, batched."""
        if len(keys) != len(prompts):
            raise ValueError(f"{len(keys)} keys for {len(prompts)} prompts")
        if nothing_to_generate(prompts, max_new_tokens):
            return [[] for _ in prompts]
        if self.identity:
            return [
                list(row)
                for row in self.inner.generate_sampled(
                    prompts,
                    keys,
                    max_new_tokens=max_new_tokens,
                    sampling=sampling,
                    batch_size=batch_size,
                )
            ]
        return self._through_cache(prompts, max_new_tokens, (keys, sampling))

    def _through_cache(
        self,
        prompts: Sequence[Sequence[int]],
        max_new_tokens: int,
        sampled: tuple[Sequence[int], Sampling] | None,
    ) -> list[list[int]]:
        out = []
        for i, p in enumerate(prompts):
            out.append(
                generate_through_cache(
                    self.model,
                    self.method,
                    p,
                    max_new_tokens=max_new_tokens,
                    eos_ids=self.inner.eos_ids,
                    activity=self.method_activity,
                    sampled=None if sampled is None else (sampled[0][i], sampled[1]),
                )
            )
            progress.advance(1)
        return out

    def score(
        self,
        requests: Sequence[ScoreRequest],
        *,
        top_k: int = 32,
        full: bool = False,
        batch_size: int = 8,
    ) -> list[TokenScores]:
        """Teacher-forced scores through the method's cache (``batch_size`` is not used)."""
        return score_through_cache(
            self.model,
            self.method,
            requests,
            top_k=top_k,
            full=full,
            chunk_size=self.chunk_size,
            activity=self.method_activity,
        )

    def generate_timed(
        self, prompt: Sequence[int], *, batch_size: int, new_tokens: int, clock: StepClock
    ) -> TimedGeneration:
        """Timed greedy generation through the method's cache (the inner one's for identity)."""
        if self.identity:
            timed: TimedGeneration = self.inner.generate_timed(
                prompt, batch_size=batch_size, new_tokens=new_tokens, clock=clock
            )
            return timed
        timed = timed_through_cache(
            self.model,
            self.method,
            prompt,
            batch_size=batch_size,
            new_tokens=new_tokens,
            clock=clock,
            recipe=self.label,
            activity=self.method_activity,
        )
        self.last_kv_cache = {k: v for k, v in timed.details.items() if k.startswith("kv_")}
        return timed

    def provenance(self) -> ModelProvenance:
        """The inner backend's provenance plus the cache method and chunk size."""
        return replace(
            self.inner.provenance(),
            name=self.name,
            cache_method=self.label,
            score_chunk_size=self.chunk_size if self.chunk_size is not None else "exact",
        )


__all__ = [
    "CacheBackend",
    "cache_activity",
    "cache_logprobs",
    "compressed",
    "exact_chunk_size",
    "generate_through_cache",
    "kv_bytes_per_token",
    "score_through_cache",
    "timed_through_cache",
    "token_scores",
]

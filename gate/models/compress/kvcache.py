"""KV-cache compression where it happens in generation: presses and quantized caches.

A cache method acts on the cache a generation builds, never on the weights:

* a **press** evicts key/value pairs. It runs as a forward hook after every
  attention layer (so the layer's own attention has seen every token) on a
  :class:`PressCache`, whose layers may hold fewer pairs than tokens seen:
  ``get_seq_length`` is the number of tokens seen (positions stay absolute:
  kept keys keep the rotary position they were written with, as in kvpress),
  ``get_mask_sizes`` is the number of pairs held plus the new queries, which
  every query may see (the held pairs all precede them);
* **KV quantization** uses transformers' ``QuantizedCache`` (quanto backend):
  the prompt attends to itself in full precision, its keys and values are then
  stored as ``nbits`` integers per channel groups of 64 with a scale and a
  shift (KIVI-style asymmetric round-to-nearest), newer tokens stay in full
  precision in a residual of 128 that is quantized whenever it fills.

The presses, for a prompt of ``n`` tokens and compression ratio ``r`` (the
fraction of pairs removed, kvpress's ``compression_ratio``), keep
``n_kept = max(1, int(n (1 - r)))`` pairs per key/value head, chosen per head:

* **SnapKV** (Li et al. 2024): the last ``w`` prompt queries (the observation
  window) attend to the keys before them; a key's score is its attention
  averaged over the window queries, smoothed by an average pool of width
  ``kernel`` (zero padded, stride 1), averaged over the query heads of its
  key/value group. The window itself is always kept. When the window does not
  fit in the budget (``w > n_kept``) it shrinks to ``n_kept`` so it stays kept.
* **Observed attention** (H2O-style, Zhang et al. 2023): a key's score is the
  attention it received from all prompt queries,
  ``sum_i A[i, j] / (n - j)`` (the number of queries that can see ``j``),
  averaged over the query heads of its group.
* **StreamingLLM** (Xiao et al. 2023): keep the first ``sinks`` tokens and the
  last ``window``. Rolling (the paper's form) it holds at most
  ``sinks + window`` pairs at every step of generation; prefill-only it
  compresses the prompt once, as kvpress's ``StreamingLLMPress`` does with
  ``window = int(n (1 - r)) - sinks``.

SnapKV and observed attention act once, at the end of the prefill (the
methods' definition and kvpress's); a rolling StreamingLLM and the quantized
cache also act during decoding.
"""

from __future__ import annotations

import functools
import inspect
import math
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from transformers.cache_utils import Cache, DynamicCache, DynamicLayer

from gate.errors import ConfigError, ModelLoadError

#: transformers' quantized-cache defaults, stated here because the docs quote them.
KV_QUANT_GROUP = 64
KV_QUANT_RESIDUAL = 128


class PressLayer(DynamicLayer):
    """A dynamic cache layer that may hold fewer key/value pairs than tokens seen."""

    def __init__(self) -> None:
        super().__init__()
        #: Tokens written to this layer so far (absolute position of the next one).
        self.cumulative_length = 0

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Append the new pairs (counted as seen) and return everything held."""
        self.cumulative_length += int(key_states.shape[-2])
        return super().update(key_states, value_states, *args, **kwargs)

    def held(self) -> int:
        """Key/value pairs held now."""
        if not self.is_initialized or self.keys is None or self.keys.numel() == 0:
            return 0
        return int(self.keys.shape[-2])

    def get_seq_length(self) -> int:
        """Tokens seen, so new tokens get their absolute positions."""
        return self.cumulative_length

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        """``(held + q, seen - held)``: the held pairs sit just before the queries for the mask."""
        held = self.held()
        return held + query_length, self.cumulative_length - held

    def keep(self, indices: torch.Tensor) -> None:
        """Keep the pairs at ``indices`` ``[B, H_kv, m]`` (sorted, so positional order is kept)."""
        assert self.keys is not None and self.values is not None
        index = indices.sort(dim=-1).values.unsqueeze(-1).expand(-1, -1, -1, self.keys.shape[-1])
        self.keys = self.keys.gather(2, index).contiguous()
        self.values = self.values.gather(2, index).contiguous()

    def crop(self, tokens_to_remove: int) -> None:
        """Not supported: evicted pairs cannot be rolled back."""
        raise NotImplementedError("a pressed cache cannot be cropped")


class PressCache(DynamicCache):
    """A dynamic cache of :class:`PressLayer` for a model of full-attention layers."""

    def __init__(self, config: Any) -> None:
        from transformers.cache_utils import get_layer_types_and_kwargs

        text = config.get_text_config(decoder=True)
        layer_types, _ = get_layer_types_and_kwargs(text)
        if set(layer_types) - {"full_attention"}:
            raise ConfigError(
                f"KV-cache presses need full-attention layers; {text.model_type} has"
                f" {sorted(set(layer_types) - {'full_attention'})}",
                "use a model whose layers are all full attention (Llama, Mistral without a window, Qwen)",
            )
        Cache.__init__(self, layers=[PressLayer() for _ in layer_types])


# ---------------------------------------------------------------------- presses


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def query_states(
    module: nn.Module, hidden: torch.Tensor, position_embeddings: tuple[torch.Tensor, torch.Tensor]
) -> torch.Tensor:
    """Rotary-embedded queries ``[B, H, n, d]`` of ``hidden`` ``[B, n, D]`` (positions of its last n).

    ``q = q_proj(x)`` per head (through ``q_norm`` where the model has one),
    then ``q cos + rotate_half(q) sin`` with the layer's cos/sin cut to the
    last ``n`` positions.
    """
    batch, n, _ = hidden.shape
    attention: Any = module
    head_dim = int(attention.head_dim)
    q = attention.q_proj(hidden).view(batch, n, -1, head_dim).transpose(1, 2)
    q_norm = getattr(module, "q_norm", None)
    if q_norm is not None:
        q = q_norm(q)
    cos, sin = position_embeddings
    cos, sin = cos[:, -n:].unsqueeze(1), sin[:, -n:].unsqueeze(1)
    return q * cos + _rotate_half(q) * sin


def _group_mean(scores: torch.Tensor, kv_heads: int) -> torch.Tensor:
    """``[B, H, n]`` per-query-head scores to ``[B, H_kv, n]`` by averaging each group."""
    batch, heads, n = scores.shape
    return scores.view(batch, kv_heads, heads // kv_heads, n).mean(dim=2)


def _causal_probs(query: torch.Tensor, keys: torch.Tensor, scaling: float) -> torch.Tensor:
    """Softmax attention ``[B, H, m, n]`` of the last ``m`` of ``n`` positions (causal, float32)."""
    groups = query.shape[1] // keys.shape[1]
    k = keys.repeat_interleave(groups, dim=1) if groups > 1 else keys
    m, n = query.shape[-2], k.shape[-2]
    scores = (query @ k.transpose(-1, -2)).float() * scaling
    rows = torch.arange(m, device=query.device)[:, None] + (n - m)
    hidden = torch.arange(n, device=query.device)[None, :] > rows
    return torch.softmax(scores.masked_fill(hidden, -math.inf), dim=-1)


class Press(ABC):
    """An eviction policy: which key/value pairs a layer keeps after an attention call."""

    @property
    def acts_in_decoding(self) -> bool:
        """Whether the press acts during decoding too (else only at the end of the prefill)."""
        return False

    @abstractmethod
    def select(
        self,
        module: nn.Module,
        layer: PressLayer,
        hidden: torch.Tensor,
        position_embeddings: tuple[torch.Tensor, torch.Tensor],
        prefill: bool,
    ) -> torch.Tensor | None:
        """Indices ``[B, H_kv, m]`` of the pairs to keep, or ``None`` to keep all."""


@dataclass(frozen=True)
class ScorePress(Press):
    """A press that keeps the ``int(n (1 - ratio))`` best-scored prompt pairs per head."""

    compression_ratio: float

    def __post_init__(self) -> None:
        if not 0.0 <= self.compression_ratio < 1.0:
            raise ConfigError(
                f"compression ratio {self.compression_ratio:g} is outside [0, 1)",
                "give the fraction of the prompt's KV pairs to remove, e.g. 0.5",
            )

    def n_kept(self, n: int) -> int:
        """Pairs kept of ``n``: ``max(1, int(n (1 - ratio)))``."""
        return max(1, int(n * (1.0 - self.compression_ratio)))

    def select(
        self,
        module: nn.Module,
        layer: PressLayer,
        hidden: torch.Tensor,
        position_embeddings: tuple[torch.Tensor, torch.Tensor],
        prefill: bool,
    ) -> torch.Tensor | None:
        n = layer.held()
        kept = self.n_kept(n)
        if not prefill or kept >= n:
            return None
        scores = self.scores(module, layer, hidden, position_embeddings, kept)
        return scores.topk(kept, dim=-1).indices

    @abstractmethod
    def scores(
        self,
        module: nn.Module,
        layer: PressLayer,
        hidden: torch.Tensor,
        position_embeddings: tuple[torch.Tensor, torch.Tensor],
        kept: int,
    ) -> torch.Tensor:
        """``[B, H_kv, n]`` importance of every held pair (higher is kept)."""


@dataclass(frozen=True)
class SnapKV(ScorePress):
    """SnapKV: attention of an observation window of the last prompt queries (see the module doc)."""

    window: int = 64
    kernel: int = 5

    def scores(
        self,
        module: nn.Module,
        layer: PressLayer,
        hidden: torch.Tensor,
        position_embeddings: tuple[torch.Tensor, torch.Tensor],
        kept: int,
    ) -> torch.Tensor:
        assert layer.keys is not None
        keys = layer.keys
        n = keys.shape[-2]
        window = min(self.window, kept, n - 1)
        query = query_states(module, hidden[:, -window:], position_embeddings)
        head_dim: Any = module.head_dim
        probs = _causal_probs(query, keys, 1.0 / math.sqrt(int(head_dim)))
        observed = probs[..., :-window].mean(dim=-2)
        pooled = F.avg_pool1d(observed, kernel_size=self.kernel, padding=self.kernel // 2, stride=1)
        scores = _group_mean(pooled, keys.shape[1])
        return F.pad(scores, (0, window), value=float(scores.max().item()) + 1.0)


@dataclass(frozen=True)
class ObservedAttention(ScorePress):
    """H2O-style: attention each pair received from all prompt queries (see the module doc)."""

    def scores(
        self,
        module: nn.Module,
        layer: PressLayer,
        hidden: torch.Tensor,
        position_embeddings: tuple[torch.Tensor, torch.Tensor],
        kept: int,
    ) -> torch.Tensor:
        assert layer.keys is not None
        keys = layer.keys
        n = keys.shape[-2]
        query = query_states(module, hidden, position_embeddings)
        scaling: Any = module.scaling
        probs = _causal_probs(query, keys, float(scaling))
        seen_by = torch.arange(n, 0, -1, device=probs.device, dtype=probs.dtype)
        return _group_mean(probs.sum(dim=-2) / seen_by, keys.shape[1])


@dataclass(frozen=True)
class StreamingLLM(Press):
    """Attention sinks plus a recent window (see the module doc)."""

    sinks: int = 4
    window: int = 256
    #: Enforce the budget at every step (the paper) or only on the prompt (kvpress).
    rolling: bool = True

    def __post_init__(self) -> None:
        if self.sinks < 0 or self.window < 1:
            raise ConfigError(
                f"kv-streaming: sinks={self.sinks} window={self.window} is not a valid budget",
                "give sinks >= 0 and window >= 1, e.g. kv-streaming:sinks=4,window=256",
            )

    @property
    def acts_in_decoding(self) -> bool:
        """A rolling window evicts at every step."""
        return self.rolling

    def select(
        self,
        module: nn.Module,
        layer: PressLayer,
        hidden: torch.Tensor,
        position_embeddings: tuple[torch.Tensor, torch.Tensor],
        prefill: bool,
    ) -> torch.Tensor | None:
        n = layer.held()
        if (not prefill and not self.rolling) or n <= self.sinks + self.window:
            return None
        assert layer.keys is not None
        index = torch.cat([torch.arange(self.sinks), torch.arange(n - self.window, n)]).to(
            layer.keys.device
        )
        batch, heads = layer.keys.shape[:2]
        return index.expand(batch, heads, -1)


# ------------------------------------------------------------------ cache methods


def check_press_support(model: nn.Module) -> list[nn.Module]:
    """The attention modules a press hooks; refuses models it cannot read queries from."""
    layers = getattr(getattr(model, "model", None), "layers", None)
    config = getattr(model, "config", None)
    kind = getattr(config, "model_type", type(model).__name__)
    if layers is None:
        raise ConfigError(
            f"{kind}: KV-cache presses need a decoder with model.layers",
            "use a Llama-style causal LM (Llama, Mistral, Qwen)",
        )
    modules = []
    for layer in layers:
        attn = getattr(layer, "self_attn", None)
        if attn is None or not all(hasattr(attn, a) for a in ("q_proj", "layer_idx", "head_dim")):
            raise ConfigError(
                f"{kind}: its attention layers have no q_proj/layer_idx, so a press cannot score them",
                "use a Llama-style causal LM (Llama, Mistral, Qwen)",
            )
        modules.append(attn)
    PressCache(config)  # refuses sliding-window / hybrid layer types
    return modules


@dataclass(frozen=True)
class CacheMethod:
    """A KV-cache recipe: a press on a :class:`PressCache`, or a quantized cache of ``bits``."""

    press: Press | None = None
    bits: int | None = None
    #: Decoder layers the press acts on (``layers=`` of the recipe; empty: every layer).
    layers: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.press is not None and self.bits is not None:
            raise ConfigError("a cache method is either a press or a quantized cache, not both")
        if self.bits is not None and self.bits not in (2, 4):
            raise ConfigError(f"kv-quant: int{self.bits} is not supported", "choose int4 or int2")

    @property
    def acts_in_decoding(self) -> bool:
        """Whether the cache changes during decoding (then chunked scoring is not exact)."""
        if self.bits is not None:
            return True
        return self.press is not None and self.press.acts_in_decoding

    def check(self, model: nn.Module) -> None:
        """Refuse a model this method cannot run on, before anything runs (``ConfigError``)."""
        if self.press is not None:
            modules = check_press_support(model)
            if self.layers:
                from gate.models.compress.attention import check_layer_indices

                check_layer_indices("KV-cache press", self.layers, len(modules))
        elif self.bits is not None:
            try:
                import optimum.quanto  # noqa: F401
            except ImportError:
                raise ModelLoadError(
                    f"kv-quant:int{self.bits} needs optimum-quanto for transformers' quantized cache",
                    "pip install optimum-quanto",
                ) from None

    def new_cache(self, model: nn.Module) -> Cache:
        """An empty cache for one generation."""
        config: Any = model.config
        if self.bits is not None:
            from transformers import QuantizedCache

            return QuantizedCache(
                "quanto",
                config,
                nbits=self.bits,
                q_group_size=KV_QUANT_GROUP,
                residual_length=KV_QUANT_RESIDUAL,
            )
        if self.press is not None:
            return PressCache(config)
        return DynamicCache(config=config)

    @contextmanager
    def active(self, model: nn.Module) -> Iterator[None]:
        """Hooks of the press on every attention layer, for the duration of the block.

        Each hook reads its call through :func:`read_attention_call` (the cache
        by its type, whatever keyword transformers passes it under). A block in
        which the attention layers ran but none of their calls carried a
        :class:`PressCache` means the press could not act: that is an error
        (:class:`~gate.errors.ModelLoadError`), never a silent uncompressed run.
        """
        if self.press is None:
            yield
            return
        press = self.press
        handles = []
        seen = {"calls": 0, "with_cache": 0}

        def hook(module: nn.Module, args: Any, kwargs: dict[str, Any], output: Any) -> Any:
            call = read_attention_call(args, kwargs)
            seen["calls"] += 1
            if not isinstance(call.cache, PressCache):
                return output
            seen["with_cache"] += 1
            index: Any = module.layer_idx
            if self.layers and int(index) not in self.layers:
                return output  # a layer the recipe leaves alone keeps its whole cache
            layer = call.cache.layers[int(index)]
            assert isinstance(layer, PressLayer)
            prefill = layer.cumulative_length == call.hidden.shape[1]
            indices = press.select(module, layer, call.hidden, call.position_embeddings, prefill)
            if indices is not None:
                layer.keep(indices)
            return output

        try:
            for module in check_press_support(model):
                handles.append(module.register_forward_hook(hook, with_kwargs=True))
            yield
        finally:
            for handle in handles:
                handle.remove()
        if seen["calls"] and not seen["with_cache"]:
            raise ModelLoadError(
                f"the KV-cache press saw {seen['calls']} attention call(s) and none carried"
                f" its cache (transformers {_transformers_version()}), so it could not act",
                "install gate from its lock (bash scripts/setup.sh) or report the transformers version",
            )


@dataclass(frozen=True)
class AttentionCall:
    """What a press reads from one attention layer's call."""

    hidden: torch.Tensor
    position_embeddings: tuple[torch.Tensor, torch.Tensor]
    #: The KV cache of the call, found by its type (``None``: the call carried none).
    cache: Cache | None


def read_attention_call(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> AttentionCall:
    """The one seam through which presses read an attention call.

    The cache is the argument that *is* a :class:`~transformers.cache_utils.Cache`,
    under whatever name (``past_key_values`` up to transformers 5.23, ``cache``
    from 5.24) or position it arrives. The hidden states are the first argument
    (``hidden_states``), the rotary ``(cos, sin)`` pair is ``position_embeddings``
    or the first pair of tensors among the arguments. A call without hidden
    states or rotary embeddings cannot be scored: :class:`ModelLoadError`.
    """
    values = [*args, *kwargs.values()]
    cache = next((v for v in values if isinstance(v, Cache)), None)
    hidden = args[0] if args and isinstance(args[0], torch.Tensor) else kwargs.get("hidden_states")
    rotary = kwargs.get("position_embeddings")
    if rotary is None:
        rotary = next((v for v in values if _is_rotary_pair(v)), None)
    if not isinstance(hidden, torch.Tensor) or rotary is None or not _is_rotary_pair(rotary):
        raise ModelLoadError(
            "a KV-cache press could not read the attention call's hidden states and rotary"
            f" embeddings (transformers {_transformers_version()})",
            "install gate from its lock (bash scripts/setup.sh)",
        )
    cos, sin = rotary
    return AttentionCall(hidden=hidden, position_embeddings=(cos, sin), cache=cache)


def _is_rotary_pair(value: Any) -> bool:
    return (
        isinstance(value, tuple)
        and len(value) == 2
        and all(isinstance(v, torch.Tensor) for v in value)
    )


def _transformers_version() -> str:
    import transformers

    return str(transformers.__version__)


def cache_argument(model: nn.Module, cache: Cache) -> dict[str, Cache]:
    """``{name: cache}`` for ``model(...)`` / ``generate(...)``: the cache under the model's own keyword.

    transformers 5.24 renamed the model's ``past_key_values`` argument to
    ``cache`` (the old name still accepted, deprecated); the name is read from
    the model's forward signature, so neither release depends on the alias.
    """
    forward: Any = type(model).forward
    return {_cache_keyword(forward): cache}


@functools.cache
def _cache_keyword(forward: Any) -> str:
    """The cache keyword of a model class's forward (read once per class: a hot path)."""
    parameters = inspect.signature(forward).parameters
    return "cache" if "cache" in parameters else "past_key_values"


def acted_pairs(cache: Cache) -> int:
    """Key/value token positions the method changed, summed over layers.

    A press layer: evicted = tokens seen - pairs held. A quantized layer:
    the pairs stored quantized = tokens seen - the full-precision residual.
    """
    total = 0
    for layer in cache.layers:
        if isinstance(layer, PressLayer):
            total += layer.cumulative_length - layer.held()
        elif getattr(layer, "_quantized_keys", None) is not None:
            keys = getattr(layer, "keys", None)
            residual = (
                int(keys.shape[-2]) if isinstance(keys, torch.Tensor) and keys.dim() == 4 else 0
            )
            total += int(getattr(layer, "cumulative_length", 0)) - residual
    return total


def _tensor_bytes(tensor: Any) -> int:
    """Storage bytes of a tensor, or of the inner tensors of a tensor subclass (quanto)."""
    flatten = getattr(tensor, "__tensor_flatten__", None)
    if callable(flatten) and type(tensor) is not torch.Tensor:
        names, _ = flatten()
        return sum(_tensor_bytes(getattr(tensor, name)) for name in names)
    if isinstance(tensor, torch.Tensor):
        return tensor.numel() * tensor.element_size()
    return 0


def cache_bytes(cache: Cache) -> int:
    """Bytes the cache holds now: keys and values, quantized codes with their scales and shifts."""
    total = 0
    for layer in cache.layers:
        for name in ("keys", "values", "_quantized_keys", "_quantized_values"):
            total += _tensor_bytes(getattr(layer, name, None))
    return total


#: SnapKV's observation window when a recipe does not give one (the method's default).
SNAPKV_WINDOW = 64


__all__ = [
    "AttentionCall",
    "CacheMethod",
    "ObservedAttention",
    "Press",
    "PressCache",
    "PressLayer",
    "ScorePress",
    "SnapKV",
    "StreamingLLM",
    "acted_pairs",
    "cache_argument",
    "cache_bytes",
    "check_press_support",
    "query_states",
    "read_attention_call",
]

"""KV-cache methods (``kv-snapkv``, ``kv-h2o``, ``kv-streaming``, ``kv-quant``): the loader runs
scoring and generation through the compressed cache each builds
(:mod:`gate.models.compress.kvcache` states the maths); they count per request.

A press (every one but ``kv-quant``) reads the queries of full-attention layers:
a local model whose ``config.json`` declares sliding-window or other layer
types is refused before loading (exit 4); hub models are checked when they load.
``kv-quant`` needs optimum-quanto (transformers' quantized cache backend): exit 3
naming the package when it is missing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from gate.errors import ConfigError
from gate.models.activity import Counting, Footprint
from gate.models.methods.base import (
    CACHE,
    EVICTED,
    CompressionMethod,
    RecipeArgs,
    keyed,
)
from gate.models.methods.quanto import QUANTO
from gate.models.model_spec import ModelSpec


def non_full_attention(config: dict[str, Any]) -> list[str]:
    """Layer kinds of a ``config.json`` other than full attention (empty: all full)."""
    text = config.get("text_config") or config
    kinds = set(text.get("layer_types") or [])
    if text.get("sliding_window") and text.get("use_sliding_window", True):
        kinds.add("sliding_attention")
    return sorted(kinds - {"full_attention"})


@dataclass(frozen=True)
class KVPress(CompressionMethod):
    """A KV press: the prompt's key/value pairs evicted (the module doc)."""

    def precheck(self, spec: ModelSpec, recipe: RecipeArgs) -> None:
        local = spec.local_dir
        path = local / "config.json" if local is not None else None
        if path is None or not path.is_file():
            return
        config = json.loads(path.read_text(encoding="utf-8"))
        other = non_full_attention(config)
        if other:
            raise ConfigError(
                f"recipe {recipe}: {config.get('model_type', spec.source)} has {', '.join(other)}"
                " layers, and a KV press needs full-attention layers",
                "use a model whose layers are all full attention (Llama, Qwen, Mistral"
                " without a sliding window)",
            )

    def cache_method(self, recipe: RecipeArgs) -> Any:
        from gate.models.compress.kvcache import CacheMethod

        return CacheMethod(self.press(recipe), layers=recipe.layers)

    def press(self, recipe: RecipeArgs) -> Any:
        """The press object of ``recipe`` (each press class says which)."""
        raise NotImplementedError(self.name)


@dataclass(frozen=True)
class SnapKVPress(KVPress):
    """``kv-snapkv:ratio[,window=w,kernel=k]``: SnapKV (window 64, kernel 5 unless given)."""

    def press(self, recipe: RecipeArgs) -> Any:
        from gate.models.compress.kvcache import SNAPKV_WINDOW, SnapKV

        values = keyed(recipe)
        window = int(values.get("window", SNAPKV_WINDOW))
        return SnapKV(float(values["ratio"]), window=window, kernel=int(values.get("kernel", 5)))


@dataclass(frozen=True)
class ObservedAttentionPress(KVPress):
    """``kv-h2o:ratio``: the pairs with the least observed attention evicted (H2O-style)."""

    def press(self, recipe: RecipeArgs) -> Any:
        from gate.models.compress.kvcache import ObservedAttention

        return ObservedAttention(float(keyed(recipe)["ratio"]))


@dataclass(frozen=True)
class StreamingPress(KVPress):
    """``kv-streaming:sinks=s,window=w``: attention sinks plus a rolling recent window."""

    def press(self, recipe: RecipeArgs) -> Any:
        from gate.models.compress.kvcache import StreamingLLM

        values = keyed(recipe)
        return StreamingLLM(sinks=int(values["sinks"]), window=int(values["window"]))


@dataclass(frozen=True)
class QuantizedCache(CompressionMethod):
    """``kv-quant:int4|int2``: transformers' quantized cache (quanto backend)."""

    def precheck(self, spec: ModelSpec, recipe: RecipeArgs) -> None:
        QUANTO.require(f"recipe {recipe}", "transformers' quantized KV cache")

    def cache_method(self, recipe: RecipeArgs) -> Any:
        from gate.models.compress.kvcache import CacheMethod

        QUANTO.require(f"recipe {recipe}", "transformers' quantized KV cache")
        bits = int(str(recipe.value).removeprefix("int"))
        return CacheMethod(bits=bits, layers=recipe.layers)


METHODS: tuple[CompressionMethod, ...] = (
    SnapKVPress(
        "kv-snapkv",
        "SnapKV eviction of the prompt's KV cache (ratio removed)",
        CACHE,
        EVICTED,
        arg="press",
        press_keys=("ratio", "window", "kernel"),
        changes_weights=False,
        needs_full_attention=True,
    ),
    ObservedAttentionPress(
        "kv-h2o",
        "observed-attention (H2O-style) eviction of the prompt's KV cache",
        CACHE,
        EVICTED,
        arg="press",
        changes_weights=False,
        needs_full_attention=True,
    ),
    StreamingPress(
        "kv-streaming",
        "StreamingLLM: attention sinks plus a rolling recent window",
        CACHE,
        EVICTED,
        arg="budget",
        changes_weights=False,
        needs_full_attention=True,
    ),
    QuantizedCache(
        "kv-quant",
        "KV cache quantized to int4/int2 (transformers' quantized cache, quanto)",
        CACHE,
        Footprint("KV pairs quantized", Counting.PER_REQUEST),
        arg="choice",
        choices=("int4", "int2"),
        changes_weights=False,
        requires=QUANTO,
        not_selective="transformers' quantized cache quantizes every layer",
    ),
)

__all__ = [
    "METHODS",
    "KVPress",
    "ObservedAttentionPress",
    "QuantizedCache",
    "SnapKVPress",
    "StreamingPress",
    "non_full_attention",
]

"""The one seam through which KV presses read an attention call, on the installed transformers.

These tests fail when the presses cannot see the cache of a real forward pass
(the class of failure where a transformers release renamed the keyword the
cache arrives under and every eviction recipe silently became a no-op), and
they check that a press that cannot act is an error or NOT EXERCISED, never
an approved uncompressed run.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch
from torch import nn
from transformers.cache_utils import DynamicCache

from gate.errors import ExitCode, ModelLoadError
from gate.gating.verdict import decide
from gate.models.backends.base import ScoreRequest
from gate.models.backends.chunked import CacheBackend, cache_activity
from gate.models.backends.hf import HFBackend
from gate.models.compress.kvcache import (
    CacheMethod,
    PressCache,
    SnapKV,
    StreamingLLM,
    acted_pairs,
    cache_argument,
    read_attention_call,
)
from gate.tiers import exercised

PROMPT = "the cat sat on the mat and looked at the dog " * 6


def _prefill(backend: HFBackend, method: CacheMethod) -> Any:
    ids = torch.tensor([backend.encode_text(PROMPT)[:48]])
    cache = method.new_cache(backend.model)
    with torch.no_grad(), method.active(backend.model):
        backend.model(input_ids=ids, **cache_argument(backend.model, cache), use_cache=True)
    return cache


def test_the_seam_sees_the_cache_of_every_layer_in_a_real_forward(tiny_backend: HFBackend) -> None:
    """A press on a real prefill evicts in every layer: the hook found the cache each time."""
    cache = _prefill(tiny_backend, CacheMethod(SnapKV(0.5, window=4)))
    assert isinstance(cache, PressCache)
    layers = len(tiny_backend.model.model.layers)
    held = [layer.held() for layer in cache.layers]
    assert held == [24] * layers, "the press did not act in every layer: it saw no cache"
    assert acted_pairs(cache) == layers * (48 - 24)


def test_the_cache_is_found_by_type_under_any_keyword_or_position() -> None:
    cache = DynamicCache()
    hidden = torch.zeros(1, 3, 8)
    rotary = (torch.ones(1, 3, 4), torch.zeros(1, 3, 4))
    for args, kwargs in [
        ((), {"hidden_states": hidden, "position_embeddings": rotary, "past_key_values": cache}),
        ((), {"hidden_states": hidden, "position_embeddings": rotary, "cache": cache}),
        ((hidden, rotary, None, cache), {}),
        ((hidden,), {"some_future_name": cache, "position_embeddings": rotary}),
    ]:
        call = read_attention_call(args, kwargs)
        assert call.cache is cache and call.hidden is hidden
        assert call.position_embeddings[0] is rotary[0]
    assert read_attention_call((hidden, rotary), {}).cache is None
    with pytest.raises(ModelLoadError, match="hidden states and rotary"):
        read_attention_call((), {"cache": cache})


def test_a_press_whose_calls_carry_no_press_cache_is_an_error(tiny_backend: HFBackend) -> None:
    """Attention ran, no call carried the press's cache: the press could not act -> exit 3."""
    method = CacheMethod(SnapKV(0.5, window=4))
    ids = torch.tensor([tiny_backend.encode_text(PROMPT)[:16]])
    other = DynamicCache(config=tiny_backend.model.config)
    with (
        pytest.raises(ModelLoadError, match="none carried its cache"),
        torch.no_grad(),
        method.active(tiny_backend.model),
    ):
        tiny_backend.model(input_ids=ids, past_key_values=other, use_cache=True)


def test_the_model_cache_keyword_comes_from_its_signature(tiny_backend: HFBackend) -> None:
    import inspect

    (name,) = cache_argument(tiny_backend.model, DynamicCache())
    assert name in inspect.signature(tiny_backend.model.forward).parameters


@contextmanager
def _no_hooks(self: CacheMethod, model: nn.Module) -> Iterator[None]:
    yield


@pytest.mark.parametrize(
    ("method", "disable"),
    [
        (CacheMethod(StreamingLLM(sinks=4, window=4096)), False),  # budget larger than every prompt
        (CacheMethod(SnapKV(0.5, window=4)), True),  # the press's hook disabled
    ],
)
def test_a_cache_method_that_never_acts_is_not_exercised_and_never_approved(
    tiny_backend: HFBackend, monkeypatch: pytest.MonkeyPatch, method: CacheMethod, disable: bool
) -> None:
    if disable:
        monkeypatch.setattr(CacheMethod, "active", _no_hooks)
    backend = CacheBackend(tiny_backend, method, label="kv-test")
    assert backend.activity is not None
    ids = tiny_backend.encode_text(PROMPT)
    before = exercised.counts(backend)
    backend.score([ScoreRequest(ids[:40], ids[40:52]), ScoreRequest(ids[:30], ids[30:40])])
    from gate.measurement import Measurement

    stamped = exercised.attach([Measurement("fidelity.cga", 1.0)], backend, before)
    idle = exercised.not_exercised(stamped)
    assert list(idle) == ["fidelity"]
    assert idle["fidelity"].requests == 2 and idle["fidelity"].acted == 0
    outcome = decide([], not_exercised=[exercised.reason(t, e) for t, e in idle.items()])
    assert outcome.exit_code == ExitCode.NO_MEASUREMENTS
    assert outcome.headline == "NOT EXERCISED" and outcome.word == "not_exercised"


def test_an_acting_press_is_exercised_and_counts_its_evictions(tiny_backend: HFBackend) -> None:
    method = CacheMethod(SnapKV(0.5, window=4))
    backend = CacheBackend(tiny_backend, method, label="kv-snapkv:0.5")
    ids = tiny_backend.encode_text(PROMPT)
    backend.score([ScoreRequest(ids[:40], ids[40:52])])
    assert backend.activity is not None
    got = backend.activity.since(None)
    layers = len(tiny_backend.model.model.layers)
    assert (got.requests, got.exercised, got.share) == (1, 1, 1.0)
    # 40 prompt pairs, 20 kept, per layer; the 11 continuation tokens are not evicted
    assert got.acted == layers * 20
    assert cache_activity("x", CacheMethod(bits=4)).unit == "KV pairs quantized"

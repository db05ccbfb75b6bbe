"""Teacher forcing through a compressed KV cache, on the demo model and its reference pack.

(a) with no press the chunked scorer is the single batched pass; (b) chunk
size 1 is a step-by-step generation loop written here with explicit
positions; (c) transformers' greedy generate with the press reproduces the
scorer's argmax wherever the histories agree; prefill-only presses give the
same scores at any chunk size; bad input fails in one line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from gate.errors import ConfigError
from gate.models.backends.base import ScoreRequest
from gate.models.backends.chunked import (
    cache_logprobs,
    exact_chunk_size,
    generate_through_cache,
    score_through_cache,
)
from gate.models.backends.loading import cache_method_of as cache_method
from gate.models.backends.loading import load_backend
from gate.models.compress.kvcache import (
    CacheMethod,
    ObservedAttention,
    PressCache,
    SnapKV,
    StreamingLLM,
    cache_argument,
    cache_bytes,
)
from gate.models.model_spec import ModelSpec
from gate.models.recipes import parse_recipe
from gate.store.reference import load_pack

PACK = Path(__file__).parents[1] / "gate/assets/baselines/demo/0001-fp32.reference.safetensors"
#: Pack prompts used: a 54- and an 84-token prompt.
PROMPTS = (0, 9)
STEPS = 16

METHODS = {
    "snapkv": CacheMethod(SnapKV(0.5, window=16)),
    "h2o": CacheMethod(ObservedAttention(0.5)),
    "streaming": CacheMethod(StreamingLLM(sinks=4, window=24)),  # rolling
    "kv-int4": CacheMethod(bits=4),
}


@pytest.fixture(scope="module")
def backend() -> Any:
    return load_backend(ModelSpec.parse("demo"))


@pytest.fixture(scope="module")
def requests() -> list[ScoreRequest]:
    pack = load_pack(PACK)
    return [
        ScoreRequest(pack.prompt_ids(j).tolist(), pack.output_ids(j)[:STEPS].tolist())
        for j in PROMPTS
    ]


def _single_pass(backend: Any, requests: list[ScoreRequest]) -> list[torch.Tensor]:
    return [s.full_logprobs for s in backend.score(requests, top_k=5, full=True, batch_size=8)]


def test_identity_policy_equals_the_single_pass(backend: Any, requests: Any) -> None:
    want = _single_pass(backend, requests)
    got = score_through_cache(backend.model, CacheMethod(), requests, top_k=5, full=True)
    for g, w in zip(got, want, strict=True):
        # float32 sums in another order (cached keys vs one pass): 1.1e-5 on an AVX-512 CPU
        torch.testing.assert_close(g.full_logprobs, w, atol=3e-5, rtol=0)


def test_identity_policy_equals_the_single_pass_at_every_chunk_size(
    backend: Any, requests: Any
) -> None:
    """In float64 the chunking is exact to rounding: 1e-5 leaves room for nothing but rounding."""
    model = backend.model.double()
    try:
        want = _single_pass(backend, requests)
        for chunk in (1, 8, STEPS):
            got = score_through_cache(model, CacheMethod(), requests, full=True, chunk_size=chunk)
            for g, w in zip(got, want, strict=True):
                torch.testing.assert_close(g.full_logprobs, w, atol=1e-5, rtol=0)
    finally:
        model.float()


def step_loop(model: Any, method: CacheMethod, request: ScoreRequest) -> torch.Tensor:
    """The generation loop written out: prefill, then one token per call at its absolute position."""
    cache = method.new_cache(model)
    context, continuation = list(request.context), list(request.continuation)
    rows = []
    with torch.no_grad(), method.active(model):
        out = model(
            input_ids=torch.tensor([context]), **cache_argument(model, cache), use_cache=True
        )
        rows.append(out.logits[0, -1])
        for i, token in enumerate(continuation[:-1]):
            position = torch.tensor([[len(context) + i]])
            out = model(
                input_ids=torch.tensor([[token]]),
                position_ids=position,
                **cache_argument(model, cache),
                use_cache=True,
            )
            rows.append(out.logits[0, -1])
    return torch.stack(rows).float().log_softmax(-1)


@pytest.mark.parametrize("name", list(METHODS))
def test_chunk_one_is_the_step_by_step_loop(backend: Any, requests: Any, name: str) -> None:
    method = METHODS[name]
    for request in requests:
        got = cache_logprobs(backend.model, method, request, chunk_size=1)
        torch.testing.assert_close(
            got, step_loop(backend.model, method, request), atol=1e-5, rtol=0
        )


@pytest.mark.parametrize("name", list(METHODS))
def test_the_press_changes_the_scores(backend: Any, requests: Any, name: str) -> None:
    """A compressed cache is not the baseline: some rows move (this must be able to fail)."""
    want = _single_pass(backend, requests)
    got = [cache_logprobs(backend.model, METHODS[name], r) for r in requests]
    moved = max(float((g - w).abs().max()) for g, w in zip(got, want, strict=True))
    assert moved > 1e-2


@pytest.mark.parametrize("name", ["snapkv", "h2o"])
def test_prefill_only_presses_are_exact_at_any_chunk(
    backend: Any, requests: Any, name: str
) -> None:
    method = METHODS[name]
    assert exact_chunk_size(method, STEPS) == STEPS
    for request in requests:
        one = cache_logprobs(backend.model, method, request, chunk_size=1)
        for chunk in (8, STEPS):
            torch.testing.assert_close(
                cache_logprobs(backend.model, method, request, chunk_size=chunk),
                one,
                atol=1e-5,
                rtol=1e-6,  # float32 summation order; log-probs reach -25
            )


def test_decoding_methods_default_to_chunk_one() -> None:
    assert exact_chunk_size(METHODS["streaming"], STEPS) == 1
    assert exact_chunk_size(CacheMethod(StreamingLLM(4, 24, rolling=False)), STEPS) == STEPS
    # the quantized cache changes only when its 128-token residual fills
    assert exact_chunk_size(METHODS["kv-int4"], STEPS) == STEPS
    assert exact_chunk_size(METHODS["kv-int4"], 129) == 129
    assert exact_chunk_size(METHODS["kv-int4"], 130) == 1


@pytest.mark.slow
@pytest.mark.parametrize("steps", [STEPS, 129, 140])
def test_quantized_cache_exact_chunk_equals_the_per_token_loop(
    backend: Any, requests: Any, steps: int
) -> None:
    """One chunk is exact while the residual holds the fed tokens; beyond, the default is 1."""
    request = requests[0]
    tokens = (list(request.continuation) * 10)[:steps]
    long = ScoreRequest(request.context, tokens)
    method = METHODS["kv-int4"]
    per_token = cache_logprobs(backend.model, method, long, chunk_size=1)
    torch.testing.assert_close(
        cache_logprobs(backend.model, method, long), per_token, atol=1e-5, rtol=1e-6
    )
    if steps > 129:  # one chunk past the residual sees unquantized pairs the loop quantized
        one_chunk = cache_logprobs(backend.model, method, long, chunk_size=steps)
        assert not torch.allclose(one_chunk, per_token, atol=1e-5)


@pytest.mark.parametrize("name", list(METHODS))
def test_greedy_generation_reproduces_the_scorer_argmax(
    backend: Any, requests: Any, name: str
) -> None:
    """Teacher-forcing the baseline's tokens: where history == generated history, argmax == generated."""
    method = METHODS[name]
    checked = 0
    for request in requests:
        generated = generate_through_cache(
            backend.model, method, request.context, max_new_tokens=STEPS, eos_ids=()
        )
        argmax = score_through_cache(backend.model, method, [request], top_k=1)[0].argmax_ids
        baseline = list(request.continuation)
        for i in range(min(len(generated), len(baseline))):
            assert int(argmax[i]) == generated[i], f"position {i}"
            checked += 1
            if generated[i] != baseline[i]:
                break  # the histories differ from here on
        # and on its own greedy tokens the scorer agrees at every position
        own = score_through_cache(
            backend.model, method, [ScoreRequest(request.context, generated)], top_k=1
        )[0]
        assert own.argmax_ids.tolist() == generated
    assert checked >= len(requests)


def test_press_holds_the_budget_and_cache_bytes_count_it(backend: Any, requests: Any) -> None:
    model, request = backend.model, requests[1]  # the 84-token prompt
    n = len(request.context)
    for press, held in [
        (SnapKV(0.5, window=16), int(n * 0.5)),
        (ObservedAttention(0.25), int(n * 0.75)),
        (StreamingLLM(4, 24), 28),
    ]:
        method = CacheMethod(press)
        cache = method.new_cache(model)
        with torch.no_grad(), method.active(model):
            model(input_ids=torch.tensor([list(request.context)]), **cache_argument(model, cache))
        assert isinstance(cache, PressCache)
        assert cache.get_seq_length() == n  # positions stay absolute
        config = model.config
        assert len(cache.layers) == config.num_hidden_layers
        assert all(layer.keys.shape[-2] == held for layer in cache.layers)
        per_pair = 2 * config.num_key_value_heads * config.head_dim * 4  # K and V, float32
        assert cache_bytes(cache) == held * per_pair * config.num_hidden_layers


def test_quantized_cache_bytes_are_smaller(backend: Any, requests: Any) -> None:
    model, request = backend.model, requests[1]
    sizes = {}
    for bits in (None, 4, 2):
        method = CacheMethod(bits=bits)
        cache = method.new_cache(model)
        with torch.no_grad():
            model(input_ids=torch.tensor([list(request.context)]), **cache_argument(model, cache))
        sizes[bits] = cache_bytes(cache)
    assert sizes[None] > 4 * sizes[4] > 0 and sizes[4] > sizes[2]


@pytest.mark.parametrize(
    ("name", "argument"),
    [
        ("kv-snapkv", "0"),
        ("kv-snapkv", "1"),
        ("kv-snapkv", "1.5"),
        ("kv-snapkv", "half"),
        ("kv-snapkv", "ratio=0.5,size=3"),
        ("kv-h2o", ""),
        ("kv-streaming", "0.5"),
        ("kv-streaming", "sinks=4"),
        ("kv-streaming", "sinks=4,window=0"),
        ("kv-tova", "0.5"),
    ],
)
def test_bad_press_arguments_are_one_line_config_errors(name: str, argument: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_recipe(f"{name}:{argument}")
    assert "\n" not in str(err.value)


def _press(text: str) -> Any:
    return cache_method(parse_recipe(text)).press


def test_press_arguments_parse() -> None:
    assert _press("kv-snapkv:0.25") == SnapKV(0.25)
    assert _press("kv-snapkv:ratio=0.5,window=16,kernel=3") == SnapKV(0.5, 16, 3)
    assert _press("kv-h2o:0.5") == ObservedAttention(0.5)
    assert _press("kv-streaming:sinks=4,window=256") == StreamingLLM(4, 256)


def test_a_model_without_full_attention_is_refused() -> None:
    from transformers import MistralConfig, MistralForCausalLM

    config = MistralConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        sliding_window=8,
    )
    model = MistralForCausalLM(config)
    with pytest.raises(ConfigError, match="full-attention"):
        CacheMethod(SnapKV(0.5)).check(model)
    with pytest.raises(ConfigError):
        score_through_cache(model, CacheMethod(SnapKV(0.5)), [ScoreRequest([1, 2], [3])])


def test_scores_are_token_scores(backend: Any, requests: Any) -> None:
    got = score_through_cache(backend.model, METHODS["snapkv"], requests[:1], top_k=7)[0]
    assert got.topk_ids.shape == (STEPS, 7) and got.full_logprobs is None
    assert np.all(np.diff(got.topk_logprobs, axis=1) <= 0)
    assert np.all(got.target_logprobs <= got.topk_logprobs[:, 0] + 1e-6)

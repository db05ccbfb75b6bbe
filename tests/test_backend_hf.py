"""HFBackend against independent, unbatched computations on a tiny real Llama."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from gate.hw.timing import PerfCounterClock
from gate.models.backends.base import Backend, ScoreRequest
from gate.models.backends.hf import HF_FACTS, HFBackend
from gate.provenance import ModelProvenance

PROMPTS = [
    "What is 7 times 8?",
    "Please reply in JSON with key name.",
    "Hi",
    "Summarize the following text in one sentence. The quick brown fox jumps over the lazy dog.",
    "Bonjour",
]


pytestmark = pytest.mark.usefixtures(
    "one_thread"
)  # tiny matrices: a second thread only adds contention


@pytest.fixture(scope="module")
def prompts(tiny_backend: HFBackend) -> list[list[int]]:
    return [tiny_backend.encode_prompt(p) for p in PROMPTS]


def _reference_logprobs(
    tiny_backend: HFBackend, context: list[int], cont: list[int]
) -> torch.Tensor:
    """Unbatched, unpadded forward pass; rows predicting each continuation token."""
    with torch.no_grad():
        logits = tiny_backend.model(input_ids=torch.tensor([context + cont])).logits[0]
    return logits[len(context) - 1 : len(context) + len(cont) - 1].float().log_softmax(-1)


def _greedy_reference(tiny_backend: HFBackend, prompt: list[int], steps: int) -> list[int]:
    """Greedy decoding by full forward passes without a KV cache."""
    ids = list(prompt)
    out: list[int] = []
    with torch.no_grad():
        for _ in range(steps):
            logits = tiny_backend.model(input_ids=torch.tensor([ids]), use_cache=False).logits[
                0, -1
            ]
            token = int(logits.argmax())
            out.append(token)
            ids.append(token)
            if token in tiny_backend.eos_ids:
                break
    return out


def test_is_a_backend(tiny_backend: HFBackend) -> None:
    assert isinstance(tiny_backend, Backend)
    assert tiny_backend.name == tiny_backend.spec.source


def test_encoding_uses_the_chat_template(tiny_backend: HFBackend) -> None:
    ids = tiny_backend.encode_prompt("Hi there")
    text = tiny_backend.tokenizer.decode(ids)
    assert text == "<|user|>Hi there<|end|><|assistant|>"
    plain = tiny_backend.encode_text("Hi there")
    assert tiny_backend.tokenizer.decode(plain) == "Hi there"
    assert tiny_backend.decode(ids) == "Hi there"  # special tokens skipped
    assert tiny_backend.encode_prompt("Hi there", chat=False) != ids


@pytest.mark.parametrize("batch_size", [1, 2, 3, 8])
def test_score_matches_unbatched_forward(
    tiny_backend: HFBackend, prompts: list[list[int]], batch_size: int
) -> None:
    rng = np.random.default_rng(batch_size)
    requests = [
        ScoreRequest(p, [int(t) for t in rng.integers(0, 384, size=int(rng.integers(1, 9)))])
        for p in prompts
    ]
    scores = tiny_backend.score(requests, top_k=5, full=True, batch_size=batch_size)
    assert len(scores) == len(requests)
    for r, s in zip(requests, scores, strict=True):
        ref = _reference_logprobs(tiny_backend, list(r.context), list(r.continuation))
        target = ref.gather(1, torch.tensor(list(r.continuation)).unsqueeze(1)).squeeze(1)
        np.testing.assert_allclose(s.target_logprobs, target.numpy(), atol=1e-5)
        np.testing.assert_allclose(s.full_logprobs.numpy(), ref.numpy(), atol=1e-5)
        values, _ = ref.topk(5, dim=-1)
        np.testing.assert_allclose(s.topk_logprobs, values.numpy(), atol=1e-5)
        assert s.topk_ids.shape == (len(r.continuation), 5)
        # the reported ids carry the reported log-probs
        picked = ref.gather(1, torch.from_numpy(s.topk_ids)).numpy()
        np.testing.assert_allclose(picked, s.topk_logprobs, atol=1e-5)
        assert (np.diff(s.topk_logprobs, axis=1) <= 0).all()


def test_only_continuation_columns_reach_the_lm_head(
    tiny_backend: HFBackend, prompts: list[list[int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Left padding + ``logits_to_keep``: the LM head sees max T + 1 columns, not the prompt."""
    requests = [
        ScoreRequest(p, list(range(5, 5 + n)))
        for p, n in zip(prompts, [1, 4, 2, 6, 3], strict=True)
    ]
    seen: list[tuple[int, ...]] = []
    head = tiny_backend.model.get_output_embeddings()
    handle = head.register_forward_hook(lambda _m, args, _out: seen.append(tuple(args[0].shape)))
    try:
        kept = tiny_backend.score(requests, top_k=5, full=True, batch_size=8)
        assert seen == [(len(requests), 6 + 1, tiny_backend.model.config.hidden_size)]
        # a model whose forward lacks logits_to_keep: full logits, same rows
        monkeypatch.setitem(tiny_backend.__dict__, "_keeps_logits", False)
        seen.clear()
        whole = tiny_backend.score(requests, top_k=5, full=True, batch_size=8)
        width = max(len(r.context) + len(r.continuation) for r in requests)
        assert seen == [(len(requests), width, tiny_backend.model.config.hidden_size)]
    finally:
        handle.remove()
    for a, b in zip(kept, whole, strict=True):
        np.testing.assert_allclose(a.full_logprobs.numpy(), b.full_logprobs.numpy(), atol=1e-6)


def test_score_without_full_rows(tiny_backend: HFBackend, prompts: list[list[int]]) -> None:
    (s,) = tiny_backend.score([ScoreRequest(prompts[0], [5, 6, 7])], top_k=400)
    assert s.full_logprobs is None
    assert s.topk_ids.shape == (3, 384)  # k is capped at the vocabulary
    np.testing.assert_allclose(np.exp(s.topk_logprobs).sum(axis=1), 1.0, atol=1e-4)


def test_generate_batched_equals_unbatched_greedy(
    tiny_backend: HFBackend, prompts: list[list[int]]
) -> None:
    batched = tiny_backend.generate(prompts, max_new_tokens=6, batch_size=4)
    singles = [tiny_backend.generate([p], max_new_tokens=6, batch_size=1)[0] for p in prompts]
    assert batched == singles
    for prompt, out in zip(prompts, batched, strict=True):
        assert out == _greedy_reference(tiny_backend, prompt, 6)


def test_generate_ignores_checkpoint_sampling_settings(
    tiny_backend: HFBackend, prompts: list[list[int]]
) -> None:
    config = tiny_backend.model.generation_config
    saved = config.to_dict()
    config.repetition_penalty, config.no_repeat_ngram_size = 3.0, 1
    config.do_sample, config.temperature, config.top_k = True, 0.5, 5
    try:
        out = tiny_backend.generate(prompts[:2], max_new_tokens=6)
    finally:
        for key in (
            "repetition_penalty",
            "no_repeat_ngram_size",
            "do_sample",
            "temperature",
            "top_k",
        ):
            setattr(config, key, saved.get(key))
    assert out == [_greedy_reference(tiny_backend, p, 6) for p in prompts[:2]]


def test_generate_stops_at_eos(tiny_backend: HFBackend, prompts: list[list[int]]) -> None:
    free = tiny_backend.generate(prompts, max_new_tokens=6)
    stop_token = free[0][2]
    stopping = HFBackend(
        tiny_backend.model,
        tiny_backend.tokenizer,
        spec=tiny_backend.spec,
        recipe=tiny_backend.recipe,
    )
    stopping.eos_ids = [stop_token]
    stopped = stopping.generate(prompts, max_new_tokens=6)
    for full, cut in zip(free, stopped, strict=True):
        expected = full[: full.index(stop_token) + 1] if stop_token in full else full
        assert cut == expected
    assert stopped[0][-1] == stop_token and len(stopped[0]) <= 3


def test_generate_timed_marks_every_step(tiny_backend: HFBackend, prompts: list[list[int]]) -> None:
    clock = PerfCounterClock()
    timed = tiny_backend.generate_timed(prompts[0], batch_size=3, new_tokens=7, clock=clock)
    assert timed.batch_size == 3 and timed.new_tokens == 7
    assert timed.prompt_tokens == len(prompts[0])
    assert len(timed.step_times) == 7
    assert list(timed.step_times) == sorted(timed.step_times)
    assert timed.end_to_end == timed.step_times[-1] > 0


@pytest.fixture()
def nan_logits(tiny_backend: HFBackend) -> Iterator[None]:
    def poison(module: torch.nn.Module, args: object, output: torch.Tensor) -> torch.Tensor:
        output = output.clone()
        output[..., 3] = float("nan")
        return output

    handle = tiny_backend.model.lm_head.register_forward_hook(poison)
    yield
    handle.remove()


def test_nan_logits_do_not_crash_scoring(
    tiny_backend: HFBackend, prompts: list[list[int]], nan_logits: None
) -> None:
    (s,) = tiny_backend.score([ScoreRequest(prompts[0], [5, 6])], top_k=4, full=True)
    assert np.isnan(s.target_logprobs).all()
    assert s.topk_logprobs.shape == (2, 4)


def test_provenance(tiny_backend: HFBackend, tiny_model_dir: Path) -> None:
    prov = tiny_backend.provenance()
    expected = hashlib.sha256((tiny_model_dir / "model.safetensors").read_bytes()).hexdigest()
    assert prov.weight_files["model.safetensors"] == expected
    tok = hashlib.sha256((tiny_model_dir / "tokenizer.json").read_bytes()).hexdigest()
    assert prov.tokenizer_files["tokenizer.json"] == tok
    assert len(prov.weights_sha256) == 64 and len(prov.tokenizer_sha256) == 64
    assert prov.recipe == "none"
    assert prov.model_family == "llama-v384"
    assert prov.linear_classes == ("Linear",)
    assert prov.linear_class_counts == {"Linear": 2 * 7 + 1}
    plain = sum(p.numel() * p.element_size() for p in tiny_backend.model.parameters())
    plain += sum(b.numel() * b.element_size() for b in tiny_backend.model.buffers())
    assert prov.parameter_bytes == plain
    assert prov.dtypes == ("float32",) and prov.device == "cpu"
    # the stored document: every fact named, unknown ones as null, in the recorded order
    document = prov.to_document()
    assert list(document) == list(HF_FACTS)
    assert document["linear_classes"] == ["Linear"] and document["revision"] is None
    assert ModelProvenance.from_document(document) == prov


def test_every_backend_starts_a_call_with_the_same_checks() -> None:
    from gate.errors import DataError
    from gate.models.backends.base import nothing_to_generate, nothing_to_score

    assert nothing_to_generate([], 4) and nothing_to_generate([[1]], 0)
    assert not nothing_to_generate([[1]], 1)
    assert nothing_to_score([]) and not nothing_to_score([ScoreRequest((1,), (2,))])
    with pytest.raises(DataError):
        nothing_to_generate([[]], 4)
    with pytest.raises(DataError):
        nothing_to_score([ScoreRequest((), (2,))])

"""Batches that fit the memory: out of memory halves the batch, retries, and says so.

The logic runs against a fake seam; the real demo model then runs behind a
forward that raises torch's own ``torch.cuda.OutOfMemoryError`` (constructible
on the CPU) whenever a batch holds more than ``k`` rows, and its scores and
generations must equal those of the untouched model.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch

from gate.errors import ModelLoadError
from gate.hw.oom import is_out_of_memory
from gate.models.backends.base import ScoreRequest
from gate.models.backends.batch_fit import BatchBackoff, BatchFitter, backoff_notes
from gate.models.backends.hf import HFBackend


class FakeSeam:
    """A device whose out-of-memory error is :class:`Full`; counts the releases."""

    def __init__(self) -> None:
        self.released = 0

    def is_out_of_memory(self, exc: BaseException) -> bool:
        return isinstance(exc, Full)

    def release(self) -> None:
        self.released += 1


class Full(Exception):
    pass


def _limited(k: int, calls: list[int]) -> Any:
    def call(batch: list[int]) -> list[int]:
        calls.append(len(batch))
        if len(batch) > k:
            raise Full(f"{len(batch)} rows")
        return [item * 10 for item in batch]

    return call


def test_halves_until_the_batch_fits_and_keeps_the_order() -> None:
    seam, calls = FakeSeam(), []
    fitter = BatchFitter("cuda:0", seam)
    out = fitter.run("score", list(range(11)), 8, _limited(2, calls))
    assert out == [i * 10 for i in range(11)]
    # 8 fails, 4 fails, then 2-row batches (the last one of 1)
    assert calls == [8, 4, 2, 2, 2, 2, 2, 1]
    assert fitter.backoffs == [
        BatchBackoff("score", 8, 4, "cuda:0"),
        BatchBackoff("score", 4, 2, "cuda:0"),
    ]
    assert seam.released == 2
    # the fitted size is kept for the operation (no failure on the next call) ...
    calls.clear()
    assert fitter.run("score", [1, 2, 3], 8, _limited(2, calls)) == [10, 20, 30]
    assert calls == [2, 1] and len(fitter.backoffs) == 2
    # ... and only for it
    assert fitter.size_for("generate", 8) == 8


def test_batch_one_out_of_memory_is_a_clear_error() -> None:
    fitter = BatchFitter("cuda:0", FakeSeam())
    with pytest.raises(ModelLoadError) as exc:
        fitter.run("generate", [1, 2], 2, _limited(0, []))
    line = exc.value.format_line()
    assert "out of memory in generate on cuda:0 even at batch size 1" in line
    assert "--dtype bfloat16" in line and "--device auto" in line
    assert [b.tried for b in fitter.backoffs] == [2]


def test_other_errors_are_not_retried() -> None:
    seam = FakeSeam()

    def broken(batch: list[int]) -> list[int]:
        raise ValueError("a bug")

    with pytest.raises(ValueError, match="a bug"):
        BatchFitter("cpu", seam).run("score", [1, 2, 3], 2, broken)
    assert seam.released == 0


def test_the_classifier() -> None:
    assert is_out_of_memory(torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate"))
    assert is_out_of_memory(RuntimeError("CUDA error: out of memory"))
    assert not is_out_of_memory(RuntimeError("shape mismatch"))
    assert not is_out_of_memory(MemoryError())


def test_a_record_round_trips_and_is_named_in_notes() -> None:
    record = BatchBackoff("score", 8, 4, "cuda:0")
    assert BatchBackoff.from_dict(record.to_dict()) == record
    assert backoff_notes([record.to_dict()]) == [
        "batch back-off: score on cuda:0: out of memory at batch 8, continued at 4"
    ]
    assert backoff_notes(None) == []
    assert backoff_notes([{"operation": "score"}])[0].startswith("batch back-off (malformed")


# ------------------------------------------------------------------ the real model


@pytest.fixture(scope="module")
def demo() -> HFBackend:
    """A copy of the demo model of its own (its batch caps change here)."""
    from gate.models.backends.loading import load_backend
    from gate.models.model_spec import ModelSpec, demo_model_dir

    if not (demo_model_dir() / "model.safetensors").is_file():
        pytest.skip("the demo model is not committed")
    return load_backend(ModelSpec.parse("demo", device="cpu"))


@pytest.fixture
def fresh(demo: HFBackend) -> Iterator[HFBackend]:
    """The demo backend with a new fitter (no caps, no back-offs) for one test."""
    demo.fitter = BatchFitter(str(demo.device))
    yield demo
    demo.fitter = BatchFitter(str(demo.device))


class _RowLimit:
    """Makes the model's forward raise CUDA out of memory above ``k`` rows; records the sizes."""

    def __init__(self, backend: HFBackend, k: int) -> None:
        self.model = backend.model
        self.k = k
        self.sizes: list[int] = []

    def __enter__(self) -> _RowLimit:
        original = type(self.model).forward

        def forward(*args: Any, **kwargs: Any) -> Any:
            rows = int(kwargs["input_ids"].shape[0])
            self.sizes.append(rows)
            if rows > self.k:
                raise torch.cuda.OutOfMemoryError(f"CUDA out of memory ({rows} rows)")
            return original(self.model, *args, **kwargs)

        self.model.forward = forward
        return self

    def __exit__(self, *exc: object) -> None:
        del self.model.forward  # back to the class's


def _requests(backend: HFBackend) -> list[ScoreRequest]:
    texts = [
        ("The cat sat on", " the mat and slept."),
        ("Numbers:", " one two three four"),
        ("Hello", " world"),
        ("A longer context about the weather today is", " sunny."),
        ("Q: 2+2? A:", " 4"),
    ]
    return [ScoreRequest(backend.encode_text(c), backend.encode_text(y)) for c, y in texts]


def test_the_real_model_scores_the_same_after_halving(fresh: HFBackend) -> None:
    requests = _requests(fresh)
    expected = fresh.score(requests, top_k=4, batch_size=1)  # one row per forward: fits
    with _RowLimit(fresh, k=2) as limit:
        got = fresh.score(requests, top_k=4, batch_size=8)
    # the 5 requests fit a batch of 8: 5 rows fail, then batches of 2 (the last of 1)
    assert limit.sizes == [5, 2, 2, 1]
    for a, b in zip(got, expected, strict=True):
        np.testing.assert_allclose(a.target_logprobs, b.target_logprobs, atol=1e-5)
        np.testing.assert_array_equal(a.topk_ids, b.topk_ids)
    assert fresh.fitter.backoffs == [BatchBackoff("score", 5, 2, "cpu")]
    recorded = fresh.provenance().batch_backoffs
    assert recorded == ({"operation": "score", "tried": 5, "fitted": 2, "device": "cpu"},)


def test_the_real_model_generates_the_same_after_halving(fresh: HFBackend) -> None:
    prompts = [r.context for r in _requests(fresh)]
    expected = fresh.generate(prompts, max_new_tokens=6, batch_size=1)
    with _RowLimit(fresh, k=1):
        got = fresh.generate(prompts, max_new_tokens=6, batch_size=4)
    assert got == expected
    assert [(b.operation, b.tried, b.fitted) for b in fresh.fitter.backoffs] == [
        ("generate", 4, 2),
        ("generate", 2, 1),
    ]
    assert fresh.fitter.size_for("generate", 4) == 1


def test_the_real_model_out_of_memory_at_one_row(fresh: HFBackend) -> None:
    with _RowLimit(fresh, k=0), pytest.raises(ModelLoadError, match="even at batch size 1"):
        fresh.score(_requests(fresh)[:2], batch_size=2)


def test_each_batch_done_counts_its_items_into_the_progress_and_a_failed_one_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gate import progress

    counted: list[int] = []
    monkeypatch.setattr(progress, "advance", counted.append)
    fitter = BatchFitter("cuda:0", FakeSeam())
    fitter.run("generate", list(range(11)), 8, _limited(2, []))
    assert counted == [2, 2, 2, 2, 2, 1]  # the 8- and 4-row batches ran out of memory

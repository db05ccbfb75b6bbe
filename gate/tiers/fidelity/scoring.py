"""Batched teacher-forced scoring: full log-prob rows ``[T, V]`` per request.

Requests are grouped by decreasing total length ``len(context) +
len(continuation)`` (ties by index) into batches of a fixed size
(:func:`batches`), so the recorder and a later candidate run form identical
batches and a baseline against its own pack scores bitwise the same. One
backend call per batch; memory stays bounded by one batch of rows."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np

from gate.errors import ModelLoadError
from gate.models.backends.base import Backend, ScoreRequest, TokenScores
from gate.progress import task as progress_task

#: Called after each scored batch with (done, total) prompts; for progress bars.
Progress = Callable[[int, int], None]


def batches(
    lengths: Sequence[int], batch_size: int, *, order_seed: int | None = None
) -> list[list[int]]:
    """Indices grouped for scoring: by decreasing length (ties by index), ``batch_size`` each.

    Sorting keeps padding small; the grouping depends only on the lengths, so
    the recorder and a later candidate run form identical batches. With
    ``order_seed`` the indices are grouped in a seeded random order instead
    (``numpy.random.default_rng(order_seed).permutation``).
    """
    if order_seed is not None:
        perm = np.random.default_rng(order_seed).permutation(len(lengths))
        order = [int(i) for i in perm]
    else:
        order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    return [order[s : s + batch_size] for s in range(0, len(order), batch_size)]


def _full_rows(scores: TokenScores) -> np.ndarray:
    full = scores.full_logprobs
    if full is None:
        raise ModelLoadError(
            "the backend returned no full log-probability rows",
            "the fidelity tier needs score(..., full=True)",
        )
    to_numpy = getattr(full, "numpy", None)
    rows = to_numpy() if callable(to_numpy) and not isinstance(full, np.ndarray) else full
    return np.asarray(rows, dtype=np.float32)


def score_rows(
    backend: Backend,
    requests: Sequence[ScoreRequest],
    *,
    batch_size: int,
    top_k: int,
    progress: Progress | None = None,
    order_seed: int | None = None,
    label: str = "fidelity: scoring",
) -> Iterator[tuple[int, np.ndarray]]:
    """Yield ``(index, full log-prob rows [T, V])`` per request, one backend call per batch.

    Empty continuations are skipped. Memory stays bounded by one batch of rows.
    """
    for i, rows, _ in scored_rows(
        backend,
        requests,
        batch_size=batch_size,
        top_k=top_k,
        progress=progress,
        order_seed=order_seed,
        label=label,
    ):
        yield i, rows


def scored_rows(
    backend: Backend,
    requests: Sequence[ScoreRequest],
    *,
    batch_size: int,
    top_k: int,
    progress: Progress | None = None,
    order_seed: int | None = None,
    label: str = "fidelity: scoring",
) -> Iterator[tuple[int, np.ndarray, TokenScores]]:
    """:func:`score_rows` with each request's :class:`TokenScores` (a served answer's
    ``returned`` ids and ``unreturned_bound``); shown as progress task ``label``."""
    live = [i for i, r in enumerate(requests) if len(r.continuation) > 0]
    lengths = [len(requests[i].context) + len(requests[i].continuation) for i in live]
    done = 0
    with progress_task(label, total=len(live)) as step:
        for group in batches(lengths, batch_size, order_seed=order_seed):
            idx = [live[g] for g in group]
            scored = backend.score(
                [requests[i] for i in idx], top_k=top_k, full=True, batch_size=batch_size
            )
            for i, s in zip(idx, scored, strict=True):
                yield i, _full_rows(s), s
            done += len(idx)
            step(len(idx))
            if progress is not None:
                progress(done, len(live))

"""Streamed requests to served builds: what one server and its replicas share.

:class:`~gate.engines.http.HTTPBackend` (one server) and
:class:`~gate.engines.replicas.ReplicaBackend` (several) differ only in
where each streamed request goes; the rest is here, once:

* :func:`check_load_run` — a load run's arguments (at least one prompt,
  ``new_tokens >= 1``; :class:`~gate.errors.DataError` otherwise);
* :func:`run_load` — the schedule of a load run: request ``r`` waits until its
  arrival offset ``o_r`` (seconds since the first send ``t0``), then for one of
  ``limit`` slots; its timing starts at ``begun_r = now - t0``. A request that
  fails is recorded with its error line and the run goes on. Returns the
  timings and the duration ``t_end - t0`` (first send to last completion);
* :func:`require_a_token` — a run in which no request returned a token is a
  :class:`~gate.errors.ModelLoadError`, not a figure;
* :func:`streams_at_once` and :func:`timed_generation` — ``batch_size``
  streams sent at one moment ``t0`` and their record: step ``j`` is when every
  stream has token ``j`` (:func:`gate.metrics.serving.step_times`), in seconds
  since ``t0``;
* :class:`LoadRuns` — ``load_run``: ``stream_timings`` summarised by
  :func:`gate.metrics.serving.load_summary`.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from functools import partial

from gate.engines.client import gather_bounded
from gate.errors import ConfigError, DataError, ModelLoadError
from gate.measurement import TimedGeneration
from gate.metrics.serving import LoadSummary, StreamTiming, load_summary, step_times
from gate.models.backends.base import StepClock
from gate.models.backends.capabilities import LoadRunner

#: Send one prompt's streamed request; ``begun`` is its offset in the run (seconds).
Send = Callable[[Sequence[int], float], Awaitable[StreamTiming]]


def check_load_run(prompts: Sequence[Sequence[int]], new_tokens: int) -> None:
    """A load run needs at least one prompt and ``new_tokens >= 1`` (DataError otherwise)."""
    if not prompts:
        raise DataError("a load run needs at least one prompt")
    if new_tokens < 1:
        raise DataError("a load run needs new_tokens >= 1")


async def run_load(
    prompts: Sequence[Sequence[int]],
    offsets: Sequence[float],
    limit: int,
    send: Send,
    *,
    fatal: Callable[[], bool] = lambda: False,
) -> tuple[list[StreamTiming], float]:
    """Each prompt sent at its offset through one of ``limit`` slots (see the module docstring).

    A request that fails with a ModelLoadError, ConfigError or DataError is
    recorded as a timing with its error, unless ``fatal()`` then says the run
    cannot go on (the error is raised).
    """
    semaphore = asyncio.Semaphore(limit)
    t0 = time.perf_counter()

    async def one(prompt: Sequence[int], offset: float) -> StreamTiming:
        await asyncio.sleep(max(0.0, offset - (time.perf_counter() - t0)))
        async with semaphore:
            begun = time.perf_counter() - t0
            try:
                return await send(prompt, begun)
            except (ModelLoadError, ConfigError, DataError) as exc:
                if fatal():
                    raise
                return StreamTiming((), len(prompt), start=begun, error=exc.format_line())

    timings = await asyncio.gather(*(one(p, o) for p, o in zip(prompts, offsets, strict=True)))
    return list(timings), time.perf_counter() - t0


def require_a_token(timings: Sequence[StreamTiming]) -> None:
    """Raise ModelLoadError (with the first error) when no request of a run returned a token."""
    if not any(t.ok for t in timings):
        first = next((t.error for t in timings if t.error), "no request returned a token")
        raise ModelLoadError(f"every request of the load run failed: {first}")


async def streams_at_once(
    clock: StepClock, batch_size: int, send: Callable[[float], Awaitable[StreamTiming]]
) -> list[StreamTiming]:
    """``batch_size`` calls ``send(t0)`` at one moment ``t0`` (a ``perf_counter`` value),
    ``clock`` started just before (for the record: the times come from the streams)."""
    clock.start()
    t0 = time.perf_counter()
    return await gather_bounded([partial(send, t0) for _ in range(batch_size)], batch_size)


def timed_generation(
    prompt: Sequence[int], batch_size: int, streams: Sequence[StreamTiming], device: str
) -> TimedGeneration:
    """The record of ``batch_size`` streams of ``prompt`` sent at one moment, on ``device``."""
    steps = step_times([s.token_times for s in streams])
    return TimedGeneration(
        batch_size=batch_size,
        prompt_tokens=len(prompt),
        new_tokens=len(steps),
        step_times=steps,
        end_to_end=steps[-1] if steps else 0.0,
        details={
            "device": device,
            "per_stream_ttft": [s.ttft for s in streams if s.token_times],
        },
    )


class LoadRuns:
    """``load_run`` for a class with ``stream_timings`` (a
    :class:`~gate.models.backends.capabilities.LoadRunner`)."""

    def load_run(
        self: LoadRunner,
        prompts: Sequence[Sequence[int]],
        *,
        new_tokens: int,
        request_rate: float = math.inf,
        max_concurrency: int | None = None,
        burstiness: float = 1.0,
        seed: int = 0,
    ) -> LoadSummary:
        """:meth:`stream_timings` summarised by :func:`gate.metrics.serving.load_summary`."""
        timings, duration = self.stream_timings(
            prompts,
            new_tokens=new_tokens,
            request_rate=request_rate,
            max_concurrency=max_concurrency,
            burstiness=burstiness,
            seed=seed,
        )
        return load_summary(timings, duration)


__all__ = [
    "LoadRuns",
    "Send",
    "check_load_run",
    "require_a_token",
    "run_load",
    "streams_at_once",
    "timed_generation",
]

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
  since ``t0``. A send whose steps all fall at one moment (``N >= 2`` and
  ``step_{N-1} = step_0``: every answer arrived in one chunk, as vLLM sends a
  stream whose deltas it merged while its reader fell behind) times no
  decoding step; it is sent again, up to :data:`TIMED_SENDS` sends in all,
  then refused (:class:`~gate.errors.DataError`). The record says how many
  sends it took;
* :class:`LoadRuns` — ``load_run``: ``stream_timings`` summarised by
  :func:`gate.metrics.serving.load_summary`.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
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


#: Sends of one timed request, at most, while every answer arrives in one chunk.
TIMED_SENDS = 3


@dataclass(frozen=True)
class TimedStreams:
    """The streams of one timed request and the sends it took (see the module docstring)."""

    streams: list[StreamTiming]
    sends: int


def merged_into_one_chunk(streams: Sequence[StreamTiming]) -> bool:
    """True when the batch's steps all fall at one moment: ``N >= 2`` and ``step_{N-1} = step_0``."""
    steps = step_times([s.token_times for s in streams])
    return len(steps) >= 2 and steps[-1] == steps[0]


async def streams_at_once(
    clock: StepClock, batch_size: int, send: Callable[[float], Awaitable[StreamTiming]]
) -> TimedStreams:
    """``batch_size`` calls ``send(t0)`` at one moment ``t0`` (a ``perf_counter`` value),
    ``clock`` started just before (for the record: the times come from the streams);
    sent again while every answer arrives in one chunk (see the module docstring)."""
    for sends in range(1, TIMED_SENDS + 1):
        clock.start()
        t0 = time.perf_counter()
        streams = await gather_bounded([partial(send, t0) for _ in range(batch_size)], batch_size)
        if not merged_into_one_chunk(streams):
            return TimedStreams(streams, sends)
    raise DataError(
        f"the server sent every timed answer in one chunk, {TIMED_SENDS} sends in a row: "
        "no decoding step can be timed from its streams",
        "time the served build on a host with idle cores (a server that falls behind "
        "its readers merges a stream's tokens)",
    )


def timed_generation(
    prompt: Sequence[int], batch_size: int, timed: TimedStreams, device: str
) -> TimedGeneration:
    """The record of ``batch_size`` streams of ``prompt`` sent at one moment, on ``device``."""
    streams = timed.streams
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
            "sends": timed.sends,
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

"""A backend with a controlled timing source, for deterministic latency tests.

:class:`FakeTime` is a manual clock; :class:`ScriptedBackend.generate_timed`
advances it by a scripted prefill and per-step duration (times ``slowdown``,
with seeded multiplicative noise) and marks the real
:class:`gate.hw.timing.PerfCounterClock` built on ``FakeTime.now``. Only the
source of time is fake: the clock, the metrics, the tier and the comparison
above it are the real code.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from gate.hw.timing import PerfCounterClock
from gate.measurement import TimedGeneration
from gate.models.backends.base import StepClock
from gate.provenance import ModelProvenance


class FakeTime:
    """A monotonic clock that only moves when told to."""

    def __init__(self) -> None:
        self.t = 1000.0

    def now(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds

    def clock(self) -> PerfCounterClock:
        return PerfCounterClock(now=self.now)


class RealTime:
    """The same interface on the real clock: ``advance`` sleeps."""

    def now(self) -> float:
        return time.perf_counter()

    def advance(self, seconds: float) -> None:
        time.sleep(seconds)

    def clock(self) -> PerfCounterClock:
        return PerfCounterClock()


class ScriptedBackend:
    """Generates nothing; spends scripted time per prefill and decoding step."""

    name = "scripted"

    def __init__(
        self,
        clock_source: FakeTime | RealTime,
        *,
        prefill_s: float = 0.020,
        step_s: float = 0.010,
        per_sequence_s: float = 0.001,
        slowdown: float = 1.0,
        noise_cv: float = 0.03,
        seed: int = 0,
        oom_at_batch: int | None = None,
        linear_classes: Sequence[str] = ("Linear",),
    ) -> None:
        self.time = clock_source
        self.prefill_s = prefill_s
        self.step_s = step_s
        self.per_sequence_s = per_sequence_s
        self.slowdown = slowdown
        self.noise_cv = noise_cv
        self.rng = np.random.default_rng(seed)
        self.oom_at_batch = oom_at_batch
        self.linear_classes = list(linear_classes)
        self.calls = 0

    def _spend(self, seconds: float, batch_size: int) -> None:
        noise = float(self.rng.lognormal(0.0, self.noise_cv)) if self.noise_cv else 1.0
        self.time.advance((seconds + self.per_sequence_s * batch_size) * self.slowdown * noise)

    def encode_prompt(self, text: str, *, chat: bool = True) -> list[int]:
        return [ord(c) % 97 for c in text]

    def generate_timed(
        self,
        prompt: Sequence[int],
        *,
        batch_size: int,
        new_tokens: int,
        clock: StepClock,
    ) -> TimedGeneration:
        self.calls += 1
        if self.oom_at_batch is not None and batch_size >= self.oom_at_batch:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        clock.start()
        self._spend(self.prefill_s, batch_size)
        clock.mark()
        for _ in range(new_tokens - 1):
            self._spend(self.step_s, batch_size)
            clock.mark()
        steps = clock.elapsed()
        return TimedGeneration(
            batch_size=batch_size,
            prompt_tokens=len(prompt),
            new_tokens=new_tokens,
            step_times=tuple(steps),
            end_to_end=steps[-1],
        )

    def provenance(self) -> ModelProvenance:
        return ModelProvenance(linear_classes=tuple(self.linear_classes), parameter_bytes=123456)

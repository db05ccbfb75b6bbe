"""The latency and memory tier: timed generation at fixed shapes, then metrics.

Workload (DESIGN.md "Latency and memory"): a fixed prompt, exactly
``new_tokens`` generated tokens (min == max), ``warmup`` untimed runs then
``runs`` timed runs at the reference batch (the first of ``batch_sizes``);
those give the TTFT/ITL/TPOT/E2E percentiles of :mod:`gate.metrics.latency`.
A sweep over the other batch sizes measures throughput and stops cleanly at
the first out-of-memory error; the best batch's tokens/s is a metric of its
own. Memory peaks come from :class:`gate.memory.MemoryTracker` around extra
runs at the reference batch, so the timed loop carries no tracker overhead.

The timed loop is handed to a ``runner(fn, rounds, warmup_rounds)`` so the
pytest suite can drive it with pytest-benchmark's ``benchmark.pedantic``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gate.backends.base import Backend, StepClock
from gate.config import build_dataclass
from gate.errors import ConfigError, ModelLoadError
from gate.fingerprint import Fingerprint
from gate.measurement import Measurement
from gate.memory import MemoryReport, MemoryTracker
from gate.metrics.latency import RunLatency, percentile, run_latency, summarize

#: ``runner(fn, rounds, warmup_rounds)``: call ``fn`` warmup_rounds + rounds times.
Runner = Callable[[Callable[[], object], int, int], object]
ClockFactory = Callable[[], StepClock]
TrackerFactory = Callable[[], contextlib.AbstractContextManager[Any]]

DEFAULT_PROMPT = (
    "Explain in a few sentences why regular exercise is good for your health, "
    "and give one practical tip for getting started."
)


@dataclass(frozen=True)
class LatencySettings:
    """``[tiers.latency]`` in the run config (validated with ``build_dataclass``)."""

    prompt: str = DEFAULT_PROMPT
    new_tokens: int = 32
    batch_sizes: tuple[int, ...] = (1, 4, 8)
    warmup: int = 2
    runs: int = 10
    memory_runs: int = 2
    sweep: bool = True
    allow_hardware_mismatch: bool = False
    #: Directory of the latency history (``gate audit latency``); "" = do not append.
    history_dir: str = ""

    def __post_init__(self) -> None:
        if self.new_tokens < 2:
            raise ValueError("new_tokens must be at least 2 (ITL needs two steps)")
        if self.runs < 2 or self.warmup < 0 or self.memory_runs < 1:
            raise ValueError("runs must be >= 2, warmup >= 0 and memory_runs >= 1")
        if not self.batch_sizes or any(b < 1 for b in self.batch_sizes):
            raise ValueError("batch_sizes must be a non-empty list of positive integers")
        if not self.prompt.strip():
            raise ValueError("prompt must not be empty")


def settings_from(mapping: Mapping[str, Any]) -> LatencySettings:
    """Validate ``[tiers.latency]`` (unknown keys and bad values -> ConfigError, exit 4)."""
    return build_dataclass(LatencySettings, mapping, where="tiers.latency")


def fingerprint_of(measurements: Mapping[str, Measurement]) -> Fingerprint | None:
    """The fingerprint a stored set of latency measurements was taken on (None if absent)."""
    for name, m in measurements.items():
        if name.startswith("latency.") and "fingerprint" in m.details:
            return Fingerprint.from_dict(m.details["fingerprint"])
    return None


def has_latency(measurements: Mapping[str, Measurement]) -> bool:
    """Whether a baseline holds any latency metric (else there is nothing to match)."""
    return any(name.startswith("latency.") for name in measurements)


@dataclass(frozen=True)
class SweepResult:
    """Throughput per batch size; ``oom_batch`` is the first batch that did not fit."""

    tokens_per_s: dict[int, tuple[float, ...]]
    oom_batch: int | None

    @property
    def best_batch(self) -> int:
        """The batch size with the highest median tokens/s."""
        return max(self.tokens_per_s, key=lambda b: percentile(self.tokens_per_s[b], 50))


@dataclass(frozen=True)
class LatencyResult:
    """What the tier measured, before it becomes Measurements."""

    runs: tuple[RunLatency, ...]
    sweep: SweepResult
    memory: tuple[MemoryReport, ...]
    param_bytes: int | None
    fingerprint: Fingerprint
    settings: LatencySettings
    extra_details: dict[str, Any] = field(default_factory=dict)


def plain_runner(fn: Callable[[], object], rounds: int, warmup_rounds: int) -> None:
    """The default loop: warm-up calls, then timed calls."""
    for _ in range(warmup_rounds + rounds):
        fn()


def is_out_of_memory(exc: BaseException) -> bool:
    """``torch.cuda.OutOfMemoryError`` or a RuntimeError saying "out of memory"."""
    if type(exc).__name__ == "OutOfMemoryError":
        return True
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()


def _free_cached_memory() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def timed_runs(
    backend: Backend,
    prompt_ids: Sequence[int],
    *,
    batch_size: int,
    settings: LatencySettings,
    clock_factory: ClockFactory,
    runner: Runner = plain_runner,
) -> list[RunLatency]:
    """``settings.warmup`` + ``settings.runs`` requests through ``runner``; the timed ones.

    Every call is collected; the warm-up calls are the first ``warmup`` ones
    and are dropped (a runner may make extra calls afterwards, e.g. profiling).
    """
    collected: list[RunLatency] = []

    def one_request() -> None:
        gen = backend.generate_timed(
            prompt_ids, batch_size=batch_size, new_tokens=settings.new_tokens, clock=clock_factory()
        )
        collected.append(run_latency(gen))

    runner(one_request, settings.runs, settings.warmup)
    timed = collected[settings.warmup : settings.warmup + settings.runs]
    if len(timed) < 2:
        raise ConfigError(
            f"the timed loop ran {len(timed)} request(s); at least 2 are needed",
            "do not run the latency tier with --benchmark-disable",
        )
    return timed


def sweep(
    backend: Backend,
    prompt_ids: Sequence[int],
    *,
    settings: LatencySettings,
    clock_factory: ClockFactory,
    reference: Sequence[RunLatency],
) -> SweepResult:
    """Tokens/s at each batch size after the reference one, stopping at the first OOM."""
    per_batch: dict[int, tuple[float, ...]] = {
        settings.batch_sizes[0]: tuple(r.tokens_per_s for r in reference)
    }
    oom: int | None = None
    if settings.sweep:
        for batch in settings.batch_sizes[1:]:
            try:
                runs = timed_runs(
                    backend,
                    prompt_ids,
                    batch_size=batch,
                    settings=settings,
                    clock_factory=clock_factory,
                )
            except Exception as exc:
                if not is_out_of_memory(exc):
                    raise
                _free_cached_memory()
                oom = batch
                break
            per_batch[batch] = tuple(r.tokens_per_s for r in runs)
    return SweepResult(tokens_per_s=per_batch, oom_batch=oom)


def memory_runs(
    backend: Backend,
    prompt_ids: Sequence[int],
    *,
    settings: LatencySettings,
    clock_factory: ClockFactory,
    tracker_factory: Callable[[], MemoryTracker],
) -> list[MemoryReport]:
    """``settings.memory_runs`` requests at the reference batch, each inside a tracker."""
    reports = []
    for _ in range(settings.memory_runs):
        tracker = tracker_factory()
        with tracker:
            backend.generate_timed(
                prompt_ids,
                batch_size=settings.batch_sizes[0],
                new_tokens=settings.new_tokens,
                clock=clock_factory(),
            )
        reports.append(tracker.report)
    return reports


def run_tier(
    backend: Backend,
    settings: LatencySettings,
    *,
    fingerprint: Fingerprint,
    clock_factory: ClockFactory,
    tracker_factory: Callable[[], MemoryTracker],
    runner: Runner = plain_runner,
) -> LatencyResult:
    """The whole workload: timed loop, sweep, memory runs."""
    prompt_ids = backend.encode_prompt(settings.prompt)
    batch = settings.batch_sizes[0]
    try:
        runs = timed_runs(
            backend,
            prompt_ids,
            batch_size=batch,
            settings=settings,
            clock_factory=clock_factory,
            runner=runner,
        )
    except Exception as exc:
        if is_out_of_memory(exc):
            raise ModelLoadError(
                f"out of memory at the reference batch size {batch}",
                "lower tiers.latency.batch_sizes or new_tokens",
            ) from None
        raise
    result_sweep = sweep(
        backend, prompt_ids, settings=settings, clock_factory=clock_factory, reference=runs
    )
    reports = memory_runs(
        backend,
        prompt_ids,
        settings=settings,
        clock_factory=clock_factory,
        tracker_factory=tracker_factory,
    )
    provenance = backend.provenance()
    raw_bytes = provenance.get("parameter_bytes", provenance.get("param_bytes"))
    return LatencyResult(
        runs=tuple(runs),
        sweep=result_sweep,
        memory=tuple(reports),
        param_bytes=int(raw_bytes) if raw_bytes is not None else None,
        fingerprint=fingerprint,
        settings=settings,
        extra_details={"prompt_tokens": len(prompt_ids)},
    )


def _peak(values: Iterator[int | None]) -> tuple[int, list[int]] | None:
    seen = [v for v in values if v is not None]
    return (max(seen), seen) if seen else None


def to_measurements(result: LatencyResult) -> list[Measurement]:
    """The tier's Measurements; every one carries the fingerprint in ``details``."""
    s = result.settings
    common: dict[str, Any] = {
        "fingerprint": result.fingerprint.to_dict(),
        "fingerprint_hash": result.fingerprint.hash,
        "hardware_hash": result.fingerprint.hardware_hash,
        "batch_size": s.batch_sizes[0],
        "new_tokens": s.new_tokens,
        "runs": s.runs,
        "warmup": s.warmup,
        **result.extra_details,
    }
    out = [
        Measurement(f"latency.{key}", stat.value, samples=stat.samples, details=common)
        for key, stat in summarize(result.runs).items()
    ]
    best = result.sweep.best_batch
    best_samples = result.sweep.tokens_per_s[best]
    out.append(
        Measurement(
            "latency.best_tokens_per_s",
            percentile(best_samples, 50),
            samples=best_samples,
            details={
                **common,
                "best_batch": best,
                "oom_batch": result.sweep.oom_batch,
                "per_batch": {
                    str(b): percentile(v, 50) for b, v in result.sweep.tokens_per_s.items()
                },
            },
        )
    )
    peaks: dict[str, tuple[int, list[int]] | None] = {
        "peak_allocated_bytes": _peak(m.peak_allocated_bytes for m in result.memory),
        "peak_reserved_bytes": _peak(m.peak_reserved_bytes for m in result.memory),
        "process_vram_bytes": _peak(m.process_vram_bytes for m in result.memory),
        "global_vram_bytes": _peak(m.global_vram_bytes for m in result.memory),
        "peak_rss_bytes": _peak(m.peak_rss_bytes for m in result.memory),
    }
    for key, peak in peaks.items():
        if peak is not None:
            value, per_run = peak
            out.append(
                Measurement(f"latency.{key}", float(value), details={**common, "per_run": per_run})
            )
    if result.param_bytes is not None:
        out.append(Measurement("latency.param_bytes", float(result.param_bytes), details=common))
    return out

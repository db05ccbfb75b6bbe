"""The speculative tier: is a speculative build lossless, how much does its drafter help, is it faster?

Workload only (the maths is :mod:`gate.metrics.speculative`). For each prompt
of the set (the packaged fidelity prompts through the chat template, cut to
``limit``) the build generates ``max_new_tokens`` greedy tokens twice in one
session: with its drafter (:meth:`Speculates.speculate`, which counts every
verification step) and without (:meth:`Speculates.plain_reference`, which also
gives the target's top-2 margin at every position and the rounding noise
between its one-token and batched forward passes). From them:

* ``speculative.lossless`` and ``speculative.confident_divergences``, each
  divergence listed in the details with its prompt, position, margin and
  whether it lies within the noise;
* ``speculative.acceptance_length`` and ``speculative.acceptance_rate`` per
  prompt (paired with the baseline's prompts), the rate per draft position in
  the details;
* ``speculative.speedup`` over the first ``speed_prompts`` prompts: each timed
  with and without speculation back to back, the order alternating between
  prompts, the ratio with its t-interval at ``confidence``; reported, and gated
  when ``min_speedup`` is set.

Settings come from ``[tiers.speculative]``; a build without a ``spec-*`` recipe
is refused where the run is planned (:func:`require_speculative`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, Protocol, TypeVar, runtime_checkable

from gate.errors import ConfigError
from gate.measurement import Measurement, MeasurementDetail
from gate.metrics.catalog import speculative as catalog
from gate.metrics.load import ratio_interval
from gate.metrics.speculative import (
    Divergence,
    PlainReference,
    SpeculativeTrace,
    acceptance_length,
    acceptance_rate,
    divergence,
    position_rates,
)
from gate.progress import track

TIER = catalog.TIER


@runtime_checkable
class Speculates(Protocol):
    """A build that generates with a drafter (:class:`gate.models.backends.speculative.
    SpeculativeBackend`)."""

    def encode_prompt(self, text: str, *, chat: bool = True) -> list[int]:
        """Token ids of a user prompt through the chat template."""
        ...

    def speculate(self, prompt: Sequence[int], *, max_new_tokens: int) -> SpeculativeTrace:
        """Greedy tokens with the drafter, and every verification step."""
        ...

    def plain_reference(self, prompt: Sequence[int], *, max_new_tokens: int) -> PlainReference:
        """Greedy tokens of the same build without the drafter, margins and noise."""
        ...

    def timed_pair(
        self, prompt: Sequence[int], *, max_new_tokens: int, speculative_first: bool
    ) -> tuple[float, float]:
        """Tokens/s ``(with speculation, without)``, timed back to back."""
        ...


class TimesPairs(Protocol):
    """A build timed with and without speculation (in process, or two servers)."""

    def timed_pair(
        self, prompt: Sequence[int], *, max_new_tokens: int, speculative_first: bool
    ) -> tuple[float, float]:
        """Tokens/s ``(with speculation, without)``, timed back to back."""
        ...


@dataclass(frozen=True)
class SpeculativeSettings:
    """``[tiers.speculative]`` settings (built with :func:`gate.tiers.registry.build_settings`)."""

    #: Prompt-set JSONL; None is the packaged fidelity prompt set.
    prompts: Path | None = None
    #: Prompts generated with and without speculation (sized for a CPU: a self-draft of
    #: SmolLM2 quantized to int4 takes about 10 s a prompt on 2 cores).
    limit: int = 8
    #: Greedy tokens per prompt.
    max_new_tokens: int = 32
    #: Prompts timed with and without speculation for the speed-up (the first ones).
    speed_prompts: int = 4
    #: Level of the speed-up's interval.
    confidence: float = 0.95
    #: The speed-up the build must show (its interval's upper end, :mod:`gate.gating.speedup`);
    #: None: reported, not gated.
    min_speedup: float | None = None

    def __post_init__(self) -> None:
        if self.limit < 1 or self.max_new_tokens < 1:
            raise ValueError("limit and max_new_tokens must be at least 1")
        if not 0 <= self.speed_prompts <= self.limit:
            raise ValueError("speed_prompts must be between 0 and limit")
        if not 0.5 < self.confidence < 1.0:
            raise ValueError(f"confidence must be in (0.5, 1), got {self.confidence}")
        if self.min_speedup is not None and self.min_speedup <= 0:
            raise ValueError(f"min_speedup must be positive, got {self.min_speedup}")


#: What a speculative run counted per prompt (a trace in process, engine counts served).
R = TypeVar("R")


def require_speculative(recipe: str | None) -> None:
    """The tier needs a build with a ``spec-*`` part: else one line, exit 4."""
    from gate.models.stack import parse_stack

    if parse_stack(recipe).part("speculative") is None:
        raise ConfigError(
            f"the speculative tier measures speculative decoding, and the build's recipe is"
            f" {recipe or 'none'}",
            "add a spec-* part (e.g. --recipe spec-draft:quanto-int4 or"
            " quanto-int4+spec-ngram:4), or drop the tier",
        )


def _prompts(settings: SpeculativeSettings) -> list[tuple[str, str]]:
    from gate.data.prompt_set import load_prompt_set

    found = list(load_prompt_set(settings.prompts))[: settings.limit]
    return [(str(p.id), str(p.text)) for p in found]


class ComparesPlain(Protocol):
    """A build that encodes prompts and generates them without speculation too (in
    process: :class:`Speculates`; served: the plain server beside the speculative one)."""

    def encode_prompt(self, text: str, *, chat: bool = True) -> list[int]:
        """Token ids of a user prompt through the chat template."""
        ...

    def plain_reference(self, prompt: Sequence[int], *, max_new_tokens: int) -> PlainReference:
        """Greedy tokens without speculation, their top-2 margins and the noise."""
        ...


@dataclass(frozen=True)
class PromptRuns(Generic[R]):
    """Every prompt of the tier generated with and without speculation: its id, what the
    speculative run counted (``R``: a trace in process, the engine's counts served), the
    divergences from the plain tokens and the largest noise seen."""

    ids: list[str]
    records: list[R]
    divergences: list[Divergence]
    noise: float
    prompts: list[Sequence[int]]

    def speed_prompts(self, settings: SpeculativeSettings) -> list[Sequence[int]]:
        """The prompts the speed-up times (the first ``speed_prompts``)."""
        return self.prompts[: settings.speed_prompts]


def run_prompts(
    build: ComparesPlain,
    settings: SpeculativeSettings,
    label: str,
    speculate: Callable[[Sequence[int]], tuple[Sequence[int], R]],
) -> PromptRuns[R]:
    """The tier's one loop over its prompts: ``speculate`` (tokens and what it counted),
    then the plain reference, each divergence found against it; in process and served."""
    runs: PromptRuns[R] = PromptRuns([], [], [], 0.0, [])
    noise = 0.0
    encoded = [(pid, build.encode_prompt(text)) for pid, text in _prompts(settings)]
    for pid, prompt in track(encoded, label):
        tokens, record = speculate(prompt)
        plain = build.plain_reference(prompt, max_new_tokens=settings.max_new_tokens)
        noise = max(noise, plain.noise)
        runs.ids.append(pid)
        runs.records.append(record)
        runs.prompts.append(prompt)
        found = divergence(pid, plain.tokens, tokens, plain.margins, plain.noise)
        if found is not None:
            runs.divergences.append(found)
    return PromptRuns(runs.ids, runs.records, runs.divergences, noise, runs.prompts)


def measure(backend: Speculates, settings: SpeculativeSettings) -> list[Measurement]:
    """The tier's measurements on ``backend`` (module doc)."""
    if not isinstance(backend, Speculates):
        raise ConfigError(
            "the speculative tier needs an in-process build with a spec-* recipe",
            "add a spec-* part to the recipe",
        )

    def speculated(prompt: Sequence[int]) -> tuple[Sequence[int], SpeculativeTrace]:
        trace = backend.speculate(prompt, max_new_tokens=settings.max_new_tokens)
        return trace.tokens, trace

    runs = run_prompts(backend, settings, "speculative: with and without the drafter", speculated)
    out = lossless_measurements(runs.ids, runs.divergences, runs.noise)
    out += _acceptance(runs.ids, runs.records)
    if settings.speed_prompts:
        out.append(speedup_measurement(backend, runs.speed_prompts(settings), settings))
    return out


def lossless_measurements(
    ids: Sequence[str], divergences: Sequence[Divergence], noise: float
) -> list[Measurement]:
    """``speculative.lossless`` (the share of prompts whose tokens never left the plain
    build's) and ``speculative.confident_divergences`` (prompts that left them where the
    target's top-2 margin exceeds ``noise``), every divergence listed in the details; in
    process and served alike."""
    diverged = {d.prompt_id for d in divergences}
    confident = [d for d in divergences if not d.within_noise]
    listed = [d.to_dict() for d in divergences]
    lossless = Measurement(
        catalog.LOSSLESS,
        1.0 - len(diverged) / len(ids),
        details={
            "prompts": len(ids),
            "divergences": listed,
            "within_noise": sum(d.within_noise for d in divergences),
            "noise": noise,
        },
    )
    counted = Measurement(
        catalog.CONFIDENT_DIVERGENCES,
        float(len(confident)),
        details={"divergences": [d.to_dict() for d in confident], "noise": noise},
    )
    return [lossless, counted]


def _acceptance(ids: Sequence[str], traces: Sequence[SpeculativeTrace]) -> list[Measurement]:
    lengths = tuple(acceptance_length(t) for t in traces)
    rated = [(pid, acceptance_rate(t)) for pid, t in zip(ids, traces, strict=True)]
    kept = [(pid, r) for pid, r in rated if r is not None]
    steps = sum(len(t.steps) for t in traces)
    details = {
        "steps": steps,
        "proposed": sum(t.proposed for t in traces),
        "accepted": sum(t.accepted for t in traces),
        "tokens": sum(len(t.tokens) for t in traces),
        "position_rates": position_rates(traces),
    }
    out = [
        Measurement(
            catalog.ACCEPTANCE_LENGTH,
            sum(lengths) / len(lengths),
            samples=lengths,
            sample_ids=tuple(ids),
            details=details,
        )
    ]
    if kept:
        rates = tuple(float(r) for _, r in kept)
        out.append(
            Measurement(
                catalog.ACCEPTANCE_RATE,
                sum(rates) / len(rates),
                samples=rates,
                sample_ids=tuple(pid for pid, _ in kept),
                details={"position_rates": details["position_rates"]},
            )
        )
    return out


def speedup_measurement(
    backend: TimesPairs, prompts: Sequence[Sequence[int]], settings: SpeculativeSettings
) -> Measurement:
    """``speculative.speedup``: tokens/s with over without speculation, each prompt timed
    back to back in alternating order; the geometric mean with its t-interval."""
    with_spec: list[float] = []
    without: list[float] = []
    for i, prompt in enumerate(track(prompts, "speculative: timed with and without")):
        fast, plain = backend.timed_pair(
            prompt, max_new_tokens=settings.max_new_tokens, speculative_first=i % 2 == 0
        )
        with_spec.append(fast)
        without.append(plain)
    found = ratio_interval(with_spec, without, level=settings.confidence)
    ci = None if found.low is None or found.high is None else [found.low, found.high]
    return Measurement(
        catalog.SPEEDUP,
        found.value,
        samples=found.ratios,
        details={
            MeasurementDetail.RATIO_CI: ci,
            MeasurementDetail.RATIO_LEVEL: settings.confidence,
            MeasurementDetail.MIN_SPEEDUP: settings.min_speedup,
            "tokens_per_s_with": with_spec,
            "tokens_per_s_without": without,
        },
    )


__all__ = [
    "TIER",
    "Speculates",
    "SpeculativeSettings",
    "measure",
    "require_speculative",
]

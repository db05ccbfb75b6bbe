"""The load tier: a served candidate against its served baseline under GuideLLM's load.

Does the compressed build serve more requests on the same hardware? Both
builds are behind OpenAI-compatible servers (``--serve``/``--endpoint`` and
``--baseline-serve``/``--baseline-endpoint``). GuideLLM
(:mod:`gate.loadgen.guidellm`) sweeps each over the same offered request rates
with the same synthetic workload; ``gate`` reads its results files and compares
the two builds (:mod:`gate.metrics.load`).

Interleaving (:func:`plan`): ``repeats`` passes over the rates; at each rate
of each pass the two builds run back to back, the order alternating pair by
pair (baseline, candidate; candidate, baseline; ...), so a shared machine's
drift lands on both builds of a pair and a linear drift cancels. Every
benchmark of the plan runs in one GuideLLM process (its start-up is paid once,
:func:`gate.loadgen.guidellm.run_batch`); the benchmarks of one build and pass
make up its sweep of that pass.

Metrics (each candidate / baseline, ``SampleKind.RATIO``, with the intervals of
:mod:`gate.metrics.load`): the speed ratio at the SLO (``ttft_p95_ms``,
``itl_p95_ms``) and TTFT / ITL / end-to-end p50 / p95 / p99, paired at every
offered rate of every pass (``repeats x len(rates)`` observations); goodput
at the SLO, the maximum sustainable rate before the knee (``sustain``) and
output tokens/s at saturation, one per pass. ``load.slo_speedup`` is gated by
``min_speedup`` (:mod:`gate.gating.speedup`); the others are reported.

Bad input, one line each: the baseline meets the SLO at no rate, or saturates
at the first rate, or fewer than 3 rates have requests completed by both
builds (:class:`~gate.errors.DataError`, exit 4: the rates or the SLO do not
fit this server); a build that is not served (:class:`~gate.errors.ConfigError`,
exit 4).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from gate.errors import DataError
from gate.measurement import Measurement, MeasurementDetail
from gate.metrics import load as maths
from gate.metrics.load import RatePoint, Slo

SIDES = ("baseline", "candidate")


@dataclass(frozen=True)
class Job:
    """One benchmark of the plan: build ``side`` at offered ``rate`` in pass ``repeat``."""

    side: str
    repeat: int
    rate: float

    @property
    def name(self) -> str:
        """File stem of its GuideLLM scenario, results and log, e.g. ``baseline-1-2r``."""
        return f"{self.side}-{self.repeat + 1}-{self.rate:g}r"


#: ``runner(jobs) -> [(point, wall_s), ...]``: runs the jobs in order (one GuideLLM
#: process), one point and its wall seconds per job; the tier decides the order, the
#: caller the transport.
BatchRunner = Callable[[Sequence[Job]], Sequence[tuple[RatePoint, float]]]


@dataclass(frozen=True)
class LoadTierSettings:
    """``[tiers.load]``: the sweep, the SLO and the gate (docs/serving.md "The load tier")."""

    #: Settings that describe this run's machine or output: never recorded into a baseline.
    MACHINE_KEYS: ClassVar[frozenset[str]] = frozenset({"guidellm", "output_dir"})

    #: Offered request rates (requests/s), the same for both builds.
    rates: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0)
    #: Seconds GuideLLM sends at each rate.
    duration_s: float = 60.0
    #: Passes over the rates (each rate of each pass: one interleaved pair of benchmarks).
    repeats: int = 3
    #: GuideLLM's arrival profile: evenly spaced (``constant``) or ``poisson``.
    profile: Literal["constant", "poisson"] = "constant"
    prompt_tokens: int = 256
    output_tokens: int = 128
    seed: int = 0
    #: The SLO: p95 bounds in milliseconds.
    ttft_p95_ms: float = 1000.0
    itl_p95_ms: float = 100.0
    #: Percentile of the speed ratio at the SLO: the SLO's p95, or p50 for benchmarks of a
    #: few requests (GuideLLM's percentiles are over requests: their p95 is the slowest).
    speed_percentile: Literal["p50", "p95", "p99"] = "p95"
    #: A rate is sustained when completed requests/s >= sustain x offered.
    sustain: float = 0.8
    #: Goodput ratio the candidate must reach (1.0: at least as fast).
    min_speedup: float = 1.0
    #: Level of the ratios' intervals.
    confidence: float = 0.95
    #: Seconds one benchmark (one build at one rate) may take.
    sweep_timeout_s: float = 3600.0
    #: The ``guidellm`` command (default: $GATE_GUIDELLM, else the cached tool env).
    guidellm: str = ""
    #: Where GuideLLM's scenarios, results and logs go (default: beside the results JSON).
    output_dir: str = ""

    def __post_init__(self) -> None:
        rates = tuple(self.rates)
        if not rates or any(not (r > 0 and math.isfinite(r)) for r in rates):
            raise ValueError("rates must be a non-empty list of positive numbers")
        if len(set(rates)) != len(rates):
            raise ValueError("rates must not repeat")
        if self.duration_s <= 0 or self.sweep_timeout_s <= 0:
            raise ValueError("duration_s and sweep_timeout_s must be positive")
        if self.repeats < 1 or self.repeats * len(rates) < maths.MIN_PAIRS:
            raise ValueError(
                f"repeats x len(rates) must be >= {maths.MIN_PAIRS} (the paired intervals need"
                f" {maths.MIN_PAIRS} pairs); repeats must be >= 1"
            )
        if self.prompt_tokens < 1 or self.output_tokens < 2:
            raise ValueError("prompt_tokens must be >= 1 and output_tokens >= 2 (ITL needs two)")
        if self.ttft_p95_ms <= 0 or self.itl_p95_ms <= 0:
            raise ValueError("ttft_p95_ms and itl_p95_ms must be positive")
        if not 0 < self.sustain <= 1:
            raise ValueError("sustain must be in (0, 1]")
        if self.speed_percentile not in maths.PERCENTILES:
            raise ValueError(f"speed_percentile must be one of {', '.join(maths.PERCENTILES)}")
        if self.min_speedup <= 0:
            raise ValueError("min_speedup must be positive")
        if not 0 < self.confidence < 1:
            raise ValueError("confidence must be in (0, 1)")

    @property
    def slo(self) -> Slo:
        """The SLO the sweeps are judged by."""
        return Slo(self.ttft_p95_ms, self.itl_p95_ms)


@dataclass(frozen=True)
class LoadResult:
    """Each build's sweep per pass (index ``j``: pass ``j``; its rates pair with the other's)."""

    baseline: tuple[tuple[RatePoint, ...], ...]
    candidate: tuple[tuple[RatePoint, ...], ...]
    #: Wall seconds: each build's benchmarks summed, and ``total`` (GuideLLM's start included).
    wall_s: Mapping[str, float]
    settings: LoadTierSettings
    extra: Mapping[str, Any]

    def by_side(self) -> tuple[tuple[str, tuple[tuple[RatePoint, ...], ...]], ...]:
        """``(side, its sweeps)`` for each of :data:`SIDES`."""
        return tuple((side, getattr(self, side)) for side in SIDES)


def _fmt_rate(r: float) -> str:
    return f"{r:g} req/s"


def check_baseline(points: Sequence[RatePoint], settings: LoadTierSettings) -> None:
    """A baseline sweep the tier can compare with, else one-line :class:`DataError` (exit 4):
    it sustains its first rate, and meets the SLO at some rate."""
    first = sorted(points, key=lambda p: p.offered_rate)[0]
    if not maths.sustained(first, settings.sustain):
        raise DataError(
            f"the baseline server saturates at the first rate {_fmt_rate(first.offered_rate)}"
            f" (it completed {first.achieved_rate:.3g} req/s, below sustain"
            f" {settings.sustain:g} x the offered rate)",
            "lower [tiers.load] rates (start below what the baseline serves) or lengthen"
            " duration_s",
        )
    if not any(p.timed for p in points):
        raise DataError(
            "GuideLLM observed no token stream of the baseline's sweep (every completed"
            " request was read in one burst: its client was not scheduled while tokens arrived)",
            "run the load tier where GuideLLM has a core to itself, or lower [tiers.load] rates",
        )
    if maths.goodput(points, settings.slo).last_ok is None:
        raise DataError(
            f"the SLO (TTFT p95 <= {settings.ttft_p95_ms:g} ms, ITL p95 <="
            f" {settings.itl_p95_ms:g} ms) is met at no rate on the baseline (at"
            f" {_fmt_rate(first.offered_rate)}: TTFT p95 {first.ttft_ms.p95:.4g} ms, ITL p95"
            f" {first.itl_ms.p95:.4g} ms)",
            "raise [tiers.load] ttft_p95_ms / itl_p95_ms to what users accept, or add a lower rate",
        )


def plan(settings: LoadTierSettings) -> list[Job]:
    """The benchmarks in running order: per pass and rate a pair, alternating which build
    goes first (B C, C B, B C, ...; module docstring)."""
    jobs: list[Job] = []
    rates = sorted(settings.rates)
    for j in range(settings.repeats):
        for i, rate in enumerate(rates):
            k = j * len(rates) + i
            order = SIDES if k % 2 == 0 else SIDES[::-1]
            jobs += [Job(side, j, rate) for side in order]
    return jobs


def run_tier(runner: BatchRunner, settings: LoadTierSettings, **extra: Any) -> LoadResult:
    """Run :func:`plan` through ``runner`` and gather each build's sweeps per pass; every
    baseline sweep is checked (:func:`check_baseline`)."""
    jobs = plan(settings)
    started = time.perf_counter()
    done = runner(jobs)
    total = time.perf_counter() - started
    if len(done) != len(jobs):
        raise DataError(
            f"GuideLLM returned {len(done)} results for {len(jobs)} benchmarks",
            "check its logs in [tiers.load] output_dir",
        )
    swept: dict[str, list[list[RatePoint]]] = {
        side: [[] for _ in range(settings.repeats)] for side in SIDES
    }
    wall = dict.fromkeys(SIDES, 0.0)
    for job, (point, seconds) in zip(jobs, done, strict=True):
        swept[job.side][job.repeat].append(point)
        wall[job.side] += seconds
    sweeps = {
        side: tuple(tuple(sorted(s, key=lambda p: p.offered_rate)) for s in swept[side])
        for side in SIDES
    }
    for points in sweeps["baseline"]:
        check_baseline(points, settings)
    return LoadResult(
        baseline=sweeps["baseline"],
        candidate=sweeps["candidate"],
        wall_s={**wall, "total": total},
        settings=settings,
        extra=dict(extra),
    )


def _curve(points: Sequence[RatePoint]) -> list[dict[str, Any]]:
    """One sweep as JSON-safe rows (non-finite latencies as ``None``)."""

    def num(x: float) -> float | None:
        return float(x) if math.isfinite(x) else None

    return [
        {
            "rate": p.offered_rate,
            "achieved": p.achieved_rate,
            "completed": p.completed,
            "unobserved": p.unobserved,
            "incomplete": p.incomplete,
            "errored": p.errored,
            "ttft_p50_ms": num(p.ttft_ms.p50),
            "ttft_p95_ms": num(p.ttft_ms.p95),
            "itl_p95_ms": num(p.itl_ms.p95),
            "e2e_p95_s": num(p.e2e_s.p95),
            "output_tokens_per_s": p.output_tokens_per_s,
            "conforming_rate": p.conforming_rate,
            "attainment": p.attainment,
        }
        for p in points
    ]


def _per_sweep(result: LoadResult) -> dict[str, list[dict[str, Any]]]:
    """Per build and pass: goodput, maximum sustainable rate, knee, tokens/s at saturation,
    and the mean share of the SLO used over the rates that completed requests."""
    s = result.settings
    out: dict[str, list[dict[str, Any]]] = {}
    for side, sweeps in result.by_side():
        rows = []
        for points in sweeps:
            good = maths.goodput(points, s.slo)
            top = maths.max_sustainable(points, s.sustain)
            q = s.speed_percentile
            loads = [maths.slo_load(p, s.slo, q) for p in points if p.observed]
            rows.append(
                {
                    "goodput": good.value,
                    "goodput_censored": good.censored,
                    "max_rate": top.value,
                    "max_rate_censored": top.censored,
                    "knee_rate": maths.knee_rate(points, s.sustain),
                    "output_tokens_per_s": maths.saturation_tokens_per_s(points),
                    "slo_load": sum(loads) / len(loads) if loads else None,
                }
            )
        out[side] = rows
    return out


def _pairs(result: LoadResult) -> list[maths.PairedRate]:
    """The paired rates (:func:`gate.metrics.load.paired_rates`); too few: one-line DataError."""
    pairs = maths.paired_rates(result.candidate, result.baseline)
    if len(pairs) < maths.MIN_PAIRS:
        raise DataError(
            f"only {len(pairs)} offered rates have requests completed by both builds (the"
            f" paired intervals need {maths.MIN_PAIRS}){_unobserved_clause(result)}",
            "lower [tiers.load] rates, lengthen duration_s, or add repeats",
        )
    return pairs


def unobserved_requests(result: LoadResult) -> dict[str, dict[str, int]]:
    """Per build: completed requests, and those read in one burst (left out of TTFT/ITL,
    :attr:`gate.metrics.load.RatePoint.unobserved`) over all its benchmarks."""
    return {
        side: {
            "completed": sum(p.completed for sweep in sweeps for p in sweep),
            "unobserved": sum(p.unobserved for sweep in sweeps for p in sweep),
        }
        for side, sweeps in result.by_side()
    }


def _unobserved_clause(result: LoadResult) -> str:
    """Why pairs were dropped when some benchmark observed no stream (else ``""``)."""
    blind = sum(1 for _, sweeps in result.by_side() for s in sweeps for p in s if not p.timed)
    if not blind:
        return ""
    return (
        f"; at {blind} benchmark(s) every completed request's token stream was read in one"
        " burst, so no latency was observed (a loaded load-generator machine)"
    )


def _latency_values(pairs: Sequence[maths.PairedRate]) -> dict[str, tuple[list[float], ...]]:
    """Per ``family_q``: the (candidate, baseline) values at each paired rate."""
    values: dict[str, tuple[list[float], ...]] = {}
    for pair in pairs:
        for family, pick in (("ttft", "ttft_ms"), ("itl", "itl_ms"), ("e2e", "e2e_s")):
            for q in maths.PERCENTILES:
                both = values.setdefault(f"{family}_{q}", ([], []))
                both[0].append(getattr(pair.candidate, pick).at(q))
                both[1].append(getattr(pair.baseline, pick).at(q))
    return values


def _measurement(name: str, ci: maths.RatioInterval, details: Mapping[str, Any]) -> Measurement:
    interval = None if ci.low is None or ci.high is None else [ci.low, ci.high]
    return Measurement(
        f"load.{name}",
        ci.value,
        samples=ci.ratios,
        details={
            **details,
            MeasurementDetail.RATIO_CI: interval,
            MeasurementDetail.RATIO_LEVEL: ci.level,
        },
    )


def _ratio(
    name: str,
    cand: Sequence[float],
    base: Sequence[float],
    settings: LoadTierSettings,
    details: Mapping[str, Any],
) -> Measurement:
    ci = maths.ratio_interval(cand, base, level=settings.confidence)
    return _measurement(
        name,
        ci,
        {
            **details,
            "candidate_values": [float(x) for x in cand],
            "baseline_values": [float(x) for x in base],
        },
    )


def to_measurements(result: LoadResult) -> list[Measurement]:
    """The tier's ratio measurements: ``load.slo_speedup`` (gated) and the reported ratios;
    ``load.goodput_ratio`` carries the sweeps for the report's plot and table."""
    s = result.settings
    sweeps = _per_sweep(result)
    pairs = _pairs(result)
    paired = [[p.repeat + 1, p.rate] for p in pairs]
    common: dict[str, Any] = {
        "unobserved_requests": unobserved_requests(result),
        MeasurementDetail.REPEATS: s.repeats,
        "rates": list(s.rates),
        "duration_s": s.duration_s,
        "profile": s.profile,
        "prompt_tokens": s.prompt_tokens,
        "output_tokens": s.output_tokens,
        **result.extra,
    }
    slo = {"ttft_p95_ms": s.ttft_p95_ms, "itl_p95_ms": s.itl_p95_ms}
    q = s.speed_percentile
    speed = maths.slo_speedup(pairs, s.slo, percentile=q, level=s.confidence)

    def column(side: str, key: str) -> list[float]:
        return [float(row[key]) for row in sweeps[side]]

    out = [
        _measurement(
            "slo_speedup",
            speed,
            {
                **common,
                MeasurementDetail.MIN_SPEEDUP: s.min_speedup,
                MeasurementDetail.SLO: slo,
                "pairs": paired,
                "speed_percentile": q,
                "candidate_slo_load": [maths.slo_load(p.candidate, s.slo, q) for p in pairs],
                "baseline_slo_load": [maths.slo_load(p.baseline, s.slo, q) for p in pairs],
                "wall_s": dict(result.wall_s),
            },
        ),
        _ratio(
            "goodput_ratio",
            column("candidate", "goodput"),
            column("baseline", "goodput"),
            s,
            {
                **common,
                MeasurementDetail.SLO: slo,
                "sustain": s.sustain,
                MeasurementDetail.PER_SWEEP: sweeps,
                MeasurementDetail.CURVES: {
                    "baseline": [_curve(p) for p in result.baseline],
                    "candidate": [_curve(p) for p in result.candidate],
                },
                "wall_s": dict(result.wall_s),
            },
        ),
        _ratio(
            "max_rate_ratio",
            column("candidate", "max_rate"),
            column("baseline", "max_rate"),
            s,
            {**common, "sustain": s.sustain},
        ),
        _ratio(
            "output_tokens_per_s_ratio",
            column("candidate", "output_tokens_per_s"),
            column("baseline", "output_tokens_per_s"),
            s,
            common,
        ),
    ]
    for key, (cand, base) in _latency_values(pairs).items():
        if all(math.isfinite(x) and x > 0 for x in (*cand, *base)):
            out.append(_ratio(f"{key}_ratio", cand, base, s, {**common, "pairs": paired}))
    return out


__all__ = [
    "SIDES",
    "BatchRunner",
    "Job",
    "LoadResult",
    "LoadTierSettings",
    "check_baseline",
    "plan",
    "run_tier",
    "to_measurements",
    "unobserved_requests",
]

"""The latency and memory tier: timed generation at fixed shapes, then metrics.

Workload (docs/metrics.md "Latency and memory"): a fixed prompt, exactly
``new_tokens`` generated tokens (min == max), ``warmup`` untimed runs then
``runs`` timed runs at the reference batch (the first of ``batch_sizes``);
those give the TTFT/ITL/TPOT/E2E percentiles of :mod:`gate.metrics.latency`.
A sweep over the other batch sizes measures throughput and stops cleanly at
the first out-of-memory error; the best batch's tokens/s is a metric of its
own. Memory peaks come from :class:`gate.hw.memory.MemoryTracker` around extra
runs at the reference batch, so the timed loop carries no tracker overhead.

The timed loop is handed to a ``runner(fn, rounds, warmup_rounds)`` so the
pytest suite can drive it with pytest-benchmark's ``benchmark.pedantic``.

Served builds (an engine behind an endpoint, :class:`LoadRunner`)
-----------------------------------------------------------------
The timed loop and the sweep run as for an in-process model, from the
streams (:meth:`~gate.engines.http.HTTPBackend.generate_timed`:
TTFT/ITL/TPOT/E2E from token arrival times). Then a *load run* at each of
``load_concurrency`` (like ``vllm bench serve``): ``load_requests`` streamed
requests of ``new_tokens`` tokens, sent at ``load_request_rate`` requests/s
(Poisson arrivals; 0 = all at once) under that concurrency cap
(:func:`gate.metrics.serving.load_summary`). The highest level gives the
``latency.load_*`` metrics (per-request TTFT, TPOT and E2E as samples; output
tokens/s of the run), and every level's summary is in their details, so a
regression under load is visible, not only at batch 1. Memory runs are
skipped: the model's memory is the server's, not this process's. In paired
mode the load runs alternate baseline and candidate per level too.

Paired A/B mode (``[tiers.latency] paired = true``, ``gate run --paired-latency``)
---------------------------------------------------------------------------------
Why: on a shared or noisy runner the machine's speed drifts between blocks of
runs -- on this project's shared 2-core CI machine by 30-50 % from one block to
the next -- so a candidate timed now and a baseline timed last week (or even a
minute ago) differ by more than any latency bound, and an identical build would
be blocked. In paired mode the run also loads the *baseline build* (the model
and recipe the first baseline's provenance names, i.e. the unmodified model for
an ``fp16`` baseline; :func:`reference_build`) and times the two in one
session, one request of each per round (A = baseline, B = candidate), which
goes first drawn at random, each first in half the timed rounds
(:func:`round_orders`; the sweep likewise per batch). Drift then lands on
both sides alike and cancels in the comparison: each timed metric carries the in-session baseline's value and
per-run samples in ``details["paired_reference"]`` and :mod:`gate.gating.compare`
uses those instead of the stored ones (same repeated-run test, same bounds).

When: shared or noisy CI runners (cloud VMs, runners shared with other jobs,
CPU-only checks). Dedicated GPU runners with stable clocks can compare with the
stored baseline and save the second model load. Costs: twice the timed runs and
the memory of both builds; so the memory runs happen *before* the baseline
build is loaded, and memory/parameter bytes are still compared with the stored
baseline (allocator peaks are deterministic; they do not drift). The hardware
fingerprint check against the stored baseline still applies to those.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from gate.errors import ConfigError, ModelLoadError
from gate.hw.fingerprint import Fingerprint
from gate.hw.memory import MemoryReport, MemoryTracker
from gate.hw.oom import is_out_of_memory, release_cached_memory
from gate.measurement import Measurement, MeasurementDetail
from gate.metrics.catalog import latency as latency_catalog
from gate.metrics.latency import RunLatency, percentile, run_latency, summarize
from gate.metrics.serving import LoadSummary, StreamTiming, load_summary
from gate.models.backends.base import Backend, StepClock
from gate.models.backends.capabilities import LoadRunner, last_kv_cache
from gate.provenance import ModelProvenance

#: ``runner(fn, rounds, warmup_rounds)``: call ``fn`` warmup_rounds + rounds times.
Runner = Callable[[Callable[[], object], int, int], object]
ClockFactory = Callable[[], StepClock]
TrackerFactory = Callable[[], contextlib.AbstractContextManager[Any]]
_T = TypeVar("_T")

DEFAULT_PROMPT = (
    "Explain in a few sentences why regular exercise is good for your health, "
    "and give one practical tip for getting started."
)


@dataclass(frozen=True)
class LatencySettings:
    """``[tiers.latency]`` in the run config (validated with ``build_dataclass``)."""

    #: Settings that describe this run's machine or output: never recorded into a
    #: baseline nor inherited from one (:func:`gate.tiers.registry.machine_keys`).
    MACHINE_KEYS: ClassVar[frozenset[str]] = frozenset({"history_dir", "allow_hardware_mismatch"})

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
    #: Run mode: time the baseline build in this session too, one request of each per round.
    paired: bool = False
    #: Served builds: concurrency caps of the load runs (the last one gives the metrics).
    load_concurrency: tuple[int, ...] = (1, 4)
    #: Served builds: streamed requests per load run.
    load_requests: int = 16
    #: Served builds: requests per second of a load run (Poisson arrivals); 0 = all at once.
    load_request_rate: float = 0.0

    def __post_init__(self) -> None:
        if self.new_tokens < 2:
            raise ValueError("new_tokens must be at least 2 (ITL needs two steps)")
        if self.runs < 2 or self.warmup < 0 or self.memory_runs < 1:
            raise ValueError("runs must be >= 2, warmup >= 0 and memory_runs >= 1")
        if not self.batch_sizes or any(b < 1 for b in self.batch_sizes):
            raise ValueError("batch_sizes must be a non-empty list of positive integers")
        if not self.prompt.strip():
            raise ValueError("prompt must not be empty")
        if not self.load_concurrency or any(c < 1 for c in self.load_concurrency):
            raise ValueError("load_concurrency must be a non-empty list of positive integers")
        if self.load_requests < 2 or self.load_request_rate < 0:
            raise ValueError("load_requests must be >= 2 and load_request_rate >= 0")


@dataclass(frozen=True)
class LoadLevel:
    """One load run: its concurrency cap, the per-request timings and the summary."""

    concurrency: int
    timings: tuple[StreamTiming, ...]
    summary: LoadSummary


def fingerprint_of(measurements: Mapping[str, Measurement]) -> Fingerprint | None:
    """The fingerprint a stored set of latency measurements was taken on (None if absent)."""
    for name, m in measurements.items():
        if name.startswith("latency.") and MeasurementDetail.FINGERPRINT in m.details:
            return Fingerprint.from_dict(m.details[MeasurementDetail.FINGERPRINT])
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
class PairedReference:
    """The baseline build's runs, interleaved with the candidate's in one session.

    ``against`` is the baseline ref whose build was timed (the comparison with
    other refs keeps using their stored values); ``model``/``recipe`` say what
    was loaded.
    """

    runs: tuple[RunLatency, ...]
    sweep: SweepResult
    against: str | None
    model: str
    recipe: str | None


@dataclass(frozen=True)
class LatencyResult:
    """What the tier measured, before it becomes Measurements."""

    runs: tuple[RunLatency, ...]
    sweep: SweepResult
    memory: tuple[MemoryReport, ...]
    #: Bytes of the loaded parameters and buffers, the provenance's ``parameter_bytes``
    #: (reported as ``latency.param_bytes``, the metric name baselines and thresholds store).
    parameter_bytes: int | None
    fingerprint: Fingerprint
    settings: LatencySettings
    extra_details: dict[str, Any] = field(default_factory=dict)
    #: What a KV-cache recipe's timed generation held (``kv_bytes_per_token`` ...;
    #: :func:`gate.models.backends.chunked.timed_through_cache`), None for other builds.
    kv_cache: Mapping[str, Any] | None = None
    #: Paired mode: the in-session baseline build's runs (``None`` otherwise).
    reference: PairedReference | None = None
    #: Served builds: the load runs, by concurrency (empty in process).
    load: tuple[LoadLevel, ...] = ()
    #: Paired mode with a served baseline build: its load runs.
    reference_load: tuple[LoadLevel, ...] = ()


def plain_runner(fn: Callable[[], object], rounds: int, warmup_rounds: int) -> None:
    """The default loop: warm-up calls, then timed calls."""
    for _ in range(warmup_rounds + rounds):
        fn()


#: One side of a timed comparison: a backend and its own encoding of the prompt.
TimedBuild = tuple[Backend, Sequence[int]]


@dataclass(frozen=True)
class BaselineBuild:
    """What paired mode times beside the candidate: ``load()`` returns its backend.

    ``against`` is the baseline ref it stands for; ``model`` and ``recipe`` are
    what :func:`reference_build` read from that baseline's provenance.
    """

    load: Callable[[], Backend]
    against: str | None
    model: str
    recipe: str | None
    #: Seed of the draw that orders the rounds (:func:`round_orders`); ``None``: fresh entropy.
    order_seed: int | None = None


def _no_recipe(recipe: object) -> str | None:
    text = str(recipe).strip() if recipe is not None else ""
    return None if text.lower() in ("", "none") else text


def reference_build(provenance: ModelProvenance, fallback_model: str) -> tuple[str, str | None]:
    """``(model, recipe)`` of the build a baseline was recorded from.

    The baseline's provenance names the model as given to the gate
    (``model``, e.g. ``demo`` or a path), else its ``source``, and the
    recipe applied (``None``/``"none"`` -> ``None``: the unmodified model).
    A provenance naming neither falls back to ``fallback_model`` unmodified.
    """
    model = provenance.model or provenance.source or fallback_model
    return model, _no_recipe(provenance.recipe)


def round_orders(sides: int, rng: random.Random, *, warmup: int, runs: int) -> Iterator[list[int]]:
    """The order of the sides in each round: as given or reversed, drawn at random.

    The ``warmup`` rounds toss a coin each; then every block of ``runs`` rounds
    (the timed ones, and any a runner adds) holds each order ``runs // 2``
    times (an odd one tossed), shuffled.

    Why drawn and not a fixed ``A B, B A, ...``: a fixed alternation has a
    period of four requests, and a neighbour busy on that period (or a multiple
    of it) lands on one side only, a same-build false alarm that more pairs do
    not remove. Drawn, a slow-down that depends on *when* a request runs and
    not on *which build* runs it (bursts, drift, a periodic neighbour) falls on
    either side of round ``i`` by chance, so the sign of the per-round log
    ratio ``d_i`` it adds is a fair coin, as Wilcoxon's signed-rank null has
    it (Fisher's randomization argument). Why balanced blocks and not a coin
    per round: each side then goes first in exactly half the timed rounds, as
    with the fixed alternation, so an order effect (the second request of a
    pair measured 13-15 % off on the shared CI machine in 80-pair trials)
    cannot tilt one side's median; with the count of "first" fixed, the
    signed-rank statistic varies less than under independent coins, so its
    p-value errs on the side of no alarm.
    """
    forward, reverse = list(range(sides)), list(range(sides))[::-1]
    for _ in range(warmup):
        yield rng.choice((forward, reverse))
    while True:
        block = [forward, reverse] * (runs // 2)
        block += [rng.choice((forward, reverse))] * (runs % 2)
        rng.shuffle(block)
        yield from block


def _rounds(
    sides: Sequence[TimedBuild],
    *,
    batch_size: int,
    settings: LatencySettings,
    clock_factory: ClockFactory,
    runner: Runner,
    rng: random.Random,
) -> list[list[RunLatency]]:
    """``settings.warmup`` + ``settings.runs`` rounds; each times one request per side.

    With several sides each round takes its order from :func:`round_orders`
    (drawn with ``rng``). Every call is collected; the warm-up rounds are
    the first ``warmup`` ones and are dropped (a runner may make extra calls
    afterwards, e.g. profiling).
    """
    collected: list[list[RunLatency]] = [[] for _ in sides]
    orders = round_orders(len(sides), rng, warmup=settings.warmup, runs=settings.runs)

    def one_round() -> None:
        for i in next(orders):
            backend, prompt_ids = sides[i]
            gen = backend.generate_timed(
                prompt_ids,
                batch_size=batch_size,
                new_tokens=settings.new_tokens,
                clock=clock_factory(),
            )
            collected[i].append(run_latency(gen))

    runner(one_round, settings.runs, settings.warmup)
    timed = [runs[settings.warmup : settings.warmup + settings.runs] for runs in collected]
    if len(timed[0]) < 2:
        raise ConfigError(
            f"the timed loop ran {len(timed[0])} request(s); at least 2 are needed",
            "the runner must call the request warmup + runs times",
        )
    return timed


def _sweep(
    sides: Sequence[TimedBuild],
    *,
    settings: LatencySettings,
    clock_factory: ClockFactory,
    first: Sequence[Sequence[RunLatency]],
    rng: random.Random,
) -> list[SweepResult]:
    """Tokens/s per side at each batch after the reference one (given as ``first``).

    With several sides each batch is timed in rounds as the reference one; the sweep
    stops for all sides at the first batch where any side runs out of memory.
    """
    tables: list[dict[int, tuple[float, ...]]] = [
        {settings.batch_sizes[0]: tuple(r.tokens_per_s for r in runs)} for runs in first
    ]
    oom: int | None = None
    if settings.sweep:
        for batch in settings.batch_sizes[1:]:
            try:
                measured = _rounds(
                    sides,
                    batch_size=batch,
                    settings=settings,
                    clock_factory=clock_factory,
                    runner=plain_runner,
                    rng=rng,
                )
            except Exception as exc:
                if not is_out_of_memory(exc):
                    raise
                release_cached_memory()
                oom = batch
                break
            for table, runs in zip(tables, measured, strict=True):
                table[batch] = tuple(r.tokens_per_s for r in runs)
    return [SweepResult(tokens_per_s=table, oom_batch=oom) for table in tables]


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


def _at_reference_batch(batch: int, measure: Callable[[], _T]) -> _T:
    """Run ``measure``; out of memory at the reference batch is a ModelLoadError (exit 3)."""
    try:
        return measure()
    except Exception as exc:
        if is_out_of_memory(exc):
            raise ModelLoadError(
                f"out of memory at the reference batch size {batch}",
                "lower tiers.latency.batch_sizes or new_tokens",
            ) from None
        raise


def load_run_prompts(backend: Backend, settings: LatencySettings) -> list[list[int]]:
    """The load run's prompts: the tier prompt, each prefixed with its request number
    (so that no two requests share a whole prompt and a prefix cache cannot answer one
    from another)."""
    return [
        backend.encode_prompt(f"Request {i + 1}. {settings.prompt}")
        for i in range(settings.load_requests)
    ]


def load_runs(sides: Sequence[Backend], settings: LatencySettings) -> list[list[LoadLevel]]:
    """Per side, one load run at each of ``settings.load_concurrency``.

    With two sides the order alternates per level (A B, then B A, ...): a few long runs,
    each level's pair balanced, where the timed loop's many short rounds draw their order.
    """
    rate = settings.load_request_rate or float("inf")
    prompts = [load_run_prompts(b, settings) for b in sides]
    out: list[list[LoadLevel]] = [[] for _ in sides]
    order = list(range(len(sides)))
    for level in settings.load_concurrency:
        for i in order:
            runner = sides[i]
            assert isinstance(runner, LoadRunner)
            timings, duration = runner.stream_timings(
                prompts[i], new_tokens=settings.new_tokens, request_rate=rate, max_concurrency=level
            )
            out[i].append(LoadLevel(level, tuple(timings), load_summary(timings, duration)))
        order.reverse()
    return out


def run_tier(
    backend: Backend,
    settings: LatencySettings,
    *,
    fingerprint: Fingerprint,
    clock_factory: ClockFactory,
    tracker_factory: Callable[[], MemoryTracker],
    runner: Runner = plain_runner,
    baseline_build: BaselineBuild | None = None,
) -> LatencyResult:
    """The whole workload: timed loop, sweep, memory runs.

    With ``baseline_build`` (paired mode) the memory runs come first, while
    only the candidate is loaded; then the baseline build is loaded and the
    timed loop and the sweep time baseline and candidate requests in rounds.
    """
    prompt_ids = backend.encode_prompt(settings.prompt)
    batch = settings.batch_sizes[0]

    def measure_memory() -> list[MemoryReport]:
        return memory_runs(
            backend,
            prompt_ids,
            settings=settings,
            clock_factory=clock_factory,
            tracker_factory=tracker_factory,
        )

    # the sides timed together, the candidate last: (candidate) or (baseline, candidate)
    sides: list[TimedBuild] = [(backend, prompt_ids)]
    served = isinstance(backend, LoadRunner)
    reports: list[MemoryReport] | None = [] if served else None  # the server's memory, not ours
    if baseline_build is not None:
        if reports is None:
            reports = measure_memory()  # while only the candidate takes memory
        base_backend = baseline_build.load()
        sides.insert(0, (base_backend, base_backend.encode_prompt(settings.prompt)))
    seed = baseline_build.order_seed if baseline_build is not None else None
    rng = random.Random(seed)
    timed = _at_reference_batch(
        batch,
        lambda: _rounds(
            sides,
            batch_size=batch,
            settings=settings,
            clock_factory=clock_factory,
            runner=runner,
            rng=rng,
        ),
    )
    sweeps = _sweep(sides, settings=settings, clock_factory=clock_factory, first=timed, rng=rng)
    if reports is None:
        reports = measure_memory()
    levels: list[list[LoadLevel]] = [[] for _ in sides]
    if served and all(isinstance(b, LoadRunner) for b, _ in sides):
        levels = load_runs([b for b, _ in sides], settings)
    runs, result_sweep = timed[-1], sweeps[-1]
    reference = None
    if baseline_build is not None:
        reference = PairedReference(
            runs=tuple(timed[0]),
            sweep=sweeps[0],
            against=baseline_build.against,
            model=baseline_build.model,
            recipe=baseline_build.recipe,
        )
    kv_cache = last_kv_cache(backend)
    return LatencyResult(
        runs=tuple(runs),
        sweep=result_sweep,
        memory=tuple(reports),
        parameter_bytes=backend.provenance().parameter_bytes,
        fingerprint=fingerprint,
        settings=settings,
        extra_details={"prompt_tokens": len(prompt_ids)},
        kv_cache=kv_cache,
        reference=reference,
        load=tuple(levels[-1]),
        reference_load=tuple(levels[0]) if len(sides) > 1 else (),
    )


def _peak(values: Iterator[int | None]) -> tuple[int, list[int]] | None:
    seen = [v for v in values if v is not None]
    return (max(seen), seen) if seen else None


def _per_gpu(reports: Sequence[MemoryReport], key: str) -> dict[str, int]:
    """``{"cuda:N": peak over the runs}`` of a VRAM figure ``key``, per tracked GPU."""
    out: dict[str, int] = {}
    for report in reports:
        for gpu in report.per_gpu:
            value = getattr(gpu, key, None)
            if isinstance(value, int):
                name = f"cuda:{gpu.index}"
                out[name] = max(out.get(name, 0), value)
    return out


def _paired(reference: PairedReference, value: float, samples: Sequence[float]) -> dict[str, Any]:
    """The ``details[MeasurementDetail.PAIRED_REFERENCE]`` entry of one timed metric.

    (see :mod:`gate.gating.compare`)
    """
    return {
        "against": reference.against,
        "model": reference.model,
        "recipe": reference.recipe,
        "value": float(value),
        "samples": [float(x) for x in samples],
    }


def to_measurements(result: LatencyResult) -> list[Measurement]:
    """The tier's Measurements; every one carries the fingerprint in ``details``.

    In paired mode every timed (REPEATED) metric also carries the in-session
    baseline's value and per-run samples under ``details[MeasurementDetail.PAIRED_REFERENCE]``,
    computed by the same :func:`summarize` over the baseline build's runs.
    """
    s = result.settings
    common: dict[str, Any] = {
        MeasurementDetail.FINGERPRINT: result.fingerprint.to_dict(),
        MeasurementDetail.FINGERPRINT_HASH: result.fingerprint.hash,
        MeasurementDetail.HARDWARE_HASH: result.fingerprint.hardware_hash,
        MeasurementDetail.BATCH_SIZE: s.batch_sizes[0],
        "new_tokens": s.new_tokens,
        "runs": s.runs,
        "warmup": s.warmup,
        "paired": result.reference is not None,
        **result.extra_details,
    }
    ref = result.reference
    ref_stats = summarize(ref.runs) if ref is not None else {}
    out = []
    for key, stat in summarize(result.runs).items():
        details = dict(common)
        if ref is not None:
            details[MeasurementDetail.PAIRED_REFERENCE] = _paired(
                ref, ref_stats[key].value, ref_stats[key].samples
            )
        out.append(Measurement(f"latency.{key}", stat.value, samples=stat.samples, details=details))
    out.append(_best_throughput(result, common))
    out += _memory_measurements(result, common)
    if result.parameter_bytes is not None:
        out.append(
            Measurement(latency_catalog.PARAM_BYTES, float(result.parameter_bytes), details=common)
        )
    if result.kv_cache is not None:
        out.append(
            Measurement(
                latency_catalog.KV_BYTES_PER_TOKEN,
                float(result.kv_cache["kv_bytes_per_token"]),
                details={**common, **result.kv_cache},
            )
        )
    out += latency_load_measurements(result, common)
    return out


def _best_throughput(result: LatencyResult, common: Mapping[str, Any]) -> Measurement:
    """``latency.best_tokens_per_s``: the median tokens/s at the sweep's best batch size,
    with every batch's median (and, paired, the in-session baseline's own best)."""
    ref = result.reference
    best = result.sweep.best_batch
    best_samples = result.sweep.tokens_per_s[best]
    best_details: dict[str, Any] = {
        **common,
        "best_batch": best,
        MeasurementDetail.OOM_BATCH: result.sweep.oom_batch,
        MeasurementDetail.PER_BATCH: {
            str(b): percentile(v, 50) for b, v in result.sweep.tokens_per_s.items()
        },
    }
    if ref is not None:
        ref_best = ref.sweep.tokens_per_s[ref.sweep.best_batch]
        best_details[MeasurementDetail.PAIRED_REFERENCE] = {
            **_paired(ref, percentile(ref_best, 50), ref_best),
            "best_batch": ref.sweep.best_batch,
        }
    return Measurement(
        latency_catalog.BEST_TOKENS_PER_S,
        percentile(best_samples, 50),
        samples=best_samples,
        details=best_details,
    )


def _memory_measurements(result: LatencyResult, common: Mapping[str, Any]) -> list[Measurement]:
    """The memory peaks over the timed runs (each run's value in ``per_run``, each GPU's
    in ``per_gpu``), those the runs measured."""
    out: list[Measurement] = []
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
            details = {**common, "per_run": per_run}
            per_gpu = _per_gpu(result.memory, key)
            if per_gpu:
                details["per_gpu"] = per_gpu
            out.append(Measurement(f"latency.{key}", float(value), details=details))
    return out


#: ``latency.load_<name>``: (per-request value, percentile) at the highest load level.
_LOAD_METRICS: dict[str, tuple[str, int]] = {
    "ttft_p50": ("ttft", 50),
    "ttft_p95": ("ttft", 95),
    "tpot_p50": ("tpot", 50),
    "e2e_p50": ("e2e", 50),
    "e2e_p95": ("e2e", 95),
}


def _per_request(level: LoadLevel, what: str) -> list[float]:
    done = [t for t in level.timings if t.ok]
    if what == "tpot":
        return [p for p in (t.tpot for t in done) if p is not None]
    return [t.ttft if what == "ttft" else t.e2e for t in done]


def latency_load_measurements(
    result: LatencyResult, common: Mapping[str, Any]
) -> list[Measurement]:
    """The ``latency.load_*`` metrics of a served build (none in process).

    At the highest concurrency level: the p50/p95 of the per-request TTFT, TPOT and
    E2E (samples: the per-request values) and the run's output tokens/s; every
    level's :class:`~gate.metrics.serving.LoadSummary` is in the details.
    """
    if not result.load:
        return []
    top = result.load[-1]
    ref_top = result.reference_load[-1] if result.reference_load else None
    details = {
        **common,
        "load_concurrency": top.concurrency,
        "load_requests": len(top.timings),
        "load_request_rate": result.settings.load_request_rate,
        "per_concurrency": {str(lv.concurrency): lv.summary.to_dict() for lv in result.load},
    }
    out: list[Measurement] = []
    for name, (what, q) in _LOAD_METRICS.items():
        samples = _per_request(top, what)
        if not samples:
            continue
        extra = dict(details)
        if ref_top is not None and result.reference is not None:
            ref_samples = _per_request(ref_top, what)
            if ref_samples:
                extra[MeasurementDetail.PAIRED_REFERENCE] = _paired(
                    result.reference, percentile(ref_samples, q), ref_samples
                )
        out.append(
            Measurement(
                f"latency.load_{name}",
                percentile(samples, q),
                samples=tuple(samples),
                details=extra,
            )
        )
    out.append(
        Measurement(
            latency_catalog.LOAD_OUTPUT_TOKENS_PER_S, top.summary.output_throughput, details=details
        )
    )
    return out

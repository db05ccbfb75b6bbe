"""Paired A/B latency mode, the latency flags of ``gate run`` and the suite under the plugin.

Drift is simulated where it must be deterministic: :class:`DriftingTime` is a
fake clock on which every scripted duration takes ``factor`` times longer, like
a shared runner whose neighbours come and go. The must-show checks then run on
real timings of the committed demo model on this (noisy, shared) machine.
"""

from __future__ import annotations

import json
import random
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gate.errors import DataError
from gate.gating.compare import compare_measurements
from gate.gating.thresholds import load_thresholds, packaged_thresholds_path
from gate.gating.verdict import Severity
from gate.hw.fingerprint import Fingerprint, collect_fingerprint
from gate.hw.memory import MemoryTracker
from gate.hw.timing import PerfCounterClock
from gate.measurement import Measurement, MeasurementDetail
from gate.metrics.latency import summarize
from gate.provenance import ModelProvenance
from gate.session.request import SessionRequest
from gate.session.runner import suites_dir
from gate.store.baseline import BaselineStore
from gate.tiers.latency import (
    BaselineBuild,
    LatencySettings,
    reference_build,
    round_orders,
    run_tier,
    to_measurements,
)

# pytester's in-process runs drop modules first imported inside them; C extensions
# (numpy, psutil, torch) cannot be imported twice, so the suite's imports come first.
from tests.cli_support import run_gate
from tests.fakes.timed_backend import FakeTime, ScriptedBackend

REPO = Path(__file__).resolve().parents[1]
SMALL = LatencySettings(new_tokens=8, batch_sizes=(1, 2), warmup=1, runs=10, memory_runs=1)
TIMED = ("latency.e2e_p50", "latency.ttft_p50", "latency.tpot_p50", "latency.tokens_per_s")


class DriftingTime(FakeTime):
    """A fake clock on a machine ``factor`` times slower than a quiet one."""

    def __init__(self, factor: float) -> None:
        super().__init__()
        self.factor = factor

    def advance(self, seconds: float) -> None:
        self.t += seconds * self.factor


def _fp() -> Fingerprint:
    return collect_fingerprint("cpu", linear_classes=["Linear"])


def _measure(
    backend: Any, *, baseline: BaselineBuild | None = None, settings: LatencySettings = SMALL
) -> list[Measurement]:
    result = run_tier(
        backend,
        settings,
        fingerprint=_fp(),
        clock_factory=backend.time.clock,
        tracker_factory=lambda: MemoryTracker("cpu"),
        baseline_build=baseline,
    )
    return to_measurements(result)


def _build(backend: Any, against: str = "fp16") -> BaselineBuild:
    return BaselineBuild(lambda: backend, against, "scripted", None)


def _severities(cand: list[Measurement], base: list[Measurement], against: str = "fp16") -> Any:
    thresholds = load_thresholds(packaged_thresholds_path())
    return {v.key: v for v in compare_measurements(cand, base, thresholds, against=against)}


class Logged(ScriptedBackend):
    """A scripted backend that writes each request to a shared log."""

    def __init__(self, tag: str, log: list[str], **kwargs: Any) -> None:
        super().__init__(kwargs.pop("clock_source"), **kwargs)
        self.tag, self.log = tag, log

    def generate_timed(self, prompt: Any, *, batch_size: int, new_tokens: int, clock: Any) -> Any:
        self.log.append(f"{self.tag}{batch_size}")
        return super().generate_timed(
            prompt, batch_size=batch_size, new_tokens=new_tokens, clock=clock
        )


def test_paired_mode_times_one_request_of_each_per_round_after_the_memory_runs() -> None:
    log: list[str] = []
    clock = FakeTime()
    cand = Logged("B", log, clock_source=clock, noise_cv=0.0, slowdown=2.0)
    base = Logged("A", log, clock_source=clock, noise_cv=0.0)

    def load() -> ScriptedBackend:
        log.append("load")
        return base

    build = BaselineBuild(load, "fp16", "m", None, order_seed=3)
    by_name = {m.name: m for m in _measure(cand, baseline=build)}
    rounds = SMALL.warmup + SMALL.runs
    # memory run of the candidate alone, then the baseline build, then the rounds per batch
    assert log[:2] == ["B1", "load"]
    timed = [log[i : i + 2] for i in range(2, len(log), 2)]
    assert len(timed) == 2 * rounds
    for batch, pairs in ((1, timed[:rounds]), (2, timed[rounds:])):
        assert all(sorted(p) == [f"A{batch}", f"B{batch}"] for p in pairs), pairs
    assert {p[0][0] for p in timed} == {"A", "B"}  # the order is drawn, not fixed
    e2e = by_name["latency.e2e_p50"]
    paired = e2e.details[MeasurementDetail.PAIRED_REFERENCE]
    assert (paired["against"], paired["model"], paired["recipe"]) == ("fp16", "m", None)
    # the reference is the baseline build's own runs: 20 ms + 1 ms, then 11 ms per step
    assert paired["value"] == pytest.approx(0.021 + 7 * 0.011)
    assert len(paired["samples"]) == SMALL.runs
    assert e2e.value == pytest.approx(2 * paired["value"])
    best = by_name["latency.best_tokens_per_s"].details[MeasurementDetail.PAIRED_REFERENCE]
    assert best["best_batch"] == 2
    # memory is the candidate's alone and has nothing in-session to compare with
    assert MeasurementDetail.PAIRED_REFERENCE not in by_name["latency.peak_rss_bytes"].details
    assert by_name["latency.param_bytes"].details["paired"] is True


def test_paired_reference_matches_summarize_of_the_baseline_runs() -> None:
    clock = FakeTime()
    base = ScriptedBackend(clock, seed=5)
    result = run_tier(
        ScriptedBackend(clock, seed=6),
        SMALL,
        fingerprint=_fp(),
        clock_factory=clock.clock,
        tracker_factory=lambda: MemoryTracker("cpu"),
        baseline_build=_build(base),
    )
    assert result.reference is not None
    expected = summarize(result.reference.runs)
    assert expected
    checked = set()
    for m in to_measurements(result):
        key = m.name.removeprefix("latency.")
        if key in expected:
            assert m.details[MeasurementDetail.PAIRED_REFERENCE]["value"] == expected[key].value
            assert m.details[MeasurementDetail.PAIRED_REFERENCE]["samples"] == list(
                expected[key].samples
            )
            checked.add(key)
    assert checked == set(expected)  # every summarized figure has its measurement


def test_in_session_baseline_cancels_drift_and_still_catches_a_slow_build() -> None:
    stored = _measure(ScriptedBackend(FakeTime(), seed=1))  # recorded on a quiet machine
    busy = DriftingTime(1.45)  # now the runner is shared: everything takes 45 % longer
    same = ScriptedBackend(busy, seed=2)
    # timed against the stored baseline alone, the same build is blocked ...
    unpaired = _severities(_measure(same), stored)
    assert unpaired["latency.e2e_p50"].severity is Severity.CRITICAL
    # ... timed beside the baseline build in the same session, it passes
    paired = _severities(_measure(same, baseline=_build(ScriptedBackend(busy, seed=3))), stored)
    assert max(v.severity for v in paired.values()) is Severity.PASS, paired
    assert paired["latency.e2e_p50"].details["reference"] == "in-session"
    assert "(in-session baseline)" in paired["latency.e2e_p50"].reason
    # a build twice as slow is critical on the drifting machine, 3 % is not
    slow = ScriptedBackend(busy, seed=4, slowdown=2.0)
    blocked = _severities(_measure(slow, baseline=_build(ScriptedBackend(busy, seed=5))), stored)
    for name in TIMED:
        assert blocked[name].severity is Severity.CRITICAL, name
    bit = ScriptedBackend(busy, seed=6, slowdown=1.03)
    mild = _severities(_measure(bit, baseline=_build(ScriptedBackend(busy, seed=7))), stored)
    for name in TIMED:
        assert mild[name].severity < Severity.CRITICAL, name


class PeriodicNeighbour(FakeTime):
    """A machine whose neighbour is busy during two requests in every four.

    Requests are counted as the tier takes a clock for each; those at positions
    ``busy`` (mod 4) take ``factor`` times longer. Four requests is the period
    of a fixed ``A B, B A`` alternation: counting the candidate's memory run
    first, that order puts every candidate request on positions 2 and 3.
    """

    def __init__(self, factor: float, busy: tuple[int, ...] = (2, 3)) -> None:
        super().__init__()
        self.factor, self.busy, self.requests = factor, busy, 0

    def clock(self) -> Any:
        self.requests += 1
        return super().clock()

    def advance(self, seconds: float) -> None:
        busy = (self.requests - 1) % 4 in self.busy
        self.t += seconds * (self.factor if busy else 1.0)


def test_round_orders_draws_balanced_blocks() -> None:
    orders = round_orders(2, random.Random(11), warmup=3, runs=20)
    warm = [next(orders) for _ in range(3)]
    blocks = [[next(orders) for _ in range(20)] for _ in range(200)]
    assert all(o in ([0, 1], [1, 0]) for o in warm)
    # each block of timed rounds: each side first in exactly half of them
    assert all(sum(o == [0, 1] for o in block) == 10 for block in blocks)
    # ... in a drawn order: which goes first at a given round is a fair coin across blocks
    for i in range(20):
        first = sum(block[i] == [0, 1] for block in blocks) / len(blocks)
        assert 0.38 < first < 0.62, i  # 200 draws: sd 0.035
    assert len({tuple(map(tuple, block)) for block in blocks}) == len(blocks)
    odd = round_orders(2, random.Random(5), warmup=0, runs=21)
    assert abs(sum(next(odd) == [0, 1] for _ in range(21)) - 10.5) == 0.5
    assert next(round_orders(1, random.Random(0), warmup=1, runs=4)) == [0]


def test_a_neighbour_busy_on_the_alternation_period_is_no_false_alarm() -> None:
    """The same build beside a neighbour busy two requests in four (+30 %), 40 seeds.

    A fixed ``A B, B A`` order put the candidate on every busy slot: all 40
    gates blocked (+30 %, p = 1/1024). With the order drawn the busy slots fall
    on either side by chance and the signed-rank test keeps its false-alarm
    rate (at most 1 % at ``alpha = 0.01``, fewer with the +5 % margin). A build
    twice as slow is still blocked beside the same neighbour.
    """
    blocked = 0
    for seed in range(40):
        machine = PeriodicNeighbour(1.3)
        same, base = ScriptedBackend(machine, seed=2 * seed), ScriptedBackend(machine, seed=99)
        build = BaselineBuild(lambda b=base: b, "fp16", "scripted", None, order_seed=seed)
        verdicts = _severities(_measure(same, baseline=build), [])
        blocked += any(verdicts[name].severity is Severity.CRITICAL for name in TIMED)
    assert blocked <= 1, f"{blocked} of 40 same-build gates blocked"
    machine = PeriodicNeighbour(1.3)
    slow = ScriptedBackend(machine, seed=1, slowdown=2.0)
    build = BaselineBuild(lambda: ScriptedBackend(machine, seed=2), "fp16", "s", None, order_seed=0)
    verdicts = _severities(_measure(slow, baseline=build), [])
    for name in TIMED:
        assert verdicts[name].severity is Severity.CRITICAL, name


def _timing(name: str, centre: float, seed: int, **details: Any) -> Measurement:
    samples = centre * np.random.default_rng(seed).lognormal(0.0, 0.03, 12)
    return Measurement(name, float(np.median(samples)), tuple(samples), details=details)


def test_compare_uses_the_in_session_baseline_only_for_its_ref() -> None:
    ref = _timing("latency.e2e_p50", 0.20, 1)
    paired = {"against": "fp16", "value": ref.value, "samples": list(ref.samples or ())}
    cand = _timing("latency.e2e_p50", 0.20, 2, **{MeasurementDetail.PAIRED_REFERENCE: paired})
    stored = [_timing("latency.e2e_p50", 0.10, 3)]  # timed when the machine was twice as fast
    fp16 = _severities([cand], stored, "fp16")["latency.e2e_p50"]
    assert fp16.severity is Severity.PASS and fp16.baseline_value == ref.value
    assert fp16.test == "Wilcoxon signed-rank (pairs)"
    prod = _severities([cand], stored, "prod")["latency.e2e_p50"]
    assert prod.severity is Severity.CRITICAL and prod.details["reference"] == "baseline"
    # no stored value at all: the in-session baseline still judges
    alone = _severities([cand], [], "fp16")["latency.e2e_p50"]
    assert alone.severity is Severity.PASS and alone.baseline_value == ref.value
    slower = _timing("latency.e2e_p50", 0.30, 4, **{MeasurementDetail.PAIRED_REFERENCE: paired})
    assert _severities([slower], [], "fp16")["latency.e2e_p50"].severity is Severity.CRITICAL


def test_malformed_in_session_baseline_is_a_data_error() -> None:
    bad = _timing(
        "latency.e2e_p50", 0.2, 1, **{MeasurementDetail.PAIRED_REFERENCE: {"value": "fast"}}
    )
    with pytest.raises(DataError, match="in-session baseline"):
        _severities([bad], [], "fp16")
    nan = _timing(
        "latency.e2e_p50",
        0.2,
        1,
        **{MeasurementDetail.PAIRED_REFERENCE: {"value": 0.2, "samples": [float("nan")]}},
    )
    with pytest.raises(DataError, match="non-finite"):
        _severities([nan], [], "fp16")


def test_reference_build_reads_the_baseline_provenance() -> None:
    demo = ModelProvenance(model="demo", recipe="none")
    assert reference_build(demo, "x") == ("demo", None)
    served = ModelProvenance(source="org/m", recipe="bnb-int8")
    assert reference_build(served, "x") == ("org/m", "bnb-int8")
    assert reference_build(ModelProvenance(), "./here") == ("./here", None)


def test_latency_flags_reach_the_plugin(monkeypatch: pytest.MonkeyPatch) -> None:
    import gate.session.runner
    from gate.cli import main

    seen: dict[str, Any] = {}

    def fake_run_request(request: SessionRequest, **kwargs: Any) -> int:
        assert request.inputs is not None  # gate run hands the session its checked inputs
        seen["latency"] = request.inputs.options.setting_overrides()["latency"]
        return 0

    # every session starts through run_request (a stand-in there: no tier runs)
    monkeypatch.setattr(gate.session.runner, "run_request", fake_run_request)
    argv = ["run", "--candidate", "demo", "--tiers", "latency", "--history", "hist"]
    assert main([*argv, "--allow-hardware-mismatch", "--paired-latency"]) == 0
    assert seen["latency"] == {
        "history_dir": "hist",
        "allow_hardware_mismatch": True,
        "paired": True,
    }
    assert main(argv) == 0
    assert seen["latency"] == {"history_dir": "hist"}


# --- the packaged suite under the plugin, with scripted backends on a busy machine ---------

CONFTEST = textwrap.dedent(
    """
    import itertools

    import pytest

    from tests.fakes.timed_backend import ScriptedBackend
    from tests.test_latency_paired import DriftingTime

    BUSY = DriftingTime(1.45)
    SLOWDOWN = {None: 1.0, "slow": 2.0}
    SEEDS = itertools.count(10)

    def pytest_gate_make_backend(config, model, recipe):
        if model == "scripted":
            return ScriptedBackend(BUSY, slowdown=SLOWDOWN[recipe], seed=next(SEEDS))
        return None

    @pytest.fixture(autouse=True)
    def busy_clock(request, monkeypatch):
        # the boundary: the suite's step clock reads the busy machine's fake time
        monkeypatch.setattr(request.module, "make_clock", lambda device: BUSY.clock())
    """
)

RUN_CONFIG = textwrap.dedent(
    """
    [tiers.latency]
    new_tokens = 8
    batch_sizes = [1, 2]
    warmup = 1
    runs = 10
    memory_runs = 1
    """
)

NO_PLUGINS = ("-p", "no:hypothesispytest", "-p", "no:anyio")


@pytest.fixture
def inner(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(CONFTEST)
    pytester.makefile(".toml", run=RUN_CONFIG)
    suite = (suites_dir() / "test_latency.py").read_text()
    pytester.makepyfile(test_latency=suite)
    return pytester


def _store_baseline(root: Path, fingerprint: Fingerprint) -> None:
    """The scripted model's fp16 baseline, recorded on a quiet machine."""
    quiet = FakeTime()
    result = run_tier(
        ScriptedBackend(quiet, seed=1),
        SMALL,
        fingerprint=fingerprint,
        clock_factory=quiet.clock,
        tracker_factory=lambda: MemoryTracker("cpu"),
    )
    store = BaselineStore(root / "store")
    stored = store.add(
        "scripted",
        "fp16",
        to_measurements(result),
        provenance=ModelProvenance(model="scripted", recipe="none"),
        environment={},
    )
    store.promote("scripted", "fp16", stored.number)


def _gate(pytester: pytest.Pytester, *args: str, benchmark: bool = False) -> pytest.RunResult:
    plugins = NO_PLUGINS if benchmark else (*NO_PLUGINS, "-p", "no:benchmark")
    return pytester.runpytest(
        *plugins,
        "--gate-model",
        "scripted",
        "--gate-store",
        "store",
        "--gate-thresholds",
        str(packaged_thresholds_path()),
        "--gate-config",
        "run.toml",
        "--gate-json",
        "out.json",
        *args,
    )


def _metrics(pytester: pytest.Pytester) -> dict[str, dict[str, Any]]:
    data = json.loads((pytester.path / "out.json").read_text())
    return {m["name"]: m for m in data["metrics"]}


def test_hardware_mismatch_raised_in_the_tier_is_exit_4_in_one_line(
    inner: pytest.Pytester,
) -> None:
    import dataclasses

    _store_baseline(inner.path, dataclasses.replace(_fp(), cpu_model="Other CPU 9000"))
    result = _gate(inner, "--gate-paired-latency")
    assert result.ret == 4
    output = result.stdout.str()
    result.stdout.fnmatch_lines(
        ["*error: latency baseline was measured on other hardware: cpu_model: 'Other CPU 9000'*"]
    )
    assert "Traceback" not in output and "raise BaselineError" not in output
    allowed = _gate(inner, "--gate-paired-latency", "--gate-allow-hardware-mismatch")
    assert allowed.ret == 0, allowed.stdout.str()
    allowed.stdout.fnmatch_lines(["*hardware mismatch allowed*"])


def test_busy_runner_passes_paired_blocks_unpaired_and_history_grows(
    inner: pytest.Pytester,
) -> None:
    _store_baseline(inner.path, _fp())
    unpaired = _gate(inner)  # the same build, timed on the busy machine against stored figures
    assert unpaired.ret == 1
    paired = _gate(inner, "--gate-paired-latency", "--gate-history", "hist")
    assert paired.ret == 0, paired.stdout.str()
    e2e = _metrics(inner)["latency.e2e_p50"]
    assert e2e["severity"] == "pass"
    histories = list((inner.path / "hist").glob("*.jsonl"))
    assert len(histories) == 1 and len(histories[0].read_text().splitlines()) == 1
    slow = _gate(inner, "--gate-paired-latency", "--gate-recipe", "slow", "--gate-history", "hist")
    assert slow.ret == 1
    e2e = _metrics(inner)["latency.e2e_p50"]
    assert e2e["severity"] == "critical"
    assert e2e["baseline_value"] == pytest.approx(e2e["value"] / 2, rel=0.1)
    assert len(histories[0].read_text().splitlines()) == 2


def test_paired_setting_in_the_run_config(inner: pytest.Pytester) -> None:
    _store_baseline(inner.path, _fp())
    inner.makefile(".toml", run=RUN_CONFIG + "paired = true\n")
    result = _gate(inner, "--gate-recipe", "slow")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*CRITICAL latency.e2e_p50*(in-session baseline)*"])


def test_benchmark_fixture_is_used_even_when_disabled(inner: pytest.Pytester) -> None:
    _store_baseline(inner.path, _fp())
    disabled = _gate(inner, "--gate-paired-latency", "--benchmark-disable", benchmark=True)
    assert disabled.ret == 0, disabled.stdout.str()
    assert "was not used" not in disabled.stdout.str()
    enabled = _gate(inner, benchmark=True)
    assert "was not used" not in enabled.stdout.str()
    bench = _metrics(inner)["latency.e2e_p50"]["details"]["pytest_benchmark"]
    assert bench["rounds"] == SMALL.runs


# --- real timings of the tiny real model on this shared machine -----------------------------

REAL = LatencySettings(
    new_tokens=16, batch_sizes=(1,), warmup=2, runs=20, memory_runs=1, sweep=False
)


@pytest.fixture(scope="module")
def demo_builds(demo_backend: Any, one_thread: None) -> Callable[[str | None], Any]:
    """Candidate builds of the committed demo model (the model the must-show promises name).

    Each call loads a build of its own; the baseline side is ``demo_backend``.
    """
    from gate.models.backends.loading import load_backend
    from gate.models.model_spec import ModelSpec

    return lambda recipe: load_backend(ModelSpec.parse("demo"), recipe)


def _real(candidate: Any, baseline: Any) -> list[Measurement]:
    result = run_tier(
        candidate,
        REAL,
        fingerprint=collect_fingerprint(
            "cpu", linear_classes=candidate.provenance().linear_classes
        ),
        clock_factory=PerfCounterClock,
        tracker_factory=lambda: MemoryTracker("cpu"),
        baseline_build=BaselineBuild(lambda: baseline, "fp16", "tiny", None),
    )
    return [m for m in to_measurements(result) if m.name != "latency.peak_rss_bytes"]


@pytest.mark.slow
def test_real_same_build_ten_gates_in_a_row_never_regress(
    demo_builds: Callable[[str | None], Any], demo_backend: Any
) -> None:
    """Ten paired gate runs of the demo model against its own baseline (two loads of it).

    Each gate times 20 pairs of 16-token requests (about 80 ms each here), which
    goes first drawn (each build first in half the pairs). It runs whatever the machine's load: a shared
    runner busy with other work is what the paired design is for (drift between
    pairs cancels in the per-pair ratios; a burst or a periodic neighbour lands
    on either side at random). Measured at a load average of 13-14 on two
    cores: ten clean gates, no warning. With the fixed ``A B, B A`` order this
    test blocked one gate in one of the full suite's fresh-clone runs (TTFT
    +12.5 %, p = 0.005; the cause was not seen again in 70 gates beside the
    same neighbours); with the order drawn the p-value holds (errs towards no
    alarm) whatever the time structure of the machine's load
    (:func:`test_a_neighbour_busy_on_the_alternation_period_is_no_false_alarm`).
    """
    candidate, baseline = demo_builds(None), demo_backend
    warned = 0
    for gate in range(10):
        verdicts = _severities(_real(candidate, baseline), [])
        flagged = [v.reason for v in verdicts.values() if v.severity is Severity.CRITICAL]
        assert not flagged, (f"gate {gate + 1} of 10", flagged)
        warned += any(v.severity is Severity.WARN for v in verdicts.values())
    assert warned <= 2


@pytest.mark.slow
def test_real_delay_recipe_is_critical_in_paired_mode(
    demo_builds: Callable[[str | None], Any], demo_backend: Any
) -> None:
    """``delay:5ms`` before every forward (2.2-2.4x on the demo model here) is blocked."""
    verdicts = _severities(_real(demo_builds("delay:5ms"), demo_backend), [])
    # TTFT holds one delayed forward (the prefill), E2E eight: the decode figures carry it
    for name in ("latency.e2e_p50", "latency.tpot_p50", "latency.tokens_per_s"):
        assert verdicts[name].severity is Severity.CRITICAL, verdicts[name].reason


# --- `gate run --config X.toml` end to end with [tiers.latency] paired = true -----------------


@pytest.mark.slow
def test_gate_run_with_a_paired_run_config(
    tiny_model_dir: Path, tiny_backend: Any, one_thread: None, tmp_path: Path
) -> None:
    """``gate run --config X.toml`` with ``paired = true``: the baseline build is timed in-session.

    20 pairs, not 10: with 10, Wilcoxon's one-sided p is 1/1024 only when every
    pair agrees, and one baseline request stalled by the scheduler of a loaded
    CI runner (a +55 ms gap here) lifted p past alpha = 0.01 and the +167 %
    slow-down passed. 20 pairs reach p < 0.01 with several reversed pairs.
    """
    baseline = tiny_backend
    result = run_tier(
        baseline,
        REAL,
        fingerprint=collect_fingerprint("cpu", linear_classes=baseline.provenance().linear_classes),
        clock_factory=PerfCounterClock,
        tracker_factory=lambda: MemoryTracker("cpu"),
    )
    store = BaselineStore(tmp_path / "store")
    provenance = ModelProvenance(model=str(tiny_model_dir)).updated(baseline.provenance())
    stored = store.add(tiny_model_dir.name, "fp16", to_measurements(result), provenance, {})
    store.promote(tiny_model_dir.name, "fp16", stored.number)
    config = tmp_path / "latency.toml"
    config.write_text(
        "[tiers.latency]\nnew_tokens = 8\nbatch_sizes = [1]\nwarmup = 2\nruns = 20\n"
        "memory_runs = 1\npaired = true\n"
    )
    run = run_gate(
        *("run", "--candidate", str(tiny_model_dir)),
        *("--recipe", "delay:5ms", "--tiers", "latency", "--config", str(config)),
        *("--store", str(tmp_path / "store"), "--against", "fp16"),
        *("--history", str(tmp_path / "hist"), "--json", str(tmp_path / "out.json")),
        cwd=tmp_path,
    )
    assert run.returncode == 1, run.stdout[-3000:] + run.stderr[-3000:]
    metrics = {m["name"]: m for m in json.loads((tmp_path / "out.json").read_text())["metrics"]}
    e2e = metrics["latency.e2e_p50"]
    assert e2e["severity"] == "critical", e2e["reason"]
    assert e2e["details"]["reference"] == "in-session"
    assert e2e["details"][MeasurementDetail.PAIRED_REFERENCE]["recipe"] is None
    assert metrics["latency.param_bytes"]["severity"] == "pass"  # stored, same weights
    assert len(list((tmp_path / "hist").glob("*.jsonl"))) == 1

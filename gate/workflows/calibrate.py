"""``gate calibrate``: measure a model's noise floor on this machine and derive bounds from it.

Everything runs as ordinary gate sessions in this process
(:func:`gate.session.runner.run_session`, each handed its checked inputs and a run
config built typed, never written as TOML) against a baseline recorded into a
*temporary* store, so the user's baseline store is never written:

1. **record** the model once (``record`` mode, ref ``base``) with the tier
   settings of ``--config`` (for ``demo`` without one: the demo's own settings);
2. **repeats**: the unchanged model gated against it ``repeats`` times, one
   session per tier (each tier's time is measured on its own);
3. **batch sizes**: every tier's ``batch_size`` halved and doubled (or the sizes given);
4. **prompt order** (fidelity): the candidate's prompts grouped into scoring
   batches in a seeded random order (``[tiers.fidelity] order_seed``);
5. **tail seeds** (fidelity): the baseline re-recorded with another
   ``tail_seed`` (other tail tokens in the reference pack), the model gated
   against it with the prompt order of seed ``k`` (an identical candidate
   reads KL 0 from any pack; a perturbed one shows the estimator's spread);
6. **controls** the user names: the model loaded in another dtype
   (``--dtype-control``) and the same weights behind a serving engine
   (``--serve``/``--endpoint``).

Each run-mode session hands its measurements over in process
(:func:`gate.session.handoff.collect_measurements`); per metric, the
degradation against the recorded baseline and the spread of the paired
per-item differences become a :class:`~gate.gating.calibration.bounds.NoiseRun`, and
:func:`gate.gating.calibration.bounds.calibrate_metric` derives the bounds. The
sessions' own reports go to a log file (``<out>.log``), not to the terminal.

No verdict is reached here: each session's verdicts and exit code are ``gate
run``'s own (the one judgement, :func:`gate.session.judgement.judge_run`, at the end
of the session). Calibration reads only the measurements a session hands over
and its exit code (a session that did not decide, exit 2/3/4/5, stops the
calibration with that code; a blocked one is reported as noise that crossed a
declared bound); the noise figures and bounds are derived from the
measurements, not from the sessions' verdicts.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from gate import progress
from gate.engines.settings import EngineSettings
from gate.errors import ConfigError, ExitCode, GateError, decided
from gate.gating.calibration.bounds import (
    DEFAULT_MARGIN,
    DEFAULT_QUANTILE,
    MetricCalibration,
    NoiseRule,
    NoiseRun,
    calibrate_metric,
)
from gate.gating.calibration.record import CalibrationRecord, TierTiming
from gate.gating.thresholds import Thresholds
from gate.gating.verdict import Bound
from gate.measurement import Measurement
from gate.metrics.metric_spec import MetricSpec, SampleKind
from gate.models.load_settings import LoadSettings
from gate.session.inputs import InputFiles
from gate.session.options import SessionOptions
from gate.tiers.tier_spec import (
    CALIBRATED_TIERS,
    DEFAULT_CALIBRATION_TIERS,
    check_recorded_together,
)

if TYPE_CHECKING:
    from gate.session.inputs import SessionInputs
    from gate.session.run import SessionMode
    from gate.session.run_config import RunConfig

    #: A session's checked inputs, for a mode, its options and its run config.
    _Inputs = Callable[[SessionMode, SessionOptions, RunConfig], SessionInputs]

#: Ref of the baseline recorded in the temporary store.
BASE_REF = "base"


class CalibrationFailed(GateError):
    """A calibration session did not complete (its exit code is the session's)."""

    def __init__(self, message: str, hint: str | None, code: ExitCode) -> None:
        super().__init__(message, hint)
        self.exit_code = code


@dataclass(frozen=True)
class CalibrationRequest:
    """What ``gate calibrate`` was asked to measure."""

    model: str
    #: The build's recipe or stack, in every session (``None``: the model as it is).
    recipe: str | None = None
    tiers: tuple[str, ...] = DEFAULT_CALIBRATION_TIERS
    repeats: int = 3
    #: Batch sizes to try (``None``: each tier's own halved and doubled).
    batch_sizes: tuple[int, ...] | None = None
    order_seeds: int = 1
    tail_seeds: int = 1
    dtype_control: str | None = None
    engine: EngineSettings | None = None
    #: The run config (``--config``), parsed once by the command: its ``[tiers]`` are the
    #: calibrated settings.
    config: RunConfig | None = None
    thresholds: Path | None = None
    model_slug: str | None = None
    margin: float = DEFAULT_MARGIN
    quantile: float = DEFAULT_QUANTILE
    #: Power of the MDE and sample sizes (``None``: the declared file's ``[gate] power``).
    power: float | None = None
    allow_pickle: bool = False
    #: Device, dtype and remote-code trust of every session (``--device`` ...).
    load: LoadSettings = field(default_factory=LoadSettings)
    #: Where the sessions' reports go (``None``: discarded).
    log: Path | None = None


@dataclass(frozen=True)
class Perturbation:
    """One run of the unchanged build (or a control) against a recorded baseline."""

    source: str
    tiers: tuple[str, ...]
    #: Tier settings on top of the recorded ones (``{"fidelity": {"batch_size": 8}}``).
    overrides: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    against: str = BASE_REF
    dtype: str | None = None
    engine: EngineSettings | None = None
    control: bool = False


@dataclass(frozen=True)
class CheckedCalibration:
    """A request whose inputs all validated: what the calibration will run."""

    request: CalibrationRequest
    thresholds: Thresholds
    #: Merged ``[tiers.<name>]`` tables of the calibrated tiers (base settings).
    tables: Mapping[str, Mapping[str, Any]]
    #: Extra baselines recorded with ``tail_seed`` k (ref ``tail<k>``).
    tail_refs: tuple[tuple[str, int], ...]
    perturbations: tuple[Perturbation, ...]
    #: The input files read so far (the thresholds file), each read once by every session.
    files: InputFiles = field(default_factory=InputFiles, compare=False, repr=False)

    @property
    def sessions(self) -> int:
        """Gate sessions the calibration runs (records included)."""
        return 1 + len(self.tail_refs) + len(self.perturbations)


def _demo_tables(tiers: Sequence[str]) -> dict[str, dict[str, Any]]:
    from gate.workflows.demo import DEMO_SETTINGS

    return {t: dict(DEMO_SETTINGS[t]) for t in tiers if t in DEMO_SETTINGS}


def base_tables(request: CalibrationRequest) -> dict[str, dict[str, Any]]:
    """The calibrated tiers' settings: ``--config``'s ``[tiers]``, else the demo's for ``demo``."""
    if request.config is not None:
        return {t: dict(request.config.tiers.get(t, {})) for t in request.tiers}
    if request.model == "demo":
        return _demo_tables(request.tiers)
    return {}


def _merge(
    base: Mapping[str, Mapping[str, Any]], top: Mapping[str, Mapping[str, Any]]
) -> dict[str, dict[str, Any]]:
    out = {t: dict(v) for t, v in base.items()}
    for tier, table in top.items():
        out.setdefault(tier, {}).update(table)
    return out


def _batch_size(tier: str, table: Mapping[str, Any]) -> int | None:
    from gate.tiers.registry import build_settings

    value = getattr(build_settings(tier, table), "batch_size", None)
    return value if isinstance(value, int) else None


def plan_perturbations(
    request: CalibrationRequest, tables: Mapping[str, Mapping[str, Any]]
) -> tuple[tuple[tuple[str, int], ...], tuple[Perturbation, ...]]:
    """The extra records (tail seeds) and the runs of a calibration (module docstring)."""
    tiers = request.tiers
    runs: list[Perturbation] = []
    for tier in tiers:
        runs += [Perturbation(f"repeat {i}", (tier,)) for i in range(1, request.repeats + 1)]
    own = {t: _batch_size(t, tables.get(t, {})) for t in tiers}
    if request.batch_sizes is not None:
        for size in request.batch_sizes:
            over = {t: {"batch_size": size} for t in tiers if own[t] is not None}
            runs.append(Perturbation(f"batch_size {size}", tiers, over))
    else:
        for label, scale in (("halved", 0.5), ("doubled", 2.0)):
            over = {
                t: {"batch_size": max(1, int(b * scale))}
                for t, b in own.items()
                if b is not None and max(1, int(b * scale)) != b
            }
            if over:
                runs.append(Perturbation(f"batch_size {label}", tiers, over))
    tails: list[tuple[str, int]] = []
    if "fidelity" in tiers:
        for k in range(1, request.order_seeds + 1):
            runs.append(
                Perturbation(f"prompt order {k}", ("fidelity",), {"fidelity": {"order_seed": k}})
            )
        base_seed = int(tables.get("fidelity", {}).get("tail_seed", 0))
        for k in range(1, request.tail_seeds + 1):
            ref = f"tail{k}"
            tails.append((ref, base_seed + k))
            runs.append(
                Perturbation(
                    f"tail_seed {base_seed + k}",
                    ("fidelity",),
                    {"fidelity": {"order_seed": k}},
                    against=ref,
                )
            )
    if request.dtype_control is not None:
        runs.append(
            Perturbation(
                f"dtype {request.dtype_control}", tiers, dtype=request.dtype_control, control=True
            )
        )
    if request.engine is not None:
        where = "served" if request.engine.serve is not None else "endpoint"
        runs.append(Perturbation(f"engine ({where})", tiers, engine=request.engine, control=True))
    return tuple(tails), tuple(runs)


def check_calibration(request: CalibrationRequest) -> CheckedCalibration:
    """Validate every input (loads no model, starts no server); raises a ``GateError``."""
    from gate.hw.devices import check_device
    from gate.models.model_spec import ModelSpec
    from gate.session.engine import session_engines
    from gate.session.runner import check_tiers_fit, select_tiers
    from gate.tiers.registry import validate_tables

    for tier in request.tiers:
        if tier not in CALIBRATED_TIERS:
            raise ConfigError(
                f"tier {tier!r} cannot be calibrated",
                f"calibrate {', '.join(CALIBRATED_TIERS)}; timings use --paired-latency",
            )
    selected, _ = select_tiers(request.tiers)
    check_recorded_together(selected)  # calibration records its baseline first
    if request.recipe is not None:
        from gate.session.run_config import canonical_recipe

        request = replace(request, recipe=canonical_recipe(request.recipe, "--recipe"))
    check_tiers_fit(selected, request.recipe)
    if request.repeats < 1:
        raise ConfigError(f"--repeats {request.repeats}: at least 1", "e.g. --repeats 3")
    if request.margin < 1.0:
        raise ConfigError(f"--margin {request.margin}: below 1", "the default is 2")
    if not 0.0 < request.quantile < 1.0:
        raise ConfigError(f"--quantile {request.quantile}: outside (0, 1)", "e.g. 0.95")
    ModelSpec.parse(request.model, dtype=request.dtype_control or "auto")
    if request.engine is None:
        check_device(request.load.effective_device)  # --device cuda without CUDA: exit 4 now
    files = InputFiles()
    thresholds = files.thresholds(request.thresholds)  # its [tiers] tables validated
    if request.power is None:
        request = replace(request, power=thresholds.power)
    elif not 0.0 < thresholds.alpha < request.power < 1.0:
        raise ConfigError(f"--power {request.power}: outside (alpha, 1)", "the default is 0.8")
    tables = _merge(
        {t: v for t, v in thresholds.tiers.items() if t in request.tiers}, base_tables(request)
    )
    validate_tables(tables, source="calibration settings")
    session_engines(SessionOptions(engine=request.engine))
    tails, runs = plan_perturbations(request, tables)
    return CheckedCalibration(request, thresholds, tables, tails, runs, files)


# ------------------------------------------------------------------ running


def session_config(what: str, tables: Mapping[str, Mapping[str, Any]]) -> RunConfig:
    """The run config of one calibration session: only ``[tiers.<name>]`` tables, built typed."""
    from gate.session.run_config import built_run_config

    return built_run_config(f"gate calibrate ({what})", tiers=tables)


@contextlib.contextmanager
def _quiet(log: Path | None) -> Iterator[None]:
    """The sessions' reports go to ``log`` (appended; ``None``: discarded), not to the terminal."""
    target = log if log is not None else Path(os.devnull)
    with open(target, "a", encoding="utf-8") as sink, contextlib.redirect_stdout(sink):
        yield


def paired_spread(cand: Measurement, base: Measurement, spec: MetricSpec) -> float | None:
    """Spread of the paired per-item differences: their sd (scores), the discordant rate
    (correctness); ``None`` for a point value or items that cannot be paired."""
    if spec.sample_kind not in (SampleKind.PAIRED_SCORE, SampleKind.PAIRED_BINARY):
        return None
    if not cand.samples or not base.samples:
        return None
    c = np.asarray(cand.samples, dtype=np.float64)
    b = np.asarray(base.samples, dtype=np.float64)
    if cand.sample_ids is not None and base.sample_ids is not None:
        where = {sid: i for i, sid in enumerate(base.sample_ids)}
        keep = [i for i, sid in enumerate(cand.sample_ids) if sid in where]
        c, b = c[keep], b[[where[cand.sample_ids[i]] for i in keep]]
    elif len(c) != len(b):
        return None
    if c.size < 2:
        return None
    if spec.sample_kind is SampleKind.PAIRED_BINARY:
        return float(np.mean(c != b))
    return float(np.std(c - b, ddof=1))


def noise_run(
    source: str,
    cand: Measurement,
    base: Measurement,
    spec: MetricSpec,
    bound: Bound,
    *,
    control: bool,
) -> NoiseRun:
    """One metric of one perturbation run: its degradation against the base and its spread."""
    d = bound.degradation(base.value, cand.value, higher_is_better=spec.higher_is_better)
    return NoiseRun(source, d, paired_spread(cand, base, spec), cand.n, control=control)


@dataclass(frozen=True)
class CalibrationResult:
    """What a calibration measured: per metric its calibration, and the record."""

    record: CalibrationRecord
    #: Exit codes of the run sessions by source (1: the noise crossed a declared bound).
    session_codes: Mapping[str, int]


def _hardware() -> str:
    from gate.hw.fingerprint import cpu_model

    try:
        import torch

        if torch.cuda.is_available():
            return f"{torch.cuda.get_device_name(0)} (CUDA)"
    except Exception:  # pragma: no cover - torch missing or broken: the CPU names it
        pass
    return f"{cpu_model()} (CPU)"


def run_calibration(checked: CheckedCalibration) -> CalibrationResult:
    """Record the base (and tail-seed) baselines in a temporary store, run every perturbation,
    derive each metric's calibration. A session that ends with an error raises."""
    from gate.metrics.registry import all_metrics
    from gate.session.inputs import prepare_session, store_slug
    from gate.store.baseline import BaselineStore

    request = checked.request
    specs = all_metrics()
    slug = store_slug(request.model, request.model_slug)
    runs: dict[str, list[NoiseRun]] = {}
    codes: dict[str, int] = {}
    tier_seconds: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="gate-calibrate-") as tmp:
        root = Path(tmp)
        store = root / "store"
        common = SessionOptions(
            recipe=request.recipe,
            store=store,
            thresholds=request.thresholds,
            model_slug=slug,
            allow_pickle=request.allow_pickle,
            load=request.load,
        )
        files = checked.files

        def inputs(mode: SessionMode, options: SessionOptions, config: RunConfig) -> SessionInputs:
            return prepare_session(mode, request.model, options, run_config=config, files=files)

        with progress.task("calibrate: sessions", total=checked.sessions) as step:
            refs = _record_baselines(checked, common, inputs, step)
            store_ = BaselineStore(store)
            bases = {ref: files.baseline(store_, ref, slug).measurements for ref in refs}
            for index, pert in enumerate(checked.perturbations):
                progress.note(
                    f"calibrate: run {index + 1}/{len(checked.perturbations)}: {pert.source}"
                )
                code, measured, elapsed = _run_perturbation(checked, pert, common, inputs)
                codes[pert.source] = int(code)
                if pert.source.startswith("repeat") and len(pert.tiers) == 1:
                    tier_seconds.setdefault(pert.tiers[0], []).append(elapsed)
                base = bases[pert.against]
                for m in measured:
                    spec = specs.get(m.name)
                    declared = checked.thresholds.for_metric(m.name)
                    if spec is None or m.name not in base or spec.tier not in pert.tiers:
                        continue
                    bound = declared.bound if declared is not None else Bound(1.0, 2.0)
                    runs.setdefault(m.name, []).append(
                        noise_run(pert.source, m, base[m.name], spec, bound, control=pert.control)
                    )
                step()
    base_measured = bases[BASE_REF]
    power = request.power if request.power is not None else checked.thresholds.power
    metrics = _calibrations(checked, specs, runs, base_measured, power)
    timings = {}
    for tier, seconds in tier_seconds.items():
        items = max((base_measured[n].n for n in metrics if specs[n].tier == tier), default=0)
        timings[tier] = TierTiming(tier, float(np.median(seconds)), items)
    record = CalibrationRecord(
        model=request.model,
        created=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        hardware=_hardware(),
        alpha=checked.thresholds.alpha,
        power=power,
        margin=request.margin,
        quantile=request.quantile,
        sources=tuple(dict.fromkeys(p.source for p in checked.perturbations)),
        metrics=metrics,
        timings=timings,
    )
    return CalibrationResult(record, codes)


def _record_baselines(
    checked: CheckedCalibration,
    common: SessionOptions,
    inputs: _Inputs,
    step: Callable[[], None],
) -> list[str]:
    """Record the base baseline (every requested tier) and one fidelity baseline per tail
    seed in the session's store; returns their refs. A recording that fails raises."""
    from gate.session.runner import run_session

    request = checked.request
    base_config = session_config("base settings", checked.tables)
    records: list[tuple[str, Mapping[str, Mapping[str, Any]]]] = [(BASE_REF, checked.tables)]
    for ref, seed in checked.tail_refs:
        records.append((ref, _merge(checked.tables, {"fidelity": {"tail_seed": seed}})))
    for ref, tables in records:
        progress.note(f"calibrate: recording baseline {ref}")
        config = base_config if ref == BASE_REF else session_config(ref, tables)
        tiers = request.tiers if ref == BASE_REF else ("fidelity",)
        options = replace(common, label=ref, ref=ref)
        with _quiet(request.log):
            code = run_session(inputs("record", options, config), tiers=tiers)
        if code != ExitCode.OK:
            raise CalibrationFailed(
                f"recording the {ref} baseline ended with exit {int(code)}",
                f"see {request.log}" if request.log else "re-run with --log FILE",
                code,
            )
        step()
    return [ref for ref, _ in records]


def _run_perturbation(
    checked: CheckedCalibration, pert: Perturbation, common: SessionOptions, inputs: _Inputs
) -> tuple[ExitCode, list[Measurement], float]:
    """Run one perturbation's session against its baseline: its exit code, the
    measurements it handed back and its wall time in seconds. A session that ends
    undecided (or hands nothing back) raises."""
    from gate.session.handoff import collect_measurements
    from gate.session.runner import run_session

    request = checked.request
    config = session_config(pert.source, _merge(checked.tables, pert.overrides))
    options = replace(
        common,
        against=(pert.against,),
        load=replace(common.load, dtype=pert.dtype) if pert.dtype is not None else common.load,
        engine=pert.engine,
    )
    started = time.perf_counter()
    with collect_measurements() as handed, _quiet(request.log):
        code = run_session(inputs("run", options, config), tiers=pert.tiers)
    elapsed = time.perf_counter() - started
    if not decided(code) or not handed:
        raise CalibrationFailed(
            f"calibration run {pert.source!r} ended with exit {int(code)}",
            f"see {request.log}" if request.log else "re-run with --log FILE",
            code if not decided(code) else ExitCode.INTERNAL_ERROR,
        )
    return code, list(handed[-1]), elapsed


def _calibrations(
    checked: CheckedCalibration,
    specs: Mapping[str, MetricSpec],
    runs: Mapping[str, list[NoiseRun]],
    base_measured: Mapping[str, Measurement],
    power: float,
) -> dict[str, MetricCalibration]:
    """Each metric's calibration from its noise ``runs``, its power figures at the base
    baseline's item count and value (the metric's ideal, else 1, where that value is 0)."""
    request = checked.request
    metrics: dict[str, MetricCalibration] = {}
    for name, noise in runs.items():
        spec = specs[name]
        ref_value = base_measured[name].value
        metrics[name] = calibrate_metric(
            spec,
            checked.thresholds.for_metric(name),
            noise,
            n=base_measured[name].n,
            reference=ref_value if ref_value else (spec.ideal or 1.0),
            alpha=checked.thresholds.alpha,
            noise_rule=NoiseRule(margin=request.margin, quantile=request.quantile),
            power=power,
        )
    return metrics


__all__ = [
    "BASE_REF",
    "CALIBRATED_TIERS",
    "DEFAULT_CALIBRATION_TIERS",
    "CalibrationFailed",
    "CalibrationRequest",
    "CalibrationResult",
    "CheckedCalibration",
    "Perturbation",
    "check_calibration",
    "noise_run",
    "paired_spread",
    "plan_perturbations",
    "run_calibration",
]

"""What ``gate run`` (and ``gate demo``) will do, checked before anything is measured.

:func:`plan_run` turns a run config and the command line into a
:class:`RunPlan`: the candidates (:func:`gate.session.run_config.build_candidates`),
the options their sessions share and the report files asked for.
:func:`check_plan` then validates everything a session would read, for every
candidate, without loading a model or importing a model library — the run
config, ``thresholds.toml``, every tier's settings, the recipes, the baseline
refs in the store, the calibration texts, the tiers' suites and that every
report file, the latency history and a server log can be written — and
returns what each session will use: its :class:`CheckedCandidate`, whose
inputs the session receives (:func:`gate.workflows.multirun.execute_plan`) and
does not read again. The run config is parsed once, by :func:`plan_run`; the
thresholds file and each baseline file once, by the plan's
:class:`~gate.session.inputs.InputFiles`, whatever the number of candidates.
``gate run`` runs it before the first session starts (so a typo fails in a
second with exit 4, not after an hour of measuring); ``gate run --dry-run``
stops after it and prints :func:`describe_plan` (with the CI matrix the
candidates make, :mod:`gate.workflows.matrix`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from gate.errors import GateError
from gate.report.outputs import check_targets, report_files
from gate.session.inputs import InputFiles
from gate.session.options import DEFAULT_STORE, SessionOptions
from gate.store.writable import check_writable, check_writable_dir

if TYPE_CHECKING:
    from gate.engines.settings import EngineSettings
    from gate.gating.thresholds import Thresholds
    from gate.report.outputs import ReportTargets
    from gate.session.inputs import SessionInputs
    from gate.session.run_config import Candidate, CandidateOverrides, RunConfig


def packaged_store() -> Path:
    """The packaged baseline store holding the demo model's committed baseline (gate/assets)."""
    return Path(__file__).resolve().parents[1] / "assets" / "baselines"


def store_for(model: str, store: Path) -> Path:
    """The store a candidate is judged against.

    ``store`` itself, except for the demo model when ``store`` is the default
    ``./baselines`` and holds no demo baselines: then the packaged store with the
    demo's committed baseline, so ``gate run --candidate demo`` works from any
    directory after ``pip install``.
    """
    if model != "demo" or store != DEFAULT_STORE or (store / "demo").is_dir():
        return store
    return packaged_store()


def suffixed(path: Path | None, name: str) -> Path | None:
    """``out/results.json`` -> ``out/results-<name>.json``."""
    if path is None:
        return None
    return path.with_name(f"{path.stem}-{name}{path.suffix}")


def candidate_targets(targets: ReportTargets, name: str, several: bool) -> ReportTargets:
    """The report paths of one candidate (suffixed when there are several candidates)."""
    if not several:
        return targets
    return replace(targets, **{kind: suffixed(path, name) for kind, path in report_files(targets)})


@dataclass(frozen=True)
class RunPlan:
    """The candidates of one ``gate run`` and what their sessions share."""

    candidates: tuple[Candidate, ...]
    #: Options of every candidate's session: store, thresholds, strict, run config,
    #: verbosity, latency flags (the per-candidate fields are filled by :meth:`options_for`).
    shared: SessionOptions
    #: The report files asked for (per candidate: :meth:`targets_for`).
    targets: ReportTargets
    #: One ``--candidate``: its own report only, no summary table.
    single: bool = False
    #: The run config, parsed once (``None``: none given).
    run_config: RunConfig | None = None
    #: The run's input files, each read once (thresholds, baselines) by every candidate's check.
    files: InputFiles = field(default_factory=InputFiles, compare=False, repr=False)

    @property
    def several(self) -> bool:
        """Whether more than one candidate runs (report files then get the candidate's name)."""
        return len(self.candidates) > 1

    def targets_for(self, candidate: Candidate) -> ReportTargets:
        """The report files of ``candidate`` (``out/results-<name>.json`` when several)."""
        return candidate_targets(self.targets, candidate.name, self.several)

    def options_for(self, candidate: Candidate, targets: ReportTargets) -> SessionOptions:
        """The options of ``candidate``'s session, writing the reports ``targets``."""
        store = self.shared.store if self.shared.store is not None else DEFAULT_STORE
        engine = candidate.engine
        return replace(
            self.shared,
            candidate_name=candidate.name,
            recipe=candidate.recipe,
            against=tuple(candidate.against),
            store=store_for(candidate.model, store),
            model_slug=candidate.model_slug,
            calibration=candidate.calibration,
            allow_pickle=self.shared.allow_pickle or candidate.allow_pickle,
            allow_incomplete_weights=(
                self.shared.allow_incomplete_weights or candidate.allow_incomplete_weights
            ),
            engine=engine,
            runtime=candidate.runtime,
            load=candidate.load,
            # a baseline engine turns the paired latency mode on
            paired_latency=self.shared.paired_latency or (engine is not None and engine.paired),
            reports=targets,
        )


def plan_run(
    config: Path | RunConfig | None,
    overrides: CandidateOverrides,
    shared: SessionOptions,
    targets: ReportTargets,
) -> RunPlan:
    """The plan of ``gate run``: candidates from ``config`` (a ``gate.toml`` path, parsed
    here, the one time a run reads it; or a run config a command built) and ``overrides``;
    ``shared``'s store, thresholds and strictness fall back to the config's ``[run]`` when
    not given."""
    from gate.session.run_config import build_candidates

    files = InputFiles()
    run_config = files.run_config(config) if isinstance(config, Path) else config
    candidates = build_candidates(run_config, overrides)
    if run_config is not None:
        defaults = run_config.run
        shared = replace(
            shared,
            store=shared.store or defaults.store,
            thresholds=shared.thresholds or defaults.thresholds,
            strict=shared.strict or defaults.strict,
        )
    return RunPlan(
        candidates=tuple(candidates),
        shared=replace(shared, config=run_config.path if run_config is not None else None),
        targets=targets,
        single=overrides.candidate is not None,
        run_config=run_config,
        files=files,
    )


@dataclass(frozen=True)
class CheckedCandidate:
    """A candidate whose session inputs all validated: what its session will use."""

    candidate: Candidate
    inputs: SessionInputs
    #: The tiers its session runs (those asked for that have a suite).
    tiers: tuple[str, ...]
    targets: ReportTargets


def check_plan(plan: RunPlan) -> list[CheckedCandidate]:
    """Validate every input of every candidate's session; loads no model.

    Raises the first problem as a :class:`~gate.errors.GateError` (exit 4 for
    bad input, thresholds that bound none of the metrics a candidate's tiers
    measure included; 5 when none of a candidate's tiers has a suite).
    """
    from gate.data.activation_prompts import activation_prompts_for
    from gate.gating.thresholds import require_a_bound
    from gate.metrics.registry import all_metrics
    from gate.models.precheck import check_model_file, check_recipe_runs
    from gate.session.engine import session_engines
    from gate.session.inputs import prepare_session
    from gate.session.run_config import canonical_recipe
    from gate.session.runner import check_tiers_fit, select_tiers

    if plan.several:  # the combined markdown, beside the given paths; each candidate's below
        check_targets(plan.targets)
    checked: list[CheckedCandidate] = []
    for candidate in plan.candidates:
        targets = plan.targets_for(candidate)
        options = plan.options_for(candidate, targets)
        try:  # a path that is not there first: the baselines it would be judged against follow
            check_model_file(candidate.model)
        except GateError as exc:
            raise type(exc)(f"candidate {candidate.name!r}: {exc.message}", exc.hint) from None
        inputs = prepare_session(
            "run", candidate.model, options, run_config=plan.run_config, files=plan.files
        )
        engines = session_engines(options)  # validated, nothing started or contacted
        if candidate.recipe is not None:
            canonical_recipe(candidate.recipe, f"candidate {candidate.name!r}")
            activation_prompts_for(candidate.recipe, candidate.calibration)
            try:
                check_recipe_runs(candidate.model, candidate.recipe)
            except GateError as exc:
                raise type(exc)(f"candidate {candidate.name!r}: {exc.message}", exc.hint) from None
        tiers, _ = select_tiers(candidate.tiers)
        try:
            check_tiers_fit(tiers, candidate.recipe, engines.candidate, inputs)
        except GateError as exc:
            raise type(exc)(f"candidate {candidate.name!r}: {exc.message}", exc.hint) from None
        require_a_bound(
            inputs.thresholds,
            [name for name, spec in all_metrics().items() if spec.tier in tiers],
            what=f"candidate {candidate.name!r} ({', '.join(tiers)})",
        )
        check_targets(targets)
        check_side_outputs(options, inputs, tiers, serves=_serves(engines.candidate))
        checked.append(CheckedCandidate(candidate, inputs, tiers, targets))
    return checked


def _serves(engine: EngineSettings | None) -> bool:
    """Whether the gate starts ``engine`` (``--serve``), and so writes its log."""
    return engine is not None and engine.serve is not None


def check_side_outputs(
    options: SessionOptions, inputs: SessionInputs, tiers: tuple[str, ...], *, serves: bool
) -> None:
    """The other files a session writes can be written: the latency history directory
    (when the latency tier runs) and a ``--server-log`` (when an engine is started)."""
    history = inputs.tier_settings.get("latency", {}).get("history_dir")
    if "latency" in tiers and history:
        check_writable_dir(Path(history), "--history")
    server_log = options.engine.server_log if options.engine is not None else None
    if serves and server_log is not None:
        check_writable(Path(server_log), "--server-log")


def describe_plan(plan: RunPlan, checked: list[CheckedCandidate]) -> list[str]:
    """What the plan will run, one block per candidate (``gate run --dry-run``)."""
    lines = [f"gate run --dry-run: {len(checked)} candidate(s); nothing was loaded or measured"]
    for item in checked:
        c, inputs = item.candidate, item.inputs
        against = ", ".join(f"{ref} = {b.display}" for ref, b in inputs.baselines.items())
        reports = [str(path) for _, path in report_files(item.targets)]
        lines += [
            f"candidate {c.name}: model {c.model}, recipe {c.recipe_label}",
            f"  tiers:      {', '.join(item.tiers)}",
            f"  against:    {against}",
            f"  store:      {inputs.store.root}",
            f"  thresholds: {inputs.thresholds.source}",
        ]
        engine = c.engine
        if c.runtime is not None:
            lines.append(f"  engine:     {c.runtime} (the {c.recipe_label} file, made and served)")
        elif engine is None:
            trust = ", trust_remote_code" if c.load.trust_remote_code else ""
            lines.append(
                f"  device:     {c.load.effective_device}, dtype {c.load.dtype or 'auto'}{trust}"
            )
        if engine is not None and engine.replicas == 1:
            lines.append(f"  engine:     {engine.describe()[0]}")
        elif engine is not None:
            lines.append(
                f"  engine:     {engine.replicas} replicas (requests spread, least-loaded)"
            )
            lines += [f"    replica {i}: {text}" for i, text in enumerate(engine.describe(), 1)]
        baseline = engine.baseline() if engine is not None else None
        if baseline is not None:
            lines.append(f"  baseline engine (paired latency): {baseline.describe()[0]}")
        if reports:
            lines.append(f"  reports:    {', '.join(reports)}")
        lines += ["  " + line for line in sample_size_lines(inputs.thresholds, item.tiers)]
    if plan.several and plan.targets.markdown is not None:
        lines.append(f"combined markdown: {plan.targets.markdown}")
    if not plan.single:  # the jobs of gate run --matrix (docs/self-hosted-runners.md)
        from gate.workflows.matrix import matrix_json

        lines.append(f"matrix (--matrix, one job per candidate): {matrix_json(plan.candidates)}")
    lines.append("gate: dry run OK (exit 0)")
    return lines


def sample_size_lines(thresholds: Thresholds, tiers: tuple[str, ...]) -> list[str]:
    """The sample-size plan per tier from a calibrated thresholds file's ``[calibration]``
    record (:mod:`gate.gating.calibration.plan`), or a line saying there is none."""
    from gate.gating.calibration.plan import describe_plans, plan_sample_sizes
    from gate.gating.calibration.reader import read_calibration
    from gate.metrics.registry import all_metrics

    if not thresholds.calibration:
        return [f"sample sizes: no calibration in {thresholds.source} (gate calibrate writes one)"]
    calibration = read_calibration(thresholds.calibration, thresholds.source)
    plans = plan_sample_sizes(thresholds, calibration, all_metrics(), tiers)
    if not plans:
        return [f"sample sizes: {thresholds.source} calibrates none of {', '.join(tiers)}"]
    return describe_plans(plans, calibration)


__all__ = [
    "CheckedCandidate",
    "RunPlan",
    "candidate_targets",
    "check_plan",
    "check_side_outputs",
    "describe_plan",
    "packaged_store",
    "plan_run",
    "sample_size_lines",
    "store_for",
    "suffixed",
]

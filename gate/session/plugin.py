"""The gate's pytest plugin: options, tier markers, the ``gate_run`` fixture, the verdict.

Loaded in every pytest session through the ``pytest11`` entry point, so it is
inert unless ``--gate-model`` is given: it only registers its options, the
tier markers and the ``gate_run`` fixture (which skips without a model).

With ``--gate-model``:

* ``pytest_sessionstart`` validates the inputs — thresholds, run config, the
  baseline refs (run mode) — and stops the session with exit 4 and one line
  when one is bad, before any model is loaded;
* tier tests receive the session's :class:`~gate.session.run.GateRun` through the
  ``gate_run`` fixture and record measurements with it;
* ``pytest_sessionfinish`` stores a baseline (record mode) or compares with the
  baseline(s) (run mode), writes ``--gate-json`` and sets
  ``session.exitstatus``: critical -> 1; warnings -> 0 (1 with
  ``--gate-strict``); nothing recorded -> 5; a bad baseline, threshold or data
  -> 4. A tier test that failed keeps pytest's failure status: the gate never
  approves a run whose tier crashed, and a record run stores nothing then;
* ``pytest_terminal_summary`` prints the report. Reporting hooks never raise.

Backend seam: the model is loaded on first access of ``gate_run.backend`` by
the first implementation of the hook ``pytest_gate_make_backend(config, model,
recipe)`` that returns one (a ``conftest.py`` can return an in-memory fake),
else by :func:`gate.models.backends.loading.load_backend` (with calibration texts from
``--gate-calibration`` or the packaged set when the recipe needs them,
:mod:`gate.data.calibration`).
"""

from __future__ import annotations

import io
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gate.errors import ExitCode, GateError
from gate.metrics.registry import TIERS

TIER_MARKERS: dict[str, str] = {
    "accuracy": "gate tier: perplexity and multiple-choice accuracy",
    "capability": "gate tier: capability probes with exact checkers",
    "fidelity": "gate tier: fidelity to the baseline's own outputs (CGA, KL)",
    "latency": "gate tier: latency, throughput and memory",
}


class GateHookSpecs:
    """Hooks the gate plugin calls (implement them in a ``conftest.py``)."""

    @pytest.hookspec(firstresult=True)
    def pytest_gate_make_backend(
        self, config: pytest.Config, model: str, recipe: str | None
    ) -> Any:
        """Return the Backend of ``model`` with ``recipe`` applied, or ``None`` to defer.

        The first non-``None`` result wins; with none, the transformers backend
        is loaded. Tests use it to inject an in-memory fake backend.
        """


@dataclass
class GateState:
    """Everything the plugin keeps for one session (stored in ``config.stash``)."""

    run: Any  # gate.session.run.GateRun (imported lazily)
    thresholds: Any  # gate.gating.thresholds.Thresholds
    store: Any  # gate.store.baseline.BaselineStore
    label: str
    ref: str | None
    strict: bool
    json_out: Path | None
    reports: Any = None  # gate.report.outputs.ReportTargets: --gate-html/-junit/-markdown
    annotations: str = ""  # GitHub ::error/::warning lines, printed at the start of a line
    failed: list[str] = field(default_factory=list)
    errors: list[GateError] = field(default_factory=list)
    report: Callable[[Any], None] | None = None  # writes to a rich console
    lines: list[str] = field(default_factory=list)


STATE_KEY = pytest.StashKey[GateState]()


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(GateHookSpecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("gate", "regression gate for compressed LLM builds")
    group.addoption("--gate-model", help="model under test (id, path or 'demo'); enables the gate")
    group.addoption("--gate-recipe", help="compression recipe applied at load time (e.g. bnb-nf4)")
    group.addoption(
        "--gate-mode",
        choices=("record", "run"),
        default="run",
        help="record: store a new baseline; run: compare a candidate (default)",
    )
    group.addoption("--gate-label", default="fp16", help="label of a recorded baseline")
    group.addoption("--gate-ref", help="record mode: also point this ref at the new baseline")
    group.addoption("--gate-store", default="baselines", help="baseline store directory")
    group.addoption(
        "--gate-baseline",
        action="append",
        default=[],
        help="baseline ref or file to compare with (repeatable; default: latest)",
    )
    group.addoption("--gate-thresholds", help="thresholds.toml (default: ./thresholds.toml)")
    group.addoption("--gate-strict", action="store_true", help="warnings block (exit 1)")
    group.addoption("--gate-json", help="write the results JSON here")
    group.addoption("--gate-html", help="write the self-contained HTML report here")
    group.addoption("--gate-junit", help="write the JUnit XML report here")
    group.addoption("--gate-markdown", help="write the markdown report (PR comment) here")
    group.addoption("--gate-config", help="run config TOML with [tiers.<name>] settings")
    group.addoption("--gate-model-slug", help="baseline store slug (default: from the model)")
    group.addoption(
        "--gate-calibration",
        help="calibration texts (JSONL with 'text') for prune-wanda (default: the packaged set)",
    )
    group.addoption(
        "--gate-history", help="latency tier: append the run to the latency history in this DIR"
    )
    group.addoption(
        "--gate-allow-hardware-mismatch",
        action="store_true",
        help="latency tier: compare with a baseline from other hardware (warning, not exit 4)",
    )
    group.addoption(
        "--gate-paired-latency",
        action="store_true",
        help="latency tier: time the baseline build in this session too, interleaving the two",
    )


def pytest_configure(config: pytest.Config) -> None:
    for tier in TIERS:
        config.addinivalue_line("markers", f"{tier}: {TIER_MARKERS.get(tier, 'gate tier')}")


def _backend_factory(config: pytest.Config, model: str, recipe: str | None) -> Callable[[], Any]:
    def load() -> Any:
        backend = config.hook.pytest_gate_make_backend(config=config, model=model, recipe=recipe)
        if backend is not None:
            return backend
        from gate.data.calibration import calibration_for
        from gate.models.backends.loading import load_backend
        from gate.models.spec import ModelSpec

        path = config.option.gate_calibration
        calibration = calibration_for(recipe, Path(path) if path else None)
        return load_backend(ModelSpec.parse(model), recipe, calibration=calibration)

    return load


def _model_slug(model: str, explicit: str | None) -> str:
    if explicit:
        return explicit
    from gate.models.spec import ModelSpec

    return ModelSpec.parse(model).slug


#: Settings that describe this run's machine or output, never inherited from a baseline.
LOCAL_SETTINGS = frozenset({"history_dir", "allow_hardware_mismatch"})


def _recorded_settings(baseline: Any) -> dict[str, dict[str, Any]]:
    """The tier settings a baseline was recorded with (``provenance["tier_settings"]``)."""
    if baseline is None:
        return {}
    recorded = baseline.provenance.get("tier_settings") or {}
    if not isinstance(recorded, dict):
        return {}
    return {
        str(tier): {k: v for k, v in table.items() if k not in LOCAL_SETTINGS}
        for tier, table in recorded.items()
        if tier in TIERS and isinstance(table, dict)
    }


def _build_state(config: pytest.Config) -> GateState:
    from gate.gating.thresholds import load_thresholds
    from gate.report.outputs import ReportTargets
    from gate.session.run import GateRun, load_run_config
    from gate.store.baseline import BaselineStore

    opt = config.option
    model: str = opt.gate_model
    mode = opt.gate_mode
    thresholds = load_thresholds(Path(opt.gate_thresholds) if opt.gate_thresholds else None)
    run_config = load_run_config(Path(opt.gate_config) if opt.gate_config else None)
    store = BaselineStore(Path(opt.gate_store))
    slug = _model_slug(model, opt.gate_model_slug)
    baselines = {}
    if mode == "run":
        for ref in opt.gate_baseline or ["latest"]:
            baselines[ref] = store.resolve(ref, slug)
    # A candidate is measured like its baseline was: the baseline's recorded tier
    # settings are the bottom layer, then thresholds.toml [tiers], the run config, flags.
    inherited = _recorded_settings(next(iter(baselines.values()), None))
    settings = {
        tier: {
            **inherited.get(tier, {}),
            **thresholds.tier_settings(tier),
            **run_config.get(tier, {}),
        }
        for tier in TIERS
    }
    # latency flags override [tiers.latency]
    if opt.gate_history:
        settings["latency"]["history_dir"] = str(opt.gate_history)
    if opt.gate_allow_hardware_mismatch:
        settings["latency"]["allow_hardware_mismatch"] = True
    if opt.gate_paired_latency:
        settings["latency"]["paired"] = True
    return GateState(
        run=GateRun(
            mode=mode,
            model=model,
            model_slug=slug,
            recipe=opt.gate_recipe,
            backend_factory=_backend_factory(config, model, opt.gate_recipe),
            tier_settings=settings,
            baselines=baselines,
            build_loader=lambda other, other_recipe: _backend_factory(
                config, other, other_recipe
            )(),
        ),
        thresholds=thresholds,
        store=store,
        label=opt.gate_label,
        ref=opt.gate_ref,
        strict=bool(opt.gate_strict),
        json_out=Path(opt.gate_json) if opt.gate_json else None,
        reports=ReportTargets(
            json=Path(opt.gate_json) if opt.gate_json else None,
            html=Path(opt.gate_html) if opt.gate_html else None,
            junit=Path(opt.gate_junit) if opt.gate_junit else None,
            markdown=Path(opt.gate_markdown) if opt.gate_markdown else None,
        ),
    )


def pytest_sessionstart(session: pytest.Session) -> None:
    config = session.config
    if not config.option.gate_model:
        return
    try:
        config.stash[STATE_KEY] = _build_state(config)
    except GateError as exc:
        raise pytest.UsageError(f"gate: {exc.format_line()}") from None


@pytest.fixture(scope="session")
def gate_run(request: pytest.FixtureRequest) -> Any:
    """The session's :class:`gate.session.run.GateRun`; tier tests skip without ``--gate-model``."""
    state = request.config.stash.get(STATE_KEY, None)
    if state is None:
        pytest.skip("gate tier: no --gate-model given")
    return state.run


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Remember failed tier tests and the GateErrors they raised (they decide the exit code)."""
    report = yield
    state = item.config.stash.get(STATE_KEY, None)
    if state is not None and report.failed:
        if item.nodeid not in state.failed:
            state.failed.append(item.nodeid)
        if call.excinfo is not None and isinstance(call.excinfo.value, GateError):
            error = call.excinfo.value
            state.errors.append(error)
            # bad input is one line, not a traceback
            report.longrepr = f"{type(error).__name__}: {error.format_line()}"
    return report


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    state = session.config.stash.get(STATE_KEY, None)
    if state is None:
        return
    if session.testsfailed and not state.failed:
        state.failed.append(f"{session.testsfailed} test(s)")
    try:
        code = _finish(state, int(exitstatus))
    except GateError as exc:
        state.lines.append(f"gate: error: {exc.format_line()}")
        code = int(exc.exit_code)
    except Exception as exc:  # never raise from a reporting hook
        state.lines.append(f"gate: internal error at session end: {type(exc).__name__}: {exc}")
        code = int(ExitCode.INTERNAL_ERROR)
    session.exitstatus = code
    if session.config.pluginmanager.get_plugin("terminalreporter") is None:
        sys.stdout.write(state.annotations + _render_text(state, color=False))


def _finish(state: GateState, exitstatus: int) -> int:
    """Store or compare; returns the session's exit status. May raise GateError."""
    from gate.provenance import environment

    run = state.run
    measured = list(run.measurements.values())
    problem = _problem_code(state, exitstatus)
    candidate: dict[str, Any] = {"model": run.model, "recipe": run.recipe, "slug": run.model_slug}
    if run.backend_loaded:
        candidate.update(run.backend.provenance())
    if run.mode == "record":
        if problem is not None:
            state.lines.append("gate: a tier failed; no baseline was stored")
            return problem
        if not measured:
            state.lines.append("gate: nothing was measured; no baseline was stored")
            return int(ExitCode.NO_MEASUREMENTS)
        recorded = {
            tier: {k: v for k, v in table.items() if k not in LOCAL_SETTINGS}
            for tier, table in run.tier_settings.items()
            if table
        }
        stored = state.store.add(
            run.model_slug,
            state.label,
            measured,
            {**candidate, **run.provenance, "tier_settings": recorded},
            environment(),
            run.artifacts,
        )
        state.lines.append(f"gate: stored baseline {stored.display} at {stored.path}")
        if state.ref:
            state.store.promote(run.model_slug, state.ref, stored.number)
            state.lines.append(f"gate: ref {state.ref} -> #{stored.number:04d}")
        return int(ExitCode.OK)
    return _compare(state, measured, candidate, environment(), problem)


def _problem_code(state: GateState, exitstatus: int) -> int | None:
    """The exit code a failure dictates (a GateError's, else pytest's), or None when clean."""
    for error in state.errors:
        state.lines.append(f"gate: error: {error.format_line()}")
    if state.errors:
        return int(state.errors[0].exit_code)
    if state.failed or exitstatus not in (ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        for nodeid in state.failed:
            state.lines.append(f"gate: tier test failed: {nodeid}")
        return exitstatus if exitstatus != ExitCode.OK else int(ExitCode.BLOCKED)
    return None


def _compare(
    state: GateState,
    measured: list[Any],
    candidate: dict[str, Any],
    env: dict[str, Any],
    problem: int | None,
) -> int:
    from gate.gating.compare import compare_many
    from gate.gating.verdict import decide
    from gate.report.console import render
    from gate.report.outputs import write_reports
    from gate.report.results_json import build_results
    from gate.store.baseline import check_compatible

    run = state.run
    if not measured:
        state.lines.append("gate: nothing was measured")
        return problem if problem is not None else int(ExitCode.NO_MEASUREMENTS)
    for baseline in run.baselines.values():
        check_compatible(baseline, candidate)
    verdicts = compare_many(
        measured,
        {ref: list(b.measurements.values()) for ref, b in run.baselines.items()},
        state.thresholds,
    )
    outcome = decide(verdicts, strict=state.strict)
    code = int(outcome.exit_code) if problem is None else problem
    notes = [line.removeprefix("gate: ") for line in state.lines]
    title = f"gate run: {run.model} ({run.recipe or 'no recipe'}) vs " + ", ".join(
        f"{ref} = {b.display}" for ref, b in run.baselines.items()
    )
    state.report = lambda console: render(
        outcome, console, exit_code=code, title=title, notes=notes
    )
    state.lines.clear()
    results = build_results(
        outcome,
        exit_code=code,
        baselines={ref: b.describe(ref) for ref, b in run.baselines.items()},
        candidate=candidate,
        environment=env,
        notes=notes,
    )
    # JSON, HTML, JUnit, markdown as asked; GitHub annotations + step summary under Actions
    buffer = io.StringIO()
    write_reports(results, state.reports, stream=buffer)
    state.annotations = buffer.getvalue()
    return code


def _render_text(state: GateState, *, color: bool) -> str:
    from gate.report.console import make_console

    buffer = io.StringIO()
    console = make_console(buffer, color=color)
    try:
        if state.report is not None:
            state.report(console)
        for line in state.lines:
            console.print(line, markup=False)
    except Exception as exc:  # never raise from a reporting hook
        buffer.write(f"gate: the report failed: {type(exc).__name__}: {exc}\n")
    return buffer.getvalue()


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    state = config.stash.get(STATE_KEY, None)
    if state is None:
        return
    try:
        terminalreporter.write_sep("=", "gate")
        terminalreporter.write(state.annotations)
        terminalreporter.write(_render_text(state, color=bool(terminalreporter.hasmarkup)))
    except Exception as exc:  # never raise from a reporting hook
        sys.stderr.write(f"gate: the report failed: {type(exc).__name__}: {exc}\n")

"""The gate's pytest plugin: options, tier markers, the ``gate_run`` fixture, the verdict.

Loaded in every pytest session through the ``pytest11`` entry point, this
module is inert unless a session is asked for: it registers the ``--gate-*``
options (:mod:`gate.session.flags`), the tier markers, the backend hook and
the ``gate_run`` fixture (which skips without a model). A session is asked for
in one of two ways, both ending in one typed
:class:`~gate.session.request.SessionRequest`: ``gate run`` and friends pass
a :class:`~gate.session.request.SessionRequestPlugin` carrying it to ``pytest.main(plugins=...)``
(no ``--gate-*`` strings are built), and a user running pytest directly gives
``--gate-model`` and the other ``--gate-*`` options, read once by
:func:`gate.session.flags.request_from_pytest`. Then ``pytest_configure``
registers a :class:`GatePlugin` for the session, the way pytest registers its
own optional plugins (``--stepwise``, ``--junit-xml``), and keeps the
session's :class:`GateState` in ``config.stash``:

* ``pytest_sessionstart`` takes the inputs the request carries, read and
  checked by the command (``gate run``: :func:`gate.workflows.plan.check_plan`);
  run directly with ``--gate-model``, it reads and validates them itself
  (:func:`gate.session.inputs.prepare_session`: thresholds, run config,
  baseline refs, every tier's settings, the report paths) and stops the
  session with exit 4 and one line when one is bad, before any model is loaded;
* tier tests receive the session's :class:`~gate.session.run.GateRun` through
  the ``gate_run`` fixture and record measurements with it;
* ``pytest_sessionfinish`` hands the run to
  :func:`gate.session.finish.store_or_compare` and sets ``session.exitstatus``:
  critical -> 1; warnings -> 0 (1 with ``--gate-strict``); nothing recorded
  -> 5; a bad baseline, threshold or data -> 4. A tier test that failed keeps
  pytest's failure status: the gate never approves a run whose tier crashed,
  and a record run stores nothing then;
* ``pytest_terminal_summary`` prints the report. Reporting hooks never raise.

Backend seam: the model is loaded on first access of ``gate_run.backend`` by
the first implementation of the hook ``pytest_gate_make_backend(config, model,
recipe)`` that returns one (a ``conftest.py`` can return an in-memory fake),
else by :func:`gate.models.backends.loading.load_backend` (with calibration
texts from ``--gate-calibration`` or the packaged set when the recipe needs
them, :mod:`gate.data.activation_prompts`).

Served builds (``--gate-serve``/``--gate-endpoint``, :mod:`gate.session.engine`):
the backend is an engine opened with :func:`gate.engines.opening.open_engine` on
the session's ``ExitStack`` on first access, so a server gate starts runs once
per session and is stopped when the session finishes, however it finishes
(a failure, Ctrl-C); a failure to open it is remembered, not retried by every
tier test. ``--gate-baseline-serve``/``--gate-baseline-endpoint`` is the
baseline build of the paired latency mode, opened the same way.
"""

from __future__ import annotations

import contextlib
import io
import sys
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from gate.errors import ExitCode, GateError, exit_label
from gate.metrics.registry import TIERS
from gate.session.flags import add_options, request_from_pytest
from gate.session.interrupt_repr import drop_lineless_frames
from gate.session.options import SessionOptions
from gate.session.request import SessionRequest, SessionRequestPlugin

if TYPE_CHECKING:
    from gate.engines.settings import EngineSettings
    from gate.models.backends.base import Backend
    from gate.session.finish import SessionEnd
    from gate.session.inputs import SessionInputs
    from gate.session.run import GateRun

TIER_MARKERS: dict[str, str] = {
    "accuracy": "gate tier: perplexity and multiple-choice accuracy",
    "capability": "gate tier: capability probes with exact checkers",
    "fidelity": "gate tier: fidelity to the baseline's own outputs (CGA, KL)",
    "generation": "gate tier: free-running greedy answers against the baseline's (loops, stops, length)",
    "judge": "gate tier: pairwise LLM judges against the baseline's answers (Elo delta)",
    "latency": "gate tier: latency, throughput and memory",
    "load": "gate tier: served load A/B with GuideLLM (goodput at an SLO, the knee)",
    "speculative": "gate tier: speculative decoding (lossless tokens, acceptance length, speed-up)",
}

#: Name under which :class:`GatePlugin` is registered with pytest's plugin manager.
PLUGIN_NAME = "gate-session"
#: Attribute set on the report of a tier test that raised a ``GateError``.
GATE_ERROR_ATTR = "gate_error"
#: pytest's result category of such a test (``1 gate error in 12.0s``).
GATE_ERROR_CATEGORY = "gate error"


class GateHookSpecs:
    """Hooks the gate plugin calls (implement them in a ``conftest.py``)."""

    @pytest.hookspec(firstresult=True)
    def pytest_gate_make_backend(
        self, config: pytest.Config, model: str, recipe: str | None
    ) -> Backend | None:
        """Return the Backend of ``model`` with ``recipe`` applied, or ``None`` to defer.

        The first non-``None`` result wins; with none, the transformers backend
        is loaded. Tests use it to inject an in-memory fake backend.
        """


@dataclass
class GateState:
    """Everything the plugin keeps for one session (stored in ``config.stash``)."""

    run: GateRun
    inputs: SessionInputs
    #: Node ids of failed tier tests.
    failed: list[str] = field(default_factory=list)
    #: GateErrors raised by tier tests (the first decides the exit code).
    errors: list[GateError] = field(default_factory=list)
    #: ``gate:`` lines printed after the report.
    lines: list[str] = field(default_factory=list)
    #: How the session ended (set at session finish).
    end: SessionEnd | None = None


STATE_KEY = pytest.StashKey[GateState]()
PLUGIN_KEY = pytest.StashKey["GatePlugin"]()


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(GateHookSpecs)


@pytest.hookimpl(tryfirst=True)
def pytest_keyboard_interrupt(excinfo: pytest.ExceptionInfo[BaseException]) -> None:
    """Before pytest formats an interrupt: drop the traceback entries a signal can leave
    without a line number (:mod:`gate.session.interrupt_repr`), so Ctrl-C stays exit 2."""
    drop_lineless_frames(excinfo)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("gate", "regression gate for compressed LLM builds")
    group.addoption("--gate-model", help="model under test (id, path or 'demo'); enables the gate")
    group.addoption(
        "--gate-mode",
        choices=("record", "run"),
        default="run",
        help="record: store a new baseline; run: compare a candidate (default)",
    )
    add_options(group)


def _passed_request(config: pytest.Config) -> SessionRequest | None:
    """The request of a :class:`SessionRequestPlugin` handed to ``pytest.main`` (or ``None``)."""
    for plugin in config.pluginmanager.get_plugins():
        if isinstance(plugin, SessionRequestPlugin):
            return plugin.request
    return None


def pytest_configure(config: pytest.Config) -> None:
    for tier in TIERS:
        config.addinivalue_line("markers", f"{tier}: {TIER_MARKERS.get(tier, 'gate tier')}")
    request = _passed_request(config)
    if request is not None or config.getoption("gate_model"):
        plugin = GatePlugin(config, request)
        config.stash[PLUGIN_KEY] = plugin
        config.pluginmanager.register(plugin, PLUGIN_NAME)


def pytest_unconfigure(config: pytest.Config) -> None:
    plugin = config.stash.get(PLUGIN_KEY, None)
    if plugin is not None:
        del config.stash[PLUGIN_KEY]
        config.pluginmanager.unregister(plugin)
        plugin.engines.close()  # every server the session started is stopped, whatever happened


@pytest.fixture(scope="session")
def gate_run(request: pytest.FixtureRequest) -> GateRun:
    """The session's :class:`gate.session.run.GateRun`; tier tests skip without ``--gate-model``."""
    state = request.config.stash.get(STATE_KEY, None)
    if state is None:
        pytest.skip("gate tier: no --gate-model given")
    return state.run


class GatePlugin:
    """The gate's hooks for one session (a passed request, or ``--gate-model``)."""

    def __init__(self, config: pytest.Config, request: SessionRequest | None = None) -> None:
        self.config = config
        #: The typed request handed to pytest (``None``: read from the ``--gate-*`` options).
        self.request = request
        #: Engines (servers) opened for this session; closed when it finishes.
        self.engines = contextlib.ExitStack()

    @property
    def state(self) -> GateState | None:
        """The session's state (``None`` until the session started, or when it could not)."""
        return self.config.stash.get(STATE_KEY, None)

    def _backend_loader(self, options: SessionOptions) -> Callable[[str, str | None], Backend]:
        """Loads ``(model, recipe)``: the ``pytest_gate_make_backend`` hook, else transformers
        (with the session's calibration texts, device, dtype, remote-code trust, ``allow_pickle``
        and ``allow_incomplete_weights``)."""
        config = self.config

        def load(model: str, recipe: str | None) -> Backend:
            backend: Backend | None = config.hook.pytest_gate_make_backend(
                config=config, model=model, recipe=recipe
            )
            if backend is not None:
                return backend
            from gate.data.activation_prompts import activation_prompts_for
            from gate.models.backends.loading import load_candidate

            texts = activation_prompts_for(recipe, options.calibration)
            spec = options.load.spec(model, allow_pickle=options.allow_pickle)
            return load_candidate(
                spec,
                recipe,
                calibration=texts,
                allow_incomplete_weights=options.allow_incomplete_weights,
            )

        return load

    def _engine_opener(
        self,
        model: str,
        engine: EngineSettings,
        log: Path,
        opener: Callable[[], contextlib.AbstractContextManager[Backend]] | None = None,
    ) -> Callable[[], Backend]:
        """Opens ``engine`` once on the session's stack; a failure is remembered and re-raised.

        ``opener`` replaces :func:`gate.engines.opening.open_engine` (``--engine llama.cpp``:
        the recipe's file made, then served)."""
        outcome: list[Backend | GateError] = []

        def open_() -> Backend:
            if not outcome:
                from gate.engines.opening import open_engine, replica_log
                from gate.engines.replicas import replica_lines
                from gate.models.model_spec import ModelSpec

                state = self.state
                if engine.serve is not None and state is not None:
                    state.lines += [
                        f"gate: server log: {replica_log(log, i)}" for i in range(engine.replicas)
                    ]
                try:
                    opened = (
                        opener()
                        if opener is not None
                        else open_engine(
                            ModelSpec.parse(model), engine, log_path=log, warn=self._warn
                        )
                    )
                    backend = self.engines.enter_context(opened)
                    if state is not None:
                        state.lines += [f"gate: {line}" for line in replica_lines(backend)]
                    outcome.append(backend)
                except GateError as exc:
                    outcome.append(exc)
            first = outcome[0]
            if isinstance(first, GateError):
                raise first
            return first

        return open_

    def _made_engine(self, model: str, options: SessionOptions, log: Path) -> Callable[[], Backend]:
        """The opener of a ``gguf-*`` recipe's file run by ``--engine llama.cpp``
        (:func:`gate.engines.llama_cpp.served.open_made_engine`), on the session's stack."""
        from gate.engines.registry import dialect_class
        from gate.engines.settings import EngineSettings
        from gate.models.methods.registry import get_method
        from gate.models.recipes import parse_recipe

        spec = options.load.spec(model, allow_pickle=options.allow_pickle)
        recipe = parse_recipe(options.recipe)
        method = get_method(recipe.name)
        server = dialect_class(method.runtime or "").server_name
        placeholder = EngineSettings(serve=server)  # the log line; the command is made later
        return self._engine_opener(
            model,
            placeholder,
            log,
            opener=lambda: method.open_in_runtime(spec, recipe, log),
        )

    def _warn(self, line: str) -> None:
        """A warning of the serving engine (a dropped replica): now on stderr, and after
        the report."""
        from gate import progress

        progress.note(line)
        state = self.state
        if state is not None:
            state.lines.append(f"gate: {line}")

    def _build_state(self) -> GateState:
        from gate.report.outputs import check_targets
        from gate.session.engine import server_log_path, session_engines
        from gate.session.inputs import prepare_session
        from gate.session.run import GateRun

        request = self.request or request_from_pytest(self.config.option)
        assert request is not None  # registered only with a request or --gate-model
        model = request.model
        inputs = request.inputs  # read and checked by the command that asked for the session
        if inputs is None:  # pytest run directly: read here, before any tier test measures
            inputs = prepare_session(request.mode, model, request.options)
            check_targets(inputs.options.reports, prefix="--gate-")
        options = inputs.options
        engines = session_engines(options)
        load = self._backend_loader(options)
        factory: Callable[[], Backend] = _once(lambda: load(model, options.recipe))
        paired_build = None
        if engines.candidate is not None:
            factory = self._engine_opener(model, engines.candidate, server_log_path(options))
        elif options.runtime is not None:  # --engine llama.cpp: the recipe's file, served
            factory = self._made_engine(model, options, server_log_path(options))
        served = engines.candidate is not None or options.runtime is not None
        plain_build = None
        if engines.candidate is not None:  # a speculating server's plain twin, started on demand
            from gate.engines.served_speculation import plain_engine

            plain = plain_engine(engines.candidate)
            if plain is not None:
                log = server_log_path(options)
                log = log.with_name(f"{log.stem}.plain{log.suffix}")
                plain_build = self._engine_opener(model, plain, log)
        if engines.baseline is not None:
            paired_build = self._engine_opener(
                model, engines.baseline, server_log_path(options, baseline=True)
            )
        run = GateRun(
            mode=inputs.mode,
            model=model,
            model_slug=inputs.model_slug,
            recipe=options.recipe,
            backend_factory=factory,
            tier_settings=inputs.tier_settings,
            baselines=inputs.baselines,
            build_loader=load,
            paired_build=paired_build,
            plain_build=plain_build,
            in_process_device=None if served else options.load.effective_device,
        )
        return GateState(run=run, inputs=inputs)

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        try:
            self.config.stash[STATE_KEY] = self._build_state()
        except GateError as exc:
            raise pytest.UsageError(f"gate: {exc.format_line()}") from None

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        """Remember failed tier tests and the GateErrors they raised (they decide the exit code)."""
        report = yield
        state = self.state
        if state is not None and report.failed:
            if item.nodeid not in state.failed:
                state.failed.append(item.nodeid)
            if call.excinfo is not None and isinstance(call.excinfo.value, GateError):
                error = call.excinfo.value
                state.errors.append(error)
                # the gate prints it once, in its own section: no traceback, no FAILURES entry
                report.longrepr = f"{type(error).__name__}: {error.format_line()}"
                setattr(report, GATE_ERROR_ATTR, True)
        return report

    def pytest_runtest_call(self, item: pytest.Item) -> None:
        """Each tier test starts a new reading of what the compression did."""
        state = self.state
        if state is not None:
            state.run.begin_test()

    def pytest_report_teststatus(
        self, report: pytest.TestReport, config: pytest.Config
    ) -> tuple[str, str, str] | None:
        """A tier test stopped by a ``GateError`` is counted as a "gate error", not as a
        failure, so pytest's FAILURES section and short summary do not repeat the line
        the gate prints (the session's exit status is the error's own)."""
        if getattr(report, GATE_ERROR_ATTR, False):
            return GATE_ERROR_CATEGORY, "E", "GATE ERROR"
        return None

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        from gate.session.finish import SessionEnd, store_or_compare

        state = self.state
        if state is None:
            return
        if session.testsfailed and not state.failed:
            state.failed.append(f"{session.testsfailed} test(s)")
        try:
            problem = _problem_code(state, int(exitstatus))
            state.end = store_or_compare(
                state.run,
                state.inputs,
                problem=problem,
                lines=state.lines,
                tiers=_session_tiers(session),
            )
            self.engines.close()  # a started server stops before the report is printed
        except GateError as exc:
            state.end = SessionEnd(
                int(exc.exit_code), [*state.lines, f"gate: error: {exc.format_line()}"]
            )
        except Exception as exc:  # never raise from a reporting hook
            line = f"gate: internal error at session end: {type(exc).__name__}: {exc}"
            state.end = SessionEnd(int(ExitCode.INTERNAL_ERROR), [*state.lines, line])
        session.exitstatus = state.end.code
        if session.config.pluginmanager.get_plugin("terminalreporter") is None:
            sys.stdout.write(state.end.annotations + _render_text(state.end, color=False))

    def pytest_terminal_summary(
        self, terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config
    ) -> None:
        state = self.state
        if state is None or state.end is None:
            return
        try:
            terminalreporter.write_sep("=", "gate")
            terminalreporter.write(state.end.annotations)
            terminalreporter.write(_render_text(state.end, color=bool(terminalreporter.hasmarkup)))
        except Exception as exc:  # never raise from a reporting hook
            sys.stderr.write(f"gate: the report failed: {type(exc).__name__}: {exc}\n")


def _once(load: Callable[[], Backend]) -> Callable[[], Backend]:
    """``load``, except that a model that failed to load with a ``GateError`` is not loaded
    again by the next tier test: the same error is raised at once."""
    failed: list[GateError] = []

    def load_once() -> Backend:
        if failed:
            raise failed[0]
        try:
            return load()
        except GateError as exc:
            failed.append(exc)
            raise

    return load_once


def _session_tiers(session: pytest.Session) -> tuple[str, ...] | None:
    """The tiers whose tests the session collected (``None`` when it collected none)."""
    items = getattr(session, "items", None) or []
    tiers = {mark.name for item in items for mark in item.iter_markers() if mark.name in TIERS}
    return tuple(sorted(tiers)) or None


def _problem_code(state: GateState, exitstatus: int) -> int | None:
    """The exit code a failure dictates (a GateError's, else pytest's), or None when clean.

    Appends one ``gate:`` line per failure to ``state.lines``.
    """
    for line in dict.fromkeys(error.format_line() for error in state.errors):
        state.lines.append(f"gate: error: {line}")  # each tier test hit by one error: once
    if state.errors:
        return int(state.errors[0].exit_code)
    if state.failed or exitstatus not in (ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        for nodeid in state.failed:
            state.lines.append(f"gate: tier test failed: {nodeid}")
        return exitstatus if exitstatus != ExitCode.OK else int(ExitCode.BLOCKED)
    return None


def _render_text(end: SessionEnd, *, color: bool) -> str:
    """The report (when one was made) and the ``gate:`` lines, as text; without a report
    a failed session ends with what its exit code means (``gate: ERROR (input, exit 4)``)."""
    from gate.report.console import make_console

    buffer = io.StringIO()
    console = make_console(buffer, color=color)
    try:
        if end.render is not None:
            end.render(console)
        for line in end.lines:  # one line each, never wrapped (logs are grepped)
            console.print(line, markup=False, soft_wrap=True)
        if end.render is None and end.code != ExitCode.OK:  # a report ends with its own
            console.print(f"gate: {exit_label(end.code)}", markup=False, soft_wrap=True)
    except Exception as exc:  # never raise from a reporting hook
        buffer.write(f"gate: the report failed: {type(exc).__name__}: {exc}\n")
    return buffer.getvalue()

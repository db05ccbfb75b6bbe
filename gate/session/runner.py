"""Build and run the pytest invocation behind ``gate run`` and ``gate baseline record``.

The tier suites ship inside the package (``suites/test_<tier>.py``); the
runner selects the requested tiers' files and markers (``-m "fidelity or
latency"``), hands the session its typed
:class:`~gate.session.request.SessionRequest` as a plugin object
(:class:`~gate.session.request.SessionRequestPlugin`; no ``--gate-*``
argument strings) and returns pytest's exit status, whose numbers are the
gate's (:class:`~gate.errors.ExitCode`). A command that checked the session's
inputs hands them over with it (:func:`run_session`), so the session reads
none of them again; :func:`run_pytest` leaves the reading to the session. A tier asked for whose suite does
not exist is reported as unavailable, never faked.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

from gate import progress
from gate.errors import ConfigError, ExitCode, ModelLoadError, NothingMeasuredError
from gate.metrics.registry import check_tier
from gate.session.options import SessionOptions
from gate.session.request import SessionRequest, SessionRequestPlugin
from gate.session.run import MODES, SessionMode
from gate.tiers.tier_spec import DEFAULT_TIERS, TIER_SPECS, check_recorded_together, tier_spec

if TYPE_CHECKING:
    from gate.engines.settings import EngineSettings
    from gate.models.recipes import Recipe
    from gate.session.inputs import SessionInputs


def suites_dir() -> Path:
    """The installed tier suites (``suites/`` in a checkout, ``gate/suites`` in a wheel)."""
    spec = importlib.util.find_spec("gate.suites")
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError("the tier suites (gate.suites) are not installed", "reinstall gate")
    return Path(next(iter(spec.submodule_search_locations))).resolve()


def parse_tiers(text: str | None) -> tuple[str, ...] | None:
    """``"fidelity,latency"`` -> ``("fidelity", "latency")``; ``None``/empty -> ``None`` (the
    default tiers, :func:`select_tiers`)."""
    if not text or not text.strip():
        return None
    tiers = tuple(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))
    return tuple(check_tier(tier) for tier in tiers)


def available_tiers(directory: Path | None = None) -> tuple[str, ...]:
    """Tiers whose suite file exists."""
    root = directory if directory is not None else suites_dir()
    return tuple(s.name for s in TIER_SPECS if (root / s.suite).is_file())


def select_tiers(
    tiers: Sequence[str] | None, directory: Path | None = None
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(runnable, missing)``: the tiers asked for (``None``: all but the opt-in ones,
    :data:`~gate.tiers.tier_spec.DEFAULT_TIERS`) with and without a suite.

    None runnable: :class:`NothingMeasuredError` (exit 5).
    """
    root = directory if directory is not None else suites_dir()
    wanted = tuple(tiers) if tiers else DEFAULT_TIERS
    present = available_tiers(root)
    selected = tuple(t for t in wanted if t in present)
    if not selected:
        raise NothingMeasuredError(
            f"none of the requested tiers ({', '.join(wanted)}) is available",
            f"available: {', '.join(present) or 'none'}",
        )
    return selected, tuple(t for t in wanted if t not in present)


def check_tiers_fit(
    tiers: Sequence[str],
    recipe: str | None,
    engine: EngineSettings | None = None,
    inputs: SessionInputs | None = None,
) -> None:
    """Tiers that need a kind of build get one, each refusal one line (exit 4), before
    anything loads: the speculative tier needs a ``spec-*`` part (served, ``engine``: a
    ``--serve`` command that speculates); the latency tier does not time one (its per-step
    clock does not see speculative steps; ``speculative.speedup`` does); with the session's
    ``inputs``, sampled answers fit the build and the baseline (:func:`_check_sampling`)."""
    from gate.metrics.catalog.latency import TIER as LATENCY
    from gate.metrics.catalog.speculative import TIER as SPECULATIVE

    if SPECULATIVE in tiers and engine is not None:
        from gate.engines.serve import parse_command
        from gate.engines.served_speculation import require_served_speculation

        commands = engine.serve_commands
        serve = parse_command(commands[0]) if commands and not engine.endpoints else None
        require_served_speculation(serve, engine.replicas)
    elif SPECULATIVE in tiers:
        from gate.tiers.speculative import require_speculative

        require_speculative(recipe)
    speculative = _speculative_part(recipe)
    if LATENCY in tiers and speculative is not None:
        raise ConfigError(
            f"the latency tier does not time a speculative build ({speculative})",
            "name the tiers without latency (e.g. --tiers fidelity,capability,speculative);"
            " the speculative tier measures its speed-up",
        )
    if inputs is not None:
        _check_sampling(tiers, inputs, engine)


def _check_sampling(
    tiers: Sequence[str], inputs: SessionInputs, engine: EngineSettings | None
) -> None:
    """Sampled answers (a ``[tiers.generation] seed``, set or inherited from the baseline)
    fit the build and the baseline (:func:`gate.tiers.generation.check_sampling_fits`)."""
    from gate.metrics.catalog.generation import TIER as GENERATION

    if GENERATION not in tiers:
        return
    from gate.tiers import generation
    from gate.tiers.registry import build_settings

    settings = build_settings("generation", inputs.tier_settings.get(GENERATION))
    if settings.sampling is None:
        return
    baseline = next(iter(inputs.baselines.values()), None) if inputs.mode == "run" else None
    recorded = None
    if baseline is not None and generation.SAMPLED_ARTIFACT in baseline.artifacts:
        path = baseline.artifact_path(generation.SAMPLED_ARTIFACT)
        recorded = generation.SampledAnswers.read(path)
    generation.check_sampling_fits(
        settings,
        coupled=engine is None and _speculative_part(inputs.options.recipe) is None,
        run_mode=inputs.mode == "run",
        recorded=recorded,
    )


def _speculative_part(recipe: str | None) -> Recipe | None:
    """The speculative part of ``recipe``; None without one, or for a name a
    ``pytest_gate_make_backend`` hook reads (the loader checks its own)."""
    from gate.models.stack import parse_stack

    if recipe is None:
        return None
    try:
        return parse_stack(recipe).part("speculative")
    except ConfigError:
        return None


def _plugin_autoloaded() -> bool:
    """Whether the ``pytest11`` entry point registers the plugin (installed package)."""
    return any(ep.value == "gate.session.plugin" for ep in metadata.entry_points(group="pytest11"))


def build_args(tiers: Sequence[str], *, directory: Path, verbose: bool = False) -> list[str]:
    """The pytest command line for one gate session over ``tiers`` in ``directory`` (what
    the session measures travels beside it, typed: :func:`run_pytest`)."""
    args = [str(directory / tier_spec(tier).suite) for tier in tiers]
    args += ["-m", " or ".join(tiers), "-p", "no:cacheprovider", "--strict-markers"]
    # the suites import gate modules that are already loaded; pytest's note about not
    # rewriting their asserts is noise in a gate report
    args += ["-W", "ignore::pytest.PytestAssertRewriteWarning"]
    args += ["--rootdir", str(directory), "-o", "addopts=", "-o", "testpaths="]
    # -qq: no pytest stats line after the gate's report, whose verdict line stays the last
    args += ["-v"] if verbose else ["-qq"]
    if not _plugin_autoloaded():
        args += ["-p", "gate.session.plugin"]
    return args


def run_pytest(
    mode: SessionMode,
    model: str,
    options: SessionOptions = SessionOptions(),
    *,
    tiers: Sequence[str] | None = None,
    directory: Path | None = None,
) -> ExitCode:
    """Run the gate's pytest session with ``options``; returns its exit status (the
    session reads its inputs itself).

    Tiers without a suite file are reported on stderr as unavailable; when
    none of the requested tiers is available, :class:`NothingMeasuredError`.
    """
    if mode not in MODES:
        raise ConfigError(f"unknown mode {mode!r}", "use 'record' or 'run'")
    request = SessionRequest(mode=mode, model=model, options=options)
    return run_request(request, tiers=tiers, directory=directory)


def run_session(
    inputs: SessionInputs,
    *,
    tiers: Sequence[str] | None = None,
    directory: Path | None = None,
) -> ExitCode:
    """Run the gate's pytest session on ``inputs`` a command already read and checked
    (:func:`gate.session.inputs.prepare_session`): the session reads none of them again."""
    return run_request(SessionRequest.checked(inputs), tiers=tiers, directory=directory)


def run_request(
    request: SessionRequest,
    *,
    tiers: Sequence[str] | None = None,
    directory: Path | None = None,
) -> ExitCode:
    """Run the pytest session of ``request`` over ``tiers``; returns its exit status."""
    import pytest

    root = directory if directory is not None else suites_dir()
    selected, missing = select_tiers(tiers, root)
    check_tiers_fit(selected, request.options.recipe, request.options.engine, request.inputs)
    if request.mode == "record":
        check_recorded_together(selected)
    for tier in missing:
        print(
            f"gate: tier {tier!r} unavailable (no suite {root / tier_spec(tier).suite})",
            file=sys.stderr,
        )
    args = build_args(selected, directory=root, verbose=request.options.verbose)
    carrier = SessionRequestPlugin(request)
    with progress.terminal():  # progress reaches the real stderr while pytest captures it
        code = int(pytest.main(args, plugins=[carrier]))
    try:
        return ExitCode(code)
    except ValueError:
        return ExitCode.INTERNAL_ERROR

"""Engine options: gate.toml engine tables, the command line, the ``--gate-*`` pytest options.

Nothing here starts a server (the CLI faults are in tests/test_cli_engine_faults.py,
the real engine in tests/test_engine_cli.py).
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from gate.engines.settings import EngineSettings, engine_setting_options
from gate.errors import ConfigError
from gate.report.outputs import ReportTargets
from gate.session.engine import server_log_path, session_engines
from gate.session.flags import ENGINE_ROWS, request_from_pytest
from gate.session.options import SessionOptions
from gate.session.run_config import CandidateOverrides, parse_run_config
from gate.workflows.plan import plan_run

SERVE = f"{sys.executable} -m vllm.entrypoints.openai.api_server --model HuggingFaceTB/m"  # a hub id: not a local path gate checks


def test_candidate_engine_table_and_run_default() -> None:
    config = parse_run_config(
        {
            "run": {"engine": {"endpoint": "http://h:8000/v1", "max_concurrency": 3}},
            "candidates": [
                {"name": "a", "model": "demo", "engine": {"serve": SERVE, "served_model": "m"}},
                {"name": "b", "model": "demo"},
            ],
        },
        source="gate.toml",
    )
    a, b = config.resolved()
    assert a.engine == EngineSettings(serve=SERVE, served_model="m")
    assert b.engine == EngineSettings(endpoint="http://h:8000/v1", max_concurrency=3)
    assert b.engine.request_timeout_s == 300.0  # typed, with the engine's own defaults


@pytest.mark.parametrize(
    ("engine", "fragment"),
    [
        ({}, "exactly one of serve and endpoint"),
        ({"serve": "x", "endpoint": "http://h/v1"}, "exactly one"),
        ({"endpoint": "http://h/v1", "max_concurrency": 0}, "max_concurrency"),
        ({"endpoint": "http://h/v1", "startup_timeout_s": -1}, "startup_timeout_s"),
        ({"endpoint": "http://h/v1", "baseline_serve": "a", "baseline_endpoint": "b"}, "at most"),
        ({"endpoint": "http://h/v1", "tensor_parallel": 8}, "tensor_parallel"),
    ],
)
def test_bad_engine_tables_are_one_line_config_errors(
    engine: dict[str, object], fragment: str
) -> None:
    with pytest.raises(ConfigError) as info:
        parse_run_config(
            {"candidates": [{"name": "a", "model": "demo", "engine": engine}]}, source="gate.toml"
        )
    assert fragment in info.value.format_line() and "\n" not in info.value.format_line()


def test_engine_reaches_the_session_options_and_back() -> None:
    engine = EngineSettings(
        serve=SERVE,
        served_model="m",
        max_concurrency=5,
        request_timeout_s=12.5,
        baseline_endpoint="http://base:8000/v1",
    )
    plan = plan_run(
        None,
        CandidateOverrides(candidate="demo", engine=engine),
        SessionOptions(),
        ReportTargets(json=Path("out/results.json")),
    )
    options = plan.options_for(plan.candidates[0], plan.targets)
    assert options.paired_latency  # a baseline engine turns the paired mode on
    assert options.engine == engine  # the one typed object travels to the session
    engines = session_engines(options)
    assert engines.candidate == engine
    assert engines.baseline == EngineSettings(
        endpoint="http://base:8000/v1", served_model="m", max_concurrency=5, request_timeout_s=12.5
    )
    assert server_log_path(options) == Path("out/results.server.log")
    assert server_log_path(options, baseline=True) == Path("out/results.baseline-server.log")


def test_no_engine_means_in_process() -> None:
    engines = session_engines(SessionOptions())
    assert engines.candidate is None and engines.baseline is None


def test_server_log_option_wins(tmp_path: Path) -> None:
    options = SessionOptions(engine=EngineSettings(serve=SERVE, server_log=tmp_path / "s.log"))
    assert server_log_path(options) == tmp_path / "s.log"
    assert server_log_path(options, baseline=True) == tmp_path / "s.baseline.log"
    # without --json and --server-log: a fresh temporary directory
    loose = server_log_path(SessionOptions(engine=EngineSettings(serve=SERVE)))
    assert loose.parent.is_dir() and loose.name == "gate.server.log"


def test_gate_flags_are_read_once_into_typed_settings(pytester: pytest.Pytester) -> None:
    """``--gate-*`` engine options (pytest run directly) become the same typed settings."""
    config = pytester.parseconfig(
        "--gate-model",
        "demo",
        "--gate-endpoint",
        "http://h/v1",
        "--gate-max-concurrency",
        "4",
        "--gate-request-timeout",
        "2.5",
        "--gate-server-log",
        "s.log",
    )
    request = request_from_pytest(config.option)
    assert request is not None
    assert request.options.engine == EngineSettings(
        endpoint="http://h/v1", max_concurrency=4, request_timeout_s=2.5, server_log=Path("s.log")
    )
    # every engine setting is declared once, with its options (a gate.toml key by its name)
    declared = {name for name, _ in engine_setting_options()}
    assert declared == {f.name for f in dataclasses.fields(EngineSettings)}
    assert {row.name for row in ENGINE_ROWS} == declared


@pytest.mark.parametrize(
    ("flags", "fragment"),
    [
        (("--gate-endpoint", "http://h/v1", "--gate-max-concurrency", "many"), "not a number"),
        (("--gate-endpoint", "http://h/v1", "--gate-request-timeout", "0"), "positive"),
        (("--gate-served-model", "m"), "--served-model given without an engine"),
        (("--gate-endpoint", "http://h/v1", "--gate-serve", "x"), "exactly one"),
        (
            ("--gate-endpoint", "h", "--gate-baseline-serve", "x", "--gate-baseline-endpoint", "y"),
            "at most one",
        ),
    ],
)
def test_bad_gate_engine_flags(
    pytester: pytest.Pytester, flags: tuple[str, ...], fragment: str
) -> None:
    config = pytester.parseconfig("--gate-model", "demo", *flags)
    with pytest.raises(ConfigError, match=fragment):
        request_from_pytest(config.option)


@pytest.mark.parametrize(
    ("engine", "fragment"),
    [
        (EngineSettings(endpoint="not a url"), "URL"),
        (EngineSettings(serve="no-such-engine-binary --model x"), "was not found"),
    ],
)
def test_session_engines_check_the_environment(engine: EngineSettings, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        session_engines(SessionOptions(engine=engine))


def test_served_logprobs_is_what_the_client_asks_for_full_rows() -> None:
    """``served_logprobs`` (``--served-logprobs``) becomes the client's ``full_top_k``."""
    assert EngineSettings(endpoint="http://h/v1").settings_for("http://h/v1").full_top_k == 64
    wide = EngineSettings(endpoint="http://h/v1", served_logprobs=4096)
    assert wide.settings_for("http://h/v1").full_top_k == 4096
    with pytest.raises(ValueError, match="served_logprobs must be >= 1"):
        EngineSettings(endpoint="http://h/v1", served_logprobs=0)


def test_replicas_in_gate_toml_on_the_command_line_and_in_pytest_flags(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    """``serve``/``endpoint`` lists (one per replica); a single string stays valid."""
    from tests.cli_support import run_gate

    urls = ("http://127.0.0.1:1/v1", "http://127.0.0.1:2/v1")
    config = parse_run_config(
        {"candidates": [{"name": "a", "model": "demo", "engine": {"endpoint": list(urls)}}]},
        source="gate.toml",
    )
    (a,) = config.resolved()
    assert a.engine is not None and a.engine.endpoints == urls and a.engine.replicas == 2
    flags = pytester.parseconfig(
        "--gate-model", "demo", "--gate-endpoint", urls[0], "--gate-endpoint", urls[1]
    )
    request = request_from_pytest(flags.option)
    assert request is not None and request.options.engine == EngineSettings(endpoint=urls)
    with pytest.raises(ConfigError, match="same replica twice"):
        parse_run_config(
            {"candidates": [{"name": "a", "model": "demo", "engine": {"endpoint": [urls[0]] * 2}}]},
            source="gate.toml",
        )
    args = ("run", "--candidate", "demo", "--tiers", "fidelity", "--dry-run")
    done = run_gate(*args, "--endpoint", urls[0], "--endpoint", urls[1], cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "engine:     2 replicas" in done.stdout
    assert f"replica 1: {urls[0]}" in done.stdout and f"replica 2: {urls[1]}" in done.stdout
    bad = run_gate(*args, "--endpoint", urls[0], "--endpoint", "not a url", cwd=tmp_path)
    assert bad.returncode == 4 and "not an http(s) URL" in bad.stdout + bad.stderr

"""Engine options: gate.toml engine tables, the command line, the session option table.

Nothing here starts a server (the CLI faults are in tests/test_cli_engine_faults.py,
the real engine in tests/test_engine_cli.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gate.errors import ConfigError
from gate.models.engine import EngineSpec
from gate.report.outputs import ReportTargets
from gate.session.engine import server_log_path, session_engines
from gate.session.options import SessionOptions
from gate.session.plan import plan_run
from gate.session.run_config import CandidateOverrides, EngineConfig, parse_run_config

SERVE = f"{sys.executable} -m vllm.entrypoints.openai.api_server --model ./m"


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
    assert a.engine == EngineConfig(serve=SERVE, served_model="m")
    assert b.engine == EngineConfig(endpoint="http://h:8000/v1", max_concurrency=3)


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
    engine = EngineConfig(
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
    # the options become the session's --gate-* pytest options
    assert "--gate-serve" in options.args() and "--gate-baseline-endpoint" in options.args()
    engines = session_engines(options)
    assert engines.candidate == EngineSpec(
        serve=SERVE, model="m", max_concurrency=5, request_timeout_s=12.5
    )
    assert engines.baseline is not None and engines.baseline.endpoint == "http://base:8000/v1"
    assert server_log_path(options) == Path("out/results.server.log")
    assert server_log_path(options, baseline=True) == Path("out/results.baseline-server.log")


def test_no_engine_means_in_process() -> None:
    engines = session_engines(SessionOptions())
    assert engines.candidate is None and engines.baseline is None


def test_server_log_option_wins(tmp_path: Path) -> None:
    options = SessionOptions(serve=SERVE, server_log=tmp_path / "s.log")
    assert server_log_path(options) == tmp_path / "s.log"
    assert server_log_path(options, baseline=True) == tmp_path / "s.baseline.log"
    # without --json and --server-log: a fresh temporary directory
    loose = server_log_path(SessionOptions(serve=SERVE))
    assert loose.parent.is_dir() and loose.name == "gate.server.log"


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        (SessionOptions(endpoint="http://h/v1", max_concurrency="many"), "not a number"),
        (SessionOptions(endpoint="http://h/v1", request_timeout="0"), "positive"),
        (SessionOptions(served_model="m"), "without an engine"),
        (SessionOptions(endpoint="http://h/v1", baseline_serve="x", baseline_endpoint="y"), "both"),
    ],
)
def test_bad_session_engine_options(options: SessionOptions, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        session_engines(options)

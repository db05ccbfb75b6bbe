"""The session layer: one option table, typed tier settings, up-front checks, ``--dry-run``.

The CLI cases run the real ``gate`` entry point in a fresh interpreter and
report, after it returned, what it imported: a bad ``[tiers.*]`` key and a dry
run must be answered without a model library, without starting a pytest
session, and without scipy.stats (whose import alone costs more than the rest
of the check, which takes well under a second).
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gate.engines.settings import EngineSettings
from gate.errors import ConfigError, ExitCode, UsageError
from gate.metrics.registry import TIERS, check_tier
from gate.models.load_settings import LoadSettings
from gate.report.outputs import ReportTargets
from gate.session.flags import PYTEST_ROWS, request_from_pytest
from gate.session.options import SESSION_FIELDS, SessionOptions
from gate.session.request import SessionRequest
from gate.session.run import GateRun
from gate.session.run_config import CandidateOverrides, build_candidates, load_run_config
from gate.session.settings import layer_settings, storable_settings
from gate.tiers.accuracy import AccuracySettings
from gate.tiers.latency import LatencySettings
from gate.tiers.registry import SETTINGS, build_settings, machine_keys, validate_tables

# ------------------------------------------------------------------ the option table


def test_every_gate_flag_is_read_once_into_the_typed_request(pytester: pytest.Pytester) -> None:
    """``--gate-*`` arguments -> pytest's parser -> one typed :class:`SessionRequest`."""
    scalar = {f.name for f in dataclasses.fields(SessionOptions)} - {
        "verbose",
        "reports",
        "engine",
        "load",
    }
    assert {row.name for row in SESSION_FIELDS} == scalar
    expected = SessionOptions(
        recipe="bnb-nf4",
        label="v2",
        ref="prod",
        store=Path("s"),
        against=("fp16", "prod"),
        thresholds=Path("t.toml"),
        strict=True,
        reports=ReportTargets(
            json=Path("r.json"),
            html=Path("r.html"),
            junit=Path("r.xml"),
            markdown=Path("r.md"),
            measurements=Path("m.json"),
        ),
        config=Path("gate.toml"),
        candidate_name="int8",
        model_slug="m",
        calibration=Path("c.jsonl"),
        history=Path("hist"),
        allow_hardware_mismatch=True,
        paired_latency=True,
        allow_pickle=True,
        allow_incomplete_weights=True,
        load=LoadSettings(device="cuda:1", dtype="bfloat16", trust_remote_code=True),
        engine=EngineSettings(
            endpoint="http://h:8000/v1",
            served_model="m",
            api_key_env="KEY",
            max_concurrency=4,
            request_timeout_s=30.0,
            startup_timeout_s=60.0,
            server_log=Path("s.log"),
            baseline_serve="python -m base",
            served_logprobs=128,
            scoring_api="positions",
        ),
        runtime="llama.cpp",
    )
    argv = [
        *("--gate-recipe", "bnb-nf4", "--gate-label", "v2", "--gate-ref", "prod"),
        *("--gate-store", "s", "--gate-baseline", "fp16", "--gate-baseline", "prod"),
        *("--gate-thresholds", "t.toml", "--gate-strict", "--gate-json", "r.json"),
        *("--gate-html", "r.html", "--gate-junit", "r.xml", "--gate-markdown", "r.md"),
        *("--gate-measurements", "m.json"),
        *("--gate-config", "gate.toml", "--gate-model-slug", "m"),
        *("--gate-candidate-name", "int8"),
        *("--gate-calibration", "c.jsonl", "--gate-history", "hist"),
        *("--gate-allow-hardware-mismatch", "--gate-paired-latency"),
        *("--gate-allow-pickle", "--gate-allow-incomplete-weights", "--gate-dtype", "bfloat16"),
        *("--gate-device", "cuda:1", "--gate-trust-remote-code"),
        *("--gate-endpoint", "http://h:8000/v1", "--gate-served-model", "m"),
        *("--gate-api-key-env", "KEY", "--gate-max-concurrency", "4"),
        *("--gate-request-timeout", "30", "--gate-startup-timeout", "60"),
        *("--gate-server-log", "s.log", "--gate-baseline-serve", "python -m base"),
        *("--gate-served-logprobs", "128", "--gate-scoring-api", "positions"),
        *("--gate-engine", "llama.cpp"),
    ]
    # every option is given (serve and baseline_endpoint exclude endpoint and baseline_serve)
    given = {a for a in argv if a.startswith("--gate-")}
    assert given == {row.option for row in PYTEST_ROWS} - {
        "--gate-serve",
        "--gate-baseline-endpoint",
    }
    config = pytester.parseconfig("--gate-model", "m", "--gate-mode", "record", *argv)
    request = request_from_pytest(config.option)
    assert request == SessionRequest(mode="record", model="m", options=expected)
    # nothing given: the plugin's defaults, which with_defaults() fills in the same way
    bare = request_from_pytest(pytester.parseconfig("--gate-model", "m").option)
    assert bare == SessionRequest(mode="run", model="m", options=SessionOptions().with_defaults())
    assert request_from_pytest(pytester.parseconfig().option) is None
    assert SessionOptions().with_defaults().store == Path("baselines")
    assert SessionOptions().with_defaults().label == "fp16"


def test_flags_stand_for_latency_settings() -> None:
    assert SessionOptions().setting_overrides() == {}
    options = SessionOptions(history=Path("h"), paired_latency=True)
    assert options.setting_overrides() == {"latency": {"history_dir": "h", "paired": True}}
    with_setting = [row for row in SESSION_FIELDS if row.setting is not None]
    assert {"history", "paired_latency"} <= {row.name for row in with_setting}
    for row in with_setting:
        tier, key = row.setting
        assert key in {f.name for f in dataclasses.fields(SETTINGS[tier])}


def test_plugin_object_is_registered_only_with_a_model(pytester: pytest.Pytester) -> None:
    from gate.session.plugin import PLUGIN_NAME, GatePlugin

    assert pytester.parseconfigure().pluginmanager.get_plugin(PLUGIN_NAME) is None
    config = pytester.parseconfigure("--gate-model", "m")
    assert isinstance(config.pluginmanager.get_plugin(PLUGIN_NAME), GatePlugin)


def test_a_passed_request_starts_the_session_without_gate_flags(
    pytester: pytest.Pytester,
) -> None:
    """``gate run`` hands the typed request to pytest as a plugin object, no strings."""
    from gate.session.plugin import PLUGIN_NAME, GatePlugin
    from gate.session.request import SessionRequestPlugin

    request = SessionRequest(mode="record", model="m", options=SessionOptions(label="x"))
    pytester.plugins.append(SessionRequestPlugin(request))  # as pytest.main(plugins=[...])
    config = pytester.parseconfigure()
    plugin = config.pluginmanager.get_plugin(PLUGIN_NAME)
    assert isinstance(plugin, GatePlugin) and plugin.request is request
    assert config.option.gate_model is None  # nothing went through the --gate-* options


# ------------------------------------------------------------- tier settings registry


def test_registry_covers_every_tier_and_answers_unknown_tiers() -> None:
    assert tuple(sorted(SETTINGS)) == TIERS
    with pytest.raises(ConfigError) as info:
        check_tier("fidelty")
    assert info.value.format_line() == "unknown tier 'fidelty' (did you mean 'fidelity'?)"
    with pytest.raises(ConfigError) as info:
        validate_tables({"latncy": {}}, source="x.toml")
    assert info.value.format_line() == "x.toml: unknown tier 'latncy' (did you mean 'latency'?)"
    assert machine_keys("latency") == {"history_dir", "allow_hardware_mismatch"}
    assert machine_keys("fidelity") == frozenset()


def test_gate_run_settings_are_typed() -> None:
    run = GateRun(
        mode="run",
        model="m",
        model_slug="m",
        backend_factory=lambda: None,  # type: ignore[arg-type,return-value]
        tier_settings={"accuracy": {"mcq_limit": 7}},
    )
    accuracy = run.settings("accuracy")
    assert isinstance(accuracy, AccuracySettings) and accuracy.mcq_limit == 7
    assert run.settings("latency") == LatencySettings()  # nothing set: the defaults
    with pytest.raises(ConfigError) as info:
        run.settings("capabilty")
    assert "did you mean 'capability'?" in info.value.format_line()


def test_layers_in_order_and_errors_name_their_source() -> None:
    merged = layer_settings(
        [
            ("baseline demo#0001 (fp16)", {"latency": {"runs": 5, "new_tokens": 8}}),
            ("thresholds.toml", {"latency": {"runs": 6}}),
            ("gate.toml", {"latency": {"runs": 7}, "fidelity": {"limit": 3}}),
            ("command line", {"latency": {"paired": True}}),
        ]
    )
    assert merged["latency"] == {"runs": 7, "new_tokens": 8, "paired": True}
    assert merged["fidelity"] == {"limit": 3}
    assert merged["accuracy"] == {} and set(merged) == set(TIERS)
    with pytest.raises(ConfigError) as info:
        layer_settings([("thresholds.toml", {"latency": {"rnus": 3}})])
    assert info.value.format_line() == (
        "thresholds.toml: tiers.latency: unknown key 'rnus' (did you mean 'runs'?)"
    )
    # valid on their own, invalid together (stride > window): caught before any tier runs
    with pytest.raises(ConfigError, match="perplexity_stride must be between"):
        layer_settings(
            [
                ("a.toml", {"accuracy": {"perplexity_stride": 200}}),
                ("b.toml", {"accuracy": {"perplexity_window": 150}}),
            ]
        )
    recorded = storable_settings({"latency": {"runs": 5, "history_dir": "h"}, "fidelity": {}})
    assert recorded == {"latency": {"runs": 5}}


def test_build_settings_where_prefix() -> None:
    with pytest.raises(ConfigError) as info:
        build_settings("fidelity", {"top_kk": 3}, source="gate.toml")
    assert info.value.format_line().startswith("gate.toml: tiers.fidelity: unknown key 'top_kk'")


# ------------------------------------------------------------------ candidate assembly


def test_build_candidates_from_config_and_flags(tmp_path: Path) -> None:
    path = tmp_path / "gate.toml"
    path.write_text(
        textwrap.dedent(
            """
        [run]
        baseline = "demo"
        against = ["fp16"]
        tiers = ["fidelity"]

        [[candidates]]
        name = "a"
        model = "demo"

        [[candidates]]
        name = "b"
        model = "demo"
        against = ["prod"]
        """
        ),
        encoding="utf-8",
    )
    config = load_run_config(path)
    a, b = build_candidates(config, CandidateOverrides())
    assert (a.against, b.against, a.tiers, a.model_slug) == (
        ("fp16",),
        ("prod",),
        ("fidelity",),
        "demo",
    )
    flags = CandidateOverrides(against=("x",), tiers=("accuracy",), calibration=Path("c"))
    assert {(c.against, c.tiers, c.calibration) for c in build_candidates(config, flags)} == {
        (("x",), ("accuracy",), Path("c"))
    }
    (single,) = build_candidates(config, CandidateOverrides(candidate="demo", recipe="bnb-nf4"))
    assert (single.name, single.recipe, single.against, single.tiers, single.model_slug) == (
        "demo",
        "bnb-nf4",
        ("fp16",),
        ("fidelity",),
        "demo",
    )
    with pytest.raises(UsageError, match="apply to --candidate only"):
        build_candidates(config, CandidateOverrides(recipe="bnb-nf4"))
    with pytest.raises(UsageError, match="nothing to gate"):
        build_candidates(None, CandidateOverrides())


# ------------------------------------------------------------------- through the CLI

PROBE = textwrap.dedent(
    """
    import sys
    from gate.cli import main

    code = main(sys.argv[1:])
    loaded = sorted(m for m in ("torch", "transformers") if m in sys.modules)
    print("MODEL-LIBRARIES", ",".join(loaded) or "none")
    print("PYTEST-SESSION", "yes" if "pytest" in sys.modules else "no")
    print("SCIPY-STATS", "yes" if "scipy.stats" in sys.modules else "no")
    sys.exit(code)
    """
)


def _gate(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, HF_HUB_OFFLINE="1", GATE_PROGRESS="plain")
    env.pop("GITHUB_ACTIONS", None)
    return subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _error_line(proc: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    return lines[0]


@pytest.mark.parametrize("where", ["thresholds", "config"])
def test_tier_settings_typo_fails_before_anything_loads(tmp_path: Path, where: str) -> None:
    """A misspelt key in ``[tiers.latency]`` fails a fidelity-only run at once: exit 4,
    one line with a did-you-mean, no model library imported, no pytest session started."""
    bad = tmp_path / "bad.toml"
    bad.write_text("[tiers.latency]\nrnus = 3\n", encoding="utf-8")
    flag = "--thresholds" if where == "thresholds" else "--config"
    proc = _gate(tmp_path, "run", "--candidate", "demo", "--tiers", "fidelity", flag, str(bad))
    assert proc.returncode == ExitCode.USAGE_ERROR, proc.stdout + proc.stderr
    line = _error_line(proc)
    assert line == (
        f"gate: error: {bad}: tiers.latency: unknown key 'rnus' (did you mean 'runs'?)"
        " - ERROR (input, exit 4)"
    )
    assert "MODEL-LIBRARIES none" in proc.stdout
    assert "PYTEST-SESSION no" in proc.stdout
    assert "SCIPY-STATS no" in proc.stdout


def _dry_run_workdir(tmp_path: Path, recipes: bool) -> Path:
    candidates = [("control", None), ("nf4", "bnb-nf4")] if recipes else [("a", None), ("b", None)]
    body = "".join(
        f'\n[[candidates]]\nname = "{name}"\nmodel = "demo"\n'
        + (f'recipe = "{recipe}"\n' if recipe else "")
        for name, recipe in candidates
    )
    config = textwrap.dedent(
        """
        [run]
        baseline = "demo"
        against = ["fp32"]
        tiers = ["fidelity", "accuracy"]

        [tiers.fidelity]
        limit = 8
        """
    )
    (tmp_path / "gate.toml").write_text(config + body, encoding="utf-8")
    return tmp_path


def _check_dry_run(proc: subprocess.CompletedProcess[str], names: tuple[str, str]) -> None:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "gate run --dry-run: 2 candidate(s); nothing was loaded or measured" in out
    for name in names:
        assert f"candidate {name}: model demo" in out
    assert out.count("tiers:      fidelity, accuracy") == 2
    assert out.count("against:    fp32 = demo#0001 (fp32)") == 2
    assert f"reports:    out/results-{names[0]}.json" in out
    assert "gate: dry run OK (exit 0)" in out
    assert "MODEL-LIBRARIES none" in out
    assert "PYTEST-SESSION no" in out
    assert "SCIPY-STATS no" in out


def test_dry_run_validates_and_loads_nothing(tmp_path: Path) -> None:
    workdir = _dry_run_workdir(tmp_path, recipes=False)
    proc = _gate(workdir, "run", "--config", "gate.toml", "--dry-run", "--json", "out/results.json")
    _check_dry_run(proc, ("a", "b"))
    assert not (workdir / "out").exists()


def test_dry_run_with_recipes_imports_no_model_library(tmp_path: Path) -> None:
    workdir = _dry_run_workdir(tmp_path, recipes=True)
    proc = _gate(workdir, "run", "--config", "gate.toml", "--dry-run", "--json", "out/results.json")
    _check_dry_run(proc, ("control", "nf4"))


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--against", "prdo"), "unknown baseline ref 'prdo'"),
        (("--html", "gate.toml/r.html"), "--html gate.toml/r.html: gate.toml is not a directory"),
        (("--candidate", "demo", "--junit", "gate.toml/deeper/j.xml"), "is not a directory"),
        (("--tiers", "fidelty"), "unknown tier 'fidelty' (did you mean 'fidelity'?)"),
    ],
)
def test_dry_run_reports_the_first_bad_input(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    extra: tuple[str, ...],
    message: str,
) -> None:
    from gate.cli import main

    monkeypatch.chdir(_dry_run_workdir(tmp_path, recipes=False))
    assert main(["run", "--config", "gate.toml", "--dry-run", *extra]) == ExitCode.USAGE_ERROR
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0], captured.err
    assert "dry run OK" not in captured.out


def test_unwritable_report_is_refused_before_the_run(tmp_path: Path) -> None:
    """Without --dry-run the same checks run first: no session starts, nothing is written."""
    workdir = _dry_run_workdir(tmp_path, recipes=False)
    proc = _gate(workdir, "run", "--config", "gate.toml", "--markdown", "gate.toml/comment.md")
    assert proc.returncode == ExitCode.USAGE_ERROR, proc.stdout + proc.stderr
    assert "--markdown gate.toml/comment.md: gate.toml is not a directory" in _error_line(proc)
    assert "MODEL-LIBRARIES none" in proc.stdout
    assert "PYTEST-SESSION no" in proc.stdout
    assert "SCIPY-STATS no" in proc.stdout
    assert sorted(p.name for p in workdir.iterdir()) == ["gate.toml"]

"""A run reads each input file once: gate.toml, thresholds.toml and each baseline file,
however many candidates it gates; the sessions use the inputs the command checked."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import gate.config
import gate.gating.thresholds
import gate.provenance
import gate.session.inputs
import gate.session.run_config
import gate.store.baseline
from gate.errors import ExitCode
from gate.workflows.plan import packaged_store

CONFIG = """\
[run]
against = ["fp32"]
tiers = ["fidelity"]
store = "{store}"

[[candidates]]
name = "control"
model = "demo"

[[candidates]]
name = "dropped"
model = "demo"
recipe = "drop-layers:2"

[tiers.fidelity]
limit = 6
max_new_tokens = 8
batch_size = 6
"""


class Reads:
    """Calls of the functions that read input files, by the path each call read."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: dict[str, Counter[Path]] = {}
        self._patch = monkeypatch

    def count(self, module: Any, name: str, *, key: Callable[..., Path | None]) -> None:
        original = getattr(module, name)
        calls = self.calls.setdefault(name, Counter())

        def counted(*args: Any, **kwargs: Any) -> Any:
            path = key(*args, **kwargs)
            calls[Path(path).resolve() if path is not None else Path("<default>")] += 1
            return original(*args, **kwargs)

        self._patch.setattr(module, name, counted)


def _first(path: Any = None, *_: Any, **__: Any) -> Path | None:
    return None if path is None else Path(path)


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Reads:
    reads = Reads(monkeypatch)
    # every TOML file parsed, whoever parses it (run_config.py holds its own reference)
    reads.count(gate.config, "load_toml_file", key=_first)
    monkeypatch.setattr(
        gate.session.run_config, "load_toml_file", gate.config.load_toml_file, raising=True
    )
    reads.count(gate.session.run_config, "load_run_config", key=_first)
    reads.count(gate.gating.thresholds, "load_thresholds", key=_first)
    reads.count(gate.store.baseline, "load_baseline_file", key=_first)
    return reads


def _run_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    store = tmp_path / "store"
    shutil.copytree(packaged_store(), store)
    config = tmp_path / "gate.toml"
    config.write_text(CONFIG.format(store=store))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GATE_PROGRESS", "off")
    return store, config


def _verdicts(path: Path) -> dict[str, tuple[str, float | None]]:
    """Each metric's severity and value in a results JSON."""
    from gate.report.results import Results

    results = Results.from_document(json.loads(path.read_text()))
    return {v.key: (v.severity.label, v.value) for v in results.verdicts}


@pytest.mark.slow
def test_a_two_candidate_run_reads_each_input_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reads: Reads
) -> None:
    """``gate run --config`` with two candidates on the demo model: gate.toml parsed once,
    the thresholds once, the fp32 baseline once; the control approved, two dropped layers
    blocked, each verdict the one a session that reads its own inputs reaches."""
    from gate.cli import main

    store, config = _run_dir(tmp_path, monkeypatch)
    (baseline_file,) = (store / "demo").glob("*-fp32.json")
    code = main(["run", "--config", str(config), "--json", str(tmp_path / "r.json")])
    assert code == ExitCode.BLOCKED  # the worst of approve (control) and block (dropped)

    assert reads.calls["load_run_config"] == {config.resolve(): 1}
    assert reads.calls["load_thresholds"] == {Path("<default>"): 1}
    assert reads.calls["load_baseline_file"] == {baseline_file.resolve(): 1}
    parsed = reads.calls["load_toml_file"]
    assert parsed[config.resolve()] == 1  # and no other reader parsed it again
    assert sum(parsed.values()) == 2  # gate.toml and the packaged thresholds.toml
    control = json.loads((tmp_path / "r-control.json").read_text())
    dropped = json.loads((tmp_path / "r-dropped.json").read_text())
    assert control["exit_code"] == ExitCode.OK
    assert dropped["exit_code"] == ExitCode.BLOCKED
    assert control["run"]["config_sha256"] == gate.provenance.sha256_file(config)

    # The blocked candidate in a pytest session that reads its own inputs (``--gate-model``,
    # no request): the same severity and value on every metric.
    from gate.session.runner import build_args, suites_dir

    own = tmp_path / "own-dropped.json"
    args = build_args(("fidelity",), directory=suites_dir())
    args += ["--gate-model", "demo", "--gate-recipe", "drop-layers:2", "--gate-json", str(own)]
    args += ["--gate-config", str(config), "--gate-store", str(store), "--gate-baseline", "fp32"]
    assert pytest.main(args) == ExitCode.BLOCKED
    assert _verdicts(own) == _verdicts(tmp_path / "r-dropped.json")
    assert any(severity == "critical" for severity, _ in _verdicts(own).values())


def test_the_plugin_uses_the_inputs_the_request_carries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session handed checked inputs reads no input file: ``prepare_session`` is not
    called again, the run config is not parsed (unit: the tier measures nothing)."""
    from gate.report.outputs import check_targets
    from gate.session.inputs import prepare_session
    from gate.session.options import SessionOptions
    from gate.session.request import SessionRequest, SessionRequestPlugin

    store, config = _run_dir(tmp_path, monkeypatch)
    options = SessionOptions(config=config, store=store, against=("fp32",))
    inputs = prepare_session("run", "demo", options)
    check_targets(inputs.options.reports)
    assert inputs.run_config is not None and inputs.run_config.path == config

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the session read its inputs again")

    monkeypatch.setattr(gate.session.inputs, "prepare_session", refuse)
    monkeypatch.setattr(gate.session.run_config, "load_run_config", refuse)
    monkeypatch.setattr(gate.gating.thresholds, "load_thresholds", refuse)
    monkeypatch.setattr(gate.store.baseline, "load_baseline_file", refuse)

    test_file = tmp_path / "test_probe.py"
    test_file.write_text("def test_probe(gate_run):\n    assert gate_run.tier_settings\n")
    carrier = SessionRequestPlugin(SessionRequest.checked(inputs))
    code = pytest.main([str(test_file), "-p", "no:cacheprovider", "-qq"], plugins=[carrier])
    # the probe ran with the session's run, which measured nothing: exit 5 (not exercised)
    assert code == ExitCode.NO_MEASUREMENTS

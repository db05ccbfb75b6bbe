"""The pytest plugin, driven through pytester with an in-memory backend.

The fake backend is injected through the documented seam, the hook
``pytest_gate_make_backend`` implemented in the inner session's conftest. Its
"recipes" flip a fixed number of the baseline's correct answers, so the
expected severities follow from thresholds.toml below: 3 of 100 points down is
past warn (2) only, 12 is past critical (5).
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

# pytester's in-process runs drop modules first imported inside them; C extensions
# (numpy, scipy) cannot be imported twice, so everything the plugin loads lazily is
# imported here first.
from gate.measurement import from_samples
from gate.provenance import ModelProvenance
from gate.store.baseline import BaselineStore

CONFTEST = textwrap.dedent(
    """
    import numpy as np

    from gate.provenance import ModelProvenance

    FLIPS = {None: 0, "none": 0, "warn": 3, "critical": 12}

    class FakeBackend:
        name = "fake"

        def __init__(self, recipe):
            rng = np.random.default_rng(0)
            self.correct = (rng.random(400) < 0.7).astype(float)
            flips = FLIPS[recipe] * 4
            right = np.flatnonzero(self.correct)[:flips]
            self.correct[right] = 0.0
            self.recipe = recipe

        def provenance(self):
            return ModelProvenance(model_family="fake", recipe=self.recipe or "none")

    def pytest_gate_make_backend(config, model, recipe):
        if model == "fake":
            return FakeBackend(recipe)
        return None
    """
)

SUITE = textwrap.dedent(
    """
    import pytest
    from gate.measurement import from_samples

    @pytest.mark.accuracy
    def test_mcq(gate_run):
        correct = gate_run.backend.correct
        ids = [f"q{i}" for i in range(len(correct))]
        gate_run.record(from_samples("accuracy.mcq_acc", correct.tolist(), ids))
    """
)

THRESHOLDS = textwrap.dedent(
    """
    [gate]
    alpha = 0.01
    [metrics."accuracy.mcq_acc"]
    warn = 0.02
    critical = 0.05
    [tiers.accuracy]
    mcq_limit = 400
    """
)


#: Inner sessions skip unrelated plugins to start faster.
FAST = ("-p", "no:hypothesispytest", "-p", "no:benchmark", "-p", "no:anyio")


@pytest.fixture
def gate_dir(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(CONFTEST)
    pytester.makefile(".toml", thresholds=THRESHOLDS)
    return pytester


def _gate(
    pytester: pytest.Pytester, *args: str, suite: str = SUITE, model: str = "fake"
) -> pytest.RunResult:
    pytester.makepyfile(test_suite=suite)
    return pytester.runpytest(
        *FAST,
        "--gate-model",
        model,
        "--gate-thresholds",
        "thresholds.toml",
        "--gate-store",
        "store",
        *args,
    )


def _record(pytester: pytest.Pytester) -> None:
    """Store the fake model's baseline directly (what record mode stores; tested once below)."""
    namespace: dict[str, object] = {}
    exec(CONFTEST, namespace)
    correct = namespace["FakeBackend"](None).correct  # type: ignore[operator]
    ids = [f"q{i}" for i in range(len(correct))]
    store = BaselineStore(pytester.path / "store")
    stored = store.add(
        "fake",
        "fp16",
        [from_samples("accuracy.mcq_acc", correct.tolist(), ids)],
        provenance=ModelProvenance(model_family="fake"),
        environment={},
    )
    store.promote("fake", "fp16", stored.number)


def test_record_then_equal_candidate_passes(gate_dir: pytest.Pytester) -> None:
    recorded = _gate(gate_dir, "--gate-mode", "record", "--gate-ref", "fp16")
    assert recorded.ret == 0, recorded.stdout.str()
    recorded.stdout.fnmatch_lines(["*stored baseline fake#0001 (fp16)*", "*ref fp16 -> #0001*"])
    stored = json.loads((gate_dir.path / "store/fake/0001-fp16.json").read_text())
    assert stored["metrics"][0]["name"] == "accuracy.mcq_acc"
    assert stored["provenance"]["model_family"] == "fake"
    result = _gate(gate_dir, "--gate-baseline", "fp16", "--gate-json", "out.json")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*gate: APPROVED (exit 0)*"])
    results = json.loads((gate_dir.path / "out.json").read_text())
    assert (results["verdict"], results["exit_code"]) == ("pass", 0)


def test_warn_passes_unless_strict(gate_dir: pytest.Pytester) -> None:
    _record(gate_dir)
    result = _gate(gate_dir, "--gate-recipe", "warn")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*WARN accuracy.mcq_acc vs latest:*", "*APPROVED WITH WARNINGS*"])
    strict = _gate(gate_dir, "--gate-recipe", "warn", "--gate-strict")
    assert strict.ret == 1
    strict.stdout.fnmatch_lines(["*gate: BLOCKED (exit 1)*"])


def test_critical_blocks_and_names_the_metric(gate_dir: pytest.Pytester) -> None:
    _record(gate_dir)
    result = _gate(gate_dir, "--gate-recipe", "critical", "--gate-json", "out.json")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*CRITICAL accuracy.mcq_acc vs latest: *past critical*"])
    results = json.loads((gate_dir.path / "out.json").read_text())
    assert results["verdict"] == "block"
    assert results["metrics"][0]["severity"] == "critical"
    assert results["metrics"][0]["delta"] == pytest.approx(-0.12)


def test_nothing_recorded_is_exit_5(gate_dir: pytest.Pytester) -> None:
    _record(gate_dir)
    suite = "import pytest\n\n@pytest.mark.accuracy\ndef test_nothing(gate_run):\n    pass\n"
    result = _gate(gate_dir, suite=suite)
    assert result.ret == 5
    result.stdout.fnmatch_lines(["*nothing was measured*"])


def test_crashed_tier_is_never_approved_and_records_nothing(gate_dir: pytest.Pytester) -> None:
    _record(gate_dir)
    crash = (
        SUITE + "\n@pytest.mark.accuracy\ndef test_boom(gate_run):\n    raise RuntimeError('x')\n"
    )
    result = _gate(gate_dir, suite=crash)
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*tier test failed: *test_boom*", "*BLOCKED*"])
    recorded = _gate(gate_dir, "--gate-mode", "record", "--gate-label", "v2", suite=crash)
    assert recorded.ret == 1
    recorded.stdout.fnmatch_lines(["*no baseline was stored*"])
    assert not (gate_dir.path / "store/fake/0002-v2.json").exists()


def test_bad_inputs_are_exit_4_with_one_line(gate_dir: pytest.Pytester) -> None:
    _record(gate_dir)
    result = _gate(gate_dir, "--gate-baseline", "prdo")
    assert result.ret == 4
    result.stderr.fnmatch_lines(["ERROR: gate: unknown baseline ref 'prdo'*"])
    assert "Traceback" not in result.stderr.str() + result.stdout.str()
    missing_pack = SUITE + (
        "\n@pytest.mark.accuracy\ndef test_pack(gate_run):\n"
        "    gate_run.baseline_artifact('reference-pack')\n"
    )
    result = _gate(gate_dir, suite=missing_pack)
    assert result.ret == 4
    result.stdout.fnmatch_lines(["*error: baseline fake#0001 (fp16) has no artifact*"])


def test_artifacts_round_trip_and_settings(gate_dir: pytest.Pytester) -> None:
    suite = SUITE + textwrap.dedent(
        """
        @pytest.mark.accuracy
        def test_pack(gate_run, tmp_path):
            assert gate_run.settings("accuracy").mcq_limit == 400  # typed, from thresholds.toml
            if gate_run.mode == "record":
                pack = tmp_path / "pack.bin"
                pack.write_bytes(b"pack")
                gate_run.attach("reference-pack", pack)
            else:
                assert gate_run.baseline_artifact("reference-pack").read_bytes() == b"pack"
        """
    )
    recorded = _gate(gate_dir, "--gate-mode", "record", suite=suite)
    assert recorded.ret == 0, recorded.stdout.str()
    assert (gate_dir.path / "store/fake/0001-fp16.reference-pack.bin").read_bytes() == b"pack"
    result = _gate(gate_dir, suite=suite)
    assert result.ret == 0, result.stdout.str()


def test_inert_without_gate_model(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_plain="def test_ok():\n    assert True\n",
        test_tier=SUITE,
    )
    result = pytester.runpytest(*FAST, "--strict-markers", "-rs")
    assert result.ret == 0
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*no --gate-model given*"])
    assert "= gate =" not in result.stdout.str()  # no gate section, no report


def test_runner_hands_the_typed_request_to_pytest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pytest command line names suites and markers only; the session's options
    travel as one typed object in the plugin object (no ``--gate-*`` strings)."""
    from gate.session.options import SessionOptions
    from gate.session.request import SessionRequest, SessionRequestPlugin
    from gate.session.runner import run_pytest

    (tmp_path / "test_fidelity.py").write_text("")
    seen: dict[str, Any] = {}

    def fake_main(args: list[str], plugins: list[object]) -> int:
        seen.update(args=args, plugins=plugins)
        return 0

    monkeypatch.setattr(pytest, "main", fake_main)
    options = SessionOptions(store=tmp_path / "s")
    assert run_pytest("record", "demo", options, tiers=["fidelity"], directory=tmp_path) == 0
    args = seen["args"]
    assert args[:3] == [str(tmp_path / "test_fidelity.py"), "-m", "fidelity"]
    assert not [arg for arg in args if arg.startswith("--gate-")]
    (carrier,) = seen["plugins"]
    assert isinstance(carrier, SessionRequestPlugin)
    assert carrier.request == SessionRequest(mode="record", model="demo", options=options)


RUNNER_SCRIPT = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from dataclasses import replace
    from gate.session.options import SessionOptions
    from gate.session.runner import run_pytest

    suites, store, thresholds = (Path(a) for a in sys.argv[1:4])
    common = SessionOptions(store=store, thresholds=thresholds)
    record = replace(common, label="fp16", ref="fp16")
    critical = replace(common, recipe="critical", against=("fp16",))
    codes = [
        run_pytest("record", "fake", record, directory=suites),
        run_pytest("run", "fake", critical, directory=suites),
        run_pytest("run", "fake", replace(common, recipe="warn"), directory=suites,
                   tiers=["accuracy", "latency"]),
    ]
    print("CODES", *[int(c) for c in codes])
    """
)


@pytest.mark.slow
def test_runner_selects_tiers_and_returns_exit_codes(tmp_path: Path) -> None:
    """gate/session/runner.py over a suites directory (a subprocess: a fresh pytest per call)."""
    import subprocess
    import sys

    suites = tmp_path / "suites"
    suites.mkdir()
    (suites / "conftest.py").write_text(CONFTEST)
    (suites / "test_accuracy.py").write_text(SUITE)
    (suites / "test_latency.py").write_text("import pytest\n")  # present, measures nothing
    (tmp_path / "thresholds.toml").write_text(THRESHOLDS)
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            RUNNER_SCRIPT,
            str(suites),
            str(tmp_path / "s"),
            str(tmp_path / "thresholds.toml"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert "CODES 0 1 0" in proc.stdout, proc.stdout + proc.stderr
    assert "tier 'fidelity' unavailable" in proc.stderr
    assert "APPROVED WITH WARNINGS" in proc.stdout

"""``gate run --measurements FILE`` and ``gate compare FILE``: one judgement, the same verdicts.

A real run of the demo model under a real recipe (bnb-nf4, which this store's
fp32 baseline and the packaged thresholds block: the case where a regression
must be reported) writes its measurements; ``gate compare`` of that file, against
the same baseline in the same store, must reach the same exit code and, for every
metric and slice, the same severity, value and delta as the run did. Nothing is
measured again: the comparison reads the file only.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from gate.errors import ExitCode
from gate.measurement import Measurement
from gate.store.measurements_file import load_measurements, save_measurements
from gate.workflows.plan import packaged_store
from tests.cli_support import run_gate


def _by_key(document: dict[str, Any]) -> dict[tuple[str, str | None, str], dict[str, Any]]:
    return {(m["name"], m.get("slice"), m["against"]): m for m in document["metrics"]}


@pytest.mark.slow
def test_compare_of_a_runs_measurements_reaches_the_runs_verdicts_metric_by_metric(
    tmp_path: Path,
) -> None:
    store = tmp_path / "S"
    shutil.copytree(packaged_store(), store)
    measurements, run_json, cmp_json = (tmp_path / n for n in ("m.json", "run.json", "cmp.json"))
    run = run_gate(
        "run", "--candidate", "demo", "--recipe", "bnb-nf4", "--tiers", "fidelity,capability",
        "--against", "fp32", "--store", str(store), "--measurements", str(measurements),
        "--json", str(run_json), cwd=tmp_path,
    )  # fmt: skip
    assert run.returncode in (ExitCode.OK, ExitCode.BLOCKED), run.stderr
    stored = load_measurements(measurements)
    assert set(stored.tiers or ()) == {"fidelity", "capability"}
    assert stored.model.recipe == "bnb-nf4"

    compared = run_gate(
        "compare", str(measurements), "--baseline", "fp32", "--model", "demo",
        "--store", str(store), "--json", str(cmp_json), cwd=tmp_path,
    )  # fmt: skip
    assert "loading" not in compared.stderr  # nothing was measured again
    first, second = json.loads(run_json.read_text()), json.loads(cmp_json.read_text())
    assert compared.returncode == run.returncode == first["exit_code"] == second["exit_code"]
    assert (first["verdict"], first["headline"]) == (second["verdict"], second["headline"])
    ran, regated = _by_key(first), _by_key(second)
    assert ran.keys() == regated.keys()
    assert len(ran) > 20 and any(key[1] is not None for key in ran)  # metrics and slices
    for key, verdict in ran.items():
        for field in ("severity", "value", "delta"):
            assert regated[key][field] == verdict[field], (key, field)
    severities = {m["severity"] for m in ran.values()}
    assert severities - {"pass"}, "bnb-nf4 on the demo model must show a finding here"
    for field in ("unmeasured", "unbounded", "not_exercised", "notes"):
        assert first[field] == second[field], field


def test_a_measurements_file_keeps_the_tiers_that_ran(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    measured = [Measurement("fidelity.cga", 0.9, samples=[1.0, 1.0, 0.0])]
    save_measurements(path, measured, tiers=("fidelity", "capability"))
    assert load_measurements(path).tiers == ("fidelity", "capability")
    save_measurements(path, measured)  # a file of another tool names no tiers
    assert load_measurements(path).tiers is None


def test_an_unwritable_measurements_path_fails_before_anything_is_loaded(tmp_path: Path) -> None:
    target = tmp_path / "missing-dir" / "deeper" / "m.json"
    (tmp_path / "missing-dir").write_text("a file, not a directory")
    done = run_gate(
        "run", "--candidate", "demo", "--tiers", "fidelity", "--measurements", str(target),
        "--dry-run", cwd=tmp_path,
    )  # fmt: skip
    errors = [line for line in done.stderr.splitlines() if line.startswith("gate: error:")]
    assert done.returncode == ExitCode.USAGE_ERROR, done.stderr
    assert len(errors) == 1 and "--measurements" in errors[0], done.stderr
    assert "loading" not in done.stderr and not target.exists()

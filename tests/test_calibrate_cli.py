"""``gate calibrate`` on the demo model, cheaply (6 prompts x 8 tokens; the fidelity and
generation tiers), and its input errors."""

from __future__ import annotations

import json
from pathlib import Path

from gate.errors import ExitCode
from gate.gating.calibration.reader import read_calibration
from gate.gating.thresholds import load_thresholds, packaged_thresholds_path
from tests.calibrate_support import calibrate_small
from tests.cli_support import run_gate


def test_calibrate_demo_writes_loadable_positive_bounds_with_their_sources(tmp_path: Path) -> None:
    out = tmp_path / "cal.toml"
    done = calibrate_small(
        tmp_path,
        "--tiers",
        "fidelity,generation",  # the generation tier reads the fidelity tier's pack
        "--tail-seeds",
        "0",  # a second record; the tail-seed runs are docs/adopting.md's
        "--dtype-control",
        "bfloat16",
    )
    assert done.returncode == ExitCode.OK, done.stdout[-3000:] + done.stderr[-3000:]
    calibrated = load_thresholds(out)
    defaults = load_thresholds(packaged_thresholds_path())
    gated = [name for name in defaults.metrics if name.startswith(("fidelity.", "generation."))]
    assert any(name.startswith("generation.") for name in gated)
    assert gated
    for name in gated:
        bound = calibrated.metrics[name].bound
        assert bound.warn > 0 and bound.critical >= bound.warn, name
    assert set(calibrated.metrics) == set(defaults.metrics)  # every other section kept
    text = out.read_text()
    assert text.count("# noise (degradation per source):") >= len(gated)
    record = read_calibration(calibrated.calibration, str(out))
    assert record.metrics["fidelity.cga"].n == 6
    assert record.timings["fidelity"].items == 6
    assert record.timings["generation"].items == 6
    doc = json.loads((tmp_path / "cal.json").read_text())
    assert doc["sources"] == [
        "repeat 1",
        "batch_size 2",
        "prompt order 1",
        "dtype bfloat16",
    ]
    kl = doc["metrics"]["fidelity.kl_mean"]["sources"]
    assert kl["repeat 1"] == 0.0  # the unchanged build in process: bit for bit
    assert kl["dtype bfloat16"] > 1e-6  # bfloat16 moves the distributions: a real figure
    # greedy answers of the unchanged build repeat token for token
    assert doc["metrics"]["generation.divergence_position"]["sources"]["repeat 1"] == 0.0
    assert "fidelity.cga" in done.stdout and "items needed" in done.stdout
    # a repeat per tier (fidelity, generation), batch size 2, prompt order 1, bfloat16
    assert (tmp_path / "cal.toml.log").read_text().count("gate run: demo") == 5


def test_calibrate_dry_run_and_bad_input(tmp_path: Path) -> None:
    out = tmp_path / "cal.toml"
    dry = run_gate("calibrate", "--model", "demo", "--out", str(out), "--dry-run", cwd=tmp_path)
    assert dry.returncode == ExitCode.OK, dry.stderr
    assert "run batch_size halved: fidelity" in dry.stdout
    assert not out.exists()
    bad = run_gate("calibrate", "--model", "demo", "--tiers", "latency", "--out", str(out))
    assert bad.returncode == ExitCode.USAGE_ERROR
    assert "tier 'latency' cannot be calibrated" in bad.stderr
    assert "Traceback" not in bad.stderr
    alone = run_gate("calibrate", "--model", "demo", "--tiers", "generation", "--out", str(out))
    assert alone.returncode == ExitCode.USAGE_ERROR
    assert "--tiers generation,fidelity" in alone.stderr
    assert len(alone.stderr.strip().splitlines()) == 1
    sizes = run_gate("calibrate", "--model", "demo", "--batch-sizes", "0", "--out", str(out))
    assert sizes.returncode == ExitCode.USAGE_ERROR
    assert "--batch-sizes" in sizes.stderr

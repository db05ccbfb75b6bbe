"""``gate calibrate``'s engine control against the real vLLM server (CPU build).

Marked ``engine``: the session's float32 server (``served`` in tests/conftest.py)
is the ``--endpoint`` of a small calibration of the demo model (6 prompts x 8
tokens). The served build against the in-process baseline is one calibrated
noise source among the in-process ones, with its own figure (printed, run
with ``-s``); gate leaves the server it did not start alone.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from gate.engines.http import HTTPBackend
from gate.errors import ExitCode
from gate.gating.thresholds import load_thresholds
from tests.calibrate_support import calibrate_small

pytestmark = pytest.mark.engine


def test_served_engine_is_a_calibrated_noise_source(served: HTTPBackend, tmp_path: Path) -> None:
    out = tmp_path / "cal.toml"
    done = calibrate_small(
        tmp_path,
        "--order-seeds",
        "0",
        "--tail-seeds",
        "0",
        "--endpoint",
        served.settings.base_url,
        "--served-model",
        "demo",
    )
    assert done.returncode == ExitCode.OK, done.stdout[-3000:] + done.stderr[-3000:]
    doc = json.loads((tmp_path / "cal.json").read_text())
    assert doc["sources"] == ["repeat 1", "batch_size 2", "engine (endpoint)"]
    assert doc["session_exit_codes"]["engine (endpoint)"] in (ExitCode.OK, ExitCode.BLOCKED)
    figures = {
        name: doc["metrics"][name]["sources"]["engine (endpoint)"]
        for name in ("fidelity.cga", "fidelity.kl_mean", "fidelity.kl_p99")
    }
    print(f"\n[calibrate engine figures] {json.dumps(figures)}")
    assert all(math.isfinite(v) for v in figures.values())
    # the served build is measured over HTTP: a figure of its own beside the in-process ones
    assert doc["metrics"]["fidelity.kl_mean"]["sources"]["repeat 1"] == 0.0
    # vLLM's float32 kernels are not transformers': the KL read from the pack moves (by
    # rounding, either way: -8.9e-09 nats in one run), its tail more (8.4e-07 nats), far below
    # any bound; an engine run that silently scored in process would read exactly 0
    assert figures["fidelity.kl_mean"] != 0.0
    assert abs(figures["fidelity.kl_mean"]) < 1e-6
    assert figures["fidelity.kl_p99"] > 0.0
    calibrated = load_thresholds(out)
    assert calibrated.metrics["fidelity.kl_mean"].bound.warn > 0
    assert "engine (endpoint)" in out.read_text()  # named in the comments and the record

"""A small ``gate calibrate`` of the demo model that the calibrate tests share.

The fidelity tier on 6 prompts x 8 tokens (batch size 4), one repeat and
batch size 2 as noise sources, the thresholds to ``cal.toml`` and the JSON
record to ``cal.json`` in the test's directory; each test adds its sources.
"""

from __future__ import annotations

from pathlib import Path

from tests.cli_support import GateRun, run_gate

#: ``[tiers.fidelity]`` of a small calibration (6 prompts x 8 tokens).
SMALL = "[tiers.fidelity]\nlimit = 6\nmax_new_tokens = 8\nbatch_size = 4\n"


def calibrate_small(tmp_path: Path, *options: str) -> GateRun:
    """``gate calibrate`` of the demo model as above, with ``options``, run in ``tmp_path``."""
    config = tmp_path / "small.toml"
    config.write_text(SMALL)
    return run_gate(
        "calibrate",
        "--model",
        "demo",
        "--tiers",
        "fidelity",
        "--repeats",
        "1",
        "--batch-sizes",
        "2",
        *options,
        "--config",
        str(config),
        "--out",
        str(tmp_path / "cal.toml"),
        "--json",
        str(tmp_path / "cal.json"),
        cwd=tmp_path,
    )

"""Speculative tier (marker ``speculative``): lossless tokens, acceptance and speed-up.

Thin: one test measures the build through :func:`gate.tiers.speculative.measure`
and records its measurements; the comparison with the baseline (recorded with
speculative decoding) happens at session end in the plugin.
"""

from __future__ import annotations

import pytest

from gate.session.run import GateRun
from gate.tiers.speculative import measure

pytestmark = pytest.mark.speculative


def test_speculative(gate_run: GateRun) -> None:
    """Every prompt generated with and without the build's drafter."""
    for measurement in measure(gate_run.backend, gate_run.settings("speculative")):
        gate_run.record(measurement)

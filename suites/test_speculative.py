"""Speculative tier (marker ``speculative``): lossless tokens, acceptance and speed-up.

Thin: one test measures the build through :func:`gate.tiers.speculative.measure`
(in process) or :func:`gate.tiers.served_speculation.measure_served` (a served
build whose command speculates, beside the same server without speculation)
and records its measurements; the comparison with the baseline (recorded with
speculative decoding) happens at session end in the plugin.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import pytest

from gate.session.run import GateRun
from gate.tiers.speculative import Speculates, measure

if TYPE_CHECKING:
    from gate.engines.http import HTTPBackend

pytestmark = pytest.mark.speculative


def test_speculative(gate_run: GateRun) -> None:
    """Every prompt generated with and without the build's drafter."""
    settings = gate_run.settings("speculative")
    if gate_run.plain_build is not None:
        from gate.engines.served_speculation_pair import ServedPair
        from gate.tiers.served_speculation import measure_served

        served = cast("HTTPBackend", gate_run.backend)
        measured = measure_served(
            ServedPair(served, cast("HTTPBackend", gate_run.plain_build())), settings
        )
    else:  # measure refuses a backend that is not a speculative build, in one line
        measured = measure(cast(Speculates, gate_run.backend), settings)
    for measurement in measured:
        gate_run.record(measurement)

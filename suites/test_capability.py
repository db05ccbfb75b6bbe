"""Tier 2 — capability probes (marker ``capability``).

Thin: one test per probe family measures ``capability.<family>`` through
:func:`gate.tiers.capability.measure` and records it on the session; the
comparison with the baseline happens at session end in the plugin.
"""

from __future__ import annotations

import pytest

from gate.data.probes import FAMILIES
from gate.session.run import GateRun
from gate.tiers.capability import measure

pytestmark = pytest.mark.capability


@pytest.mark.parametrize("family", FAMILIES)
def test_capability(gate_run: GateRun, family: str) -> None:
    """Pass rate of one probe family on the model under test."""
    settings = gate_run.settings("capability")
    if family not in settings.families:
        pytest.skip(f"{family} is not in [tiers.capability] families")
    for measurement in measure(gate_run.backend, settings, families=(family,)):
        gate_run.record(measurement)

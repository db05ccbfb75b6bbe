"""Generation tier suite (marker ``generation``): a thin wrapper over :mod:`gate.tiers.generation`.

The baseline's answers are the fidelity tier's reference pack (artifact
``reference``): nothing of the baseline is generated here. Record mode: the
baseline's own generation measurements, read from the pack the fidelity tier
attached in the same session (run ``fidelity`` with it). Run mode: the
candidate answers the pack's prompts greedily up to the pack's cap, batched as
the pack was recorded (``[tiers.fidelity]`` ``batch_size`` and ``limit``), and
each measurement carries the baseline's values from the pack beside its own.
"""

from __future__ import annotations

import pytest

from gate.errors import UsageError
from gate.session.run import GateRun
from gate.store.reference import load_pack
from gate.tiers import generation as tier
from gate.tiers.fidelity import verify_candidate

pytestmark = pytest.mark.generation

#: The fidelity tier's artifact: the baseline's reference pack.
ARTIFACT = "reference"


def test_generation(gate_run: GateRun) -> None:
    settings = gate_run.settings("generation")
    fidelity = gate_run.settings("fidelity")
    if gate_run.mode == "record":
        recorded = gate_run.artifacts.get(ARTIFACT)
        if recorded is None:
            raise UsageError(
                "the generation tier reads the baseline's answers from the fidelity tier's "
                "reference pack",
                "record the baseline with --tiers fidelity,generation",
            )
        for measurement in tier.record(load_pack(recorded), settings, limit=fidelity.limit):
            gate_run.record(measurement)
        return
    pack = load_pack(gate_run.baseline_artifact(ARTIFACT))
    verify_candidate(gate_run.backend, pack)
    against = next(iter(gate_run.baselines))
    for measurement in tier.measure(
        gate_run.backend,
        pack,
        settings,
        batch_size=fidelity.batch_size,
        limit=fidelity.limit,
        against=against,
    ):
        gate_run.record(measurement)

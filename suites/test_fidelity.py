"""Fidelity tier suite (marker ``fidelity``): a thin wrapper over :mod:`gate.tiers.fidelity`.

Record mode (baseline): generate the reference pack, attach it to the new
baseline as artifact ``reference``, note in the baseline's provenance how many
prompts the recorder cut or left empty, and record the baseline's own fidelity
measurements against it (CGA 1, KL 0: the pack round-trips).
Run mode (candidate): take the pack from the baseline, score the candidate
against it and record the measurements. ``[tiers.fidelity] live_baseline``
loads that model too (through ``gate_run.load_build``, like the candidate) and
makes the KL exact.
"""

from __future__ import annotations

import pytest

from gate.session.run import GateRun
from gate.store.reference import load_pack
from gate.tiers import fidelity as tier

pytestmark = pytest.mark.fidelity

ARTIFACT = "reference"


def test_fidelity(gate_run: GateRun, tmp_path_factory: pytest.TempPathFactory) -> None:
    settings = gate_run.settings("fidelity")
    if gate_run.mode == "record":
        prompts = tier.load_prompts(settings, backend=gate_run.backend)
        path = tmp_path_factory.mktemp("fidelity") / "reference.safetensors"
        tier.record(gate_run.backend, prompts, settings, path)
        gate_run.attach(ARTIFACT, path)
    else:
        prompts = tier.load_prompts(settings, apply_limit=False, backend=gate_run.backend)
        path = gate_run.baseline_artifact(ARTIFACT)
    pack = load_pack(path)
    if gate_run.mode == "record":
        gate_run.note_provenance(tier.recording_provenance(pack))
    # the live baseline loads like the candidate (hooks, --allow-pickle), with no recipe
    baseline_backend = (
        gate_run.load_build(settings.live_baseline, None) if settings.live_baseline else None
    )
    for measurement in tier.measure(
        gate_run.backend, pack, settings, prompts=prompts, baseline_backend=baseline_backend
    ):
        gate_run.record(measurement)

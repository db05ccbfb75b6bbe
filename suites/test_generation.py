"""Generation tier suite (marker ``generation``): a thin wrapper over :mod:`gate.tiers.generation`.

The baseline's answers are the fidelity tier's reference pack (artifact
``reference``): nothing of the baseline is generated here. Record mode: the
baseline's own generation measurements, read from the pack the fidelity tier
attached in the same session (run ``fidelity`` with it). Run mode: the
candidate answers the pack's prompts greedily up to the pack's cap, batched as
the pack was recorded (``[tiers.fidelity]`` ``batch_size`` and ``limit``), and
each measurement carries the baseline's values from the pack beside its own.
With ``[tiers.generation] seed``, both builds' answers are coupled samples: the
baseline draws its own when it is recorded and stores them (artifact
``generation-sampled``), and the candidate's are compared with those.
"""

from __future__ import annotations

import pytest

from gate.errors import UsageError
from gate.session.run import GateRun
from gate.store.reference import load_pack
from gate.tiers import generation as tier
from gate.tiers.fidelity import verify_candidate
from gate.tiers.tier_spec import tier_spec

pytestmark = pytest.mark.generation

#: The fidelity tier's artifact: the baseline's reference pack.
ARTIFACT = "reference"


def test_generation(gate_run: GateRun, tmp_path_factory: pytest.TempPathFactory) -> None:
    settings = gate_run.settings("generation")
    fidelity = gate_run.settings("fidelity")
    sampling = settings.sampling
    if gate_run.mode == "record":
        recorded = gate_run.artifacts.get(ARTIFACT)
        if recorded is None:  # the CLI refuses this before loading (check_recorded_together)
            reads = tier_spec(tier.TIER).records_with
            raise UsageError(
                f"the generation tier reads the baseline's answers from the {' and '.join(reads)}"
                " tier's reference pack, which this session did not record",
                f"record the baseline with --tiers {','.join((*reads, tier.TIER))}",
            )
        pack = load_pack(recorded)
        sampled = None
        if sampling is not None:
            sampled = tier.SampledAnswers.draw(
                gate_run.backend,
                pack,
                sampling,
                batch_size=fidelity.batch_size,
                limit=fidelity.limit,
            )
            path = tmp_path_factory.mktemp("generation") / "sampled.json"
            sampled.write(path)
            gate_run.attach(tier.SAMPLED_ARTIFACT, path)
        for measurement in tier.record(pack, settings, limit=fidelity.limit, sampled=sampled):
            gate_run.record(measurement)
        return
    pack = load_pack(gate_run.baseline_artifact(ARTIFACT))
    verify_candidate(gate_run.backend, pack)
    sampled = None
    baseline = gate_run.baseline
    if (
        sampling is not None
        and baseline is not None
        and tier.SAMPLED_ARTIFACT in baseline.artifacts
    ):
        sampled = tier.SampledAnswers.read(gate_run.baseline_artifact(tier.SAMPLED_ARTIFACT))
    against = next(iter(gate_run.baselines))
    for measurement in tier.measure(
        gate_run.backend,
        pack,
        settings,
        batch_size=fidelity.batch_size,
        limit=fidelity.limit,
        against=against,
        sampled=sampled,
    ):
        gate_run.record(measurement)

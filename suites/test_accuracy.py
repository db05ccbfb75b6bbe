"""Accuracy tier suite (marker ``accuracy``): a thin wrapper over :mod:`gate.tiers.accuracy`.

``test_perplexity`` records sliding-window perplexity of the configured corpus.
``test_multiple_choice`` scores the MCQ sets. In record mode (baseline) the
per-question results are attached to the new baseline as artifact ``mcq`` and
the baseline's flips/all-flips/choice KL are measured against itself (0); in
run mode (candidate) they are read back from the baseline and the candidate is
paired with it question by question. The artifact's file is the store's
(:mod:`gate.store.mcq_results`): the suite writes and reads it, the tier gets the
parsed results. Settings: ``[tiers.accuracy]``.
"""

from __future__ import annotations

import pytest

from gate.session.run import GateRun
from gate.store import mcq_results
from gate.tiers import accuracy as tier
from gate.tiers import exercised

pytestmark = pytest.mark.accuracy


def test_perplexity(gate_run: GateRun) -> None:
    settings = gate_run.settings("accuracy")
    if not settings.perplexity:
        pytest.skip("perplexity disabled in [tiers.accuracy]")
    gate_run.record(tier.measure_perplexity(gate_run.backend, settings))


def test_multiple_choice(gate_run: GateRun, tmp_path_factory: pytest.TempPathFactory) -> None:
    settings = gate_run.settings("accuracy")
    before = exercised.counts(gate_run.backend)
    results = tier.run_mcq(gate_run.backend, settings)
    baseline = None
    if gate_run.mode == "record":
        path = tmp_path_factory.mktemp("accuracy") / "mcq.json"
        gate_run.attach(mcq_results.ARTIFACT, mcq_results.write_mcq_results(path, results))
    else:
        path = gate_run.baseline_artifact(mcq_results.ARTIFACT)
        baseline = mcq_results.read_mcq_results(path)
    measured = tier.mcq_measurements(results, baseline)
    for measurement in exercised.attach(measured, gate_run.backend, before):
        gate_run.record(measurement)

"""Judge tier suite (marker ``judge``): a thin wrapper over :mod:`gate.tiers.judge`.

Record mode (baseline): generate the baseline's answers on the judged prompts,
attach them to the new baseline as artifact ``judge-outputs`` and record the
judges' validity verdicts on them (``judge.validity``).
Run mode (candidate): take the baseline's answers from that artifact (a baseline
recorded without it is one line, exit 4), let the candidate answer the same
prompts, judge every pair with the configured panel and record the Elo delta,
validity and the judges' rates. An UNSTABLE panel records the rates and, when
the tier is required (the default), fails with exit 5 (nothing measured); so
does a panel that decided no pair. The artifact's file is the store's
(:mod:`gate.store.judge_outputs`): the suite writes and reads it, the tier
generates and judges the answers.
"""

from __future__ import annotations

import pytest

from gate.session.run import GateRun
from gate.store.judge_outputs import ARTIFACT, read_outputs, write_outputs
from gate.tiers import judge as tier
from gate.tiers.judge_outputs import generate_outputs, prompts_of


def _beside_the_build(gate_run: GateRun) -> str:
    """Where an in-process judge runs unless its ``[[judges]]`` entry says: where the build
    runs in process (the session's ``--device``, ``auto`` by default), else (a served
    build) ``auto``."""
    return gate_run.in_process_device or "auto"


pytestmark = pytest.mark.judge


def test_judge(gate_run: GateRun, tmp_path_factory: pytest.TempPathFactory) -> None:
    settings = gate_run.settings("judge")
    if gate_run.mode == "record":
        prompts = tier.load_prompts(settings)
        outputs = generate_outputs(
            gate_run.backend,
            prompts,
            max_new_tokens=settings.max_new_tokens,
            batch_size=settings.batch_size,
        )
        path = tmp_path_factory.mktemp("judge") / "judge-outputs.json"
        write_outputs(path, outputs)
        gate_run.attach(ARTIFACT, path)
        judges = tier.open_panel(settings, _beside_the_build(gate_run))
        validity = tier.validity_measurement(judges, settings.templates(), outputs)
        if validity is not None:
            gate_run.record(validity)
        gate_run.note_provenance({"judge_validity_judges": [j.judge.model_id for j in judges]})
        return
    assert gate_run.baseline is not None
    if ARTIFACT not in gate_run.baseline.artifacts:
        raise tier.baseline_outputs_missing(gate_run.baseline.display)
    baseline = read_outputs(gate_run.baseline_artifact(ARTIFACT))
    candidate = generate_outputs(
        gate_run.backend,
        prompts_of(baseline),
        max_new_tokens=baseline.max_new_tokens,
        batch_size=settings.batch_size,
    )
    judges = tier.open_panel(settings, _beside_the_build(gate_run))
    result = tier.compare_outputs(candidate, baseline, judges, settings)
    for measurement in result.measurements:
        gate_run.record(measurement)
    if result.problem is not None and (settings.required or result.stability.stable):
        raise result.problem

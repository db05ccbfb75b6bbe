"""The judgement's baselines: a stored one is checked against the candidate's model and
versions; an external one (another tool's file) records neither, and is compared as is."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from gate.errors import BaselineError
from gate.gating.thresholds import load_thresholds
from gate.report.results import RunIdentity
from gate.session.judgement import (
    BaselineInput,
    ExternalBaseline,
    Judgement,
    JudgementInputs,
    judge_run,
)
from gate.store.baseline import load_baseline_file
from gate.store.measurements_file import load_measurements

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
RUN = RunIdentity(
    candidate="c", gate_version="0", thresholds="t", thresholds_sha256="0", strict=False
)


def _judge(baseline: BaselineInput, *, family: str | None = None) -> Judgement:
    cand = load_measurements(EXAMPLES / "candidate-critical.json")
    model = cand.model if family is None else dataclasses.replace(cand.model, model_family=family)
    return judge_run(
        JudgementInputs(
            measurements=cand.measurements,
            baselines={"base": baseline},
            thresholds=load_thresholds(EXAMPLES / "thresholds.toml"),
            candidate=model,
            environment={"packages": {"torch": "2.0.0"}},
            run=RUN,
        )
    )


def test_a_stored_baseline_of_another_model_family_is_refused() -> None:
    stored = load_baseline_file(EXAMPLES / "baseline.json")
    assert stored.provenance.model_family == "llama"
    with pytest.raises(BaselineError, match="model_family 'llama' but the candidate has 'gpt2'"):
        _judge(stored, family="gpt2")


def test_an_external_baseline_gets_the_same_verdicts_without_provenance_checks() -> None:
    stored = load_baseline_file(EXAMPLES / "baseline.json")
    external = ExternalBaseline(
        source={"source": "elsewhere"}, measurements=stored.measurements, display="elsewhere"
    )
    from_store, from_elsewhere = _judge(stored), _judge(external, family="gpt2")
    assert from_store.exit_code == from_elsewhere.exit_code == 1
    assert from_store.results.verdicts == from_elsewhere.results.verdicts
    # the stored baseline records no package versions: a note says so; the external one
    # records no model at all, so no version note applies to it
    assert any("records no package versions" in n for n in from_store.results.notes)
    assert not any("version" in n for n in from_elsewhere.results.notes)
    assert from_elsewhere.results.baselines == {"base": {"source": "elsewhere"}}

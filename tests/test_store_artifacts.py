"""The store's files of the baseline artifacts other than the reference pack.

The per-question MCQ results (artifact ``mcq``, :mod:`gate.store.mcq_results`)
and the judge outputs (artifact ``judge-outputs``, :mod:`gate.store.judge_outputs`):
the committed demo baseline's files read, and write back byte for byte; every
problem is one :class:`~gate.errors.BaselineError` line.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gate.errors import BaselineError, ExitCode
from gate.measurement import JudgedOutput, OutputSet
from gate.metrics.accuracy import QuestionResult
from gate.store import judge_outputs, mcq_results
from gate.store.baseline import BaselineStore

DEMO_STORE = Path(__file__).resolve().parents[1] / "gate" / "assets" / "baselines"


def _demo_artifact(name: str) -> Path:
    return BaselineStore(DEMO_STORE).resolve("fp32", "demo").artifact_path(name)


def test_the_demo_baselines_mcq_results_read_and_write_back_unchanged(tmp_path: Path) -> None:
    stored = _demo_artifact(mcq_results.ARTIFACT)
    results = mcq_results.read_mcq_results(stored)
    assert results and all(isinstance(r, QuestionResult) for r in results)
    assert len({r.id for r in results}) == len(results)
    again = mcq_results.write_mcq_results(tmp_path / "mcq.json", results)
    assert again.read_bytes() == stored.read_bytes()


def test_the_demo_baselines_judge_outputs_read_and_write_back_unchanged(tmp_path: Path) -> None:
    stored = _demo_artifact(judge_outputs.ARTIFACT)
    outputs = judge_outputs.read_outputs(stored)
    assert outputs.outputs and outputs.max_new_tokens > 0
    judge_outputs.write_outputs(tmp_path / "o.json", outputs)
    assert (tmp_path / "o.json").read_bytes() == stored.read_bytes()


def test_mcq_results_file_layout_and_every_refusal(tmp_path: Path) -> None:
    result = QuestionResult("s/1", "s", 1, (-2.0, -1.0), (1, 1))
    path = mcq_results.write_mcq_results(tmp_path / "mcq.json", [result])
    assert json.loads(path.read_text(encoding="utf-8")) == {
        "schema_version": 1,
        "kind": "gate.mcq_results",
        "questions": [result.to_dict()],
    }
    assert path.read_text(encoding="utf-8").endswith("]\n}\n")
    cases = {
        "{not json": "cannot read the baseline's MCQ results",
        "[]": "is not a gate MCQ results file",
        '{"kind": "other", "schema_version": 1}': "is not a gate MCQ results file",
        '{"kind": "gate.mcq_results"}': "has no integer schema_version",
        '{"kind": "gate.mcq_results", "schema_version": 2}': "has schema_version 2; this gate",
        '{"kind": "gate.mcq_results", "schema_version": 1}': "malformed MCQ results",
        '{"kind": "gate.mcq_results", "schema_version": 1, "questions": [{"id": "q"}]}': (
            "malformed per-question result 'q'"
        ),
    }
    for text, message in cases.items():
        path.write_text(text, encoding="utf-8")
        with pytest.raises(BaselineError, match=message) as info:
            mcq_results.read_mcq_results(path)
        assert info.value.exit_code == ExitCode.USAGE_ERROR
        assert "\n" not in info.value.message


def test_judge_outputs_file_layout_and_refusals(tmp_path: Path) -> None:
    outputs = OutputSet(8, "abc", (JudgedOutput("p", "chat", "short", "hé?", 3, "oui", 2),))
    path = tmp_path / "o.json"
    judge_outputs.write_outputs(path, outputs)
    text = path.read_text(encoding="utf-8")
    assert "hé?" in text and not text.endswith("\n")  # ensure_ascii off, no final newline
    assert json.loads(text)["format"] == judge_outputs.FORMAT == 1
    assert judge_outputs.read_outputs(path) == outputs
    path.write_text('{"format": 2, "outputs": []}', encoding="utf-8")
    with pytest.raises(BaselineError, match=r"format 2, this gate reads 1"):
        judge_outputs.read_outputs(path)
    path.write_text("[]", encoding="utf-8")
    with pytest.raises(BaselineError, match="cannot read the baseline's judge outputs"):
        judge_outputs.read_outputs(path)

"""The capability tier end to end: real small models, and a damaged build that must regress."""

from __future__ import annotations

import ast
import json
import operator
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from gate.data.probes import build_probes
from gate.errors import ConfigError, DataError
from gate.gating.compare import compare_measurements
from gate.gating.thresholds import parse_thresholds
from gate.gating.verdict import Severity
from gate.measurement import Measurement
from gate.metrics.capability import (
    ProbeOutcome,
    pass_rate,
    pass_rate_measurement,
    wilson_interval,
)
from gate.metrics.metric_spec import SampleKind
from gate.metrics.registry import get_metric
from gate.tiers.capability import CapabilitySettings, measure
from gate.tiers.registry import build_settings

DEMO = Path(__file__).resolve().parents[1] / "gate" / "assets" / "demo_model"
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}


def _solve(question: str) -> int:
    def ev(node: ast.AST) -> int:
        if isinstance(node, ast.BinOp):
            return int(_OPS[type(node.op)](ev(node.left), ev(node.right)))
        assert isinstance(node, ast.Constant) and isinstance(node.value, int)
        return node.value

    return ev(ast.parse(question, mode="eval").body)


class OracleBackend:
    """Answers arithmetic and JSON probes in the demo's reply format; ``damage`` breaks some.

    ``damage = k`` answers every k-th arithmetic prompt (by the prompt's own
    numbers, so baseline and candidate see the same prompts) off by one.
    """

    name = "oracle"

    def __init__(self, damage: int = 0) -> None:
        self.damage = damage
        self.prompts: list[str] = []

    def encode_prompt(self, text: str, *, chat: bool = True) -> list[int]:
        self.prompts.append(text)
        return [len(self.prompts) - 1]

    def generate(
        self, prompts: Sequence[Sequence[int]], *, max_new_tokens: int, batch_size: int = 8
    ) -> list[list[int]]:
        return [list(p) for p in prompts]

    def decode(self, ids: Sequence[int]) -> str:
        text = self.prompts[ids[0]]
        json_match = re.match(r'Reply in JSON with the key "(\w+)": (.*)', text)
        if json_match:
            key, question = json_match.groups()
            arith = re.match(r"What is ([\d +*-]+)\?", question)
            return json.dumps({key: _solve(arith.group(1)) if arith else "Paris"})
        expr = re.match(r"What is (.*)\?", text)
        assert expr is not None, text
        value = _solve(expr.group(1))
        if self.damage and sum(map(int, re.findall(r"\d+", text))) % self.damage == 0:
            value += 1
        return f"{expr.group(1)} = {value}."


FAST = CapabilitySettings(
    arithmetic_easy=60,
    arithmetic_medium=60,
    arithmetic_hard=60,
    structured_output=40,
    instruction_following=24,
    code=3,
    max_new_tokens=24,
    code_max_new_tokens=48,
    sandbox_wall_s=2.0,
    sandbox_cpu_s=1,
)
#: Small enough for a random tiny model on a busy CPU (the numbers are meaningless there).
TINY = CapabilitySettings(
    arithmetic_easy=8,
    arithmetic_medium=4,
    arithmetic_hard=4,
    instruction_following=12,
    structured_output=4,
    code=2,
    max_new_tokens=8,
    code_max_new_tokens=16,
    sandbox_wall_s=2.0,
    sandbox_cpu_s=1,
)
ORACLE_FAMILIES = ("arithmetic_easy", "arithmetic_medium", "arithmetic_hard", "structured_output")


def test_catalog_specs_are_paired_binary() -> None:
    for family in ("arithmetic_easy", "instruction_following", "structured_output", "code"):
        spec = get_metric(f"capability.{family}")
        assert spec.sample_kind is SampleKind.PAIRED_BINARY and spec.higher_is_better


def test_pass_rate_measurement_matches_a_hand_count() -> None:
    outcomes = [
        ProbeOutcome("p1", "q1", "r1", True, "ok", ("op:+",)),
        ProbeOutcome("p2", "q2", "r2", False, "wrong", ("op:+",)),
        ProbeOutcome("p3", "q3", "r3", True, "ok", ("op:*",)),
        ProbeOutcome("p4", "q4", "r4", False, "no number", ("op:*",)),
        ProbeOutcome("p5", "q5", "r5", True, "ok", ("op:*",)),
    ]
    m = pass_rate_measurement("capability.arithmetic_easy", outcomes, examples=1)
    assert m.value == pytest.approx(3 / 5) == pass_rate([o.passed for o in outcomes])
    assert m.samples == (1.0, 0.0, 1.0, 0.0, 1.0)
    assert m.sample_ids == ("p1", "p2", "p3", "p4", "p5")
    assert m.breakdown["op:+"].value == pytest.approx(0.5)
    assert m.breakdown["op:*"].sample_ids == ("p3", "p4", "p5")
    assert m.breakdown["op:*"].value == pytest.approx(2 / 3)
    assert m.details["passed"] == 3
    assert m.details["wilson_95"] == list(wilson_interval(3, 5))
    assert [e["id"] for e in m.details["failing_examples"]] == ["p2"]
    with pytest.raises(DataError):
        pass_rate_measurement("capability.code", [])
    with pytest.raises(DataError, match="duplicate"):
        pass_rate_measurement("capability.code", outcomes[:1] * 2)


def test_oracle_passes_everything() -> None:
    ms = measure(OracleBackend(), FAST, families=ORACLE_FAMILIES)
    assert [m.name for m in ms] == [f"capability.{f}" for f in ORACLE_FAMILIES]
    for m in ms:
        assert m.value == 1.0, m.details["failing_examples"]
        m.validate()
        assert m.sample_ids is not None and len(set(m.sample_ids)) == m.n
    assert set(ms[0].breakdown) == {"op:+", "op:-", "op:*"}


def test_damaged_arithmetic_is_blocked_and_an_identical_build_passes_every_family() -> None:
    thresholds = parse_thresholds(
        {
            "metrics": {
                f"capability.{f}": {"warn": 0.02, "critical": 0.05, "mode": "absolute"}
                for f in ORACLE_FAMILIES
            }
        },
        source="test",
    )
    base = measure(OracleBackend(), FAST, families=ORACLE_FAMILIES)
    same = measure(OracleBackend(), FAST, families=ORACLE_FAMILIES)
    unchanged = compare_measurements(same, base, thresholds)
    assert {v.key for v in unchanged if v.slice is None} == {
        f"capability.{f}" for f in ORACLE_FAMILIES
    }
    assert all(v.severity is Severity.PASS for v in unchanged), [v.reason for v in unchanged]

    damaged = measure(OracleBackend(damage=3), FAST, families=ORACLE_FAMILIES)
    verdicts = {v.key: v for v in compare_measurements(damaged, base, thresholds)}
    for family in ("arithmetic_easy", "arithmetic_medium", "arithmetic_hard"):
        v = verdicts[f"capability.{family}"]
        assert v.severity is Severity.CRITICAL, v.reason
        assert v.value < 0.8
    assert verdicts["capability.structured_output"].severity is Severity.PASS


def test_settings_validation() -> None:
    assert build_settings("capability", {"arithmetic_easy": 5}).arithmetic_easy == 5
    with pytest.raises(ConfigError) as info:
        build_settings("capability", {"arithmetic_esay": 5})
    assert "arithmetic_easy" in (info.value.hint or "")
    with pytest.raises(ConfigError):
        build_settings("capability", {"families": ["arithmetic", "code"]})
    with pytest.raises(ConfigError):
        build_settings("capability", {"code": 0})


@pytest.mark.slow
def test_tier_on_a_real_tiny_model_is_deterministic(tiny_backend: Any) -> None:
    backend = tiny_backend
    first = measure(backend, TINY)
    second = measure(backend, TINY, families=("arithmetic_easy", "instruction_following"))
    assert [m.name for m in first] == [
        "capability.arithmetic_easy",
        "capability.arithmetic_medium",
        "capability.arithmetic_hard",
        "capability.instruction_following",
        "capability.structured_output",
        "capability.code",
    ]
    for a in first:
        a.validate()
        assert 0.0 <= a.value <= 1.0 and a.n == TINY.count(a.name.split(".")[1])
    for a, b in zip((first[0], first[3]), second, strict=True):
        assert a.samples == b.samples and a.sample_ids == b.sample_ids
    instr = first[3]
    assert {k.split(":")[0] for k in instr.breakdown} == {"constraint"}
    # every probe's id is the one the generator gives (pairing with a baseline works)
    probes = build_probes("arithmetic_easy", TINY.arithmetic_easy, TINY.seed)
    assert first[0].sample_ids == tuple(p.id for p in probes)


@pytest.mark.slow
@pytest.mark.skipif(
    not (DEMO / "model.safetensors").exists(), reason="the demo model is not committed yet"
)
def test_demo_model_scores_clearly_above_zero(demo_backend: Any) -> None:
    backend = demo_backend
    settings = CapabilitySettings(
        arithmetic_easy=60,
        arithmetic_medium=40,
        arithmetic_hard=40,
        instruction_following=60,
        structured_output=40,
        code=4,
    )
    ms: dict[str, Measurement] = {m.name: m for m in measure(backend, settings)}
    # The demo model learned the multiplication table (~0.36 of `a * b` probes) but not
    # two-digit addition or subtraction; the formats it was trained on it follows well.
    assert ms["capability.arithmetic_easy"].breakdown["op:*"].value >= 0.2
    assert ms["capability.arithmetic_easy"].value >= 0.08
    assert ms["capability.structured_output"].value >= 0.5
    fmt = ms["capability.instruction_following"].breakdown
    assert fmt["constraint:one_word"].value >= 0.5
    assert fmt["constraint:bullet_count"].value >= 0.3

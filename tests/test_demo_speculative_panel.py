"""``gate demo --panel speculative``: its baseline, its control and its candidates.

The panel's figures on SmolLM2 are in docs/speculative.md ("The demo panel"); here
the panel's construction and its exit rule, which need no model.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gate.errors import ConfigError, ExitCode
from gate.metrics.catalog import speculative as speculative_catalog
from gate.models.stack import parse_stack
from gate.session.runner import check_tiers_fit
from gate.workflows.demo import (
    SPECULATIVE_BASELINE,
    SPECULATIVE_REF,
    CandidateResult,
    demo_config,
    demo_model,
    panel_exit_code,
    store_dir,
)


@pytest.mark.parametrize("name", ["demo", "smollm2"])
def test_the_panel_is_gated_against_a_baseline_recorded_with_the_int4_self_draft(
    name: str,
) -> None:
    panel = demo_model(name, "speculative")
    assert panel.baseline_recipe == SPECULATIVE_BASELINE == panel.control
    assert panel.baseline_ref == SPECULATIVE_REF and not panel.committed
    assert panel.tiers == panel.baseline_tiers == (speculative_catalog.TIER,)
    # the control first, a re-compressed draft, a draft of another kind, a compressed target
    assert panel.recipes[0] == panel.control
    stacks = [parse_stack(r) for r in panel.recipes]
    assert all(s.part("speculative") is not None for s in stacks)
    assert any(s.weights is not None and s.part("speculative") is not None for s in stacks[1:])
    for recipe in panel.recipes:
        check_tiers_fit(panel.tiers, recipe)  # every candidate runs the speculative tier
    # its own store: the fidelity panel's baseline is another build
    assert store_dir(panel) != store_dir(demo_model(name))


def test_the_panel_config_names_each_candidate_and_keeps_the_control_recipe(
    tmp_path: Path,
) -> None:
    panel = demo_model("smollm2", "speculative")
    config = demo_config(panel.recipes, panel.tiers, store=tmp_path, model=panel, source="x")
    recipes = [c.recipe for c in config.candidates]
    assert recipes == list(panel.recipes)  # the control is a speculative build, not `none`
    assert config.run.against == (SPECULATIVE_REF,)
    assert config.tiers[speculative_catalog.TIER]["limit"] >= 1


def test_the_demo_fails_when_its_speculative_control_is_not_approved() -> None:
    control = SPECULATIVE_BASELINE
    ok = CandidateResult(control, 0, "pass")
    blocked = CandidateResult("spec-draft:quanto-int2", 1, "block")
    assert panel_exit_code([ok, blocked], control) == (ExitCode.OK, None)
    code, problem = panel_exit_code([CandidateResult(control, 1, "block"), blocked], control)
    assert code == ExitCode.BLOCKED and problem is not None and "control" in problem
    # the fidelity panel's control (`none`) is not this panel's
    assert panel_exit_code([CandidateResult("none", 1, "block"), ok], control)[0] == ExitCode.OK


def test_an_unknown_model_is_one_line() -> None:
    with pytest.raises(ConfigError, match="no model"):
        demo_model("nope", "speculative")

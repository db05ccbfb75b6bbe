"""Each tier is declared once (gate/tiers/tier_spec.py); every list of tiers derives from it."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

import gate
from gate.commands.group import cli
from gate.errors import ConfigError
from gate.metrics.registry import CATALOG_MODULES, TIERS, all_metrics
from gate.session.runner import build_args, select_tiers, suites_dir
from gate.tiers.registry import SETTINGS
from gate.tiers.tier_spec import (
    CALIBRATED_TIERS,
    DEFAULT_CALIBRATION_TIERS,
    DEFAULT_TIERS,
    OPT_IN_TIERS,
    PORTABLE_TIERS,
    TIER_SPECS,
    check_recorded_together,
    recorded_tiers,
    tier_spec,
)
from gate.workflows import demo
from gate.workflows.calibrate import CalibrationRequest, check_calibration

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = Path(gate.__file__).resolve().parent


def test_one_spec_per_catalog_tier_in_registry_order() -> None:
    assert tuple(s.name for s in TIER_SPECS) == TIERS
    assert sorted(m.TIER for m in CATALOG_MODULES) == list(TIERS)
    assert dict(SETTINGS) == {s.name: s.settings for s in TIER_SPECS}


def test_every_metric_is_owned_by_exactly_the_spec_of_its_tier() -> None:
    owned = [name for s in TIER_SPECS for name in s.metric_names]
    assert sorted(owned) == sorted(all_metrics())
    for spec in TIER_SPECS:
        assert spec.metric_names, spec.name
        assert {all_metrics()[n].tier for n in spec.metric_names} == {spec.name}


def test_the_tier_lists_are_the_specs_flags() -> None:
    assert DEFAULT_TIERS == ("accuracy", "capability", "fidelity", "latency")
    assert OPT_IN_TIERS == ("generation", "judge", "load", "speculative")
    assert CALIBRATED_TIERS == ("accuracy", "capability", "fidelity", "generation", "speculative")
    assert set(DEFAULT_CALIBRATION_TIERS) <= set(CALIBRATED_TIERS)
    assert CalibrationRequest(model="demo").tiers == DEFAULT_CALIBRATION_TIERS
    assert set(DEFAULT_TIERS) | set(OPT_IN_TIERS) == set(TIERS)
    assert demo.BASELINE_TIERS == PORTABLE_TIERS
    assert "latency" not in demo.DEFAULT_TIERS and "judge" not in demo.DEFAULT_TIERS
    assert set(demo.DEFAULT_TIERS) == set(DEFAULT_TIERS) & set(PORTABLE_TIERS)


def test_every_spec_names_a_suite_that_ships_and_the_runner_uses_it() -> None:
    shipped = suites_dir()
    for spec in TIER_SPECS:
        assert (shipped / spec.suite).is_file(), spec.suite
        assert (ROOT / "suites" / spec.suite).is_file()
    runnable, missing = select_tiers(None)
    assert runnable == DEFAULT_TIERS and missing == ()
    args = build_args(["judge", "fidelity"], directory=shipped)
    assert args[:2] == [str(shipped / "test_judge.py"), str(shipped / "test_fidelity.py")]


def test_an_unknown_tier_is_refused_with_a_suggestion() -> None:
    assert tier_spec("latency").settings is SETTINGS["latency"]
    with pytest.raises(ConfigError, match="unknown tier 'fidelty'") as caught:
        tier_spec("fidelty", "gate.toml")
    assert "fidelity" in str(caught.value.hint)
    assert str(caught.value).startswith("gate.toml: ")


def test_calibrate_accepts_exactly_the_calibrated_tiers() -> None:
    for spec in TIER_SPECS:
        needs = "spec-ngram:3" if spec.name == "speculative" else None  # a speculative build
        tiers = (*spec.records_with, spec.name)  # the generation tier reads fidelity's pack
        request = CalibrationRequest(model="demo", recipe=needs, tiers=tiers)
        if spec.calibrated:
            check_calibration(request)
        else:
            with pytest.raises(ConfigError, match=f"tier '{spec.name}' cannot be calibrated"):
                check_calibration(request)


def test_the_help_texts_list_the_tiers_from_the_specs() -> None:
    runner = CliRunner()
    for command in (["run"], ["baseline", "record"]):
        text = " ".join(runner.invoke(cli, [*command, "--help"], terminal_width=400).output.split())
        for spec in TIER_SPECS:
            assert (f"{spec.name} (opt-in)" in text) is (not spec.default), (command, spec.name)
            assert spec.name in text
        assert f"default: {','.join(DEFAULT_TIERS)}" in text
    text = " ".join(runner.invoke(cli, ["calibrate", "--help"]).output.split())
    assert f"tiers to calibrate ({', '.join(CALIBRATED_TIERS)})" in text
    text = " ".join(runner.invoke(cli, ["demo", "--help"]).output.split())
    assert f"(default: {','.join(demo.DEFAULT_TIERS)};" in text


def test_the_readme_tier_table_matches_the_specs() -> None:
    """The README's table lists every tier once, and marks exactly the opt-in ones."""
    rows = re.findall(r"^\| \*\*(\w+)\*\*( \(opt-in\))? \|", (ROOT / "README.md").read_text(), re.M)
    assert sorted(name for name, _ in rows) == sorted(TIERS)
    assert {name for name, opt_in in rows if opt_in} == set(OPT_IN_TIERS)


#: Tier selections that are a choice of their module, not a fact of the tiers.
CHOSEN = {
    # the SmolLM2 demo runs the tiers that finish in a CPU session's time (its baseline
    # records what tier_spec.recorded_tiers derives from them)
    "workflows/demo.py": ["fidelity", "accuracy", "generation"],
}


def test_no_module_spells_a_tier_list_of_its_own() -> None:
    """A tuple, list or set of two or more tier names outside gate/tiers/tier_spec.py is a
    second declaration of which tiers belong together; derive it from the specs."""
    found = []
    chosen: set[str] = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == PACKAGE / "tiers" / "tier_spec.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Tuple | ast.List | ast.Set):
                names = [
                    e.value
                    for e in node.elts
                    if isinstance(e, ast.Constant) and isinstance(e.value, str) and e.value in TIERS
                ]
                rel = path.relative_to(PACKAGE).as_posix()
                if len(names) >= 2 and CHOSEN.get(rel) == names:
                    chosen.add(rel)
                elif len(names) >= 2:
                    found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: {names}")
    assert not found, "tier lists spelt outside the tier specs:\n" + "\n".join(found)
    assert chosen == set(CHOSEN), "CHOSEN lists a selection that is gone"


def test_reading_the_specs_imports_no_tier_workload() -> None:
    """The CLI reads the specs for its help texts; the settings classes load on first use."""
    import subprocess
    import sys

    code = (
        "import sys, gate.commands.group; "
        "print(sorted(m for m in sys.modules if m.startswith('gate.tiers')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['gate.tiers', 'gate.tiers.tier_spec']"
    for spec in TIER_SPECS:
        assert dataclasses.is_dataclass(spec.settings) and spec.settings.__name__.endswith(
            "Settings"
        )


def test_a_tier_that_records_from_another_is_refused_without_it() -> None:
    """The generation tier reads the fidelity tier's reference pack when a baseline is
    recorded: recording it alone is one line naming both (exit 4)."""
    check_recorded_together(("fidelity", "generation"))
    check_recorded_together(("accuracy",))
    with pytest.raises(ConfigError, match="fidelity tier's records") as info:
        check_recorded_together(("accuracy", "generation"))
    assert info.value.hint == "name them together: --tiers accuracy,generation,fidelity"
    for spec in TIER_SPECS:  # every tier named is a tier
        assert all(tier_spec(t) for t in spec.records_with)


def test_a_baseline_records_the_tiers_that_read_no_other_tiers_records() -> None:
    """A run over fidelity, accuracy and generation needs a baseline of fidelity and
    accuracy: generation gates on the fidelity tier's pack (SmolLM2's panel)."""
    assert recorded_tiers(("fidelity", "accuracy", "generation")) == ("fidelity", "accuracy")
    assert recorded_tiers(("generation",)) == ()
    check_recorded_together((*recorded_tiers(DEFAULT_TIERS), "generation"))

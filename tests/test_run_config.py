"""Run config (``gate.toml``) validation, multi-candidate bookkeeping, calibration."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from gate.cli import main
from gate.data.activation_prompts import (
    activation_prompts_for,
    build_activation_prompt_set,
    default_activation_prompts_path,
    load_activation_prompts,
)
from gate.data.prompt_set import load_prompt_set
from gate.data.sharegpt import Conversation, Turn, base_id, is_heldout
from gate.errors import ConfigError, DataError, ExitCode
from gate.gating.verdict import Severity, Verdict
from gate.report.outputs import ReportTargets
from gate.report.results import Results
from gate.session.run_config import Candidate, load_run_config
from gate.workflows.multirun import (
    outcome_of,
    summary_markdown,
    worst_exit,
    worst_findings,
)
from gate.workflows.plan import candidate_targets

ROOT = Path(__file__).resolve().parents[1]

GOOD = textwrap.dedent(
    """
    [run]
    baseline = "demo"
    against = ["fp16"]
    tiers = ["fidelity", "capability"]
    calibration = "calib.jsonl"

    [[candidates]]
    name = "int8"
    model = "demo"
    recipe = "bnb-int8"

    [[candidates]]
    name = "wanda"
    model = "./pruned"
    recipe = "PRUNE-WANDA:0.50"
    against = ["prod", "fp16"]
    tiers = ["fidelity"]
    model_slug = "other"

    [tiers.fidelity]
    max_new_tokens = 16
    """
)


def _write(tmp_path: Path, text: str, name: str = "gate.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_are_inherited_and_overridden(tmp_path: Path) -> None:
    config = load_run_config(_write(tmp_path, GOOD))
    first, second = config.resolved()
    assert first == Candidate(
        name="int8",
        model="demo",
        recipe="bnb-int8",
        against=("fp16",),
        tiers=("fidelity", "capability"),
        calibration=Path("calib.jsonl"),
        model_slug="demo",
    )
    assert second.recipe == "prune-wanda:0.5"  # canonical form
    assert second.against == ("prod", "fp16")
    assert second.tiers == ("fidelity",)
    assert second.model_slug == "other"
    assert config.tiers == {"fidelity": {"max_new_tokens": 16}}


def test_shipped_configs_are_valid() -> None:
    for path in (ROOT / "gate.toml", ROOT / "examples" / "gate.toml"):
        config = load_run_config(path)
        assert len(config.candidates) == 3
        assert {c.model_slug for c in config.resolved()} == {"demo"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[runn]\nbaseline = 'demo'\n", "unknown key 'runn' (did you mean 'run'?)"),
        ("[run]\nagainst_refs = ['fp16']\n", "unknown key 'against_refs'"),
        ("[run]\nagianst = ['fp16']\n", "did you mean 'against'?"),
        ("[run]\ntiers = ['fidelty']\n", "unknown tier 'fidelty' (did you mean 'fidelity'?)"),
        ("[run]\ntiers = []\n", "the tier list is empty"),
        ("[run]\nagainst = 'fp16'\n", "expected a list"),
        ("[run]\nstrict = 'yes'\n", "expected true or false"),
        ("[[candidates]]\nname = 'a'\n", "missing key 'model'"),
        ("[[candidates]]\nname = 'a'\nmodel = 'demo'\nrecipie = 'x'\n", "did you mean 'recipe'?"),
        (
            "[[candidates]]\nname = 'a'\nmodel = 'demo'\nrecipe = 'bnb-nf5'\n",
            "candidate 'a': unknown recipe 'bnb-nf5' (did you mean bnb-nf4?)",
        ),
        (
            "[[candidates]]\nname = 'a'\nmodel = 'demo'\nrecipe = 'prune-magnitude:1.5'\n",
            "fraction 1.5 is outside (0, 1)",
        ),
        ("[[candidates]]\nname = 'a b'\nmodel = 'demo'\n", "must be 1-64 letters"),
        (
            "[[candidates]]\nname = 'a'\nmodel = 'demo'\n[[candidates]]\nname = 'a'\nmodel = 'x'\n",
            "candidate name 'a' is used twice",
        ),
        ("candidates = 'int8'\n", "'candidates' must be an array of tables"),
        ("[tiers.fidelty]\nlimit = 3\n", "unknown tier 'fidelty'"),
        ("[tiers.fidelity]\nmax_new_tokenz = 3\n", "did you mean 'max_new_tokens'?"),
        ("[tiers.fidelity]\nmax_new_tokens = 0\n", "max_new_tokens must be >= 1"),
        ("[run\nbaseline = 'demo'\n", "invalid TOML"),
    ],
)
def test_bad_configs_are_one_line_config_errors(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_run_config(_write(tmp_path, text))
    line = info.value.format_line()
    assert message in line
    assert "\n" not in line
    assert info.value.exit_code == ExitCode.USAGE_ERROR


def test_missing_config_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_run_config(tmp_path / "absent.toml")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "--config", "{bad}"], "unknown key 'agianst'"),
        (["baseline", "record", "--config", "{bad}"], "unknown key 'agianst'"),
        (["run"], "nothing to gate"),
        (["run", "--config", "{empty}"], "names no candidates"),
        (["run", "--config", "{good}", "--recipe", "bnb-nf4"], "apply to --candidate only"),
        (["run", "--config", "{good}", "--tiers", "fidelty"], "did you mean 'fidelity'?"),
        (["run", "--config", "{good}", "--store", "{store}"], "no baselines for model 'demo'"),
        (["baseline", "record", "--config", "{empty}"], "no model to record"),
    ],
)
def test_cli_input_errors_exit_4_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    paths = {
        "bad": _write(tmp_path, "[run]\nagianst = ['fp16']\n", "bad.toml"),
        "empty": _write(tmp_path, "[run]\nagainst = ['fp16']\n", "empty.toml"),
        "good": _write(tmp_path, "[[candidates]]\nname = 'a'\nmodel = 'demo'\n", "good.toml"),
        "store": tmp_path / "store",
    }
    code = main([arg.format(**paths) for arg in argv])
    captured = capsys.readouterr()
    assert code == ExitCode.USAGE_ERROR
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("gate: error: ")
    assert message in lines[0]
    assert "Traceback" not in captured.err + captured.out


# ------------------------------------------------------------- multi-candidate bookkeeping


def test_worst_exit_errors_dominate_blocks() -> None:
    assert worst_exit([]) == ExitCode.OK
    assert worst_exit([0, 0]) == ExitCode.OK
    assert worst_exit([0, 1, 0]) == ExitCode.BLOCKED
    assert worst_exit([1, 5]) == ExitCode.NO_MEASUREMENTS
    assert worst_exit([1, 4, 5]) == ExitCode.USAGE_ERROR
    assert worst_exit([4, 3, 1]) == ExitCode.INTERNAL_ERROR
    assert worst_exit([3, 2]) == ExitCode.INTERRUPTED
    assert worst_exit([0, 77]) == ExitCode.INTERNAL_ERROR  # unknown status: internal


def test_report_paths_get_the_candidate_name() -> None:
    targets = ReportTargets(json=Path("out/results.json"), markdown=Path("out/comment.md"))
    assert candidate_targets(targets, "nf4", several=False) == targets
    several = candidate_targets(targets, "nf4", several=True)
    assert several.json == Path("out/results-nf4.json")
    assert several.markdown == Path("out/comment-nf4.md")
    assert several.html is None and several.junit is None


def _metric(name: str, severity: str, rel: float | None, slice_: str | None = None) -> Verdict:
    return Verdict(
        metric=name,
        tier=name.split(".")[0],
        slice=slice_,
        severity=Severity[severity.upper()],
        value=0.5,
        baseline_value=1.0,
        relative_delta=rel,
        delta=-0.5 if rel is None else rel,
        higher_is_better=True,
        n=1,
        reason="",
    )


def _results(*verdicts: Verdict, headline: str = "BLOCKED") -> Results:
    return Results("block", headline, 1, verdicts)


def test_worst_findings_order() -> None:
    results = _results(
        _metric("a.small_crit", "critical", -0.2),
        _metric("a.warn", "warn", -0.9),
        _metric("a.pass", "pass", -0.99),
        _metric("a.big_crit", "critical", -0.8),
        _metric("a.big_crit", "critical", -0.95, "category:math"),
        _metric("a.no_rel", "critical", None),
    )
    found = worst_findings(results, limit=5)
    assert [f.split(" ")[0] for f in found] == [
        "a.big_crit",
        "a.no_rel",
        "a.small_crit",
        "a.big_crit[category:math]",
        "a.warn",
    ]
    assert found[0] == "a.big_crit 0.5 vs 1 (critical)"


def test_outcome_without_results_and_combined_markdown(tmp_path: Path) -> None:
    cand = Candidate("nf4", "demo", "bnb-nf4", ("fp16",), None, None, "demo")
    crashed = outcome_of(cand, ExitCode.INTERNAL_ERROR, None)
    assert crashed.headline.startswith("ERROR") and crashed.findings == ("see its report above",)
    md = tmp_path / "c.md"
    md.write_text("## candidate report\n")
    blocked = outcome_of(
        cand, ExitCode.BLOCKED, _results(_metric("fidelity.cga", "critical", -0.3)), md
    )
    assert blocked.findings == ("fidelity.cga 0.5 vs 1 (critical)",)
    text = summary_markdown([crashed, blocked], worst_exit([3, 1]))
    assert text.startswith("## gate: 2 candidates, exit 3")
    assert "| nf4 | demo | bnb-nf4 | BLOCKED | 1 | fidelity.cga 0.5 vs 1 (critical) |" in text
    assert "## candidate report" in text and "No report: ERROR" in text


# ------------------------------------------------------------------------- calibration


def _conv(
    cid: str, user: str, reply: str = "Sure, here is a long enough reply text."
) -> Conversation:
    return Conversation(cid, (Turn("user", user), Turn("assistant", reply)))


def test_calibration_set_is_training_split_deterministic_and_cut() -> None:
    convs = [_conv(f"c{i}_0", f"question number {i} " * 20) for i in range(200)]
    convs.append(_conv("dup_0", convs[0].turns[0].content))  # same text: dropped
    convs.append(_conv("short_0", "hi", "ok"))  # too short: dropped
    first = build_activation_prompt_set(convs, size=30, max_chars=100)
    assert first == build_activation_prompt_set(list(reversed(convs)), size=30, max_chars=100)
    assert len(first) == 30
    assert all(not is_heldout(r["id"]) for r in first)
    assert all(len(r["text"]) <= 100 and not r["text"].endswith(" ") for r in first)
    held = [c.id for c in convs if is_heldout(c.id)]
    assert held, "the synthetic sample must contain held-out ids for this test to mean anything"
    every = build_activation_prompt_set(convs, size=1000, max_chars=100)
    assert not {r["id"] for r in every} & set(held)
    assert "short_0" not in {r["id"] for r in every}
    assert len({r["text"] for r in every}) == len(every)


def test_packaged_calibration_never_overlaps_the_fidelity_prompts() -> None:
    records = [
        json.loads(line)
        for line in default_activation_prompts_path().read_text(encoding="utf-8").splitlines()
    ]
    assert len(records) == 128
    assert all(not is_heldout(r["id"]) for r in records)
    calib_groups = {base_id(r["id"]) for r in records}
    prompt_groups = {base_id(p.id) for p in load_prompt_set()}
    assert not calib_groups & prompt_groups
    assert load_activation_prompts() == [r["text"] for r in records]


def test_calibration_only_for_recipes_that_need_it(tmp_path: Path) -> None:
    assert activation_prompts_for(None) is None
    assert activation_prompts_for("bnb-nf4", tmp_path / "absent.jsonl") is None
    custom = tmp_path / "c.jsonl"
    custom.write_text('{"text": "one"}\n\n{"text": "two", "id": "x"}\n', encoding="utf-8")
    assert activation_prompts_for("prune-wanda:0.5", custom) == ["one", "two"]
    assert load_activation_prompts(custom, limit=1) == ["one"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "is empty"),
        ("{not json}\n", "c.jsonl:1: not valid JSON"),
        ('{"text": ""}\n', 'c.jsonl:1: needs a non-empty string "text"'),
        ('["text"]\n', "c.jsonl:1"),
    ],
)
def test_bad_calibration_files(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "c.jsonl"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(DataError, match=message.replace("(", r"\(")):
        load_activation_prompts(path)
    with pytest.raises(DataError, match="not found"):
        activation_prompts_for("prune-wanda:0.3", tmp_path / "missing.jsonl")

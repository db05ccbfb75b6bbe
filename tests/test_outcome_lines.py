"""Nothing silently approved, and every outcome named: the real CLI on files, no model loaded.

* thresholds that bound none of the measured metrics are refused (exit 4, one
  line), before any model loads for ``gate run``;
* measured metrics without a bound, and baseline metrics the run did not
  measure, are listed in the console report and the results JSON; an
  unmeasured metric is a warning, so ``--strict`` blocks (exit 1);
* the last line names what the exit code means, for every exit code: bad
  input is ``ERROR (input, exit 4)``, never ``BLOCKED``;
* every report target is checked before anything is read or loaded (exit 4);
* ``gate baseline show`` shows what the fidelity reference recorder cut.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gate.cli import main
from gate.errors import EXIT_MEANINGS, ExitCode, exit_label
from gate.gating.verdict import GateOutcome, Severity, decide
from gate.measurement import Measurement
from gate.report.console import summary_line
from gate.report.results_json import build_results, final_words
from gate.store.baseline import BaselineStore
from gate.workflows.plan import packaged_store
from tests.cli_support import run_gate

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def _one_error_line(capsys: pytest.CaptureFixture[str], *needles: str) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("gate: error: "), err
    assert err.endswith("ERROR (input, exit 4)"), err
    for needle in needles:
        assert needle in err, err
    return err


def _compare(*extra: str) -> list[str]:
    return ["compare", str(EXAMPLES / "candidate-equal.json"),
            "--baseline", str(EXAMPLES / "baseline.json"), *extra]  # fmt: skip


def _run_demo(store: Path, *extra: str) -> list[str]:
    return ["run", "--candidate", "demo", "--against", "fp32", "--tiers", "fidelity",
            "--store", str(store), *extra]  # fmt: skip


# ------------------------------------------------------------------- thresholds bounding nothing


def test_an_empty_thresholds_file_is_refused_before_a_run_loads_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "thresholds.toml"
    empty.write_text("")
    assert main(_run_demo(packaged_store(), "--thresholds", str(empty))) == ExitCode.USAGE_ERROR
    _one_error_line(capsys, "bounds none of the 12 metrics", "would approve any build")


def test_thresholds_bounding_only_another_tier_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = tmp_path / "thresholds.toml"
    other.write_text('[metrics."accuracy.perplexity"]\nwarn = 0.05\n\n[tiers.fidelity]\n')
    assert main(_run_demo(packaged_store(), "--thresholds", str(other))) == ExitCode.USAGE_ERROR
    _one_error_line(capsys, str(other), "fidelity.cga")


def test_compare_refuses_thresholds_bounding_none_of_the_file_metrics(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    only_tiers = tmp_path / "thresholds.toml"
    only_tiers.write_text("[tiers.latency]\nruns = 5\n")
    assert main(_compare("--thresholds", str(only_tiers))) == ExitCode.USAGE_ERROR
    _one_error_line(capsys, "bounds none of")


def test_metrics_without_a_bound_are_listed_in_the_console_and_the_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    some = tmp_path / "thresholds.toml"
    some.write_text('[metrics."accuracy.mcq_acc"]\nwarn = 0.02\ncritical = 0.05\n')
    out_json = tmp_path / "r.json"
    assert main(_compare("--thresholds", str(some), "--json", str(out_json))) == ExitCode.OK
    out = capsys.readouterr().out
    results = json.loads(out_json.read_text())
    measured = {m["name"] for m in results["metrics"]}
    assert set(results["unbounded"]) == measured - {"accuracy.mcq_acc"}
    assert "fidelity.cga" in results["unbounded"]
    assert "have no bound in" in out and "fidelity.cga" in out
    assert any("have no bound" in note for note in results["notes"])


# ------------------------------------------------------------------ baseline metrics not measured


def _without(tmp_path: Path, metric: str) -> Path:
    data: dict[str, Any] = json.loads((EXAMPLES / "candidate-equal.json").read_text())
    data["metrics"] = [m for m in data["metrics"] if m["name"] != metric]
    path = tmp_path / "candidate.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("strict", [False, True])
def test_a_baseline_metric_the_run_did_not_measure_is_listed_and_fails_under_strict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], strict: bool
) -> None:
    candidate = _without(tmp_path, "accuracy.perplexity")
    out_json = tmp_path / "r.json"
    argv = ["compare", str(candidate), "--baseline", str(EXAMPLES / "baseline.json"),
            "--thresholds", str(EXAMPLES / "thresholds.toml"), "--json", str(out_json)]  # fmt: skip
    code = main([*argv, "--strict"] if strict else argv)
    out = capsys.readouterr().out
    results = json.loads(out_json.read_text())
    assert [(u["name"], Path(u["against"]).name) for u in results["unmeasured"]] == [
        ("accuracy.perplexity", "baseline.json")
    ]
    assert "not measured in this run" in out and "accuracy.perplexity" in out
    assert "1 not measured" in out.splitlines()[-1]
    if strict:
        assert code == ExitCode.BLOCKED
        assert out.splitlines()[-1].startswith("gate: BLOCKED (exit 1)")
    else:
        assert code == ExitCode.OK
        assert results["headline"] == "APPROVED WITH WARNINGS"


def test_metrics_of_tiers_that_did_not_run_are_not_unmeasured() -> None:
    from gate.gating.compare import unmeasured

    cga = Measurement("fidelity.cga", 1.0)
    ppl = Measurement("accuracy.perplexity", 10.0)
    kl = Measurement("fidelity.kl_mean", 0.0)
    stored = {"fp16": [cga, ppl, kl]}
    assert [u.metric for u in unmeasured([cga], stored)] == ["fidelity.kl_mean"]
    assert [u.metric for u in unmeasured([cga], stored, ("fidelity", "accuracy"))] == [
        "accuracy.perplexity",
        "fidelity.kl_mean",
    ]
    assert decide([], unmeasured=unmeasured([cga], stored)).severity == Severity.WARN


# ------------------------------------------------------------------------ the last line's words


@pytest.mark.parametrize("code", list(ExitCode))
def test_the_verdict_line_names_what_every_exit_code_means(code: ExitCode) -> None:
    approved = GateOutcome(Severity.PASS, ExitCode.OK, ())
    line = summary_line(build_results(approved, exit_code=code))
    _, headline = final_words(approved, int(code))
    assert line.startswith(f"gate: {exit_label(int(code))} - "), line
    assert headline == EXIT_MEANINGS[code]
    assert build_results(approved, exit_code=code).headline == EXIT_MEANINGS[code]
    if code != ExitCode.BLOCKED:
        assert "BLOCKED" not in line


def test_exit_labels() -> None:
    assert exit_label(4) == "ERROR (input, exit 4)"
    assert exit_label(3) == "ERROR (internal or model load, exit 3)"
    assert exit_label(1) == "BLOCKED (exit 1)"
    assert exit_label(2) == "INTERRUPTED (exit 2)"
    assert exit_label(5) == "NOTHING MEASURED (exit 5)"
    assert exit_label(0, "APPROVED WITH WARNINGS") == "APPROVED WITH WARNINGS (exit 0)"


def test_a_usage_error_ends_with_the_input_error_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--no-such-option"]) == ExitCode.USAGE_ERROR
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == "gate: ERROR (input, exit 4)"


def test_an_internal_error_ends_with_its_meaning(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import gate.commands.group as group

    class Broken:
        def main(self, **_: Any) -> int:
            raise RuntimeError("boom")

    monkeypatch.setattr(group, "cli", Broken())
    assert main(["run"]) == ExitCode.INTERNAL_ERROR
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0] == "gate: internal error: RuntimeError: boom"
    assert err[-1].startswith("gate: ERROR (internal or model load, exit 3)")


# ---------------------------------------------------------------------- report targets up front


def _a_file(tmp_path: Path) -> Path:
    path = tmp_path / "plain-file"
    path.write_text("x")
    return path


def _usage_error(capsys: pytest.CaptureFixture[str], option: str) -> None:
    """click's own refusal of a directory where a file is named: exit 4, the option named,
    and the last line naming the outcome."""
    err = capsys.readouterr().err.strip()
    assert f"Invalid value for '{option}'" in err, err
    assert err.splitlines()[-1] == "gate: ERROR (input, exit 4)", err


@pytest.mark.parametrize("option", ["--json", "--html", "--junit", "--markdown"])
def test_gate_run_checks_every_report_target_before_loading(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str
) -> None:
    under = _a_file(tmp_path) / "report.out"
    assert main(_run_demo(packaged_store(), option, str(under))) == ExitCode.USAGE_ERROR
    _one_error_line(capsys, option, str(under.parent), "is not a directory")
    assert main(_run_demo(packaged_store(), option, str(tmp_path))) == ExitCode.USAGE_ERROR
    _usage_error(capsys, option)


def test_a_multi_candidate_run_checks_its_report_targets_before_loading(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "gate.toml"
    config.write_text(
        f'[run]\nbaseline = "demo"\nagainst = ["fp32"]\ntiers = ["fidelity"]\n'
        f'store = "{packaged_store()}"\n\n'
        '[[candidates]]\nname = "a"\nmodel = "demo"\n\n'
        '[[candidates]]\nname = "b"\nmodel = "demo"\nrecipe = "bnb-nf4"\n'
    )
    under = _a_file(tmp_path) / "comment.md"
    assert main(["run", "--config", str(config), "--markdown", str(under)]) == 4
    _one_error_line(capsys, "--markdown")


def test_demo_checks_its_json_dir_before_loading(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    under = _a_file(tmp_path) / "results"
    assert main(["demo", "--tiers", "fidelity", "--json-dir", str(under)]) == 4
    _one_error_line(capsys, "--json-dir", "is not a directory")
    assert main(["demo", "--tiers", "fidelity", "--json-dir", str(_a_file(tmp_path))]) == 4
    _usage_error(capsys, "--json-dir")


@pytest.mark.parametrize("option", ["--json", "--html", "--junit", "--markdown"])
def test_compare_checks_its_report_targets_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str
) -> None:
    under = _a_file(tmp_path) / "report.out"
    assert main(_compare(option, str(under))) == ExitCode.USAGE_ERROR
    _one_error_line(capsys, option, "is not a directory")


def test_import_checks_its_json_target_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope.jsonl"
    under = _a_file(tmp_path) / "r.json"
    argv = ["import", "lm-eval", str(missing), str(missing), "--json", str(under)]
    assert main(argv) == ExitCode.USAGE_ERROR
    _one_error_line(capsys, "--json", "is not a directory")


# ------------------------------------------------------------------------------ baseline show


def test_baseline_show_names_what_the_reference_recorder_cut(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "store"
    shutil.copytree(packaged_store(), store)
    fp32 = BaselineStore(store).resolve("fp32", "demo")
    provenance = replace(
        fp32.provenance,
        fidelity_prompts_truncated=3,
        fidelity_prompts_empty=1,
        fidelity_tokens_cut=17,
    )
    BaselineStore(store).add(
        "demo", "cut", list(fp32.measurements.values()), provenance, {}, refs=("cut",)
    )
    assert main(["baseline", "show", "cut", "--model", "demo", "--store", str(store)]) == 0
    out = capsys.readouterr().out
    assert (
        "fidelity reference: 96 prompts; 3 cut at the baseline's first self-disagreement "
        "(17 generated tokens removed); 1 left empty (not scored)"
    ) in out


@pytest.mark.slow
def test_gate_run_lists_perplexity_it_did_not_measure_and_strict_blocks(tmp_path: Path) -> None:
    """The accuracy tier with ``perplexity = false`` against the fp32 baseline, which has it."""
    config = tmp_path / "gate.toml"
    config.write_text("[tiers.accuracy]\nperplexity = false\n")
    out_json = tmp_path / "r.json"
    argv = ["run", "--candidate", "demo", "--against", "fp32", "--tiers", "accuracy",
            "--store", str(packaged_store()), "--config", str(config),
            "--json", str(out_json), "--strict"]  # fmt: skip
    done = run_gate(*argv, cwd=tmp_path)
    out = done.stdout
    assert done.returncode == ExitCode.BLOCKED, out[-3000:] + done.stderr[-3000:]
    results = json.loads(out_json.read_text())
    assert results["unmeasured"] == [{"name": "accuracy.perplexity", "against": "fp32"}]
    assert "accuracy.perplexity" not in {m["name"] for m in results["metrics"]}
    assert results["headline"] == "BLOCKED"
    assert "not measured in this run (blocks under --strict): accuracy.perplexity" in out
    gate_lines = [line for line in out.splitlines() if line.startswith("gate: ")]
    assert gate_lines[-1].startswith("gate: BLOCKED (exit 1) - 0 critical, 0 warnings")
    # the demo's small MCQ slices are also listed as underpowered after it (docs/metrics.md "Power")
    assert ", 1 not measured" in gate_lines[-1]

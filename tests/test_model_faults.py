"""Broken models on the real demo model: refused at load (exit 3) or gated as critical (exit 1).

* weights that do not match the config (missing, unexpected, of another shape)
  refuse the model unless ``allow_incomplete_weights``;
* a truncated or corrupt weight file is a one-line model-load error;
* NaN weights are measured, not refused: the accuracy tier reports them as a
  critical regression (perplexity and MCQ), like the fidelity tier does.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gate.errors import ExitCode, ModelLoadError
from gate.gating.thresholds import load_thresholds, packaged_thresholds_path
from gate.gating.verdict import Severity
from gate.metrics import accuracy as am
from gate.models.backends.loading import load_backend
from gate.models.model_spec import ModelSpec, demo_model_dir
from gate.workflows.plan import packaged_store
from tests.cli_support import GateRun, run_gate

ROOT = Path(__file__).resolve().parents[1]


def _demo_copy(root: Path, name: str) -> Path:
    target = root / name
    shutil.copytree(demo_model_dir(), target)
    return target


def _edit_config(model: Path, **changes: Any) -> Path:
    path = model / "config.json"
    config = json.loads(path.read_text())
    config.update(changes)
    path.write_text(json.dumps(config))
    return model


def _edit_weights(model: Path, change: Callable[[dict[str, Any]], None]) -> Path:
    from safetensors.torch import load_file, save_file

    path = model / "model.safetensors"
    tensors = load_file(path)
    change(tensors)
    save_file(tensors, path, metadata={"format": "pt"})
    return model


def _nan_down_proj(tensors: dict[str, Any]) -> None:
    import torch

    key = "model.layers.1.mlp.down_proj.weight"
    tensors[key] = torch.full_like(tensors[key], float("nan"))


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("broken-models")
    six = _edit_config(_demo_copy(root, "six-layers"), num_hidden_layers=6)
    three = _edit_config(_demo_copy(root, "three-layers"), num_hidden_layers=3)
    narrow = _edit_config(_demo_copy(root, "narrow-mlp"), intermediate_size=512)
    truncated = _demo_copy(root, "truncated")
    weights = truncated / "model.safetensors"
    os.truncate(weights, weights.stat().st_size // 2)
    garbage = _demo_copy(root, "bad-header")
    with (garbage / "model.safetensors").open("r+b") as handle:
        handle.write(b"\xff" * 16)
    nan = _edit_weights(_demo_copy(root, "nan"), _nan_down_proj)
    return {
        "six": six,
        "three": three,
        "narrow": narrow,
        "truncated": truncated,
        "bad-header": garbage,
        "nan": nan,
    }


def _refused(path: Path) -> str:
    with pytest.raises(ModelLoadError) as info:
        load_backend(ModelSpec.parse(str(path)))
    assert info.value.exit_code == ExitCode.INTERNAL_ERROR
    line = info.value.format_line()
    assert "\n" not in line
    return line


# ----------------------------------------------------------------------------- weights vs config


def test_weights_missing_for_the_config_refuse_the_model(models: dict[str, Path]) -> None:
    line = _refused(models["six"])
    # layers 4 and 5: 9 tensors each (4 attention, 3 MLP, 2 norms)
    assert "do not match its config: tensors 18 missing" in line, line
    assert "model.layers.4.input_layernorm.weight" in line, line
    assert "allow_incomplete_weights" in line


def test_unused_tensors_in_the_checkpoint_refuse_the_model(models: dict[str, Path]) -> None:
    line = _refused(models["three"])
    assert "9 unexpected (model.layers.3." in line, line


def test_tensors_of_another_shape_refuse_the_model(models: dict[str, Path]) -> None:
    line = _refused(models["narrow"])
    assert "12 of another shape (model.layers.0.mlp.down_proj.weight" in line, line


def test_incomplete_weights_load_only_when_explicitly_allowed(models: dict[str, Path]) -> None:
    backend = load_backend(ModelSpec.parse(str(models["six"])), allow_incomplete_weights=True)
    report = backend.provenance().incomplete_weights
    assert len(report["missing"]) == 18 and report["unexpected"] == []
    assert backend.model.config.num_hidden_layers == 6


def test_a_whole_model_reports_complete_weights() -> None:
    backend = load_backend(ModelSpec.parse("demo"))
    assert backend.provenance().incomplete_weights is None


# ----------------------------------------------------------------------------- corrupt files


@pytest.mark.parametrize("name", ["truncated", "bad-header"])
def test_a_corrupt_weight_file_is_a_one_line_load_error(models: dict[str, Path], name: str) -> None:
    line = _refused(models[name])
    assert "a weight file is corrupt or truncated" in line, line


def _gate(*args: str, cwd: Path = ROOT) -> GateRun:
    return run_gate(*args, cwd=cwd)


_SMALL_ACCURACY = """
[tiers.accuracy]
perplexity_max_tokens = 512
mcq_sets = ["arithmetic"]
mcq_limit = 64
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "needle"),
    [
        ("truncated", "a weight file is corrupt or truncated"),
        ("six", "tensors 18 missing"),
    ],
)
def test_gate_run_on_a_broken_checkpoint_exits_3_without_traceback(
    models: dict[str, Path], tmp_path: Path, name: str, needle: str
) -> None:
    (tmp_path / "gate.toml").write_text(_SMALL_ACCURACY)
    result = _gate(
        "run", "--candidate", str(models[name]), "--tiers", "accuracy",
        "--model-slug", "demo", "--against", "fp32", "--store", str(ROOT / "baselines"),
        "--config", str(tmp_path / "gate.toml"),
        cwd=tmp_path,
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == ExitCode.INTERNAL_ERROR, output[-3000:]
    assert output.count(needle) == 1, output[-3000:]  # once: not again in pytest's FAILURES
    assert "FAILURES" not in output and "short test summary" not in output, output[-3000:]
    assert "Traceback" not in output and "SafetensorError" not in output, output[-3000:]
    gate_lines = [line for line in result.stdout.splitlines() if line.startswith("gate: ")]
    assert gate_lines[-1] == "gate: ERROR (internal or model load, exit 3)", output[-3000:]
    if name == "six":
        assert "--allow-incomplete-weights" in output, output[-3000:]


def _pickle_only(root: Path) -> Path:
    """The demo model with its weights as ``pytorch_model.bin`` (a pickle) only."""
    import torch
    from safetensors.torch import load_file

    model = _demo_copy(root, "pickle-only")
    tensors = load_file(model / "model.safetensors")
    torch.save(tensors, model / "pytorch_model.bin")
    (model / "model.safetensors").unlink()
    return model


def _fidelity_run(model: Path, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return _gate(
        "run", "--candidate", str(model), "--tiers", "fidelity", "--model-slug", "demo",
        "--against", "fp32", "--store", str(packaged_store()), "--json", "r.json", *extra,
        cwd=tmp_path,
    )  # fmt: skip


@pytest.mark.slow
def test_gate_run_loads_a_pickle_only_checkpoint_only_with_allow_pickle(tmp_path: Path) -> None:
    model = _pickle_only(tmp_path)
    refused = _fidelity_run(model, tmp_path)
    output = refused.stdout + refused.stderr
    assert refused.returncode == ExitCode.INTERNAL_ERROR, output[-3000:]
    assert "pass --allow-pickle" in output, output[-3000:]  # the hint names a real option
    allowed = _fidelity_run(model, tmp_path, "--allow-pickle")
    output = allowed.stdout + allowed.stderr
    assert allowed.returncode == ExitCode.OK, output[-3000:]  # the same weights: approved
    results = json.loads((tmp_path / "r.json").read_text())
    assert results["headline"] == "APPROVED"


@pytest.mark.slow
def test_a_live_baseline_loads_like_the_candidate(tmp_path: Path) -> None:
    """``[tiers.fidelity] live_baseline`` goes through the session's loader: a pickle-only
    baseline checkpoint is refused without ``--allow-pickle``, as a candidate would be."""
    baseline = _pickle_only(tmp_path)
    config = tmp_path / "gate.toml"
    config.write_text(f"[tiers.fidelity]\nlive_baseline = {json.dumps(str(baseline))}\nlimit = 4\n")
    refused = _fidelity_run(demo_model_dir(), tmp_path, "--config", str(config))
    output = refused.stdout + refused.stderr
    assert refused.returncode != ExitCode.OK, output[-3000:]
    assert "pass --allow-pickle" in output, output[-3000:]
    allowed = _fidelity_run(demo_model_dir(), tmp_path, "--config", str(config), "--allow-pickle")
    output = allowed.stdout + allowed.stderr
    assert allowed.returncode == ExitCode.OK, output[-3000:]  # the same weights: approved
    results = json.loads((tmp_path / "r.json").read_text())
    assert results["headline"] == "APPROVED"


@pytest.mark.slow
@pytest.mark.parametrize("how", ["flag", "run-config"])
def test_incomplete_weights_are_measured_when_asked_for(
    models: dict[str, Path], tmp_path: Path, how: str
) -> None:
    """``--allow-incomplete-weights`` (or the candidate's key in gate.toml) reaches the loader:
    the model is measured and its provenance lists the missing tensors. (Its two freshly
    initialized layers barely change the outputs: Llama initializes the output projections
    small, so the new layers are close to the identity; measured KL ~1e-5 nats.)"""
    if how == "flag":
        result = _fidelity_run(models["six"], tmp_path, "--allow-incomplete-weights")
    else:
        (tmp_path / "gate.toml").write_text(
            f'[run]\nmodel_slug = "demo"\nagainst = ["fp32"]\ntiers = ["fidelity"]\n'
            f'store = "{packaged_store()}"\n\n[[candidates]]\nname = "six"\n'
            f'model = "{models["six"]}"\nallow_incomplete_weights = true\n'
        )
        result = _gate("run", "--config", "gate.toml", "--json", "r.json", cwd=tmp_path)
    output = result.stdout + result.stderr
    assert result.returncode in (ExitCode.OK, ExitCode.BLOCKED), output[-3000:]  # measured
    results = json.loads((tmp_path / "r.json").read_text())
    assert len(results["candidate"]["incomplete_weights"]["missing"]) == 18, results["candidate"]
    assert {m["name"] for m in results["metrics"]} >= {"fidelity.cga", "fidelity.kl_mean"}


# ----------------------------------------------------------------------------- NaN weights


def test_nan_weights_are_a_critical_regression_in_the_accuracy_tier(
    models: dict[str, Path],
) -> None:
    """Measured with the real tier code on the demo model and a copy with one NaN matrix."""
    from gate.gating.compare import compare_measurements
    from gate.session.run import GateRun
    from gate.tiers import accuracy as tier

    settings = tier.AccuracySettings(
        perplexity_max_tokens=512, mcq_sets=("arithmetic",), mcq_limit=64
    )
    base = load_backend(ModelSpec.parse("demo"))
    broken = load_backend(ModelSpec.parse(str(models["nan"])))
    base_results = tier.run_mcq(base, settings)
    baseline = [tier.measure_perplexity(base, settings)]
    baseline += tier.mcq_measurements(base_results, None)
    candidate = [tier.measure_perplexity(broken, settings)]
    candidate += tier.mcq_measurements(tier.run_mcq(broken, settings), base_results)

    ppl = candidate[0]
    # every token's log-prob is NaN: each counts as NLL_CAP nats
    assert ppl.details["nonfinite_tokens"] == ppl.details["scored_tokens"] > 0
    assert ppl.value == pytest.approx(math.exp(am.NLL_CAP), rel=1e-9)
    by_name = {m.name: m for m in candidate}
    assert by_name["accuracy.mcq_acc"].value == 0.0  # no answer counts as right
    assert by_name["accuracy.all_flips"].value == 1.0
    assert by_name["accuracy.choice_kl"].value == am.CHOICE_KL_CAP
    assert by_name["accuracy.top_margin_mean"].value == 0.0
    assert by_name["accuracy.mcq_acc"].details["nonfinite_questions"] == 64

    run = GateRun(mode="run", model="nan", model_slug="demo", backend_factory=lambda: broken)
    for measurement in candidate:
        run.record(measurement)  # finite: accepted (it used to be a DataError, exit 4)
    verdicts = {
        v.metric: v
        for v in compare_measurements(
            candidate, baseline, load_thresholds(packaged_thresholds_path())
        )
        if v.slice is None
    }
    for name in (
        "accuracy.perplexity",
        "accuracy.mcq_acc",
        "accuracy.all_flips",
        "accuracy.choice_kl",
    ):
        assert verdicts[name].severity is Severity.CRITICAL, verdicts[name].reason

    # The baseline itself, measured again, is untouched by the cap: no token NLL reaches it.
    again = tier.measure_perplexity(base, settings)
    assert again.details["nonfinite_tokens"] == again.details["capped_tokens"] == 0
    assert again.value == pytest.approx(baseline[0].value)


@pytest.mark.slow
def test_gate_run_accuracy_on_nan_weights_blocks_with_exit_1(
    models: dict[str, Path], tmp_path: Path
) -> None:
    (tmp_path / "gate.toml").write_text(_SMALL_ACCURACY)
    store = str(tmp_path / "store")
    recorded = _gate(
        "baseline", "record", "--model", "demo", "--model-slug", "demo", "--tiers", "accuracy",
        "--store", store, "--ref", "fp16", "--config", "gate.toml", cwd=tmp_path,
    )  # fmt: skip
    assert recorded.returncode == 0, recorded.stdout[-3000:] + recorded.stderr[-2000:]
    result = _gate(
        "run", "--candidate", str(models["nan"]), "--model-slug", "demo", "--tiers", "accuracy",
        "--store", store, "--config", "gate.toml", "--json", "r.json", cwd=tmp_path,
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == ExitCode.BLOCKED, output[-3000:]
    results = json.loads((tmp_path / "r.json").read_text())
    critical = {
        v["name"] for v in results["metrics"] if v["severity"] == "critical" and v["slice"] is None
    }
    assert {"accuracy.perplexity", "accuracy.mcq_acc"} <= critical, critical
    assert "non-finite" not in output

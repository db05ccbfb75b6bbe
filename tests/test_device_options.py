"""``--device``, ``--dtype``, ``--trust-remote-code``: one declaration, every command, gate.toml,
the CUDA check before loading, ``auto`` on this machine, and device/dtype drift."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gate.cli import main
from gate.commands.group import cli
from gate.errors import ConfigError, ExitCode, ModelLoadError, UsageError
from gate.gating.placement import compare_placement, placement_drift, placement_notes
from gate.gating.verdict import decide
from gate.hw.devices import check_device, resolve_device
from gate.models.load_settings import LoadSettings, load_setting_options
from gate.models.model_spec import ModelSpec
from gate.provenance import ModelProvenance
from gate.session.run_config import (
    CandidateOverrides,
    build_candidates,
    load_run_config,
)

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
FLAGS = ("--device", "--dtype", "--trust-remote-code")


class FakeCuda:
    """A CUDA probe answering as a machine with ``count`` GPUs."""

    def __init__(self, count: int) -> None:
        self.count = count

    def is_available(self) -> bool:
        return self.count > 0

    def device_count(self) -> int:
        return self.count


def _cuda_here() -> bool:
    import torch

    return bool(torch.cuda.is_available())


# ------------------------------------------------------------------ the options


@pytest.mark.parametrize("command", [["run"], ["baseline", "record"], ["calibrate"], ["demo"]])
def test_every_model_command_lists_the_load_options(command: list[str]) -> None:
    result = CliRunner().invoke(cli, [*command, "--help"], terminal_width=200)
    assert result.exit_code == 0
    for flag in FLAGS:
        assert f"  {flag} " in result.output, (command, flag)
    assert "auto|float32|bfloat16|float16" in result.output


def test_the_options_come_from_the_one_declaration() -> None:
    declared = [option.flag for _, option in load_setting_options()]
    assert declared == list(FLAGS)
    assert [name for name, _ in load_setting_options()] == [
        "device",
        "dtype",
        "trust_remote_code",
    ]


def test_settings_layer_and_build_the_spec() -> None:
    run = LoadSettings(device="cpu", dtype="bfloat16")
    candidate = LoadSettings(dtype="float16")
    line = LoadSettings(trust_remote_code=True)
    merged = line.over(candidate.over(run))
    assert merged == LoadSettings(device="cpu", dtype="float16", trust_remote_code=True)
    spec = merged.spec("demo", allow_pickle=True)
    assert (spec.device, spec.dtype, spec.trust_remote_code, spec.allow_pickle) == (
        "cpu",
        "float16",
        True,
        True,
    )
    default = LoadSettings().spec("demo")  # nothing given: auto, the checkpoint's dtype
    assert (default.device, default.dtype, default.trust_remote_code) == ("auto", "auto", False)
    with pytest.raises(ValueError, match="unknown device 'gpu'"):
        LoadSettings(device="gpu")
    with pytest.raises(ValueError, match="unknown dtype"):
        LoadSettings(dtype="int8")


def test_gate_toml_keys_of_run_and_candidates(tmp_path: Path) -> None:
    path = tmp_path / "gate.toml"
    path.write_text(
        '[run]\ndevice = "cpu"\ndtype = "bfloat16"\n'
        '[[candidates]]\nname = "a"\nmodel = "demo"\n'
        '[[candidates]]\nname = "b"\nmodel = "demo"\ndevice = "cuda:1"\ntrust_remote_code = true\n'
    )
    config = load_run_config(path)
    assert (config.run.device, config.run.dtype) == ("cpu", "bfloat16")
    a, b = build_candidates(config, CandidateOverrides())
    assert a.load == LoadSettings(device="cpu", dtype="bfloat16")
    assert b.load == LoadSettings(device="cuda:1", dtype="bfloat16", trust_remote_code=True)
    # the command line wins over both
    line = CandidateOverrides(load=LoadSettings(device="auto", dtype="float32"))
    a, b = build_candidates(config, line)
    assert a.load == LoadSettings(device="auto", dtype="float32")
    assert b.load == LoadSettings(device="auto", dtype="float32", trust_remote_code=True)
    # --candidate: [run]'s settings under the command line's
    (single,) = build_candidates(config, CandidateOverrides(candidate="demo"))
    assert single.load == LoadSettings(device="cpu", dtype="bfloat16")


@pytest.mark.parametrize(
    ("table", "words"),
    [
        ('[run]\ndevice = "gpu"\n', "unknown device 'gpu'"),
        ('[run]\ndtype = "int4"\n', "unknown dtype 'int4'"),
        ('[run]\ndevise = "cpu"\n', "devise"),
        ('[[candidates]]\nname = "a"\nmodel = "demo"\ntrust_remote_code = "yes"\n', "trust"),
    ],
)
def test_bad_load_keys_are_config_errors(tmp_path: Path, table: str, words: str) -> None:
    path = tmp_path / "gate.toml"
    path.write_text(table)
    with pytest.raises(ConfigError, match=words):
        load_run_config(path)


# ------------------------------------------------------------------ the device rules


def test_auto_resolves_to_this_machines_device() -> None:
    assert resolve_device("auto", FakeCuda(0)) == "cpu"
    assert resolve_device("auto", FakeCuda(2)) == "cuda"
    assert resolve_device("cuda:1", FakeCuda(0)) == "cuda:1"  # only auto is resolved
    if not _cuda_here():
        assert resolve_device("auto") == "cpu"
        from gate.models.backends.loading import _device_map

        assert _device_map(ModelSpec.parse("demo", device="auto")) == {"": "cpu"}
        with pytest.raises(ModelLoadError, match="no CUDA GPU"):
            _device_map(ModelSpec.parse("demo", device="cuda"))


def test_a_cuda_device_the_machine_lacks_is_a_usage_error() -> None:
    check_device("auto", FakeCuda(0))
    check_device("cpu", FakeCuda(0))
    check_device("cuda:1", FakeCuda(2))
    with pytest.raises(UsageError, match="no CUDA GPU") as exc:
        check_device("cuda", FakeCuda(0))
    assert "--device cpu" in exc.value.format_line()
    with pytest.raises(UsageError, match=r"has 2 CUDA GPU\(s\) \(cuda:0..cuda:1\)"):
        check_device("cuda:2", FakeCuda(2))


@pytest.mark.slow  # a fresh interpreter imports torch to ask it (about 15 s on 2 busy cores)
@pytest.mark.parametrize("dry_run", [False, True])
def test_device_cuda_without_cuda_is_one_line_exit_4_before_loading(
    tmp_path: Path, dry_run: bool
) -> None:
    if _cuda_here():
        pytest.skip("this machine has CUDA: --device cuda is valid here")
    argv = ["run", "--candidate", "demo", "--device", "cuda", "--against", "fp32"]
    argv += ["--tiers", "fidelity", *(["--dry-run"] if dry_run else [])]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "gate.cli", *argv],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == ExitCode.USAGE_ERROR
    assert done.stdout == ""
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("gate: error: --device cuda: torch sees no CUDA GPU")
    assert "--device cpu" in line and "Traceback" not in done.stderr
    assert "loading" not in done.stderr  # nothing was loaded


def test_a_bad_device_name_is_exit_4(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--candidate", "demo", "--device", "gpu", "--dry-run"]) == 4
    assert "unknown --device 'gpu'" in capsys.readouterr().err


def test_dry_run_names_the_device(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["run", "--candidate", "demo", "--against", "fp32", "--tiers", "fidelity"]
    assert main([*argv, "--device", "cpu", "--dtype", "float32", "--dry-run"]) == 0
    assert "  device:     cpu, dtype float32" in capsys.readouterr().out


# ------------------------------------------------------------------ device and dtype drift


def _prov(**facts: Any) -> ModelProvenance:
    return ModelProvenance(**facts)


def test_another_device_kind_or_dtype_is_a_drift_naming_both() -> None:
    cpu32 = _prov(device="cpu", compute_dtype="float32", dtypes=("float32",))
    gpu16 = _prov(device="cuda:0", compute_dtype="bfloat16", dtypes=("bfloat16",))
    device, dtype = compare_placement(cpu32, gpu16, against="fp16")
    assert (device.package, device.baseline, device.candidate) == ("device", "cpu", "cuda")
    assert (dtype.package, dtype.baseline, dtype.candidate) == ("dtype", "float32", "bfloat16")
    assert device.message.startswith("baseline fp16 measured with device cpu, candidate with cuda")
    (note, _) = placement_notes([device, dtype], strict=False)
    assert note.startswith("device drift (a warning; --strict blocks): baseline fp16")
    assert decide([], strict=False, version_drift=[device]).exit_code == ExitCode.OK
    assert decide([], strict=True, version_drift=[device]).exit_code == ExitCode.BLOCKED


def test_what_is_not_a_placement_drift() -> None:
    cpu32 = _prov(device="cpu", compute_dtype="float32")
    # another GPU index is the same path; nf4 storage (uint8) computing in float32 is no drift
    assert compare_placement(_prov(device="cuda:0"), _prov(device="cuda:1")) == []
    nf4 = _prov(device="cpu", compute_dtype="float32", dtypes=("float32", "uint8"))
    assert compare_placement(cpu32, nf4) == []
    # an old record without compute_dtype: its one parameter dtype; several: unknown
    assert compare_placement(_prov(dtypes=("float32",)), _prov(compute_dtype="float16"))
    assert compare_placement(_prov(dtypes=("float32", "uint8")), _prov(compute_dtype="f16")) == []
    # a served side runs where its server put it; a record without the facts is not compared
    served = _prov(device="cuda:0", engine="vllm")
    assert compare_placement(cpu32, served) == [] and compare_placement(cpu32, _prov()) == []
    both = placement_drift({"a": cpu32, "b": _prov(device="cuda")}, _prov(device="cuda:0"))
    assert [(d.against, d.package) for d in both] == [("a", "device")]


def _with_device(path: Path, source: Path, device: str, dtype: str) -> Path:
    data = json.loads(source.read_text())
    data["model"] = {**data["model"], "device": device, "compute_dtype": dtype}
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("strict", [False, True])
def test_gate_compare_warns_on_another_device_and_strict_blocks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], strict: bool
) -> None:
    base = _with_device(tmp_path / "b.json", EXAMPLES / "baseline.json", "cpu", "float32")
    cand = _with_device(tmp_path / "c.json", EXAMPLES / "candidate-equal.json", "cuda:0", "float32")
    out_json = tmp_path / "r.json"
    argv = ["compare", str(cand), "--baseline", str(base),
            "--thresholds", str(EXAMPLES / "thresholds.toml"), "--json", str(out_json)]  # fmt: skip
    code = main([*argv, "--strict"] if strict else argv)
    out = " ".join(capsys.readouterr().out.split())
    assert "measured with device cpu, candidate with cuda" in out
    results = json.loads(out_json.read_text())
    assert results["version_drift"] == [
        {"package": "device", "baseline": "cpu", "candidate": "cuda", "against": str(base)}
    ]
    if strict:
        assert code == ExitCode.BLOCKED
    else:
        assert code == ExitCode.OK and results["headline"] == "APPROVED WITH WARNINGS"


@pytest.mark.slow
def test_gate_run_against_a_baseline_from_a_gpu_warns_and_strict_blocks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The demo's fp32 baseline, as if recorded on a GPU in bfloat16, against the demo
    measured here on the CPU in float32: both drifts named, approved with warnings;
    ``--strict`` blocks."""
    from gate.workflows.plan import packaged_store

    store = tmp_path / "store"
    shutil.copytree(packaged_store(), store)
    (path,) = store.glob("demo/*-fp32.json")
    data = json.loads(path.read_text())
    data["provenance"].update(device="cuda:0", compute_dtype="bfloat16")
    path.write_text(json.dumps(data, indent=1))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GATE_PROGRESS", "plain")
    (tmp_path / "gate.toml").write_text("[tiers.fidelity]\nlimit = 8\n")
    argv = ["run", "--candidate", "demo", "--against", "fp32", "--tiers", "fidelity",
            "--store", str(store), "--config", "gate.toml", "--device", "cpu",
            "--dtype", "float32"]  # fmt: skip
    assert main([*argv, "--json", "r.json"]) == ExitCode.OK
    out = " ".join(capsys.readouterr().out.split())
    assert "baseline fp32 measured with device cuda, candidate with cpu" in out
    assert "baseline fp32 measured with dtype bfloat16, candidate with float32" in out
    results = json.loads((tmp_path / "r.json").read_text())
    assert results["headline"] == "APPROVED WITH WARNINGS"
    assert results["candidate"]["device"] == "cpu"
    assert results["candidate"]["compute_dtype"] == "float32"
    assert {"package": "device", "baseline": "cuda", "candidate": "cpu", "against": "fp32"} in (
        results["version_drift"]
    )
    assert main([*argv, "--strict"]) == ExitCode.BLOCKED


def test_calibrate_takes_the_device_of_its_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if _cuda_here():
        pytest.skip("this machine has CUDA: device cuda is valid here")
    config = tmp_path / "gate.toml"
    config.write_text('[run]\ndevice = "cuda"\n')
    argv = ["calibrate", "--model", "demo", "--config", str(config), "--repeats", "1"]
    argv += ["--out", str(tmp_path / "cal.toml"), "--dry-run"]
    assert main(argv) == ExitCode.USAGE_ERROR
    assert "--device cuda: torch sees no CUDA GPU" in capsys.readouterr().err
    assert main([*argv, "--device", "cpu"]) == ExitCode.OK  # the command line wins

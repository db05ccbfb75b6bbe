"""Hardware fingerprints: stable hashes, NVML through a fake, mismatch refused (exit 4)."""

from __future__ import annotations

import dataclasses
import os
import re

import pytest

from gate.errors import BaselineError, ExitCode
from gate.hw.fingerprint import Fingerprint, check_fingerprint, collect_fingerprint
from gate.hw.nvml import open_nvml
from tests.fakes.fake_nvml import FakeGpuState, make_fake_nvml


def _gpu_print(**changes: object) -> Fingerprint:
    nvml = open_nvml(make_fake_nvml(FakeGpuState()))
    fp = collect_fingerprint("cuda:0", linear_classes=["Linear8bitLt", "Linear"], nvml=nvml)
    return dataclasses.replace(fp, **changes)  # type: ignore[arg-type]


def test_cpu_fingerprint_names_this_machine() -> None:
    fp = collect_fingerprint("cpu", linear_classes=["Linear", "Linear", "QLinear"])
    assert fp.device == "cpu" and fp.gpu_name is None and fp.driver is None
    assert fp.cpu_cores == os.cpu_count()
    assert fp.linear_classes == ("Linear", "QLinear")
    assert fp.cpu_model and fp.torch


def test_gpu_fingerprint_reads_nvml() -> None:
    fp = _gpu_print()
    assert fp.gpu_name == "NVIDIA Fake GPU 80GB" and fp.driver == "550.54.15"


def test_hashes_are_short_stable_and_round_trip() -> None:
    fp = _gpu_print()
    again = Fingerprint.from_dict(fp.to_dict())
    assert again == fp and again.hash == fp.hash and len(fp.hash) == 12
    assert re.fullmatch("[0-9a-f]{12}", fp.hash) and re.fullmatch("[0-9a-f]{12}", fp.hardware_hash)
    # kernel classes change the full hash (history key) but not the hardware hash
    other_kernels = dataclasses.replace(fp, linear_classes=("Linear",))
    assert other_kernels.hash != fp.hash
    assert other_kernels.hardware_hash == fp.hardware_hash
    assert dataclasses.replace(fp, driver="535.0").hardware_hash != fp.hardware_hash


def test_equal_hardware_passes_and_kernel_change_is_a_warning() -> None:
    base = _gpu_print(linear_classes=("Linear",))
    cand = _gpu_print()
    assert check_fingerprint(base, base, allow_mismatch=False) == []
    warnings = check_fingerprint(cand, base, allow_mismatch=False)
    assert len(warnings) == 1 and "Linear8bitLt" in warnings[0]


def test_mismatch_is_refused_with_exit_4_unless_allowed() -> None:
    base = _gpu_print()
    cand = _gpu_print(gpu_name="NVIDIA A10G")
    with pytest.raises(BaselineError) as info:
        check_fingerprint(cand, base, allow_mismatch=False)
    assert info.value.exit_code == ExitCode.USAGE_ERROR
    assert "NVIDIA A10G" in info.value.message and "--allow-hardware-mismatch" in str(
        info.value.hint
    )
    warnings = check_fingerprint(cand, base, allow_mismatch=True)
    assert any("gpu_name" in w for w in warnings)


def test_baseline_without_fingerprint_is_a_mismatch() -> None:
    with pytest.raises(BaselineError):
        check_fingerprint(_gpu_print(), None, allow_mismatch=False)


def test_malformed_fingerprint_is_a_baseline_error() -> None:
    with pytest.raises(BaselineError):
        Fingerprint.from_dict({"device": "cpu"})

"""The GPU path on a real GPU (marker ``gpu``; ``scripts/gpu_check.sh`` runs them).

They run wherever torch sees CUDA and skip with the reason elsewhere: the demo
model and a quantized build gated end to end with ``--device cuda``, CUDA-event
step timing, VRAM reported by torch and NVML, the fingerprint naming the GPU and
its driver, and the batch back-off on a real out-of-memory error (a deliberately
huge batch under a capped allocator).
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from gate.cli import main
from gate.errors import ExitCode
from gate.hw.fingerprint import collect_fingerprint
from gate.hw.memory import MemoryTracker
from gate.hw.nvml import open_nvml
from gate.hw.timing import CudaEventClock, make_clock
from gate.models.backends.base import ScoreRequest
from gate.models.backends.batch_fit import BatchFitter
from gate.models.backends.hf import HFBackend

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available(), reason="needs a CUDA GPU: torch sees none on this machine"
    ),
]


@pytest.fixture(scope="module")
def cuda_demo() -> HFBackend:
    from gate.models.backends.loading import load_backend
    from gate.models.model_spec import ModelSpec

    return load_backend(ModelSpec.parse("demo", device="cuda"))


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GATE_PROGRESS", "plain")
    (tmp_path / "gate.toml").write_text("[tiers.fidelity]\nlimit = 8\n")
    return tmp_path


def _run(*extra: str) -> tuple[int, dict[str, object]]:
    argv = ["run", "--candidate", "demo", "--device", "cuda", "--against", "fp32"]
    argv += ["--tiers", "fidelity", "--config", "gate.toml", "--json", "r.json", *extra]
    code = main(argv)
    return code, json.loads(Path("r.json").read_text())


def test_the_demo_gated_on_cuda_warns_of_the_cpu_baseline(in_tmp: Path) -> None:
    code, results = _run()
    assert code == ExitCode.OK
    candidate = results["candidate"]
    assert isinstance(candidate, dict) and str(candidate["device"]).startswith("cuda")
    drift = {"package": "device", "baseline": "cpu", "candidate": "cuda", "against": "fp32"}
    assert drift in results["version_drift"]  # type: ignore[operator]
    assert _run("--strict")[0] == ExitCode.BLOCKED


def test_a_quantized_build_loaded_on_cuda_is_blocked(in_tmp: Path) -> None:
    code, results = _run("--recipe", "quanto-int2")
    assert code == ExitCode.BLOCKED
    candidate = results["candidate"]
    assert isinstance(candidate, dict) and str(candidate["device"]).startswith("cuda")


def test_steps_are_timed_with_cuda_events(cuda_demo: HFBackend) -> None:
    clock = make_clock(str(cuda_demo.device))
    assert isinstance(clock, CudaEventClock)
    prompt = cuda_demo.encode_text("The weather today is")
    timed = cuda_demo.generate_timed(prompt, batch_size=2, new_tokens=8, clock=clock)
    steps = list(timed.step_times)
    assert len(steps) == timed.new_tokens == 8
    assert steps[0] > 0 and all(b > a for a, b in itertools.pairwise(steps))


def test_vram_is_reported_per_gpu(cuda_demo: HFBackend) -> None:
    nvml = open_nvml()
    index = cuda_demo.device.index or 0
    requests = [ScoreRequest(cuda_demo.encode_text("Hello there"), [5, 6, 7, 8])] * 4
    with MemoryTracker(str(cuda_demo.device), nvml=nvml) as tracker:
        cuda_demo.score(requests, batch_size=4)
    report = tracker.report
    assert report.peak_allocated_bytes is not None and report.peak_allocated_bytes > 0
    assert [g.index for g in report.per_gpu] == [index]
    if nvml is not None:
        assert report.global_vram_bytes is not None and report.global_vram_bytes > 0
        nvml.close()


def test_the_fingerprint_names_the_gpu_and_driver(cuda_demo: HFBackend) -> None:
    nvml = open_nvml()
    fingerprint = collect_fingerprint(str(cuda_demo.device), nvml=nvml)
    assert fingerprint.device == "cuda" and fingerprint.gpu_name
    assert fingerprint.cuda == torch.version.cuda
    if nvml is not None:
        assert fingerprint.driver
        nvml.close()


@pytest.fixture
def capped(cuda_demo: HFBackend) -> Iterator[int]:
    """The allocator capped at about 512 MiB of GPU ``index`` (restored after)."""
    index = cuda_demo.device.index or 0
    total = torch.cuda.get_device_properties(index).total_memory
    torch.cuda.empty_cache()
    torch.cuda.set_per_process_memory_fraction(min(1.0, 512 * 2**20 / total), index)
    cuda_demo.fitter = BatchFitter(str(cuda_demo.device))
    try:
        yield 512 * 2**20
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0, index)
        cuda_demo.fitter = BatchFitter(str(cuda_demo.device))
        torch.cuda.empty_cache()


def test_a_huge_batch_backs_off_on_a_real_out_of_memory(cuda_demo: HFBackend, capped: int) -> None:
    vocab = int(cuda_demo.model.config.vocab_size)
    steps = 32
    # the float32 logits of the whole batch alone are four times the cap
    rows = math.ceil(4 * capped / ((steps + 1) * vocab * 4))
    generator = np.random.default_rng(0)
    requests = [
        ScoreRequest(
            [int(t) for t in generator.integers(10, vocab, 8)],
            [int(t) for t in generator.integers(10, vocab, steps)],
        )
        for _ in range(rows)
    ]
    scores = cuda_demo.score(requests, top_k=4, batch_size=rows)
    backoffs = cuda_demo.fitter.backoffs
    assert backoffs and backoffs[0].tried == rows and backoffs[0].operation == "score"
    assert all(b.fitted == b.tried // 2 for b in backoffs)
    assert len(scores) == rows
    recorded = cuda_demo.provenance().batch_backoffs
    assert recorded is not None and len(recorded) == len(backoffs)
    # the rows scored after halving are the model's: the CPU computes the same
    from gate.models.backends.loading import load_backend
    from gate.models.model_spec import ModelSpec

    cpu = load_backend(ModelSpec.parse("demo", device="cpu"))
    for got, want in zip(scores[:4], cpu.score(requests[:4], top_k=4, batch_size=4), strict=True):
        np.testing.assert_allclose(got.target_logprobs, want.target_logprobs, atol=1e-3)

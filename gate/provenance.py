"""Where a measurement came from: software, hardware, code revision, file hashes.

docs/contracts.md "Results JSON": provenance includes the gate version, the git commit,
and the environment (python, torch, transformers, the quantization kernel
packages' versions, device, GPU name and driver via pynvml when present). The model's own
provenance (weights hashes, recipe, quantized linear classes) comes from the
backend's ``provenance()``.

Nothing here imports torch: package versions are read with
:mod:`importlib.metadata`, so recording provenance costs milliseconds.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

from gate import __version__
from gate.hw.nvml import open_nvml

#: Distributions whose versions are recorded (name in the environment dict -> distribution);
#: ``None`` when not installed. Those that move the numbers are compared with the
#: baseline's by :mod:`gate.gating.versions` (version drift).
PACKAGES: tuple[tuple[str, str], ...] = (
    ("torch", "torch"),
    ("transformers", "transformers"),
    ("tokenizers", "tokenizers"),
    ("accelerate", "accelerate"),
    ("bitsandbytes", "bitsandbytes"),
    ("optimum_quanto", "optimum-quanto"),
    ("compressed_tensors", "compressed-tensors"),
    ("kernels", "kernels"),
    ("numpy", "numpy"),
)


def gate_version() -> str:
    """The installed gate version."""
    return __version__


def package_version(distribution: str) -> str | None:
    """Installed version of ``distribution``, or ``None`` when it is not installed."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def git_commit(cwd: Path | None = None) -> str | None:
    """The commit of the git checkout at ``cwd`` (``-dirty`` appended), or ``None``.

    ``GITHUB_SHA`` is used when git itself is unavailable (shallow CI images).
    """
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return os.environ.get("GITHUB_SHA") or None
    return f"{head}-dirty" if dirty else head or None


def sha256_file(path: Path, *, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file's bytes, read in chunks."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def cpu_model() -> str:
    """The CPU model name (``/proc/cpuinfo`` on Linux, ``platform`` elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpus(nvml_module: Any | None = None) -> list[dict[str, Any]]:
    """Name, memory and driver of each NVIDIA GPU via :mod:`gate.hw.nvml`; empty when none.

    ``nvml_module`` replaces ``pynvml`` (tests pass a fake).
    """
    nvml = open_nvml(nvml_module)
    if nvml is None:
        return []
    try:
        driver = nvml.driver_version()
        return [
            {
                "index": index,
                "name": nvml.device_name(index),
                "memory_total_bytes": nvml.total_bytes(index),
                "driver": driver,
            }
            for index in range(nvml.device_count())
        ]
    except Exception:  # a half-working NVML must not fail a run
        return []
    finally:
        with contextlib.suppress(Exception):
            nvml.close()


def environment() -> dict[str, Any]:
    """The software and hardware a run happened on (the ``environment`` of docs/contracts.md "Results JSON")."""
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "packages": {key: package_version(dist) for key, dist in PACKAGES},
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "gpus": gpus(),
        "gate_version": gate_version(),
        "git_commit": git_commit(),
    }

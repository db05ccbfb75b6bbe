"""Hardware fingerprints: latency and memory only compare like with like.

A :class:`Fingerprint` names what a timing depends on: device kind, GPU name,
driver and CUDA versions (NVML / torch), torch version, CPU model and core
count, plus the classes of the linear layers the model actually runs
(``backend.provenance().linear_classes``), so a silent fallback from a fused
kernel to a slow one is visible.

Two hashes (first 12 hex digits of SHA-256 over canonical JSON):

* :attr:`Fingerprint.hardware_hash` -- the machine and software stack only.
  A candidate's latency is compared with its baseline's only when these are
  equal (:func:`check_fingerprint`); the kernel classes are *expected* to
  differ between an fp16 baseline and an INT8 candidate, so they are shown,
  not refused.
* :attr:`Fingerprint.hash` -- everything, kernel classes included. It keys the
  latency history (one JSONL file per build-on-hardware, :mod:`gate.store.history`).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from gate.errors import BaselineError
from gate.hw.nvml import Nvml

#: Fields compared between candidate and baseline.
HARDWARE_FIELDS: tuple[str, ...] = (
    "device",
    "gpu_name",
    "driver",
    "cuda",
    "torch",
    "cpu_model",
    "cpu_cores",
)


@dataclass(frozen=True)
class Fingerprint:
    """What a latency figure depends on; ``None`` where not applicable (no GPU)."""

    device: str
    gpu_name: str | None
    driver: str | None
    cuda: str | None
    torch: str
    cpu_model: str
    cpu_cores: int
    linear_classes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON form (lists for tuples)."""
        data = asdict(self)
        data["linear_classes"] = list(self.linear_classes)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Fingerprint:
        """Parse :meth:`to_dict` output; a malformed entry raises :class:`BaselineError`."""
        try:
            known = {f.name for f in fields(cls)}
            kwargs = {k: v for k, v in data.items() if k in known}
            kwargs["linear_classes"] = tuple(str(c) for c in kwargs.get("linear_classes", ()))
            kwargs["cpu_cores"] = int(kwargs["cpu_cores"])
            return cls(**kwargs)
        except (KeyError, TypeError, ValueError) as exc:
            raise BaselineError(
                f"malformed hardware fingerprint: {exc}",
                "re-record the baseline with this gate version",
            ) from None

    @property
    def hardware_hash(self) -> str:
        """Short stable hash of :data:`HARDWARE_FIELDS`."""
        return _short_hash({k: getattr(self, k) for k in HARDWARE_FIELDS})

    @property
    def hash(self) -> str:
        """Short stable hash of every field, kernel classes included."""
        return _short_hash(self.to_dict())


def _short_hash(data: Mapping[str, Any]) -> str:
    blob = json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, else :mod:`platform`)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def collect_fingerprint(
    device: str,
    *,
    linear_classes: Iterable[str] = (),
    nvml: Nvml | None = None,
) -> Fingerprint:
    """The fingerprint of this machine for a model running on ``device``.

    ``nvml`` supplies GPU name and driver; without it (or on CPU) they are
    ``None``. The CUDA version is torch's build (``torch.version.cuda``).
    """
    import torch

    kind, _, index_text = device.partition(":")
    index = int(index_text) if index_text else 0
    gpu_name = driver = cuda = None
    if kind == "cuda":
        cuda = torch.version.cuda
        if nvml is not None:
            gpu_name = nvml.device_name(index)
            driver = nvml.driver_version()
        elif torch.cuda.is_available():
            gpu_name = torch.cuda.get_device_name(index)
    return Fingerprint(
        device=kind,
        gpu_name=gpu_name,
        driver=driver,
        cuda=cuda,
        torch=str(torch.__version__),
        cpu_model=cpu_model(),
        cpu_cores=os.cpu_count() or 0,
        linear_classes=tuple(sorted(set(linear_classes))),
    )


def differences(candidate: Fingerprint, baseline: Fingerprint) -> list[str]:
    """``"field: baseline -> candidate"`` for each hardware field that differs."""
    out = []
    for name in HARDWARE_FIELDS:
        a, b = getattr(baseline, name), getattr(candidate, name)
        if a != b:
            out.append(f"{name}: {a!r} -> {b!r}")
    return out


def check_fingerprint(
    candidate: Fingerprint,
    baseline: Fingerprint | None,
    *,
    allow_mismatch: bool,
) -> list[str]:
    """Refuse to compare latency across different hardware.

    Returns warning lines (empty when the hardware matches). A mismatch, or a
    baseline without a fingerprint, raises :class:`BaselineError` (exit 4)
    unless ``allow_mismatch``, which turns it into warnings. Different kernel
    classes are always a warning line, never an error.
    """
    if baseline is None:
        problems = ["the baseline has no hardware fingerprint"]
    else:
        problems = differences(candidate, baseline)
    warnings: list[str] = []
    if problems:
        line = "latency baseline was measured on other hardware: " + "; ".join(problems)
        if not allow_mismatch:
            raise BaselineError(
                line,
                "record a baseline on this runner, or pass --allow-hardware-mismatch",
            )
        warnings.append(line + " (compared anyway: hardware mismatch allowed)")
    if baseline is not None and candidate.linear_classes != baseline.linear_classes:
        warnings.append(
            "linear kernels differ: "
            f"{', '.join(baseline.linear_classes) or '-'} -> "
            f"{', '.join(candidate.linear_classes) or '-'}"
        )
    return warnings

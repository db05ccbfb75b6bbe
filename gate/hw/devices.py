"""Which device a model runs on: ``auto`` resolved, a CUDA device checked before anything loads.

The one question asked of the machine is torch's own (``torch.cuda.is_available()``
and ``torch.cuda.device_count()``): a CUDA driver without a CUDA build of torch
counts as no CUDA, since torch is what would run the model. Both reach torch
through a small seam (:class:`CudaProbe`), so the rules run in CPU tests with a
fake; torch is imported only when a device name needs the answer (``auto`` at
load time, ``cuda[:N]`` when it is checked), so validating a config that names
``cpu`` or nothing imports no model library.

Rules:

* ``auto``: ``cuda`` when CUDA is present, else ``cpu`` (:func:`resolve_device`);
* ``cpu``: always there;
* ``cuda`` / ``cuda:N``: needs CUDA and GPU ``N`` (``cuda`` is GPU 0); otherwise
  :func:`check_device` raises a one-line :class:`~gate.errors.UsageError`
  (exit 4) naming the fix.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from gate.errors import UsageError


class CudaProbe(Protocol):
    """What the device rules ask of torch (``torch.cuda`` has both)."""

    def is_available(self) -> bool: ...

    def device_count(self) -> int: ...


@dataclass(frozen=True)
class _TorchCuda:
    """``torch.cuda``, imported when first asked."""

    def is_available(self) -> bool:
        import torch

        return bool(torch.cuda.is_available())

    def device_count(self) -> int:
        import torch

        return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0


#: The probe of this machine.
TORCH_CUDA: CudaProbe = _TorchCuda()


def device_kind(device: str) -> str:
    """``cuda:1`` -> ``cuda``; ``cpu`` -> ``cpu`` (what a device-drift check compares)."""
    return device.partition(":")[0].strip().lower()


def resolve_device(device: str, probe: CudaProbe = TORCH_CUDA) -> str:
    """``auto`` as this machine resolves it (``cuda`` or ``cpu``); other names unchanged."""
    if device == "auto":
        return "cuda" if probe.is_available() else "cpu"
    return device


def cuda_indices(device: str, device_map: Mapping[str, Any] | None = None) -> tuple[int, ...]:
    """The CUDA GPUs a model occupies: the GPU entries of its accelerate device map
    (``{"model.layers.0": 0, ...}``, ``"cuda:1"``), else ``device``'s index; none on the CPU."""
    found: list[int] = []
    for where in (device_map or {}).values():
        text = str(where)
        if isinstance(where, int) or text.isdigit():
            found.append(int(text))
        elif device_kind(text) == "cuda":
            found.append(int(text.partition(":")[2] or 0))
    if found:
        return tuple(sorted(set(found)))
    if device_kind(device) != "cuda":
        return ()
    return (int(device.partition(":")[2] or 0),)


def check_device(device: str, probe: CudaProbe = TORCH_CUDA) -> None:
    """Refuse a CUDA device this machine does not have (:class:`UsageError`, exit 4).

    ``auto`` and ``cpu`` always pass (``auto`` falls back to the CPU).
    """
    if device_kind(device) != "cuda":
        return
    if not probe.is_available():
        raise UsageError(
            f"--device {device}: torch sees no CUDA GPU on this machine",
            "pass --device cpu, or --device auto: it falls back to the CPU",
        )
    index = int(device.partition(":")[2] or 0)
    count = probe.device_count()
    if index >= count:
        raise UsageError(
            f"--device {device}: this machine has {count} CUDA GPU(s) (cuda:0..cuda:{count - 1})",
            "pass --device cuda:N with an existing N, or --device auto",
        )


__all__ = [
    "TORCH_CUDA",
    "CudaProbe",
    "check_device",
    "cuda_indices",
    "device_kind",
    "resolve_device",
]

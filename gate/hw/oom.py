"""Out of memory on an accelerator: recognising it, and giving the memory back.

The seam between the batch back-off (:mod:`gate.models.backends.batch_fit`) and
the device: :class:`MemorySeam` has two calls, :meth:`~MemorySeam.is_out_of_memory`
(the classifier) and :meth:`~MemorySeam.release` (the allocator's cache emptied
so the next, smaller batch can use it). :data:`TORCH_MEMORY` is torch's:

* out of memory is ``torch.cuda.OutOfMemoryError`` (its class name is matched,
  so other backends' errors of that name count too, and nothing here imports
  torch to classify), or a ``RuntimeError`` whose text says "out of memory"
  (older torch, other allocators);
* release is ``torch.cuda.empty_cache()`` where CUDA is present.

CPU tests hand the logic above it a fake seam, or raise the real
``torch.cuda.OutOfMemoryError`` (constructible without a GPU).
"""

from __future__ import annotations

from typing import Protocol


def is_out_of_memory(exc: BaseException) -> bool:
    """``torch.cuda.OutOfMemoryError`` or a RuntimeError saying "out of memory"."""
    if type(exc).__name__ == "OutOfMemoryError":
        return True
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()


def release_cached_memory() -> None:
    """Return the CUDA caching allocator's free blocks to the device (nothing on the CPU)."""
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()


class MemorySeam(Protocol):
    """What the batch back-off asks of the device."""

    def is_out_of_memory(self, exc: BaseException) -> bool: ...

    def release(self) -> None: ...


class _TorchMemory:
    """torch's classifier and cache release."""

    def is_out_of_memory(self, exc: BaseException) -> bool:
        return is_out_of_memory(exc)

    def release(self) -> None:
        release_cached_memory()


#: The seam of this process's torch.
TORCH_MEMORY: MemorySeam = _TorchMemory()

__all__ = ["TORCH_MEMORY", "MemorySeam", "is_out_of_memory", "release_cached_memory"]

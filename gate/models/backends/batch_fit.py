"""Batches that fit the memory: an out-of-memory error halves the batch and retries.

A tier asks a backend to score or generate with its configured ``batch_size``
(8 by default). On a GPU whose free memory holds fewer rows (a long prompt, a
large vocabulary, a model that fills most of the card) the forward pass raises
out of memory. :class:`BatchFitter` runs the batches of one call and, on that
error, releases the allocator's cache, halves the batch (``b -> b // 2``) and
retries the same items, down to 1; out of memory at batch 1 is a one-line
:class:`~gate.errors.ModelLoadError` (exit 3) naming what loads the model in
less memory. The halved size is kept for later calls of the same operation
(no second failure per call), and every halving is a typed
:class:`BatchBackoff` record: the backend's provenance lists them
(``batch_backoffs``) and the report names them in its notes.

Halving changes which rows share a batch, never a row's numbers beyond what
padding does (every row is left-padded and masked on its own), so a backed-off
run measures the same thing.

The device is reached only through :class:`~gate.hw.oom.MemorySeam` (classify,
release), so the logic runs in CPU tests.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from gate import progress
from gate.errors import ModelLoadError
from gate.hw.oom import TORCH_MEMORY, MemorySeam

_T = TypeVar("_T")
_R = TypeVar("_R")
#: The batched operations of an in-process backend.
Operation = Literal["score", "generate"]

#: How to fit a model that runs out of memory one row at a time.
OUT_OF_MEMORY_HINT = (
    "load it in less memory: --dtype bfloat16, a weight-quantizing --recipe, or --device auto "
    "to spread it over several GPUs; or lower the tier's max_new_tokens"
)


@dataclass(frozen=True)
class BatchBackoff:
    """One halving: ``operation`` ran out of memory at batch ``tried`` on ``device`` and
    went on at ``fitted`` (``tried // 2``)."""

    operation: str
    tried: int
    fitted: int
    device: str

    @property
    def line(self) -> str:
        """``score on cuda:0: out of memory at batch 8, continued at 4``."""
        return (
            f"{self.operation} on {self.device}: out of memory at batch {self.tried}, "
            f"continued at {self.fitted}"
        )

    def to_dict(self) -> dict[str, Any]:
        """The provenance entry (``batch_backoffs[]``)."""
        return {
            "operation": self.operation,
            "tried": self.tried,
            "fitted": self.fitted,
            "device": self.device,
        }

    @classmethod
    def from_dict(cls, entry: Mapping[str, Any]) -> BatchBackoff:
        """Inverse of :meth:`to_dict` (``KeyError``/``TypeError``/``ValueError`` when malformed)."""
        return cls(
            operation=str(entry["operation"]),
            tried=int(entry["tried"]),
            fitted=int(entry["fitted"]),
            device=str(entry["device"]),
        )


class BatchFitter:
    """Runs an operation's batches at the largest size that fitted so far (see the module)."""

    def __init__(self, device: str, seam: MemorySeam = TORCH_MEMORY) -> None:
        self.device = device
        self.seam = seam
        #: The size each operation fitted at after a back-off (absent: never backed off).
        self.caps: dict[str, int] = {}
        #: Every halving, in order.
        self.backoffs: list[BatchBackoff] = []

    def size_for(self, operation: Operation, batch_size: int) -> int:
        """The batch size ``operation`` runs at when asked for ``batch_size``."""
        return max(1, min(batch_size, self.caps.get(operation, batch_size)))

    def run(
        self,
        operation: Operation,
        items: Sequence[_T],
        batch_size: int,
        call: Callable[[list[_T]], list[_R]],
    ) -> list[_R]:
        """``call`` on consecutive batches of ``items``; the results in ``items``' order.

        ``call`` returns one result per item of its batch; each batch done counts its items
        into the current progress task (:func:`gate.progress.advance`). Out of memory halves
        the batch and reruns the batch's items; any other error propagates.
        """
        size = self.size_for(operation, batch_size)
        out: list[_R] = []
        start = 0
        while start < len(items):
            chunk = list(items[start : start + size])
            try:
                results = call(chunk)
            except Exception as exc:
                if not self.seam.is_out_of_memory(exc):
                    raise
                failed = True
            else:
                failed = False
            if not failed:
                out.extend(results)
                start += len(chunk)
                progress.advance(len(chunk))
                continue
            # the error (and the tensors its traceback holds) is gone here: release, then halve
            self.seam.release()
            if len(chunk) == 1:
                raise ModelLoadError(
                    f"out of memory in {operation} on {self.device} even at batch size 1",
                    OUT_OF_MEMORY_HINT,
                )
            fitted = max(1, len(chunk) // 2)
            self.backoffs.append(BatchBackoff(operation, len(chunk), fitted, self.device))
            size = fitted
            self.caps[operation] = fitted
        return out


def backoff_notes(entries: Sequence[Mapping[str, Any]] | None) -> list[str]:
    """Report notes of a provenance's ``batch_backoffs`` (one per halving)."""
    notes = []
    for entry in entries or ():
        try:
            notes.append(f"batch back-off: {BatchBackoff.from_dict(entry).line}")
        except (KeyError, TypeError, ValueError):
            notes.append(f"batch back-off (malformed record): {dict(entry)}")
    return notes


__all__ = ["OUT_OF_MEMORY_HINT", "BatchBackoff", "BatchFitter", "Operation", "backoff_notes"]

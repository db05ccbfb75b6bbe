"""The control: the unmodified model (``none``), the one method that counts nothing."""

from __future__ import annotations

from gate.models.methods.base import WEIGHTS, CompressionMethod

#: ``none``: changes nothing, so it declares no footprint.
NONE = CompressionMethod(
    "none",
    "the unmodified model",
    WEIGHTS,
    footprint=None,
    changes_weights=False,
    localizable=True,  # a checkpoint given as the model, localized as it is
    not_selective="it changes nothing",
    control=True,
)

METHODS: tuple[CompressionMethod, ...] = (NONE,)

__all__ = ["METHODS", "NONE"]

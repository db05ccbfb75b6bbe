"""gate's own cache directory: ``$XDG_CACHE_HOME/gate`` (``~/.cache/gate`` when unset).

What lives there is made by gate and can be deleted at any time (it is made
again): the demo's baseline stores (``demo/``), the dequantized copies of GGUF
files (``models/``) and the judge tier's answers (``judge/``). The tool environments of the serving engine and of
GuideLLM live apart, under ``~/.cache/gate-tools``. This module imports nothing
of the package, so every layer may use it.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """``$XDG_CACHE_HOME/gate``, or ``~/.cache/gate`` when the variable is unset or empty."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gate"


__all__ = ["cache_root"]

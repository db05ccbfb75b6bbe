"""Where the demo model's compressed checkpoints live: packaged, or cached by what made them.

``scripts/make_compressed_checkpoints.py`` (run in llm-compressor's own
environment) writes a checkpoint per method. The demo's ship under
``gate/assets/checkpoints/<method>`` (GPTQ and AWQ W4A16 6 MB each; SparseGPT 18 MB,
written dense: compressed-tensors no longer stores sparse formats), so a fresh
clone gates them without the tool; a method made anew (another model or
calibration set) is cached under ``${GATE_TOOL_CACHE:-~/.cache/gate-tools}/checkpoints`` in a
directory named by the method and the sha256 prefixes of the base weights and
of the calibration file, so a second run finds it and a changed model or
calibration set makes a new one. Standard library only: the tool environment
imports it too.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

ASSETS = Path(__file__).resolve().parents[1] / "assets"
PACKAGED = ASSETS / "checkpoints"
DEMO_WEIGHTS = ASSETS / "demo_model" / "model.safetensors"
CALIBRATION = ASSETS / "calibration" / "sharegpt_calibration.jsonl"
#: Every method the checkpoint script makes; each is looked for in the package first.
PACKAGED_METHODS = ("gptq-w4a16", "awq-w4a16", "sparsegpt-0.5")
#: Every method the checkpoint script makes.
METHODS = PACKAGED_METHODS


def file_sha256(path: Path) -> str:
    """sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def tool_cache() -> Path:
    """``$GATE_TOOL_CACHE`` or ``~/.cache/gate-tools``."""
    return Path(os.environ.get("GATE_TOOL_CACHE") or Path.home() / ".cache" / "gate-tools")


def cache_key(method: str, base_sha256: str, calibration_sha256: str) -> str:
    """``<method>-<base sha[:12]>-<calibration sha[:12]>``."""
    return f"{method}-{base_sha256[:12]}-{calibration_sha256[:12]}"


def cached_dir(method: str) -> Path:
    """The cache directory of ``method``'s checkpoint of the demo model and the packaged calibration."""
    key = cache_key(method, file_sha256(DEMO_WEIGHTS), file_sha256(CALIBRATION))
    return tool_cache() / "checkpoints" / key


def default_dir(method: str) -> Path:
    """Where the checkpoint script writes ``method`` by default."""
    return PACKAGED / method if method in PACKAGED_METHODS else cached_dir(method)


def find(method: str) -> Path | None:
    """The checkpoint of ``method`` if it exists (packaged first, then the cache)."""
    for path in (PACKAGED / method, cached_dir(method)):
        if (path / "config.json").is_file():
            return path
    return None

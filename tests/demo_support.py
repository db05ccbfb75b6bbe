"""Whether the committed demo model's weights and its ``fp32`` baseline are here (tests that gate it skip otherwise)."""

from __future__ import annotations

from pathlib import Path

from gate.errors import BaselineError
from gate.models.model_spec import demo_model_dir
from gate.store.baseline import BaselineStore

ROOT = Path(__file__).resolve().parents[1]


def demo_baseline_present() -> bool:
    """The demo model's weights and the repository's ``fp32`` baseline of it are both present."""
    if not (demo_model_dir() / "model.safetensors").is_file():
        return False
    try:
        BaselineStore(ROOT / "baselines").resolve("fp32", "demo")
    except BaselineError:
        return False
    return True

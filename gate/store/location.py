"""Where the baseline store lives when nothing names one.

Declared here, at the bottom of the store layer and with the standard library
only, so that every reader of a store path (the session's options, the
planner, the workflow's change filter, which runs without the gate's
dependencies' heavy parts) takes the same default.
"""

from __future__ import annotations

from pathlib import Path

#: The baseline store when neither ``--store``/``$GATE_STORE`` nor ``[run].store`` names
#: one: ``baselines`` under the directory the gate runs in.
DEFAULT_STORE = Path("baselines")

__all__ = ["DEFAULT_STORE"]

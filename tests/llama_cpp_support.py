"""llama.cpp for the tests that run its tools: built once per machine, then found.

:func:`built_llama_cpp` returns the build gate finds
(:func:`gate.engines.llama_cpp.install.find_llama_cpp`); where there is none it runs
``bash scripts/setup_engine.sh llama.cpp`` (about 5 minutes on 2 cores, once:
the build is cached in the engine cache) and fails the test with the script's
last lines when that fails.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gate.engines.llama_cpp.install import LlamaCpp, find_llama_cpp

REPO = Path(__file__).resolve().parents[1]
SETUP = REPO / "scripts" / "setup_engine.sh"


def built_llama_cpp() -> LlamaCpp:
    """The built llama.cpp (built by the set-up script when missing)."""
    found = find_llama_cpp()
    if found is not None:
        return found
    done = subprocess.run(
        ["bash", str(SETUP), "llama.cpp"], capture_output=True, text=True, timeout=3600, check=False
    )
    found = find_llama_cpp()
    if done.returncode != 0 or found is None:
        tail = " | ".join(done.stderr.strip().splitlines()[-3:])
        pytest.fail(f"setup_engine.sh llama.cpp failed ({done.returncode}): {tail}", pytrace=False)
    return found

"""The secrets the engine tests start real servers with, and where gate might leak them.

Shared by tests/test_engine_secrets.py (a served run of vLLM, llama-server's
record and run) and tests/test_engine_speculative.py (vLLM's speculative
record, whose plain twin gate starts from the same keyed command).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.cli_support import GateRun

KEY = "sk-gate-secret-test-9c41e7d2"
HF_TOKEN = "hf_gateSecretTestNotARealToken7731"
SECRETS = (KEY, HF_TOKEN)
#: The variable ``--api-key-env`` names: the client's copy of the key.
KEY_VARIABLE = "GATE_TEST_KEY"


def leaks(root: Path, *runs: GateRun) -> list[str]:
    """Every file under ``root`` and every console stream of ``runs`` that holds a secret."""
    found = [
        str(path)
        for path in sorted(root.rglob("*"))
        if path.is_file() and any(s.encode() in path.read_bytes() for s in SECRETS)
    ]
    for run in runs:
        for name, text in (("stdout", run.stdout), ("stderr", run.stderr)):
            if any(s in text for s in SECRETS):
                found.append(f"{' '.join(run.args[:2])}: {name}")
    return found


def written(root: Path) -> list[str]:
    """The files gate wrote under ``root`` (relative), to show what the scan covered."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def recorded_command(provenance: dict[str, Any]) -> list[str]:
    """The server command a provenance record holds, word by word."""
    command = provenance["serve_command"]
    assert isinstance(command, list) and command, provenance
    return [str(word) for word in command]


def baseline_document(store: Path) -> dict[str, Any]:
    """The one baseline document of ``store``."""
    files = [p for p in store.rglob("*.json") if p.name[:4].isdigit()]
    assert len(files) == 1, written(store)
    document: dict[str, Any] = json.loads(files[0].read_text())
    return document

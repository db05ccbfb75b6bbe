"""``gguf-*`` recipes gated as llama.cpp runs them (``--engine llama.cpp``) and dequantized.

The checks of issue 38 on SmolLM2-135M-Instruct: a baseline recorded in
process (``gate baseline record --model smollm2 --ref base --tiers fidelity``,
``[tiers.fidelity] limit = 24, max_new_tokens = 32``), then

* on the first 8 of the baseline's prompts (``config_first8``),
  ``--recipe gguf-f16 --engine llama.cpp``: gate makes the file, serves it with
  llama-server, gates it on the fidelity and generation tiers (approved, exit 0;
  the candidate's provenance says ``engine: llama.cpp``, the build and the file)
  and stops the server;
  ``--recipe gguf-q2_k --engine llama.cpp``: blocked (exit 1);
* on all 24, ``gguf-q8_0``: its KL mean as llama.cpp runs the file is at least 1.5 times
  that of the same file dequantized in process (llama.cpp's kernels quantize
  the activations too).

The made files are gate's own cache (made on a machine's first run, then
reused); llama.cpp is built once per machine (tests/llama_cpp_support.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.cli_support import run_gate
from tests.llama_cpp_support import built_llama_cpp

pytestmark = [pytest.mark.engine, pytest.mark.slow, pytest.mark.realmodel]


@pytest.fixture(scope="module")
def base(smollm2_fidelity_base: dict[str, Path]) -> dict[str, Path]:
    """SmolLM2's baseline ``base`` (``[tiers.fidelity] limit = 24, max_new_tokens = 32``),
    its store, run config and work folder: the session's (tests/conftest.py)."""
    return smollm2_fidelity_base


def _run(
    base: dict[str, Path],
    recipe: str,
    name: str,
    *extra: str,
    config: str = "config",
    tiers: str = "fidelity",
) -> tuple[int, dict[str, Any]]:
    """``gate run`` of ``recipe`` against ``base`` with the run config ``base[config]``."""
    out = base["root"] / f"{name}.json"
    done = run_gate(
        "run", "--candidate", "smollm2", "--recipe", recipe, "--against", "base",
        "--tiers", tiers, "--config", str(base[config]), "--store", str(base["store"]),
        "--json", str(out), *extra,
    )  # fmt: skip
    assert out.is_file(), done.stdout + done.stderr
    return done.returncode, json.loads(out.read_text(encoding="utf-8"))


def _whole(results: dict[str, Any], metric: str) -> float:
    for verdict in results["metrics"]:
        if verdict["name"] == metric and verdict.get("slice") is None:
            return float(verdict["value"])
    raise AssertionError(f"{metric} not in the results")


def _servers_of(path: str) -> list[int]:
    """llama-server processes serving ``path``."""
    return [
        p.pid
        for p in psutil.process_iter(["cmdline"])
        if "llama-server" in " ".join(p.info["cmdline"] or []) and path in (p.info["cmdline"] or [])
    ]


def _figures(name: str, **values: Any) -> None:
    print(f"\n[llama.cpp gate figures] {name}: {json.dumps(values, default=float)}")


def test_f16_run_by_llama_cpp_is_approved_and_says_so(base: dict[str, Path]) -> None:
    """Served by llama-server, the f16 file is approved on fidelity and on its own free-running
    answers (the generation tier: llama-server's greedy answers against the pack's)."""
    code, results = _run(
        base,
        "gguf-f16",
        "f16",
        "--engine",
        "llama.cpp",
        config="config_first8",
        tiers="fidelity,generation",
    )
    candidate = results["candidate"]
    generation = {
        m["name"]: m
        for m in results["metrics"]
        if m["name"].startswith("generation.") and m.get("slice") is None
    }
    _figures(
        "gguf-f16 llama.cpp",
        exit=code,
        kl_mean=_whole(results, "fidelity.kl_mean"),
        cga=_whole(results, "fidelity.cga"),
        **{name: m["value"] for name, m in generation.items()},
    )
    assert code == 0, results.get("verdict")
    assert len(generation) == 6
    for m in generation.values():  # against the pack's answers, taken in the session
        assert m["n"] == 8 and m["severity"] == "pass", m
    assert candidate["engine"] == "llama.cpp"
    assert candidate["engine_version"] == built_llama_cpp().build
    assert candidate["gguf_runtime"] == "llama.cpp"
    assert candidate["recipe"] == "gguf-f16"
    assert candidate["gguf_tensor_types"]["F16"] > 0 and len(candidate["gguf_sha256"]) == 64
    command = candidate["serve_command"]
    assert Path(command[0]).name == "llama-server"
    assert not _servers_of(command[command.index("-m") + 1])  # stopped


def test_q2_k_run_by_llama_cpp_is_blocked(base: dict[str, Path]) -> None:
    code, results = _run(base, "gguf-q2_k", "q2k", "--engine", "llama.cpp", config="config_first8")
    _figures(
        "gguf-q2_k llama.cpp",
        exit=code,
        kl_mean=_whole(results, "fidelity.kl_mean"),
        cga=_whole(results, "fidelity.cga"),
        types=results["candidate"]["gguf_tensor_types"],
    )
    assert code == 1


def test_q8_0_loses_more_in_llama_cpp_than_dequantized(base: dict[str, Path]) -> None:
    code_d, dequantized = _run(base, "gguf-q8_0", "q8-dequantized")
    code_e, engine = _run(base, "gguf-q8_0", "q8-engine", "--engine", "llama.cpp")
    kl_d = _whole(dequantized, "fidelity.kl_mean")
    kl_e = _whole(engine, "fidelity.kl_mean")
    _figures(
        "gguf-q8_0", dequantized=kl_d, llama_cpp=kl_e, ratio=kl_e / kl_d, exits=[code_d, code_e]
    )
    assert dequantized["candidate"]["gguf_runtime"] == "dequantized"
    assert engine["candidate"]["gguf_runtime"] == "llama.cpp"
    assert dequantized["candidate"]["gguf_sha256"] == engine["candidate"]["gguf_sha256"]
    assert kl_e >= 1.5 * kl_d > 0

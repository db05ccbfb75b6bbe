"""No engine secret in anything gate writes: real servers started with ``--api-key KEY``.

Marked ``engine``. A served baseline is recorded and a served run gated
against it through the real CLI, each server started by gate from a command
that carries a key (and, for vLLM, a Hugging Face token), the client holding
the key in the variable ``--api-key-env`` names (so the server's refusal of
other clients is really passed). Afterwards no file under the test's directory
(results JSON, HTML, markdown, JUnit, the store's baseline and reference pack,
the server logs, gate's cache) and neither the console's stdout nor stderr
holds the key, while the recorded command keeps each option with ``***`` as
its value. The masking rule itself is tests/test_command_masking.py's.

* vLLM's CPU server (scripts/setup_engine.sh) on the demo model: record, run.
* llama-server (scripts/setup_engine.sh llama.cpp) on SmolLM2's packaged GGUF:
  record, ``gate run --dry-run`` (its description of the engine), run.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest

from gate.errors import ExitCode
from gate.models.masking import MASK
from tests.cli_support import GateRun, run_gate
from tests.engine_support import engine_env, engine_python, vllm_command

pytestmark = [pytest.mark.engine, pytest.mark.slow]

KEY = "sk-gate-secret-test-9c41e7d2"
HF_TOKEN = "hf_gateSecretTestNotARealToken7731"
SECRETS = (KEY, HF_TOKEN)


def _leaks(root: Path, *runs: GateRun) -> list[str]:
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


def _vllm_servers_on(endpoint: str) -> list[int]:
    """vLLM servers still listening on ``endpoint``'s port (by their command lines)."""
    import psutil

    port = endpoint.rsplit(":", 1)[1].split("/", 1)[0]
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        command = proc.info["cmdline"] or []
        if "vllm.entrypoints.openai.api_server" in command and port in command:
            found.append(int(proc.info["pid"]))
    return found


def _written(root: Path) -> list[str]:
    """The files gate wrote under ``root`` (relative), to show what the scan covered."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def _recorded(provenance: dict[str, Any]) -> list[str]:
    command = provenance["serve_command"]
    assert isinstance(command, list) and command, provenance
    return [str(word) for word in command]


def _baseline_document(store: Path) -> dict[str, Any]:
    files = [p for p in store.rglob("*.json") if p.name[:4].isdigit()]
    assert len(files) == 1, _written(store)
    document: dict[str, Any] = json.loads(files[0].read_text())
    return document


def test_vllm_served_baseline_and_run_leave_no_key(engine_cache: Path, tmp_path: Path) -> None:
    serve = vllm_command(
        engine_python(), "--dtype", "float32", "--api-key", KEY, f"--hf-token={HF_TOKEN}"
    )
    config = tmp_path / "gate.toml"
    config.write_text("[tiers.fidelity]\nlimit = 4\n")
    store, out = tmp_path / "store", tmp_path / "out"
    env = {
        **engine_env(engine_cache),
        "GATE_TEST_KEY": KEY,
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
    }
    served = ("--serve", serve, "--api-key-env", "GATE_TEST_KEY", "--startup-timeout", "1800")
    record = run_gate(
        *("baseline", "record", "--model", "demo", "--label", "served", "--ref", "served"),
        *("--tiers", "fidelity", "--config", str(config), "--store", str(store)),
        *served,
        *("--server-log", str(tmp_path / "record.server.log")),
        cwd=tmp_path,
        env=env,
    )
    assert record.returncode == ExitCode.OK, record.stdout[-3000:] + record.stderr[-3000:]
    run = run_gate(
        *("run", "--candidate", "demo", "--against", "served", "--store", str(store)),
        *("--tiers", "fidelity", "--config", str(config)),
        *served,
        *("--json", str(out / "results.json"), "--html", str(out / "report.html")),
        *("--markdown", str(out / "comment.md"), "--junit", str(out / "junit.xml")),
        cwd=tmp_path,
        env=env,
    )
    assert run.returncode == ExitCode.OK, run.stdout[-3000:] + run.stderr[-3000:]
    written = _written(tmp_path)
    print(f"\n[engine secrets] vLLM: scanned {len(written)} files: {written}")
    # the served build against its own served baseline: the same tokens, approved; what
    # the provenance names; the server gate started is gone
    results = json.loads((out / "results.json").read_text())
    whole = {m["name"]: m for m in results["metrics"] if m["slice"] is None}
    assert results["verdict"] == "pass" and whole["fidelity.cga"]["value"] == 1.0
    assert whole["fidelity.kl_mean"]["value"] < 1e-6
    # a served baseline's pack holds no sampled tail: its KL is the top-k + tail-bucket bound
    assert whole["fidelity.kl_mean"]["details"]["kl_kind"] == "bound"
    candidate = results["candidate"]
    assert candidate["backend"] == "http" and candidate["engine"] == "vllm"
    assert candidate["engine_version"] == "0.32.0" and candidate["served_model"] == "demo"
    assert candidate["endpoint"].startswith("http://127.0.0.1:")
    assert candidate["served_settings"]["dtype"] == "float32"
    assert candidate["server_log"] == str(out / "results.server.log")
    assert not _vllm_servers_on(candidate["endpoint"])
    for name in ("results.json", "report.html", "comment.md", "junit.xml", "results.server.log"):
        assert (out / name).stat().st_size > 0, name
    assert (tmp_path / "record.server.log").stat().st_size > 0
    assert _leaks(tmp_path, record, run) == []
    # the record keeps the options, their values masked, in the results and the baseline
    for provenance in (
        json.loads((out / "results.json").read_text())["candidate"],
        _baseline_document(store)["provenance"],
    ):
        command = _recorded(provenance)
        assert command[command.index("--api-key") + 1] == MASK
        assert f"--hf-token={MASK}" in command and "--dtype" in command
        assert provenance["api_key_env"] == "GATE_TEST_KEY"
    assert "--api-key" in (out / "report.html").read_text()


def test_llama_server_baseline_run_and_dry_run_leave_no_key(tmp_path: Path) -> None:
    from tests.gguf_support import smollm2_file
    from tests.llama_cpp_support import built_llama_cpp

    gguf = smollm2_file()
    llama = built_llama_cpp()
    server = str(llama.server)
    serve = shlex.join([server, "-m", str(gguf), "--api-key", KEY, "-c", "2048", "-np", "2"])
    config = tmp_path / "gate.toml"
    config.write_text("[tiers.fidelity]\nlimit = 2\nmax_new_tokens = 8\n")
    store, out = tmp_path / "store", tmp_path / "out"
    env = {"GATE_TEST_KEY": KEY, "XDG_CACHE_HOME": str(tmp_path / "cache"), **llama.tool_env()}
    served = ("--serve", serve, "--api-key-env", "GATE_TEST_KEY")
    record = run_gate(
        *("baseline", "record", "--model", "smollm2", "--label", "llama", "--ref", "llama"),
        *("--tiers", "fidelity", "--config", str(config), "--store", str(store)),
        *served,
        *("--server-log", str(tmp_path / "record.server.log")),
        cwd=tmp_path,
        env=env,
    )
    assert record.returncode == ExitCode.OK, record.stdout[-3000:] + record.stderr[-3000:]
    against = ("--candidate", "smollm2", "--against", "llama", "--store", str(store))
    dry = run_gate(
        *("run", *against, "--tiers", "fidelity", "--config", str(config), *served, "--dry-run"),
        cwd=tmp_path,
        env=env,
    )
    assert dry.returncode == ExitCode.OK, dry.stdout[-3000:] + dry.stderr[-3000:]
    assert f"--api-key {shlex.quote(MASK)}" in dry.stdout
    run = run_gate(
        *("run", *against, "--tiers", "fidelity", "--config", str(config), *served),
        *("--json", str(out / "results.json"), "--html", str(out / "report.html")),
        *("--markdown", str(out / "comment.md"), "--junit", str(out / "junit.xml")),
        cwd=tmp_path,
        env=env,
    )
    assert run.returncode == ExitCode.OK, run.stdout[-3000:] + run.stderr[-3000:]
    written = _written(tmp_path)
    print(f"\n[engine secrets] llama-server: scanned {len(written)} files: {written}")
    for name in ("results.json", "report.html", "comment.md", "junit.xml", "results.server.log"):
        assert (out / name).stat().st_size > 0, name
    assert (tmp_path / "record.server.log").stat().st_size > 0
    assert _leaks(tmp_path, record, dry, run) == []
    for provenance in (
        json.loads((out / "results.json").read_text())["candidate"],
        _baseline_document(store)["provenance"],
    ):
        command = _recorded(provenance)
        assert command[command.index("--api-key") + 1] == MASK and command[0] == server
        assert provenance["engine"] == "llama.cpp"
        assert provenance["api_key_env"] == "GATE_TEST_KEY"

"""No engine secret in anything gate writes: real servers started with ``--api-key KEY``.

Marked ``engine``. Served runs gated through the real CLI, each server started
by gate from a command that carries a key (and, for vLLM, a Hugging Face
token), the client holding
the key in the variable ``--api-key-env`` names (so the server's refusal of
other clients is really passed). Afterwards no file under the test's directory
(results JSON, HTML, markdown, JUnit, the store's baseline and reference pack,
the server logs, gate's cache) and neither the console's stdout nor stderr
holds the key, while the recorded command keeps each option with ``***`` as
its value. The masking rule itself is tests/test_command_masking.py's.

* vLLM's CPU server (scripts/setup_engine.sh) on the demo model: a run against a
  baseline recorded in process. A served vLLM record, with the plain server gate
  starts beside a speculative one from the same keyed command, is
  tests/test_engine_speculative.py's (the same checks, tests/secrets_support.py).
* llama-server (scripts/setup_engine.sh llama.cpp) on SmolLM2's packaged GGUF:
  record, ``gate run --dry-run`` (its description of the engine), run.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from gate.engines.secrets import MASK
from gate.errors import ExitCode
from tests.cli_support import run_gate
from tests.engine_support import engine_env, engine_python, vllm_command
from tests.secrets_support import (
    HF_TOKEN,
    KEY,
    KEY_VARIABLE,
    baseline_document,
    leaks,
    recorded_command,
    written,
)

pytestmark = [pytest.mark.engine, pytest.mark.slow]


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


def test_vllm_served_run_leaves_no_key(engine_cache: Path, tmp_path: Path) -> None:
    """A served run against a baseline recorded in process (the served record, its plain
    twin and the baseline's provenance: tests/test_engine_speculative.py, one keyed
    command for both of its servers)."""
    serve = vllm_command(
        engine_python(), "--dtype", "float32", "--api-key", KEY, f"--hf-token={HF_TOKEN}"
    )
    config = tmp_path / "gate.toml"
    config.write_text("[tiers.fidelity]\nlimit = 4\n")
    store, out = tmp_path / "store", tmp_path / "out"
    env = {
        **engine_env(engine_cache),
        KEY_VARIABLE: KEY,
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
    }
    record = run_gate(
        *("baseline", "record", "--model", "demo", "--label", "fp32", "--ref", "fp32"),
        *("--tiers", "fidelity", "--config", str(config), "--store", str(store)),
        cwd=tmp_path,
        env=env,
    )
    assert record.returncode == ExitCode.OK, record.stdout[-3000:] + record.stderr[-3000:]
    served = ("--serve", serve, "--api-key-env", KEY_VARIABLE, "--startup-timeout", "1800")
    run = run_gate(
        *("run", "--candidate", "demo", "--against", "fp32", "--store", str(store)),
        *("--tiers", "fidelity", "--config", str(config)),
        *served,
        *("--json", str(out / "results.json"), "--html", str(out / "report.html")),
        *("--markdown", str(out / "comment.md"), "--junit", str(out / "junit.xml")),
        cwd=tmp_path,
        env=env,
    )
    assert run.returncode == ExitCode.OK, run.stdout[-3000:] + run.stderr[-3000:]
    scanned = written(tmp_path)
    print(f"\n[engine secrets] vLLM: scanned {len(scanned)} files: {scanned}")
    # the served float32 build against its in-process baseline: the same tokens, approved;
    # what the provenance names; the server gate started is gone
    results = json.loads((out / "results.json").read_text())
    whole = {m["name"]: m for m in results["metrics"] if m["slice"] is None}
    assert results["verdict"] == "pass" and whole["fidelity.cga"]["value"] == 1.0
    assert whole["fidelity.kl_mean"]["value"] < 1e-6
    candidate = results["candidate"]
    assert candidate["backend"] == "http" and candidate["engine"] == "vllm"
    assert candidate["engine_version"] == "0.32.0" and candidate["served_model"] == "demo"
    assert candidate["endpoint"].startswith("http://127.0.0.1:")
    assert candidate["served_settings"]["dtype"] == "float32"
    assert candidate["server_log"] == str(out / "results.server.log")
    assert not _vllm_servers_on(candidate["endpoint"])
    for name in ("results.json", "report.html", "comment.md", "junit.xml", "results.server.log"):
        assert (out / name).stat().st_size > 0, name
    assert leaks(tmp_path, record, run) == []
    # the record keeps the options, their values masked
    command = recorded_command(candidate)
    assert command[command.index("--api-key") + 1] == MASK
    assert f"--hf-token={MASK}" in command and "--dtype" in command
    assert candidate["api_key_env"] == KEY_VARIABLE
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
    env = {KEY_VARIABLE: KEY, "XDG_CACHE_HOME": str(tmp_path / "cache"), **llama.tool_env()}
    served = ("--serve", serve, "--api-key-env", KEY_VARIABLE)
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
    scanned = written(tmp_path)
    print(f"\n[engine secrets] llama-server: scanned {len(scanned)} files: {scanned}")
    for name in ("results.json", "report.html", "comment.md", "junit.xml", "results.server.log"):
        assert (out / name).stat().st_size > 0, name
    assert (tmp_path / "record.server.log").stat().st_size > 0
    assert leaks(tmp_path, record, dry, run) == []
    for provenance in (
        json.loads((out / "results.json").read_text())["candidate"],
        baseline_document(store)["provenance"],
    ):
        command = recorded_command(provenance)
        assert command[command.index("--api-key") + 1] == MASK and command[0] == server
        assert provenance["engine"] == "llama.cpp"
        assert provenance["api_key_env"] == KEY_VARIABLE

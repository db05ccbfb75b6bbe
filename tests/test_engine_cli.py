"""``gate run`` through the real CLI against real vLLM servers (CPU build).

Marked ``engine`` (the engine is set up by scripts/setup_engine.sh when
missing). Each test is one ``gate run`` command, run in this process as a user
or a workflow runs it (the servers are real processes either way). The
session's float32 and bfloat16 servers (``served``, ``served_bf16`` in
tests/conftest.py) are the ``--endpoint`` and ``--baseline-endpoint``, which
gate must leave alone (gate starting and stopping a server of its own through
``--serve``: tests/test_engine_secrets.py). Figures are printed (run with ``-s``).

* the bfloat16 build (``--dtype bfloat16``) as an
  endpoint with the latency tier: latency from the streams, the load runs at
  two concurrency levels and the paired A/B mode with the baseline build's own
  server; both servers still serve afterwards, no server added (its fidelity
  is test_engine_vllm's).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psutil
import pytest

from gate.engines.http import HTTPBackend
from gate.errors import ExitCode
from tests.cli_support import GateRun, run_gate
from tests.engine_support import engine_env

pytestmark = [pytest.mark.engine, pytest.mark.slow]

BASELINE = Path(__file__).resolve().parents[1] / "gate" / "assets" / "baselines" / "demo"
SECRET = "sk-gate-test-not-a-real-key-4711"


def _gate(cwd: Path, cache: Path, *args: str) -> GateRun:
    return run_gate(*args, cwd=cwd, env={**engine_env(cache), "GATE_TEST_KEY": SECRET})


def _metrics(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m["name"]: m for m in results["metrics"] if m["slice"] is None}


def _servers_on(port: int) -> list[int]:
    """Processes of a vLLM server listening on ``port`` (by their command line)."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmd = proc.info["cmdline"] or []
        if "vllm.entrypoints.openai.api_server" in cmd and str(port) in cmd:
            found.append(int(proc.info["pid"]))
    return found


def _port(endpoint: str) -> int:
    return int(endpoint.rsplit(":", 1)[1].split("/", 1)[0])


def _figures(name: str, **values: Any) -> None:
    print(f"\n[engine cli figures] {name}: {json.dumps(values, default=float)}")


def test_bf16_endpoint_latency_and_paired_endpoints(
    engine_cache: Path, served: HTTPBackend, served_bf16: HTTPBackend, tmp_path: Path
) -> None:
    """The bfloat16 build as ``--endpoint`` (the session's bfloat16 server: starting a server
    through ``--serve`` is the float32 test's, its fidelity test_engine_vllm's); the
    baseline build is the session's float32 server, reached as
    ``--baseline-endpoint`` (paired A/B latency)."""
    candidate = served_bf16.settings.base_url
    baseline = served.settings.base_url
    config = tmp_path / "gate.toml"
    config.write_text(
        "[tiers.latency]\n"
        "new_tokens = 8\n"
        "batch_sizes = [1, 2]\n"
        "warmup = 1\n"
        "runs = 3\n"
        "load_requests = 6\n"
        "load_concurrency = [1, 3]\n"
    )
    out = tmp_path / "results.json"
    before = _api_servers()
    done = _gate(
        tmp_path,
        engine_cache,
        "run",
        "--candidate",
        "demo",
        "--against",
        "fp32",
        "--tiers",
        "latency",
        "--config",
        str(config),
        "--endpoint",
        candidate,
        "--served-model",
        "demo",
        "--baseline-endpoint",
        baseline,
        "--allow-hardware-mismatch",
        "--json",
        str(out),
    )
    assert done.returncode in (ExitCode.OK, ExitCode.BLOCKED), (
        done.stdout[-3000:] + done.stderr[-3000:]
    )
    results = json.loads(out.read_text())
    metrics = _metrics(results)
    cand = results["candidate"]
    load = metrics["latency.load_ttft_p50"]["details"]
    _figures(
        "served bf16 (CLI), paired with the float32 server",
        verdict=results["verdict"],
        exit_code=done.returncode,
        ttft_p50=metrics["latency.ttft_p50"]["value"],
        ttft_p50_baseline_in_session=metrics["latency.ttft_p50"]["baseline_value"],
        load={c: s["output_throughput"] for c, s in load["per_concurrency"].items()},
    )
    assert results["verdict"] in ("pass", "warn", "block")
    assert results["exit_code"] == done.returncode
    assert _port(cand["endpoint"]) == _port(candidate) and cand["served_model"] == "demo"
    assert {m.split(".")[0] for m in metrics} == {"latency"}
    # latency from the streams, compared with the baseline build's own server in session
    assert metrics["latency.ttft_p50"]["details"]["reference"] == "in-session"
    assert metrics["latency.load_ttft_p50"]["details"]["reference"] == "in-session"
    assert set(load["per_concurrency"]) == {"1", "3"}
    for summary in load["per_concurrency"].values():
        assert summary["completed"] == 6 and summary["failed"] == 0
    assert "latency.peak_rss_bytes" not in metrics  # the server's memory is not ours
    # gate leaves the servers it did not start alone: both still serve, none is added
    assert _api_servers() == before
    assert served.generate([[1, 4]], max_new_tokens=1)
    assert served_bf16.generate([[1, 4]], max_new_tokens=1)


def _api_servers() -> set[int]:
    """Every vLLM API server process on the machine."""
    return {
        int(p.info["pid"])
        for p in psutil.process_iter(["pid", "cmdline"])
        if "vllm.entrypoints.openai.api_server" in (p.info["cmdline"] or [])
    }


def test_endpoint_accuracy_and_capability_through_the_cli(
    engine_cache: Path, served: HTTPBackend, tmp_path: Path
) -> None:
    """A server someone else runs (``--endpoint``: the session's float32 server): the
    accuracy, capability and generation tiers over HTTP against the committed float32
    baseline: nothing may change (the served answers are the pack's, the baseline's
    values read from the pack), and gate leaves the server it did not start alone."""
    endpoint = served.settings.base_url
    out = tmp_path / "results.json"
    done = _gate(
        tmp_path,
        engine_cache,
        "run",
        "--candidate",
        "demo",
        "--against",
        "fp32",
        "--tiers",
        "accuracy,capability,generation",
        "--endpoint",
        endpoint,
        "--served-model",
        "demo",
        "--max-concurrency",
        "4",
        "--json",
        str(out),
    )
    assert _servers_on(_port(endpoint)) != []  # still running
    assert done.returncode == ExitCode.OK, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads(out.read_text())
    metrics = _metrics(results)
    _figures(
        "endpoint accuracy + capability (CLI)",
        **{name: m["value"] for name, m in metrics.items()},
        verdict=results["verdict"],
    )
    assert results["candidate"]["endpoint"] == endpoint
    assert results["candidate"]["server_log"] is None
    assert any(name.startswith("accuracy.") for name in metrics)
    assert any(name.startswith("capability.") for name in metrics)
    generation = {name: m for name, m in metrics.items() if name.startswith("generation.")}
    assert len(generation) == 6
    for m in generation.values():  # against the pack's answers, taken in the session
        assert m["n"] == 96 and m["details"]["reference"] == "in-session", m
    # float32 served greedily: the answers are the pack's, or part late on a near-tie
    assert generation["generation.exact_match"]["value"] >= 0.9
    assert generation["generation.stop_rate"]["value"] == pytest.approx(
        generation["generation.stop_rate"]["baseline_value"], abs=2 / 96
    )
    for m in metrics.values():
        assert m["severity"] == "pass", m["reason"]

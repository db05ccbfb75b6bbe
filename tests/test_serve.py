"""A server that gate starts: health wait, log, and no orphan process however it ends.

The engine here is a stand-in process (tests/fakes/engine_process.py) with a
child in its process group, as a real engine has workers; the real vLLM
server goes through the same code in tests/test_engine_vllm.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from gate.engines.http import HTTPBackend
from gate.engines.opening import open_engine, served_settings
from gate.engines.serve import ManagedServer, group_members, with_address
from gate.engines.settings import EngineSettings
from gate.errors import ExitCode, ModelLoadError
from gate.models.model_spec import ModelSpec

ENGINE = str(Path(__file__).parent / "fakes" / "engine_process.py")
REPO = Path(__file__).resolve().parents[1]


def _command(*extra: str) -> list[str]:
    return [sys.executable, ENGINE, *extra]


def _wait_gone(pgid: int, seconds: float = 10.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return group_members(pgid)


def test_address_is_added_when_missing() -> None:
    argv, host, port = with_address(["serve", "--model", "m"])
    assert argv[-4:] == ["--port", str(port), "--host", "127.0.0.1"] and host == "127.0.0.1"
    argv, host, port = with_address(["serve", "--port=8123", "--host", "0.0.0.0"])
    assert (argv, host, port) == (["serve", "--port=8123", "--host", "0.0.0.0"], "127.0.0.1", 8123)


def test_served_settings_from_the_command_line() -> None:
    argv = "python -m vllm.entrypoints.openai.api_server --model m -tp 8 --quantization fp8 "
    argv += "--dtype=bfloat16 --max-model-len 4096 --kv-cache-dtype fp8 --enforce-eager"
    settings = served_settings(argv.split())
    assert settings == {
        "model": "m",
        "tensor_parallel_size": 8,
        "quantization": "fp8",
        "dtype": "bfloat16",
        "max_model_len": 4096,
        "kv_cache_dtype": "fp8",
        "enforce_eager": True,
    }


def test_starts_waits_for_health_and_stops_the_whole_group(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    with ManagedServer(_command("--delay", "1.5", "--child"), log_path=log) as server:
        assert server.alive() and server.startup_seconds is not None
        assert server.startup_seconds >= 1.0  # it waited for /health, not for the port
        pgid = server.pgid
        assert pgid is not None
        deadline = time.monotonic() + 10
        while len(group_members(pgid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(group_members(pgid)) >= 2  # the engine and its child
    assert _wait_gone(pgid) == []
    assert "listening on" in log.read_text()


def test_sigterm_ignoring_server_is_killed(tmp_path: Path) -> None:
    server = ManagedServer(
        _command("--child", "--ignore-term"), log_path=tmp_path / "s.log", grace=1.0
    )
    server.start()
    pgid = server.pgid
    assert pgid is not None
    server.stop()
    server.stop()  # idempotent
    assert _wait_gone(pgid) == []


def test_server_that_exits_is_exit_3_with_its_log(tmp_path: Path) -> None:
    command = [sys.executable, "-c", "print('engine: no CUDA device found'); raise SystemExit(3)"]
    with pytest.raises(ModelLoadError) as info:
        ManagedServer(command, log_path=tmp_path / "s.log").start()
    line = info.value.format_line()
    assert info.value.exit_code == ExitCode.INTERNAL_ERROR and "\n" not in line
    assert "exited with code 3" in line and "no CUDA device found" in line


def test_never_healthy_is_exit_3_and_leaves_nothing(tmp_path: Path) -> None:
    server = ManagedServer(
        _command("--delay", "1000", "--child"), log_path=tmp_path / "s.log", startup_timeout=2.0
    )
    with pytest.raises(ModelLoadError) as info:
        server.start()
    assert "did not become healthy within 2s" in info.value.format_line()
    assert server.pgid is not None and _wait_gone(server.pgid) == []


def test_server_killed_mid_run(tmp_path: Path, tiny_model_dir: Path) -> None:
    """A server that dies during a load run: one line naming the signal, exit 3, no orphan."""
    engine = EngineSettings(serve=" ".join(_command("--child")), request_timeout_s=30)
    spec = ModelSpec.parse(str(tiny_model_dir))
    with (
        pytest.raises(ModelLoadError) as info,
        open_engine(spec, engine, log_dir=tmp_path) as backend,
    ):
        assert isinstance(backend, HTTPBackend)
        assert backend.provenance().serve_command[1] == ENGINE
        assert backend.connect().model == "stand-in"
        server_pid = _leader(tmp_path)
        threading.Timer(1.0, os.kill, (server_pid, signal.SIGKILL)).start()
        backend.stream_timings([[1, 2, 3]] * 4, new_tokens=200, max_concurrency=2)
    line = info.value.format_line()
    assert info.value.exit_code == ExitCode.INTERNAL_ERROR and "\n" not in line
    assert "killed by signal 9" in line
    assert _wait_gone(server_pid) == []  # the leader's pid is the group id


def _leader(log_dir: Path) -> int:
    """Pid of the stand-in engine started by open_engine (its command names ENGINE)."""
    import psutil

    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmd = proc.info["cmdline"] or []
        if ENGINE in cmd and os.getpgid(proc.info["pid"]) == proc.info["pid"]:
            return int(proc.info["pid"])
    raise AssertionError("the engine process was not found")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_to_gate_stops_the_server(tmp_path: Path, sig: signal.Signals) -> None:
    """SIGTERM or Ctrl-C (SIGINT) to the gate process: its server group is stopped too."""
    script = textwrap.dedent(
        f"""
        import time
        from pathlib import Path
        from gate.engines.serve import ManagedServer
        with ManagedServer({_command("--child")!r}, log_path=Path({str(tmp_path)!r}) / "s.log") as s:
            print(s.pgid, flush=True)
            time.sleep(600)
        """
    )
    gate = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=REPO,
        env={**os.environ, "GATE_PROGRESS": "off"},
    )
    try:
        assert gate.stdout is not None
        pgid = int(gate.stdout.readline())
        assert group_members(pgid)
        gate.send_signal(sig)
        gate.wait(timeout=60)
    finally:
        if gate.poll() is None:
            gate.kill()
    assert _wait_gone(pgid) == []


def test_log_tail_quotes_error_lines_not_warnings(tmp_path: Path) -> None:
    from gate.engines.serve import tail_lines

    log = tmp_path / "server.log"
    log.write_text(
        "INFO starting\n"
        "(APIServer) WARNING ulimit: failed to automatically increase\n"
        "RuntimeError: Worker failed: FP8 KV cache needs AVX-512\n"
        "INFO shutting down\n"
        "UserWarning: leaked shared_memory objects\n"
    )
    assert tail_lines(log) == ["RuntimeError: Worker failed: FP8 KV cache needs AVX-512"]
    quiet = tmp_path / "quiet.log"
    quiet.write_text("a\nb\n\nc\nd\n")
    assert tail_lines(quiet) == ["b", "c", "d"]
    assert tail_lines(tmp_path / "missing.log") == []


def test_not_enough_free_memory_names_the_memory_setting(tmp_path: Path) -> None:
    """vLLM 0.32's CPU worker refuses to start when less RAM is free than it reserves
    (vllm/v1/worker/cpu_worker.py); gate's line names the setting that fixes it."""
    refusal = (
        "ValueError: Available memory on node 0 (14.1/22.9 GiB) on startup is less than "
        "desired CPU memory utilization (0.92, 21.1 GiB). On the CPU backend, the "
        "`--gpu-memory-utilization` flag controls the fraction of CPU memory reserved"
    )
    command = [sys.executable, "-c", f"print({refusal!r}); raise SystemExit(1)"]
    with pytest.raises(ModelLoadError) as info:
        ManagedServer(command, log_path=tmp_path / "s.log").start()
    line = info.value.format_line()
    assert info.value.exit_code == ExitCode.INTERNAL_ERROR and "\n" not in line
    assert "--gpu-memory-utilization" in line and "VLLM_CPU_KVCACHE_SPACE" in line
    assert "less than desired CPU memory utilization" in line  # the engine's own words

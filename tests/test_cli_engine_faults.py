"""``gate run --serve/--endpoint`` faults through the real CLI (no engine needed).

Each fault is one clear line and the documented exit code, and the server that
gate started is gone afterwards: an endpoint nobody listens on (exit 3), a
server command that exits at once (exit 3, the last lines of its log quoted),
one that never answers ``/health`` (exit 3 after the startup timeout, its
process group stopped), bad engine options (exit 4 from ``--dry-run``, nothing
started). The real engine (vLLM) is in tests/test_engine_cli.py.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import uuid
from pathlib import Path

import psutil
import pytest

from gate.engines.serve import free_port
from gate.errors import ExitCode
from tests.cli_support import GateRun, run_gate

pytestmark = pytest.mark.slow


def _gate(cwd: Path, *args: str) -> GateRun:
    return run_gate(*args, cwd=cwd)


def _processes_with(marker: str) -> list[int]:
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        if any(marker in part for part in proc.info["cmdline"] or ()):
            found.append(int(proc.info["pid"]))
    return found


def _error_lines(done: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in (done.stdout + done.stderr).splitlines() if "gate: error:" in line]


RUN = ("run", "--candidate", "demo", "--against", "fp32", "--tiers", "fidelity")


def test_unreachable_endpoint_is_exit_3_with_one_line(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    done = _gate(tmp_path, *RUN, "--endpoint", url, "--json", str(tmp_path / "r.json"))
    assert done.returncode == ExitCode.INTERNAL_ERROR, done.stdout + done.stderr
    errors = _error_lines(done)
    assert errors and url.removesuffix("/v1") in errors[0]
    assert "Traceback" not in done.stdout + done.stderr


def test_server_that_exits_at_once_is_exit_3_with_its_log_tail(tmp_path: Path) -> None:
    script = "import sys; print('RuntimeError: no device for the engine'); sys.exit(2)"
    command = shlex.join([sys.executable, "-c", script])
    log = tmp_path / "srv.log"
    done = _gate(tmp_path, *RUN, "--serve", command, "--server-log", str(log))
    assert done.returncode == ExitCode.INTERNAL_ERROR, done.stdout + done.stderr
    errors = _error_lines(done)
    assert errors and "exited with code 2" in errors[0]
    assert "no device for the engine" in errors[0]
    assert str(log) in (done.stdout + done.stderr).replace("\n", "")  # the console may wrap
    assert "Traceback" not in done.stdout + done.stderr
    assert "no device for the engine" in log.read_text()


def test_server_never_healthy_is_stopped_and_exit_3(tmp_path: Path) -> None:
    marker = f"gate-test-{uuid.uuid4().hex}"
    script = f"import time; print('loading {marker}', flush=True); time.sleep(600)"
    command = shlex.join([sys.executable, "-c", script])
    done = _gate(
        tmp_path,
        *RUN,
        "--serve",
        command,
        "--startup-timeout",
        "3",
        "--json",
        str(tmp_path / "out" / "r.json"),
    )
    assert done.returncode == ExitCode.INTERNAL_ERROR, done.stdout + done.stderr
    errors = _error_lines(done)
    assert errors and "did not become healthy within 3s" in errors[0]
    assert _processes_with(marker) == []  # no orphan: the whole group was stopped
    # the log is kept beside the results JSON
    assert marker in (tmp_path / "out" / "r.server.log").read_text()


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("--serve", "no-such-engine-binary --model x"), "was not found"),
        (("--max-concurrency", "4"), "exactly one of serve and endpoint"),
        (("--endpoint", "http://127.0.0.1:1/v1", "--serve", "x"), "exactly one"),
        (("--endpoint", "http://127.0.0.1:1/v1", "--api-key-env", "GATE_NO_SUCH_KEY"), "not set"),
        (("--endpoint", "http://127.0.0.1:1/v1", "--recipe", "bnb-nf4"), "served build"),
        (("--endpoint", "ftp://host/v1"), "endpoint"),
    ],
)
def test_bad_engine_options_fail_the_dry_run(
    tmp_path: Path, args: tuple[str, ...], fragment: str
) -> None:
    done = _gate(tmp_path, *RUN, *args, "--dry-run")
    assert done.returncode == ExitCode.USAGE_ERROR, done.stdout + done.stderr
    errors = _error_lines(done)
    assert len(errors) == 1 and fragment in errors[0], errors
    assert "Traceback" not in done.stdout + done.stderr


def test_dry_run_names_the_engine_and_starts_nothing(tmp_path: Path) -> None:
    marker = f"gate-test-{uuid.uuid4().hex}"
    command = shlex.join([sys.executable, "-c", f"print('{marker}')"])
    config = tmp_path / "gate.toml"
    config.write_text(
        "[[candidates]]\n"
        'name = "served"\n'
        'model = "demo"\n'
        'against = ["fp32"]\n'
        "[candidates.engine]\n"
        f"serve = {json.dumps(command)}\n"
        "max_concurrency = 4\n"
        f"baseline_endpoint = 'http://127.0.0.1:{free_port()}/v1'\n"
    )
    done = _gate(tmp_path, "run", "--config", str(config), "--dry-run")
    assert done.returncode == ExitCode.OK, done.stdout + done.stderr
    assert f"engine:     serve {command}" in done.stdout
    assert "baseline engine (paired latency)" in done.stdout
    assert not list(tmp_path.glob("*.log"))


#: A stand-in OpenAI server whose tokenizer differs from the demo model's: it is
#: healthy and lists a model, but /tokenize answers other ids.
OTHER_TOKENIZER_SERVER = """
import json, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

port = int(sys.argv[sys.argv.index("--port") + 1])

class Handler(BaseHTTPRequestHandler):
    def _send(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/health":
            self._send(200, {})
        elif self.path == "/v1/models":
            self._send(200, {"data": [{"id": "demo", "owned_by": "stand-in"}]})
        elif self.path == "/version":
            self._send(200, {"version": "0"})
        else:
            self._send(404, {"error": {"message": "not found"}})

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.path == "/tokenize":
            self._send(200, {"tokens": [5, 6, 7], "count": 3})
        else:
            self._send(404, {"error": {"message": "not found"}})

    def log_message(self, *args):
        pass

print("MARKER serving", flush=True)
ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
"""


def test_server_with_another_tokenizer_is_refused_exit_4(tmp_path: Path) -> None:
    marker = f"gate-test-{uuid.uuid4().hex}"
    script = tmp_path / f"{marker}.py"
    script.write_text(OTHER_TOKENIZER_SERVER.replace("MARKER", marker))
    done = _gate(tmp_path, *RUN, "--serve", shlex.join([sys.executable, str(script)]))
    assert done.returncode == ExitCode.USAGE_ERROR, done.stdout + done.stderr
    errors = _error_lines(done)
    assert errors and "tokenizer differs" in errors[0]
    assert "Traceback" not in done.stdout + done.stderr
    assert _processes_with(marker) == []  # the server gate started is stopped


#: A stand-in server that is healthy but never answers a completion (no /tokenize, so
#: gate's tokenizer probe goes through a completion and waits).
HANGING_SERVER = OTHER_TOKENIZER_SERVER.replace(
    """        if self.path == "/tokenize":
            self._send(200, {"tokens": [5, 6, 7], "count": 3})""",
    """        if self.path == "/v1/completions":
            print("MARKER request", flush=True)
            import time
            time.sleep(3600)""",
)


def test_ctrl_c_stops_the_server_gate_started(tmp_path: Path) -> None:
    import signal
    import time

    marker = f"gate-test-{uuid.uuid4().hex}"
    script = tmp_path / f"{marker}.py"
    script.write_text(HANGING_SERVER.replace("MARKER", marker))
    assert "time.sleep(3600)" in script.read_text()
    log = tmp_path / "server.log"
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", GATE_PROGRESS="plain")
    command = shlex.join([sys.executable, str(script)])
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from gate.cli import main; main()",
            *RUN,
            "--serve",
            command,
            "--server-log",
            str(log),
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 600  # a guard, not a speed check
        while f"{marker} request" not in (log.read_text() if log.exists() else ""):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "gate never sent a request"
            time.sleep(0.5)
        assert _processes_with(marker)  # the server runs while gate waits for it
        proc.send_signal(signal.SIGINT)  # Ctrl-C reaches gate only: the server has its own group
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == ExitCode.INTERRUPTED, out + err
    assert "Traceback" not in out + err
    assert _processes_with(marker) == []


def test_engine_table_of_gate_toml_reaches_the_session(tmp_path: Path) -> None:
    """``[candidates.engine]`` starts the candidate's server (here one with another tokenizer)."""
    marker = f"gate-test-{uuid.uuid4().hex}"
    script = tmp_path / f"{marker}.py"
    script.write_text(OTHER_TOKENIZER_SERVER.replace("MARKER", marker))
    config = tmp_path / "gate.toml"
    config.write_text(
        "[[candidates]]\n"
        'name = "served"\n'
        'model = "demo"\n'
        'against = ["fp32"]\n'
        'tiers = ["fidelity"]\n'
        "[candidates.engine]\n"
        f"serve = {json.dumps(shlex.join([sys.executable, str(script)]))}\n"
        'server_log = "logs/served.log"\n'
    )
    done = _gate(tmp_path, "run", "--config", str(config))
    assert done.returncode == ExitCode.USAGE_ERROR, done.stdout + done.stderr
    assert "tokenizer differs" in done.stdout + done.stderr
    assert f"{marker} serving" in (tmp_path / "logs" / "served.log").read_text()
    assert _processes_with(marker) == []

"""A third serving engine added from outside gate: one module, registered by entry point.

The "quirky" engine is a small real HTTP server (below) that serves the demo
model through gate's in-process backend with field names of its own
(tests/fakes/quirky_dialect.py's docstring): ids under ``output_ids``, its own
usage keys, scoring asked as ``score_prompt`` and answered as ``prompt_scores``.
Its dialect is that one file, copied into a directory with a ``dist-info`` whose
``entry_points.txt`` registers it in the ``gate.engines`` group, the directory
put on ``sys.path``: what installing an engine package does. No file of
``gate/`` names it.

Without the entry point gate speaks to the server as a generic OpenAI server
and cannot score through it (exit 4). With it, ``gate baseline record`` and
``gate run --endpoint`` gate the served demo model as a user would: the same
build is approved, the demo with two of its four layers dropped is blocked, and
the provenance names the engine and its scoring.
"""

from __future__ import annotations

import json
import shutil
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gate.engines import registry
from gate.engines.client import EndpointSettings
from gate.engines.http import HTTPBackend
from gate.errors import ConfigError
from gate.models.backends.base import ScoreRequest
from gate.models.backends.hf import HFBackend
from gate.models.model_spec import ModelSpec

pytestmark = pytest.mark.slow

DIALECT_SOURCE = Path(__file__).parent / "fakes" / "quirky_dialect.py"


class QuirkyServer:
    """The quirky engine serving ``backend`` on 127.0.0.1 (see the module docstring)."""

    def __init__(self, backend: HFBackend) -> None:
        self.backend = backend
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def __enter__(self) -> QuirkyServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def scores(self, prompt: list[int], k: int) -> list[list[list[float]] | None]:
        """Per position: ``None`` for the first, else the top ``k`` ``[id, logprob]`` pairs
        and the position's own token, from the model's whole log-prob row."""
        with self._lock:
            (scored,) = self.backend.score(
                [ScoreRequest(prompt[:1], prompt[1:])], top_k=1, full=True, batch_size=1
            )
        assert scored.full_logprobs is not None
        rows = np.asarray(scored.full_logprobs, dtype=np.float64)
        out: list[list[list[float]] | None] = [None]
        for j in range(1, len(prompt)):
            row = rows[j - 1]
            top = np.argsort(-row, kind="stable")[:k].tolist()
            ids = [*top, *([prompt[j]] if prompt[j] not in top else [])]
            out.append([[int(i), float(row[i])] for i in ids])
        return out

    def generate(self, prompt: list[int], n: int, exact: bool) -> list[int]:
        with self._lock:
            (ids,) = self.backend.generate([prompt], max_new_tokens=n, batch_size=1)
        if exact:  # a stream of exactly n ids, EOS ignored
            ids = [t for t in ids if t not in self.backend.eos_ids] or [10]
            ids = (ids * n)[:n]
        return ids

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, payload: Any) -> None:
                body = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                if self.path == "/health":
                    self._send(200, {})
                elif self.path == "/v1/models":
                    card = {"id": "quirky-demo", "owned_by": "quirky"}
                    self._send(200, {"object": "list", "data": [card]})
                else:
                    self._send(404, {"error": {"message": "Not Found"}})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                server.requests.append(body)
                if self.path == "/tokenize":
                    if "messages" in body:
                        ids = server.backend.encode_prompt(body["messages"][0]["content"])
                    else:
                        ids = server.backend.encode_text(body["prompt"])
                    self._send(200, {"tokens": ids})
                    return
                if self.path != "/v1/completions":
                    self._send(404, {"error": {"message": "Not Found"}})
                    return
                prompt = [int(t) for t in body["prompt"]]
                n = int(body.get("max_tokens") or 16)
                if body.get("stream"):
                    self._stream(prompt, server.generate(prompt, n, True))
                    return
                choice: dict[str, Any] = {"index": 0}
                if "score_prompt" in body:
                    choice["prompt_scores"] = server.scores(prompt, int(body["score_prompt"]))
                ids = server.generate(prompt, n, bool(body.get("ignore_eos")))
                choice["output_ids"] = ids
                usage = {"output_tokens": len(ids), "input_tokens": len(prompt)}
                self._send(200, {"choices": [choice], "usage": usage})

            def _stream(self, prompt: list[int], ids: list[int]) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                for token in ids:
                    event = {"choices": [{"index": 0, "output_ids": [token]}]}
                    self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
                    self.wfile.flush()
                usage = {"output_tokens": len(ids), "input_tokens": len(prompt)}
                self.wfile.write(
                    f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n".encode()
                )
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()

        return Handler


@pytest.fixture
def quirky_installed(tmp_path: Path) -> Iterator[Path]:
    """The quirky dialect installed as a package would be: its one module and a dist-info
    with the ``gate.engines`` entry point, in a directory on ``sys.path``."""
    site = tmp_path / "site"
    info = site / "quirky_engine-1.0.dist-info"
    info.mkdir(parents=True)
    shutil.copy(DIALECT_SOURCE, site / "quirky_engine.py")
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: quirky-engine\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[gate.engines]\nquirky = quirky_engine:QuirkyDialect\n")
    sys.path.insert(0, str(site))
    registry.refresh()
    try:
        yield site
    finally:
        sys.path.remove(str(site))
        sys.modules.pop("quirky_engine", None)
        registry.refresh()


def test_without_its_dialect_gate_cannot_score_through_the_quirky_server(
    demo_backend: HFBackend,
) -> None:
    assert "quirky" not in registry.engine_names()
    with QuirkyServer(demo_backend) as server:
        backend = HTTPBackend(EndpointSettings(server.url), ModelSpec.parse("demo"))
        assert backend.connect().engine == "quirky"  # the generic dialect: owned_by
        assert type(backend.dialect).__name__ == "OpenAIDialect"
        with pytest.raises(ConfigError, match="no log-probs of prompt tokens"):
            backend.score([ScoreRequest([1, 2, 3], [4, 5])], top_k=2)


def test_a_dialect_installed_by_entry_point_speaks_to_its_server(
    quirky_installed: Path, demo_backend: HFBackend
) -> None:
    """Scores, greedy ids and streams through the quirky dialect match the in-process model."""
    assert registry.engine_names()[-1] == "quirky"
    assert registry.dialect_class("quirky").__module__ == "quirky_engine"
    from gate.engines.secrets import mask_argv

    assert mask_argv(["quirky-server", "--quirky-license", "L1"]) == [
        "quirky-server",
        "--quirky-license",
        "***",
    ]
    prompt = demo_backend.encode_prompt("What is the capital of France?")
    with QuirkyServer(demo_backend) as server:
        backend = HTTPBackend(EndpointSettings(server.url), ModelSpec.parse("demo"))
        assert type(backend.spoken).__module__ == "quirky_engine"
        request = ScoreRequest(prompt, [10, 20, 30])
        (served,) = backend.score([request], top_k=4)
        (local,) = demo_backend.score([request], top_k=4)
        assert np.allclose(served.target_logprobs, local.target_logprobs, atol=1e-4)
        assert backend.scoring_api == "score_prompt"
        assert backend.generate([prompt], max_new_tokens=8) == demo_backend.generate(
            [prompt], max_new_tokens=8
        )
        timings, _ = backend.stream_timings([prompt, prompt], new_tokens=5)
        assert [len(t.token_times) for t in timings] == [5, 5]
        assert all(t.prompt_tokens == len(prompt) for t in timings)
        assert any("score_prompt" in body for body in server.requests)


def test_gate_records_and_gates_a_build_served_by_the_third_engine(
    quirky_installed: Path, demo_backend: HFBackend, tmp_path: Path
) -> None:
    """``gate baseline record`` and ``gate run --endpoint`` through the quirky server: the
    same build is approved (exit 0), two of four layers dropped are blocked (exit 1)."""
    from gate.models.backends.loading import load_backend
    from tests.cli_support import run_gate

    config = tmp_path / "gate.toml"
    config.write_text("[tiers.fidelity]\nlimit = 8\nmax_new_tokens = 16\n")
    common = ("--tiers", "fidelity", "--config", str(config), "--store", str(tmp_path / "store"))
    with QuirkyServer(demo_backend) as server:
        recorded = run_gate(
            "baseline", "record", "--model", "demo", "--label", "quirky", *common,
            "--endpoint", server.url, cwd=tmp_path,
        )  # fmt: skip
        assert recorded.returncode == 0, recorded.stdout[-2000:] + recorded.stderr[-2000:]
        same = run_gate(
            "run", "--candidate", "demo", *common, "--json", str(tmp_path / "same.json"),
            "--endpoint", server.url, cwd=tmp_path,
        )  # fmt: skip
    assert same.returncode == 0, same.stdout[-2000:] + same.stderr[-2000:]
    approved = json.loads((tmp_path / "same.json").read_text())
    assert approved["verdict"] == "pass", approved["headline"]
    candidate = approved["candidate"]
    assert candidate["engine"] == "quirky" and candidate["scoring_api"] == "score_prompt"
    assert candidate["backend"] == "http"

    damaged = load_backend(ModelSpec.parse("demo", device="cpu"), "drop-layers:2")
    with QuirkyServer(damaged) as server:
        worse = run_gate(
            "run", "--candidate", "demo", *common, "--json", str(tmp_path / "worse.json"),
            "--endpoint", server.url, cwd=tmp_path,
        )  # fmt: skip
    assert worse.returncode == 1, worse.stdout[-2000:] + worse.stderr[-2000:]
    results = json.loads((tmp_path / "worse.json").read_text())
    assert results["candidate"]["engine"] == "quirky"
    assert results["verdict"] == "block"
    cga = next(m for m in results["metrics"] if m["name"] == "fidelity.cga")
    assert cga["severity"] == "critical" and cga["value"] < 0.5 < cga["baseline_value"]

"""A small OpenAI-compatible server on 127.0.0.1 for tests: real scores, faults on demand.

:class:`FakeOpenAIServer` answers the routes gate's HTTP backend uses
(``/health``, ``/version``, ``/v1/models``, ``/tokenize``, ``/v1/completions``
plain and streamed) in vLLM's formats. Scores and greedy tokens come from a
real in-process backend (the tiny model), so what the HTTP backend parses can
be compared with the in-process numbers; only the transport is a stand-in.

``fault`` picks a failure mode:

* ``"503"`` / ``"500"``: every completion is answered with that status;
* ``"429-once"``: the first completion gets 429 with ``Retry-After: 0``;
* ``"drop-once"``: the first completion's connection is closed without an answer;
* ``"hang"``: completions never answer (until the server stops);
* ``"garbage"``: completions answer 200 with an HTML page;
* ``"nan"``: log-prob position 2 of every scoring answer is ``null`` (vLLM's JSON for NaN);
* ``"merge"``: a stream carries two tokens in some chunks (token counting).

``latency`` (seconds) delays every completion's answer, as an engine's fixed
per-request cost would (the replica benchmark); ``version`` is what ``/version``
says; ``die_after=N`` makes the server die at its ``N + 1``-th completion: that
request's connection is closed unanswered and the server stops listening (a
replica killed mid-run); ``merged_streams=N`` sends the first ``N`` streamed
answers in one chunk each (an engine whose reader fell behind merges a
stream's deltas: no decoding step can be timed from it).

``prompt_logprobs=False`` ignores that field (a server with only the legacy
``echo`` fields); ``echo=False`` as well leaves no way to score prompts.
``tokenize`` is ``"ok"``, ``"absent"`` (404) or ``"wrong"`` (ids shifted by one).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

from gate.models.backends.base import ScoreRequest
from gate.models.backends.hf import HFBackend


class _HangUpTolerantServer(ThreadingHTTPServer):
    """A client that hangs up before its answer is written (the tests' timeouts, killed
    runs and interrupts) is an expected event here, not an error to print with a
    traceback; any other error still is."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            return
        super().handle_error(request, client_address)


class FakeOpenAIServer:
    """Serve ``backend`` the way vLLM's OpenAI server does (see the module docstring)."""

    def __init__(
        self,
        backend: HFBackend,
        *,
        model_name: str = "fake-model",
        prompt_logprobs: bool = True,
        echo: bool = True,
        tokenize: str = "ok",
        max_logprobs: int = 64,
        fault: str | None = None,
        api_key: str | None = None,
        latency: float = 0.0,
        version: str = "0.0-fake",
        die_after: int | None = None,
        merged_streams: int = 0,
    ) -> None:
        self.backend = backend
        self.latency = latency
        self.version = version
        self.die_after = die_after
        self.merged_streams = merged_streams
        self.streams = 0
        self.dead = threading.Event()
        self.model_name = model_name
        self.prompt_logprobs = prompt_logprobs
        self.echo = echo
        self.tokenize = tokenize
        self.max_logprobs = max_logprobs
        self.fault = fault
        self.api_key = api_key
        self.completions = 0
        self.bodies: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._model_lock = threading.Lock()
        self._stopping = threading.Event()
        self._closed = False
        self._httpd = _HangUpTolerantServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        """The OpenAI base URL (``http://127.0.0.1:PORT/v1``)."""
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def __enter__(self) -> FakeOpenAIServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopping.set()
        self._stop_listening()

    def _stop_listening(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def die(self) -> None:
        """Stop answering: no new connection is accepted (a killed server)."""
        self.dead.set()
        threading.Thread(target=self._stop_listening, daemon=True).start()

    # -- model answers ------------------------------------------------------------

    def _rows(self, prompt: list[int]) -> np.ndarray:
        """Full log-prob rows of positions 1..n-1 of ``prompt`` (teacher-forced)."""
        with self._model_lock:
            (scores,) = self.backend.score(
                [ScoreRequest(prompt[:1], prompt[1:])], top_k=1, full=True, batch_size=1
            )
        assert scores.full_logprobs is not None
        return np.asarray(scores.full_logprobs, dtype=np.float32)

    def _generate(self, prompt: list[int], n: int, exact: bool) -> list[int]:
        with self._model_lock:
            (ids,) = self.backend.generate([prompt], max_new_tokens=n, batch_size=1)
        if exact:  # ignore_eos + min_tokens: always n tokens
            ids = [t for t in ids if t not in self.backend.eos_ids] or [10]
            ids = (ids * n)[:n]
        return ids

    def _positions(self, prompt: list[int], k: int, key: Any) -> list[dict[str, Any] | None]:
        rows = self._rows(prompt)
        out: list[dict[str, Any] | None] = [None]
        for j in range(1, len(prompt)):
            row = rows[j - 1]
            top = np.argsort(-row, kind="stable")[:k].tolist()
            ids = [*top, *([prompt[j]] if prompt[j] not in top else [])]
            entry = {key(i): float(row[i]) for i in ids}
            if self.fault == "nan" and j == 2:
                entry = dict.fromkeys(entry)
            out.append(entry)
        return out

    # -- HTTP ---------------------------------------------------------------------

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(
                self, status: int, payload: Any, headers: dict[str, str] | None = None
            ) -> None:
                body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body)

            def _error(self, status: int, message: str) -> None:
                self._send(status, {"error": {"message": message, "code": status}})

            def _authorized(self) -> bool:
                if server.api_key is None:
                    return True
                if self.headers.get("Authorization") == f"Bearer {server.api_key}":
                    return True
                self._error(401, "Unauthorized")
                return False

            def do_GET(self) -> None:
                if server.dead.is_set():  # a killed server answers nothing
                    self.close_connection = True
                    return
                if self.path == "/health":
                    self._send(200, b"")
                elif not self._authorized():
                    return
                elif self.path == "/version":
                    self._send(200, {"version": server.version})
                elif self.path == "/v1/models":
                    card = {"id": server.model_name, "owned_by": "fake", "max_model_len": 512}
                    self._send(200, {"object": "list", "data": [card]})
                else:
                    self._error(404, "Not Found")

            def do_POST(self) -> None:
                if not self._authorized():
                    return
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                if server.dead.is_set():  # a killed server answers nothing
                    self.close_connection = True
                    return
                if self.path == "/tokenize":
                    self._tokenize(body)
                elif self.path == "/v1/completions":
                    with server._lock:
                        server.completions += 1
                        server.bodies.append(body)
                        count = server.completions
                    if server.die_after is not None and count > server.die_after:
                        server.die()
                        self.close_connection = True
                        return
                    if server.latency:
                        time.sleep(server.latency)
                    if server.dead.is_set():
                        self.close_connection = True
                        return
                    self._complete(body, count)
                else:
                    self._error(404, "Not Found")

            def _tokenize(self, body: dict[str, Any]) -> None:
                if server.tokenize == "absent":
                    self._error(404, "Not Found")
                    return
                tok = server.backend.tokenizer
                if "messages" in body:
                    ids = server.backend.encode_prompt(body["messages"][0]["content"])
                else:
                    special = bool(body.get("add_special_tokens", True))
                    ids = tok(body["prompt"], add_special_tokens=special)["input_ids"]
                if server.tokenize == "wrong":
                    ids = [int(i) + 1 for i in ids]
                self._send(200, {"count": len(ids), "tokens": [int(i) for i in ids]})

            def _complete(self, body: dict[str, Any], count: int) -> None:
                fault = server.fault
                if fault in ("503", "500"):
                    self._error(int(fault), "engine overloaded" if fault == "503" else "boom")
                    return
                if fault == "429-once" and count == 1:
                    self._send(429, {"error": {"message": "slow down"}}, {"Retry-After": "0"})
                    return
                if fault == "drop-once" and count == 1:  # a stale keep-alive connection
                    self.close_connection = True
                    return
                if fault == "hang":
                    server._stopping.wait(60)
                    return
                if fault == "garbage":
                    page = b"<html><body>502 Bad Gateway</body></html>"
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(page)))
                    self.end_headers()
                    self.wfile.write(page)
                    return
                prompt = body["prompt"]
                if isinstance(prompt, str):
                    prompt = server.backend.tokenizer(prompt)["input_ids"]
                prompt = [int(t) for t in prompt]
                if body.get("stream"):
                    self._stream(body, prompt)
                    return
                choice: dict[str, Any] = {"index": 0, "finish_reason": "length"}
                k = body.get("prompt_logprobs")
                if k is not None and server.prompt_logprobs:
                    if k > server.max_logprobs:
                        self._error(
                            400,
                            f"Requested prompt logprobs of {k}, which is greater than max "
                            f"allowed: {server.max_logprobs}",
                        )
                        return
                    choice["prompt_logprobs"] = [
                        None
                        if e is None
                        else {k_: {"logprob": v, "rank": 1} for k_, v in e.items()}
                        for e in server._positions(prompt, k, str)
                    ]
                if body.get("echo") and body.get("logprobs") is not None and server.echo:
                    as_ids = bool(body.get("return_tokens_as_token_ids"))

                    def key(i: int) -> str:
                        return f"token_id:{i}" if as_ids else server.backend.tokenizer.decode([i])

                    tops = server._positions(prompt, int(body["logprobs"]), key)
                    choice["logprobs"] = {
                        "tokens": [key(t) for t in prompt],
                        "token_logprobs": [
                            None if e is None else e[key(t)]
                            for e, t in zip(tops, prompt, strict=True)
                        ],
                        "top_logprobs": tops,
                    }
                n = int(body.get("max_tokens") or 16)
                ids = server._generate(prompt, n, bool(body.get("ignore_eos")))
                choice["text"] = server.backend.decode(ids)
                if body.get("return_token_ids"):
                    choice["token_ids"] = ids
                usage = {"prompt_tokens": len(prompt), "completion_tokens": len(ids)}
                self._send(200, {"object": "text_completion", "choices": [choice], "usage": usage})

            def _stream(self, body: dict[str, Any], prompt: list[int]) -> None:
                n = int(body.get("max_tokens") or 16)
                ids = server._generate(prompt, n, bool(body.get("ignore_eos")))
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                chunks: list[list[int]] = []
                with server._lock:
                    server.streams += 1
                    whole = server.streams <= server.merged_streams
                i = len(ids) if whole else 0
                if whole:
                    chunks.append(ids)
                while i < len(ids):
                    width = 2 if server.fault == "merge" and i % 3 == 0 else 1
                    chunks.append(ids[i : i + width])
                    i += width
                for part in chunks:
                    choice: dict[str, Any] = {"index": 0, "text": server.backend.decode(part)}
                    if body.get("return_token_ids"):
                        choice["token_ids"] = part
                    self.wfile.write(f"data: {json.dumps({'choices': [choice]})}\n\n".encode())
                    self.wfile.flush()
                    time.sleep(0.002)
                usage = {"prompt_tokens": len(prompt), "completion_tokens": len(ids)}
                self.wfile.write(
                    f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n".encode()
                )
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()

        return Handler

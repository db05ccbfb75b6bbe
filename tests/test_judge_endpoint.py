"""ChatJudge: a judge behind an OpenAI-compatible chat API, against a small local HTTP server.

The server is real (``http.server`` on a free local port); the faults are what a
judge endpoint does in practice: it is down, answers garbage, or rate-limits.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from gate.engines.chat import ChatJudge
from gate.engines.client import EndpointSettings
from gate.errors import ExitCode, GateError, ModelLoadError
from gate.judge.cache import CachedJudge, JudgeCache
from gate.judge.panel import JudgeTemplates, Pair, judge_pairs
from gate.judge.protocol import Outcome
from gate.judge.template import default_template

Reply = Callable[[dict[str, object]], tuple[int, bytes, dict[str, str]]]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    reply: Reply
    in_flight: int = 0
    most_in_flight: int = 0
    requests: list[dict[str, object]]
    lock: threading.Lock


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, *args: object) -> None:  # keep the test output clean
        return

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        srv = self.server
        with srv.lock:
            srv.requests.append(body)
            srv.in_flight += 1
            srv.most_in_flight = max(srv.most_in_flight, srv.in_flight)
        try:
            time.sleep(0.02)  # let concurrent requests overlap
            status, payload, headers = srv.reply(body)
        finally:
            with srv.lock:
                srv.in_flight -= 1
        self.send_response(status)
        for key, value in {"Content-Type": "application/json", **headers}.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


@contextmanager
def serve(reply: Reply) -> Iterator[_Server]:
    server = _Server(("127.0.0.1", 0), _Handler)
    server.reply = reply
    server.requests = []
    server.lock = threading.Lock()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def completion(text: str) -> tuple[int, bytes, dict[str, str]]:
    body = {
        "choices": [{"message": {"role": "assistant", "content": text}}],
        "usage": {"prompt_tokens": 50, "completion_tokens": 1},
    }
    return 200, json.dumps(body).encode(), {}


def longer_reply_wins(body: dict[str, object]) -> tuple[int, bytes, dict[str, str]]:
    """A judge server: the longer reply wins a pairwise question; everything is valid."""
    messages = body["messages"]
    assert isinstance(messages, list)
    question = str(messages[0]["content"])
    if "Reply A:" not in question:
        return completion("valid")
    a = question.split("Reply A:\n", 1)[1].split("\n\nReply B:\n", 1)[0]
    b = question.split("\n\nReply B:\n", 1)[1].split("\n\nAnswer", 1)[0]
    return completion("A" if len(a) > len(b) else "B" if len(b) > len(a) else "tie")


def judge_at(url: str, *, concurrency: int = 4, retries: int = 2) -> ChatJudge:
    settings = EndpointSettings(
        url,
        model="judge-7b",
        max_concurrency=concurrency,
        max_retries=retries,
        retry_backoff=0.01,
        request_timeout=10,
        connect_timeout=2,
    )
    return ChatJudge(
        settings, name="remote", family="qwen", max_output_tokens=3, concurrency=concurrency
    )


TEMPLATES = JudgeTemplates(default_template("pairwise"), default_template("validity"))
PAIRS = [Pair(f"q{i}?", f"a full answer {i}", f"ans {i}") for i in range(6)]


def test_a_working_endpoint_judges_pairs_with_requests_in_flight(tmp_path: Path) -> None:
    with serve(longer_reply_wins) as server:
        judge = CachedJudge(
            judge_at(f"http://127.0.0.1:{server.server_port}/v1"), JudgeCache(tmp_path)
        )
        outcomes = judge_pairs(judge, TEMPLATES, PAIRS)
    assert [o.outcome for o in outcomes] == [Outcome.WIN] * 6
    assert judge.stats.calls == 6 * 4 and judge.stats.prompt_tokens == 50 * 24
    assert 1 < server.most_in_flight <= 4
    first = server.requests[0]
    assert first["model"] == "judge-7b" and first["max_tokens"] == 3 and first["temperature"] == 0


def test_endpoint_down_is_one_line_exit_3() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again when the block ends: nothing listens
    with pytest.raises(ModelLoadError) as info:
        judge_at(f"http://127.0.0.1:{port}/v1").ask("Which reply is better?")
    assert info.value.exit_code == ExitCode.INTERNAL_ERROR
    assert "cannot reach the endpoint" in info.value.format_line()
    assert "\n" not in info.value.format_line()


def test_garbage_answer_is_one_line_exit_3() -> None:
    garbage = serve(lambda body: (200, b"<html>gateway says hi</html>", {}))
    with garbage as server, pytest.raises(ModelLoadError, match="not JSON") as info:
        judge_at(f"http://127.0.0.1:{server.server_port}/v1").ask("q")
    assert info.value.exit_code == ExitCode.INTERNAL_ERROR


def test_json_without_a_completion_is_one_line_exit_3() -> None:
    no_completion = serve(lambda body: (200, b'{"ok": true}', {}))
    with no_completion as server, pytest.raises(ModelLoadError, match="without a chat completion"):
        judge_at(f"http://127.0.0.1:{server.server_port}/v1").ask("q")


def test_rate_limited_is_retried_then_one_line_exit_3() -> None:
    limited = (429, b'{"error": {"message": "rate limit reached"}}', {"Retry-After": "0"})
    with serve(lambda body: limited) as server:
        with pytest.raises(ModelLoadError, match=r"rate limit reached.*after 3 tries") as info:
            judge_at(f"http://127.0.0.1:{server.server_port}/v1", retries=2).ask("q")
        assert len(server.requests) == 3
    assert info.value.exit_code == ExitCode.INTERNAL_ERROR


def test_rate_limit_that_clears_is_answered() -> None:
    calls = {"n": 0}

    def reply(body: dict[str, object]) -> tuple[int, bytes, dict[str, str]]:
        calls["n"] += 1
        if calls["n"] <= 2:
            return 429, b'{"error": "slow down"}', {"Retry-After": "0"}
        return completion("tie")

    with serve(reply) as server:
        answer = judge_at(f"http://127.0.0.1:{server.server_port}/v1", concurrency=1).ask("q")
    assert answer.text == "tie" and calls["n"] == 3


def test_endpoint_judge_needs_the_served_model_name() -> None:
    with pytest.raises(GateError, match="needs the served model name"):
        ChatJudge(EndpointSettings("http://127.0.0.1:1/v1"), name="x", family="y")

"""A stand-in engine *process* for the server-lifecycle tests (no model, no torch).

Run as a script: ``python engine_process.py --port P [--delay S] [--child]
[--ignore-term]``. It answers ``/health`` with 503 for ``--delay`` seconds and
200 afterwards, lists one model, has no ``/tokenize``, and streams completions
slowly (token id 10 every 50 ms) so a test can kill it mid-stream.
``--child`` starts a sleeping child process in the same process group (as an
engine starts its workers); ``--ignore-term`` ignores SIGTERM (so only SIGKILL
stops it). ``--api-key KEY`` makes ``/v1`` answer 401 without ``Authorization:
Bearer KEY``; the process writes its arguments (the key among them) to its
log first, unmasked (vLLM prints its arguments too, masking its own keys).
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--child", action="store_true")
    parser.add_argument("--ignore-term", action="store_true")
    parser.add_argument("--api-key", default=None)
    args = parser.parse_args()
    print(f"engine: args {vars(args)}", flush=True)
    if args.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if args.child:
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    ready_at = time.monotonic() + args.delay
    print(f"engine: listening on {args.host}:{args.port}", flush=True)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a: Any) -> None:
            pass

        def _json(self, status: int, payload: Any) -> None:
            body = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _refused(self) -> bool:
            wanted = f"Bearer {args.api_key}"
            if args.api_key is None or self.headers.get("Authorization") == wanted:
                return False
            self._json(401, {"error": "Unauthorized"})
            return True

        def do_GET(self) -> None:
            if self.path.startswith("/v1") and self._refused():
                return
            if self.path == "/health":
                self._json(200 if time.monotonic() >= ready_at else 503, {})
            elif self.path == "/v1/models":
                self._json(200, {"data": [{"id": "stand-in", "owned_by": "test"}]})
            else:
                self._json(404, {"error": {"message": "Not Found"}})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
            if self._refused():
                return
            if self.path != "/v1/completions":
                self._json(404, {"error": {"message": "Not Found"}})
                return
            n = int(body.get("max_tokens", 16))
            if not body.get("stream"):
                self._json(200, {"choices": [{"text": "x", "token_ids": [10] * n}]})
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for _ in range(n):
                chunk = {"choices": [{"text": "x", "token_ids": [10]}]}
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.flush()
                time.sleep(0.05)
            self.wfile.write(b"data: [DONE]\n\n")

    server = ThreadingHTTPServer((args.host, args.port), Handler)
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()

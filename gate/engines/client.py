"""An async client for OpenAI-compatible servers: bounded, retried, one-line errors.

:class:`EndpointClient` sends JSON requests (plain or streamed as server-sent
events) with ``httpx``. Its guarantees:

* **Bounded.** Every request has a connect and a read timeout; a request is
  tried at most ``1 + max_retries`` times; :func:`gather_bounded` runs at most
  ``max_concurrency`` requests at once and stops all of them at the first
  failure. Nothing loops without a bound.
* **Retries** only where waiting can help: HTTP 429, 502, 503 and 504, and a
  connection the server dropped while it is still alive (a stale keep-alive
  connection), after ``retry_backoff * 2**attempt`` seconds (or the server's
  ``Retry-After``), capped at :data:`MAX_BACKOFF_S`. A stream is retried only
  before its first event.
* **One-line errors.** A 4xx is a :class:`~gate.errors.ConfigError` (exit 4:
  the request or the server's settings must change), with the server's own
  message and, where it is recognisable, the fix (``--max-logprobs``); a 5xx
  after the retries, a timeout, an unreachable endpoint, a dropped connection
  or an answer that is not JSON is a :class:`~gate.errors.ModelLoadError`
  (exit 3). When a ``liveness`` check is given (a server gate started), a
  connection failure first asks it whether the server died, and reports that.
* **No credential leaves the process.** The API key is read from the
  environment variable the settings name, sent as a bearer token, and never
  stored in settings, provenance or messages; :func:`public_url` strips any
  user-info or query from an URL before it is shown.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar
from urllib.parse import urlsplit, urlunsplit

from gate import progress
from gate.errors import ConfigError, GateError, ModelLoadError

T = TypeVar("T")

#: HTTP statuses that are retried (the server is busy or restarting).
RETRY_STATUSES = frozenset({429, 502, 503, 504})
#: Longest wait between two tries of one request (seconds).
MAX_BACKOFF_S = 30.0
#: Requests in flight at once when nothing says otherwise.
DEFAULT_MAX_CONCURRENCY = 8
#: Seconds to wait for a response when nothing says otherwise.
DEFAULT_REQUEST_TIMEOUT_S = 300.0
#: Log-probs asked per position when a caller wants full rows: twice a reference pack's k.
DEFAULT_SERVED_LOGPROBS = 64
#: Characters of a server message quoted in an error.
_QUOTE = 240

ScoringApi = Literal["auto", "prompt_logprobs", "echo", "forced", "positions"]
#: Every ``scoring_api`` (:mod:`gate.engines.http`; ``forced`` and ``positions`` are
#: llama-server's, :mod:`gate.engines.llama_cpp.server`).
SCORING_APIS: tuple[str, ...] = ("auto", "prompt_logprobs", "echo", "forced", "positions")
#: A check that returns an error when the server behind the endpoint has died.
Liveness = Callable[[], GateError | None]


def public_url(url: str) -> str:
    """``url`` without user-info, query or fragment (safe for reports and logs)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def _split_base(url: str) -> tuple[str, str]:
    """``(root, api base)`` of an endpoint URL: ``http://h:p`` and ``http://h:p/v1``."""
    text = url.strip().rstrip("/")
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(
            f"endpoint {public_url(text)!r} is not an http(s) URL",
            "give the server's base URL, e.g. http://127.0.0.1:8000/v1",
        )
    path = parts.path.rstrip("/")
    if not path.endswith("/v1"):
        path = path + "/v1"
    root_path = path[: -len("/v1")]
    root = urlunsplit((parts.scheme, parts.netloc, root_path, "", ""))
    base = urlunsplit((parts.scheme, parts.netloc, path, "", ""))
    return root, base


@dataclass(frozen=True)
class EndpointSettings:
    """Where the server is and how to talk to it.

    ``url`` is the OpenAI base URL (``http://host:8000/v1``; ``/v1`` is added
    when missing). ``model`` is the served model name (None: the first model
    ``/v1/models`` lists). ``api_key_env`` names the environment variable that
    holds the API key (the key itself is never stored here).
    """

    url: str
    model: str | None = None
    api_key_env: str | None = None
    #: Requests in flight at once (engines batch concurrent requests).
    max_concurrency: int = DEFAULT_MAX_CONCURRENCY
    #: Seconds to wait for a response (or for the next chunk of a stream).
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT_S
    #: Seconds to wait for a connection.
    connect_timeout: float = 10.0
    #: Extra tries of a request answered 429/502/503/504.
    max_retries: int = 4
    #: First wait before a retry (doubles each time).
    retry_backoff: float = 0.5
    #: Top-k asked per position when the caller wants full rows (``score(full=True)``);
    #: twice the reference pack's k, so the returned ids cover the pack's top-k set.
    full_top_k: int = DEFAULT_SERVED_LOGPROBS
    #: ``prompt_logprobs`` (vLLM, SGLang), ``echo`` (legacy), ``forced`` or ``positions``
    #: (llama-server), or ``auto``: llama-server's ``forced``, else the first two in that order.
    scoring_api: ScoringApi = "auto"

    def __post_init__(self) -> None:
        _split_base(self.url)
        if self.max_concurrency < 1:
            raise ConfigError("max_concurrency must be >= 1")
        if self.request_timeout <= 0 or self.connect_timeout <= 0:
            raise ConfigError("endpoint timeouts must be positive")
        if self.max_retries < 0 or self.retry_backoff < 0:
            raise ConfigError("max_retries and retry_backoff must be >= 0")
        if self.full_top_k < 1:
            raise ConfigError("full_top_k must be >= 1")
        if self.scoring_api not in SCORING_APIS:
            raise ConfigError(
                f"unknown scoring_api {self.scoring_api!r}", f"use one of {', '.join(SCORING_APIS)}"
            )
        if self.api_key_env is not None and not re.fullmatch(
            r"[A-Za-z_][A-Za-z0-9_]*", self.api_key_env
        ):
            raise ConfigError(
                f"api_key_env {self.api_key_env!r} is not an environment variable name",
                "name the variable that holds the key (e.g. GATE_API_KEY), not the key itself",
            )

    @property
    def root_url(self) -> str:
        """The server root (``/health``, ``/version``, ``/tokenize`` live here)."""
        return _split_base(self.url)[0]

    @property
    def base_url(self) -> str:
        """The OpenAI base URL, ending in ``/v1``."""
        return _split_base(self.url)[1]

    def api_key(self) -> str | None:
        """The key from ``$api_key_env`` (ConfigError when the variable is named but unset)."""
        if self.api_key_env is None:
            return None
        key = os.environ.get(self.api_key_env)
        if not key:
            raise ConfigError(
                f"environment variable {self.api_key_env} (the endpoint's API key) is not set",
                f"export {self.api_key_env}=... before running gate",
            )
        return key


def server_message(body: bytes | str) -> str:
    """The human message of an error body (OpenAI/vLLM ``{"error": {"message"}}``, FastAPI ``detail``)."""
    text = body.decode("utf-8", errors="replace") if isinstance(body, bytes) else body
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    message: Any = None
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict):
            message = error.get("message")
        elif isinstance(error, str):
            message = error
        message = message or data.get("message") or data.get("detail")
    if message is None:
        message = text
    if not isinstance(message, str):
        message = json.dumps(message)
    line = " ".join(message.split())
    return line[:_QUOTE] + ("..." if len(line) > _QUOTE else "")


_LOGPROBS_LIMIT = re.compile(
    r"(?P<what>prompt[_ ]logprobs|logprobs)\D{0,40}?(?P<asked>\d+)\D{1,60}?max\D{0,30}?(?P<max>\d+)",
    re.IGNORECASE,
)


class LogprobsLimitError(ConfigError):
    """The server caps the log-probs per position below what was asked (``--max-logprobs``)."""


def http_error(status: int, body: bytes | str, url: str) -> GateError:
    """The one-line error for an HTTP failure ``status`` from ``url``."""
    message = server_message(body)
    where = public_url(url)
    if status in (401, 403):
        return ConfigError(
            f"{where} refused the request as unauthorized (HTTP {status}: {message})",
            "put the API key in the environment variable named by api_key_env",
        )
    if status == 404:
        if "model" in message.lower():
            return ConfigError(
                f"the server does not serve the requested model (HTTP 404: {message})",
                "set the served model name, or leave it unset to use the one the server lists",
            )
        return ConfigError(
            f"{where} does not exist on the server (HTTP 404)",
            "the endpoint must be the OpenAI base URL, e.g. http://host:8000/v1",
        )
    if 400 <= status < 500:
        limit = _LOGPROBS_LIMIT.search(message)
        if limit:
            asked, most = limit.group("asked"), limit.group("max")
            field = "prompt_logprobs" if "prompt" in limit.group("what").lower() else "logprobs"
            return LogprobsLimitError(
                f"the server refuses {field} above {most} (asked for {asked})",
                f"start it with --max-logprobs {asked}",
            )
        return ConfigError(f"the server refused the request (HTTP {status}: {message})")
    return ModelLoadError(f"the server failed the request (HTTP {status}: {message})")


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def _loads(raw: bytes, url: str) -> Any:
    """Parse JSON (NaN/Infinity literals allowed); anything else is a ModelLoadError."""
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        head = raw[:60].decode("utf-8", errors="replace")
        raise ModelLoadError(
            f"{public_url(url)} answered with something that is not JSON ({head!r})",
            "the endpoint must be an OpenAI-compatible server",
        ) from None


def counted(factory: Callable[[], Awaitable[T]]) -> Callable[[], Awaitable[T]]:
    """``factory`` whose awaitable, once done, counts one item of the current progress task
    (:func:`gate.progress.advance`): the request loops' progress."""

    async def run() -> T:
        result = await factory()
        progress.advance(1)
        return result

    return run


async def gather_bounded(factories: Sequence[Callable[[], Awaitable[T]]], limit: int) -> list[T]:
    """Run the awaitables made by ``factories`` with at most ``limit`` at once, results in order.

    The first exception cancels everything still running and is raised.
    """
    if not factories:
        return []
    semaphore = asyncio.Semaphore(max(1, limit))

    async def one(factory: Callable[[], Awaitable[T]]) -> T:
        async with semaphore:
            return await factory()

    tasks = [asyncio.ensure_future(one(f)) for f in factories]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for task in tasks:
            if task.done() and not task.cancelled() and task.exception() is not None:
                exc = task.exception()
                assert exc is not None
                raise exc
        return [t.result() for t in tasks]
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class EndpointClient:
    """One ``httpx.AsyncClient`` to an endpoint; create it inside the event loop that uses it."""

    def __init__(self, settings: EndpointSettings, *, liveness: Liveness | None = None) -> None:
        import httpx

        self.settings = settings
        self.liveness = liveness
        headers = {"Accept": "application/json"}
        key = settings.api_key()
        if key:
            headers["Authorization"] = f"Bearer {key}"
        limits = httpx.Limits(
            max_connections=settings.max_concurrency + 4,
            max_keepalive_connections=settings.max_concurrency + 4,
        )
        self._client = httpx.AsyncClient(
            headers=headers,
            timeout=httpx.Timeout(settings.request_timeout, connect=settings.connect_timeout),
            limits=limits,
            trust_env=False,
        )

    async def __aenter__(self) -> EndpointClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._client.aclose()

    def url(self, path: str, *, root: bool = False) -> str:
        """Absolute URL of ``path`` under the API base (or the server root)."""
        base = self.settings.root_url if root else self.settings.base_url
        return base + path

    # -- failures -------------------------------------------------------------

    async def _dead_server(self) -> GateError | None:
        """The liveness check's error, giving a dying server a moment to exit."""
        if self.liveness is None:
            return None
        for _ in range(20):
            error = self.liveness()
            if error is not None:
                return error
            await asyncio.sleep(0.1)
        return None

    async def _transport_error(self, exc: Exception, url: str) -> GateError:
        import httpx

        dead = await self._dead_server()
        if dead is not None:
            return dead
        where = public_url(url)
        if isinstance(exc, httpx.TimeoutException):
            kind = "connect" if isinstance(exc, httpx.ConnectTimeout) else "response"
            limit = (
                self.settings.connect_timeout
                if kind == "connect"
                else self.settings.request_timeout
            )
            return ModelLoadError(
                f"{where}: no {kind} within {limit:g}s (the request timed out)",
                "check that the server is up and not overloaded, or raise request_timeout",
            )
        if isinstance(exc, httpx.ConnectError):
            return ModelLoadError(
                f"cannot reach the endpoint {where} ({_reason(exc)})",
                "check the endpoint URL and that the server is running",
            )
        return ModelLoadError(
            f"the connection to {where} failed mid-request ({_reason(exc)})",
            "check the server (it may have crashed or restarted)",
        )

    async def _dropped_by_a_live_server(self, exc: Exception) -> bool:
        """Whether ``exc`` is a connection the server dropped (a stale keep-alive) while it lives.

        Such a request never reached the engine or can be sent again (scoring and
        greedy generation have no side effects), so it is retried like a 503.
        Refused connections and timeouts are not.
        """
        import httpx

        dropped = (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError)
        return isinstance(exc, dropped) and await self._dead_server() is None

    async def _backoff(self, attempt: int, retry_after: float | None) -> None:
        wait = self.settings.retry_backoff * (2**attempt)
        if retry_after is not None:
            wait = max(wait, retry_after)
        await asyncio.sleep(min(wait, MAX_BACKOFF_S))

    # -- requests -------------------------------------------------------------

    async def request_json(
        self, method: str, path: str, payload: Any = None, *, root: bool = False
    ) -> Any:
        """One JSON request with retries; returns the parsed body of a 2xx answer."""
        import httpx

        url = self.url(path, root=root)
        attempts = self.settings.max_retries + 1
        for attempt in range(attempts):
            try:
                response = await self._client.request(method, url, json=payload)
            except httpx.HTTPError as exc:
                if attempt + 1 < attempts and await self._dropped_by_a_live_server(exc):
                    await self._backoff(attempt, None)
                    continue
                raise await self._transport_error(exc, url) from None
            if response.status_code in RETRY_STATUSES and attempt + 1 < attempts:
                await self._backoff(attempt, _retry_after(response.headers.get("retry-after")))
                continue
            if response.status_code >= 400:
                error = http_error(response.status_code, response.content, url)
                if response.status_code in RETRY_STATUSES:
                    error = ModelLoadError(
                        f"{error.message} after {attempts} tries",
                        "the server stayed overloaded or unavailable; lower max_concurrency or check it",
                    )
                raise error
            return _loads(response.content, url)
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    async def post(self, path: str, payload: Any, *, root: bool = False) -> Any:
        """POST ``payload`` as JSON (see :meth:`request_json`)."""
        return await self.request_json("POST", path, payload, root=root)

    async def get(self, path: str, *, root: bool = False) -> Any:
        """GET (see :meth:`request_json`)."""
        return await self.request_json("GET", path, root=root)

    async def get_text(self, path: str, *, root: bool = False) -> str | None:
        """GET a text resource once (no retries); None on any failure (for optional facts)."""
        import httpx

        try:
            response = await self._client.get(self.url(path, root=root))
        except httpx.HTTPError:
            return None
        return response.text if response.status_code == 200 else None

    async def stream(
        self, path: str, payload: Any, *, root: bool = False
    ) -> AsyncIterator[tuple[float, dict[str, Any]]]:
        """POST a streaming request; yield ``(arrival perf_counter, event JSON)`` per SSE event.

        Retries (429/502/503/504) happen only before the first byte of the body;
        the stream ends at ``data: [DONE]`` or when the server closes it.
        """
        import httpx

        url = self.url(path, root=root)
        attempts = self.settings.max_retries + 1
        yielded = False
        for attempt in range(attempts):
            try:
                async with self._client.stream("POST", url, json=payload) as response:
                    if response.status_code in RETRY_STATUSES and attempt + 1 < attempts:
                        await response.aread()
                        retry_after = _retry_after(response.headers.get("retry-after"))
                        await self._backoff(attempt, retry_after)
                        continue
                    if response.status_code >= 400:
                        raise http_error(response.status_code, await response.aread(), url)
                    async for line in response.aiter_lines():
                        arrival = time.perf_counter()
                        event = parse_sse_line(line)
                        if event is None:
                            continue
                        if event == "[DONE]":
                            return
                        data = _loads(event.encode(), url)
                        if isinstance(data, dict) and "error" in data and "choices" not in data:
                            raise ModelLoadError(
                                f"the server failed mid-stream: {server_message(event)}",
                                "see the server log",
                            )
                        yielded = True
                        yield arrival, data
                    return
            except httpx.HTTPError as exc:
                retry = not yielded and attempt + 1 < attempts
                if retry and await self._dropped_by_a_live_server(exc):
                    await self._backoff(attempt, None)
                    continue
                raise await self._transport_error(exc, url) from None
        raise ModelLoadError(
            f"{public_url(url)} stayed unavailable (HTTP 429/503) after {attempts} tries",
            "lower max_concurrency or check the server",
        )


def parse_sse_line(line: str) -> str | None:
    """The data of one server-sent-events line, or None for blanks, comments and other fields."""
    text = line.strip()
    if not text or text.startswith(":"):
        return None
    if text.startswith("data:"):
        return text[5:].strip()
    return None


def _reason(exc: Exception) -> str:
    text = str(exc).strip()
    if not text and exc.__cause__ is not None:
        text = str(exc.__cause__).strip()
    low = text.lower()
    if "connection refused" in low or "errno 111" in low:
        return "connection refused"
    if "name or service not known" in low or "nodename nor servname" in low:
        return "unknown host"
    return (text.splitlines()[0][:120] if text else type(exc).__name__) or type(exc).__name__


async def gather_counted(factories: Sequence[Callable[[], Awaitable[T]]], limit: int) -> list[T]:
    """The requests made by ``factories``, at most ``limit`` at once, each :func:`counted` as
    it is done, results in order (:func:`gather_bounded`): the request loops of a server and
    of its replicas."""
    return await gather_bounded([counted(factory) for factory in factories], limit)


def run_sync(coro: Awaitable[T]) -> T:
    """Run one coroutine to completion on a fresh event loop (the backend's sync face)."""

    async def main() -> T:
        return await coro

    return asyncio.run(main())

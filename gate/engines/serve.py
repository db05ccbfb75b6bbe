"""A serving engine that gate starts, waits for and always stops (:class:`ManagedServer`).

The server runs from a command line (``python -m vllm.entrypoints.openai.api_server
--model ... --tensor-parallel-size 8``) as the leader of its own process group
and session, so a terminal's Ctrl-C reaches gate only, and stopping the group
stops every process the engine started (its engine core, tensor-parallel
workers). Its stdout and stderr go to one log file, kept as a report artifact.

Lifecycle: :meth:`ManagedServer.start` launches it and polls ``GET /health``
(once a second, with a progress line) until it answers 200. A server that
exits first, or is not healthy within ``startup_timeout`` seconds, is stopped
and raises :class:`~gate.errors.ModelLoadError` (exit 3) naming the last lines
of its log. :meth:`ManagedServer.stop` sends SIGTERM to the group, waits up to
``grace`` seconds for every member to go, then SIGKILLs the group; it is
idempotent. Stopping is guaranteed by the context manager (errors, Ctrl-C),
by a SIGTERM handler installed while the server runs (SIGTERM to gate becomes
:class:`KeyboardInterrupt`, so the same cleanup runs), and by an ``atexit``
hook for any other orderly exit.

Port and host: when the command names no ``--port`` a free loopback port is
appended; when it names no ``--host`` the server is bound to ``127.0.0.1``
(a server gate starts for itself needs no other interface).

Credentials: the process runs the command as given (:attr:`ManagedServer.argv`);
everything gate records or shows of it is :attr:`ManagedServer.recorded_argv`,
with every secret value masked (:mod:`gate.engines.secrets`). Log lines quoted
in an error are masked too, and so is the log file once the server is stopped
(an engine may echo its arguments there; vLLM 0.32 masks its own).
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import os
import re
import shlex
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any, BinaryIO

from gate import progress
from gate.engines.secrets import mask_argv, scrub_file, scrub_text, secret_values
from gate.errors import ConfigError, ModelLoadError, UsageError

#: Lines of the server log quoted in an error.
LOG_TAIL_LINES = 3
_WILDCARD_HOSTS = {"0.0.0.0", "::", "[::]", ""}


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_taken(host: str, port: int) -> bool:
    """Whether a listening socket holds ``port`` on ``host`` (a port left in TIME_WAIT is not
    taken: servers bind with ``SO_REUSEADDR``, and so does this probe)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            return exc.errno == errno.EADDRINUSE
    return False


def _option(argv: Sequence[str], name: str) -> str | None:
    """The value of ``--name VALUE`` or ``--name=VALUE`` in ``argv`` (last wins)."""
    value = None
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith(name + "="):
            value = arg.split("=", 1)[1]
    return value


def parse_command(command: str | Sequence[str]) -> list[str]:
    """The argument vector of a server command line (``ConfigError`` when empty or unparsable)."""
    try:
        argv = shlex.split(command) if isinstance(command, str) else [str(a) for a in command]
    except ValueError as exc:
        raise ConfigError(f"cannot parse the server command: {exc}", "check its quoting") from None
    if not argv:
        raise ConfigError("the server command is empty", "give the command that starts the server")
    return argv


def with_address(argv: Sequence[str]) -> tuple[list[str], str, int]:
    """``argv`` with ``--host``/``--port`` added where missing, and the address to connect to."""
    out = list(argv)
    port_text = _option(out, "--port")
    if port_text is None:
        port = free_port()
        out += ["--port", str(port)]
    else:
        try:
            port = int(port_text)
        except ValueError:
            raise ConfigError(
                f"the server command has --port {port_text!r}", "give a port number"
            ) from None
    host = _option(out, "--host")
    if host is None:
        out += ["--host", "127.0.0.1"]
        host = "127.0.0.1"
    connect = "127.0.0.1" if host in _WILDCARD_HOSTS else host
    return out, connect, port


_WARNING = re.compile(r"\bWARN(ING)?\b|Warning: |warnings\.warn")
#: Characters of one quoted log line.
_QUOTE = 240
_ERROR_LINE = re.compile(r"\w*(Error|Exception): |\berror: |\bfailed\b", re.IGNORECASE)


def tail_lines(path: Path, count: int = LOG_TAIL_LINES) -> list[str]:
    """The last ``count`` lines of a server log worth quoting.

    The last lines that name an error (``...Error:``, ``Exception:``,
    ``failed``; warnings excluded) when there are any, since an engine's final
    lines are often shutdown warnings; otherwise the last non-empty lines.
    Each is cut to 240 characters. Empty if unreadable.
    """
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 256_000))
            text = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return []
    lines = [" ".join(line.split())[:_QUOTE] for line in text.splitlines() if line.strip()]
    errors: list[str] = []
    for line in reversed(lines):
        if _ERROR_LINE.search(line) and not _WARNING.search(line) and line not in errors:
            errors.append(line)
        if len(errors) == count:
            break
    return list(reversed(errors)) if errors else lines[-count:]


#: A server that could not bind its port (llama-server's "couldn't bind HTTP server socket",
#: uvicorn's "[Errno 98] ... address already in use").
_PORT_IN_USE = re.compile(r"couldn't bind HTTP server socket|address already in use", re.IGNORECASE)


def log_says(path: Path, pattern: re.Pattern[str]) -> bool:
    """Whether the last 256 kB of the log at ``path`` match ``pattern`` (False if unreadable)."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 256_000))
            text = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return False
    return pattern.search(text) is not None


def group_members(pgid: int) -> list[int]:
    """Pids of the live (non-zombie) processes of process group ``pgid``."""
    import psutil

    members = []
    for proc in psutil.process_iter(["pid", "status"]):
        try:
            if proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if os.getpgid(proc.info["pid"]) == pgid:
                members.append(int(proc.info["pid"]))
        except (ProcessLookupError, psutil.Error, OSError):
            continue
    return members


class ManagedServer:
    """One engine process group, its log, and the guarantee that it is stopped.

    Use as a context manager::

        with ManagedServer(command, log_path=out / "server.log") as server:
            backend = ...(server.base_url)
    """

    def __init__(
        self,
        command: str | Sequence[str],
        *,
        log_path: Path,
        startup_timeout: float = 900.0,
        grace: float = 20.0,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        health_path: str = "/health",
        poll_interval: float = 1.0,
    ) -> None:
        if startup_timeout <= 0 or grace <= 0 or poll_interval <= 0:
            raise ConfigError("server timeouts must be positive")
        given = parse_command(command)
        self.argv, self.host, self.port = with_address(given)
        #: Whether the command names its port (else gate chose a free one).
        self.port_given = _option(given, "--port") is not None
        #: The command as gate records and shows it: every secret value masked.
        self.recorded_argv = mask_argv(self.argv)
        self._secrets = secret_values(self.argv)
        self.log_path = Path(log_path)
        self.startup_timeout = startup_timeout
        self.grace = grace
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self.health_path = health_path
        self.poll_interval = poll_interval
        self.process: subprocess.Popen[bytes] | None = None
        self.startup_seconds: float | None = None
        self._stopped = False
        self._lock = threading.Lock()
        self._previous_sigterm: Any = None
        self._sigterm_installed = False

    # -- addresses ------------------------------------------------------------

    @property
    def root_url(self) -> str:
        """``http://host:port`` of the server (no path)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible base URL, ``http://host:port/v1``."""
        return self.root_url + "/v1"

    @property
    def command_text(self) -> str:
        """The command line as recorded (for provenance and messages: secrets masked)."""
        return shlex.join(self.recorded_argv)

    @property
    def program(self) -> str:
        """What the command runs, for messages: a Python's module after ``-m``, else the executable's name.

        Only a Python interpreter's ``-m`` names a module; llama-server's ``-m`` names its model file.
        """
        argv = self.recorded_argv
        executable = Path(argv[0]).name
        if executable.startswith("python") and "-m" in argv[:-1]:
            return argv[argv.index("-m") + 1]
        return executable

    @property
    def pgid(self) -> int | None:
        """The server's process group id (its leader's pid), once started."""
        return self.process.pid if self.process is not None else None

    # -- lifecycle ------------------------------------------------------------

    def __enter__(self) -> ManagedServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _open_log(self) -> BinaryIO:
        """The log file, opened for appending; an unwritable one is a one-line UsageError."""
        try:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            return self.log_path.open("ab")
        except OSError as exc:
            raise UsageError(
                f"cannot write the server log {self.log_path}: {exc.strerror or exc}",
                "give --server-log a path in a writable directory",
            ) from None

    def start(self) -> None:
        """Launch the server and wait until ``/health`` answers (ModelLoadError otherwise)."""
        if self.process is not None:
            raise RuntimeError("ManagedServer.start() called twice")
        bind = (_option(self.argv, "--host") or "127.0.0.1").strip("[]") or "0.0.0.0"
        if self.port_given and port_taken(bind, self.port):
            raise ConfigError(
                f"port {self.port} on {bind} is taken: the server command's --port {self.port} "
                "cannot be bound",
                "stop what listens there, or leave --port out of the command (gate picks a free one)",
            )
        log = self._open_log()
        env = dict(os.environ) if self.env is None else {**os.environ, **self.env}
        with log:
            try:
                self.process = subprocess.Popen(
                    self.argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    cwd=self.cwd,
                    start_new_session=True,
                )
            except OSError as exc:
                raise ModelLoadError(
                    f"cannot start the server {self.recorded_argv[0]!r}: {exc.strerror or exc}",
                    "check the server command",
                ) from None
        atexit.register(self.stop)
        self._install_sigterm()
        try:
            self._wait_healthy()
        except BaseException:
            self.stop()
            raise

    def _install_sigterm(self) -> None:
        """While the server runs, SIGTERM to gate raises KeyboardInterrupt (so cleanup runs).

        Only where SIGTERM would otherwise kill the process (its default action):
        a handler already there (the command line's, which raises once and lets
        the cleanup finish, or the embedding program's) and an ignored SIGTERM are
        left alone.
        """
        if threading.current_thread() is not threading.main_thread():
            return
        if signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, None):
            return

        def _on_sigterm(signum: int, frame: FrameType | None) -> None:
            raise KeyboardInterrupt(f"signal {signum}")

        try:
            self._previous_sigterm = signal.signal(signal.SIGTERM, _on_sigterm)
            self._sigterm_installed = True
        except ValueError:  # not the main interpreter thread
            self._sigterm_installed = False

    def _restore_sigterm(self) -> None:
        if self._sigterm_installed and threading.current_thread() is threading.main_thread():
            with contextlib.suppress(ValueError, TypeError):
                signal.signal(signal.SIGTERM, self._previous_sigterm or signal.SIG_DFL)
            self._sigterm_installed = False

    def _healthy(self) -> bool:
        import httpx

        try:
            response = httpx.get(self.root_url + self.health_path, timeout=5.0)
        except httpx.HTTPError:
            return False
        return response.status_code == 200

    def _wait_healthy(self) -> None:
        started = time.monotonic()
        deadline = started + self.startup_timeout
        what = f"server {self.program} on port {self.port}: waiting for {self.health_path}"
        with progress.task(what, total=int(self.startup_timeout)) as step:
            waited = 0
            while True:
                failure = self.failure()
                if failure is not None:
                    raise failure
                if self._healthy():
                    break
                if time.monotonic() >= deadline:
                    raise self._error(
                        f"the server did not become healthy within {self.startup_timeout:.0f}s",
                        "raise the startup timeout, or see the server log",
                    )
                time.sleep(self.poll_interval)
                now = int(time.monotonic() - started)
                if now > waited:
                    step(now - waited)
                    waited = now
        self.startup_seconds = time.monotonic() - started

    def alive(self) -> bool:
        """Whether the server's leader process is still running."""
        return self.process is not None and self.process.poll() is None

    def failure(self) -> ModelLoadError | None:
        """A ModelLoadError describing the server's exit, or None while it runs."""
        if self.process is None or self._stopped:
            return None
        code = self.process.poll()
        if code is None:
            return None
        how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
        if log_says(self.log_path, _PORT_IN_USE):
            return self._error(
                f"the server {how}: port {self.port} is taken",
                "stop what listens there, or leave --port out of the command (gate picks a free one)",
            )
        return self._error(f"the server {how}", "see the server log")

    def _error(self, message: str, hint: str) -> ModelLoadError:
        tail = scrub_text(" | ".join(tail_lines(self.log_path)), self._secrets)
        detail = f"; last log lines: {tail}" if tail else ""
        from gate.engines.registry import startup_failures

        for failure in startup_failures():
            if log_says(self.log_path, failure.pattern):
                hint = failure.hint
                break
        return ModelLoadError(f"{message}{detail}", f"{hint}: {self.log_path}")

    def stop(self) -> None:
        """Stop the whole process group: SIGTERM, up to ``grace`` seconds, then SIGKILL."""
        with self._lock:
            if self._stopped or self.process is None:
                self._stopped = True
                return
            self._stopped = True
        try:
            self._terminate_group(self.process.pid)
        finally:
            scrub_file(self.log_path, self._secrets)  # the engine may have logged its arguments
            self._restore_sigterm()
            with contextlib.suppress(Exception):
                atexit.unregister(self.stop)

    def _terminate_group(self, pgid: int) -> None:
        assert self.process is not None
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGTERM)
        deadline = time.monotonic() + self.grace
        while time.monotonic() < deadline:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=0.2)
            if self.process.poll() is not None and not group_members(pgid):
                return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10.0)
        deadline = time.monotonic() + 10.0
        while group_members(pgid) and time.monotonic() < deadline:
            time.sleep(0.1)


@contextlib.contextmanager
def serving(
    command: str | Sequence[str], *, log_path: Path, **kwargs: Any
) -> Iterator[ManagedServer]:
    """``with serving(cmd, log_path=...) as server``: a started, healthy server, always stopped."""
    server = ManagedServer(command, log_path=log_path, **kwargs)
    with server:
        yield server

"""Run untrusted Python (a model's code answer) in a limited subprocess.

What the sandbox does, and — honestly — what it does not:

* **process**: ``python -I -B`` (isolated mode: no ``PYTHON*`` variables, no user
  site, the script's directory not on ``sys.path``; no bytecode writes) in a new
  session, with a minimal environment (``PATH``, ``HOME`` = the work directory,
  ``LANG``), stdin from ``/dev/null``;
* **directory**: a fresh temporary directory per run, deleted afterwards; the
  child's working directory;
* **time**: a wall-clock limit enforced by the parent (the whole process group
  gets SIGKILL) plus ``RLIMIT_CPU`` (SIGXCPU at the soft limit, SIGKILL one
  second later);
* **memory**: ``RLIMIT_AS`` (address space), so a 10 GB allocation fails with
  ``MemoryError`` at once; ``RLIMIT_FSIZE`` caps every file the child writes,
  stdout and stderr included (they go to files); ``RLIMIT_NOFILE`` caps open
  files; core dumps are off;
* **network**: when ``unshare --user --map-root-user --net`` works on the host
  (Linux with unprivileged user namespaces, or root) the child runs in an empty
  network namespace, where only a down loopback exists. In every case a
  :pep:`578` audit hook, installed before the answer runs, refuses every
  ``socket.*`` event (creation, connect, bind, DNS lookups), so no socket can be
  opened from Python code;
* **files**: the hook refuses ``open`` for writing, ``os.remove``/``unlink``,
  ``rmdir``, ``rename``/``replace``, ``mkdir``, ``chmod``, ``chown``, ``utime``,
  ``truncate``, ``link``, ``shutil.rmtree`` ... on any path whose real path lies
  outside the work directory (a ``dir_fd`` argument is resolved through
  ``/proc/self/fd``; where that fails the call is refused), and ``os.symlink``
  always; reading files is allowed (imports need it);
* **escape hatches closed by the hook**: ``subprocess``, ``os.system``,
  ``os.exec*``, ``os.spawn*``, ``os.posix_spawn``, ``os.fork``, ``os.kill``,
  ``ctypes`` (foreign calls would bypass the hook), ``resource.setrlimit`` (a
  root child could raise its hard limits), and the networking library events.

Known gaps: the ``open`` audit event carries no ``dir_fd``, so
``os.open(name, O_WRONLY, dir_fd=fd)`` on a descriptor of an outside directory
is judged as if ``name`` were relative to the work directory; reads are never
confined; without ``unshare`` the network is closed only to Python code.
Audit hooks are *not* a security boundary (:pep:`578` says so: C extensions
and interpreter internals can bypass them). This sandbox contains accidents and
the obvious misbehaviour of generated code — infinite loops, huge
allocations, stray sockets, deleting files — so that a probe fails and the
gate goes on. It is not a defence against a determined attacker; run the gate
itself in a container or VM when that matters.

Every blocked event is also written to the child's stderr as a line
``gate-sandbox: blocked <event> ...`` before the exception is raised, so an
answer that swallows the exception is still reported as ``blocked``.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from gate.errors import DataError

__all__ = ["SandboxLimits", "SandboxResult", "network_namespace_available", "run_python"]

BLOCK_MARK = "gate-sandbox: blocked"

_GUARD = r"""
import os, resource, runpy, sys

ROOT = os.path.realpath(sys.argv[1])
MAIN = sys.argv[2]
CPU, MEM, FSIZE, NOFILE = (int(x) for x in sys.argv[3:7])
resource.setrlimit(resource.RLIMIT_CPU, (CPU, CPU + 1))
for _res, _val in ((resource.RLIMIT_AS, MEM), (resource.RLIMIT_FSIZE, FSIZE),
                   (resource.RLIMIT_NOFILE, NOFILE), (resource.RLIMIT_CORE, 0)):
    resource.setrlimit(_res, (_val, _val))
os.chdir(ROOT)
sys.argv = [MAIN]
sys.path.insert(0, ROOT)

_WRITE = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
_DENY = ("socket.", "ctypes.", "subprocess.", "os.exec", "os.spawn", "os.posix_spawn",
         "os.fork", "os.forkpty", "os.system", "os.kill", "os.killpg", "os.startfile",
         "os.symlink", "pty.", "webbrowser.", "urllib.", "http.client.", "ftplib.",
         "smtplib.", "poplib.", "imaplib.", "nntplib.", "telnetlib.", "resource.setrlimit",
         "resource.prlimit", "sys.remote_exec")
# event -> ((index of a path argument, index of its dir_fd argument or None), ...)
_PATHS = {
    "os.remove": ((0, 1),), "os.rmdir": ((0, 1),), "os.mkdir": ((0, 2),),
    "os.rename": ((0, 2), (1, 3)), "os.link": ((0, 2), (1, 3)), "os.chmod": ((0, 2),),
    "os.lchmod": ((0, None),), "os.chown": ((0, 3),), "os.lchown": ((0, None),),
    "os.utime": ((0, 3),), "os.truncate": ((0, None),), "os.chflags": ((0, None),),
    "os.lchflags": ((0, None),), "os.setxattr": ((0, None),), "os.removexattr": ((0, None),),
    "shutil.rmtree": ((0, 1),), "shutil.copyfile": ((1, None),), "shutil.copytree": ((1, None),),
    "shutil.move": ((0, None), (1, None)), "shutil.chown": ((0, None),),
    "shutil.make_archive": ((0, None),),
}


def _inside(path, dir_fd=None):
    if isinstance(path, int):
        return True  # an open descriptor: its opening was checked
    path = os.fsdecode(path)
    if dir_fd is not None and dir_fd != -1 and not os.path.isabs(path):
        try:  # Linux: the directory behind the descriptor (shutil.rmtree walks by dir_fd)
            path = os.path.join(os.readlink("/proc/self/fd/%d" % dir_fd), path)
        except (OSError, TypeError):
            return False
    real = os.path.realpath(path)
    return real == ROOT or real.startswith(ROOT + os.sep)


def _deny(event, detail):
    msg = "gate-sandbox: blocked %s %s" % (event, detail)
    try:
        os.write(2, (msg + "\n").encode("utf-8", "replace"))
    except OSError:
        pass
    raise PermissionError(msg)


def _hook(event, args):
    if event == "open":
        path, mode, flags = (tuple(args) + (None, None, 0))[:3]
        writing = bool(mode and any(c in str(mode) for c in "wax+")) or bool((flags or 0) & _WRITE)
        if writing and not _inside(path):
            _deny(event, repr(path))
        return
    spec = _PATHS.get(event)
    if spec is not None:
        for i, fd_index in spec:
            dir_fd = args[fd_index] if fd_index is not None and len(args) > fd_index else None
            if i < len(args) and args[i] is not None and not _inside(args[i], dir_fd):
                _deny(event, repr(args[i]))
        return
    if event.startswith(_DENY):
        _deny(event, "")


sys.addaudithook(_hook)
runpy.run_path(MAIN, run_name="__main__")
"""


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits of one sandboxed run."""

    #: Wall-clock seconds before the process group is killed.
    wall_s: float = 5.0
    #: CPU seconds (``RLIMIT_CPU`` soft limit; integer, at least 1).
    cpu_s: int = 5
    #: Address-space bytes (``RLIMIT_AS``).
    memory_bytes: int = 512 * 1024**2
    #: Bytes any single written file may reach, stdout/stderr included (``RLIMIT_FSIZE``).
    file_bytes: int = 1024**2
    #: Open file descriptors (``RLIMIT_NOFILE``).
    open_files: int = 64
    #: Run in an empty network namespace when ``unshare`` allows it.
    network_namespace: bool = True

    def __post_init__(self) -> None:
        if self.wall_s <= 0 or self.cpu_s < 1 or self.memory_bytes < 64 * 1024**2:
            raise DataError(
                f"sandbox limits too small: {self}",
                "wall_s > 0, cpu_s >= 1 and memory_bytes >= 64 MiB (Python itself needs ~30 MiB)",
            )


@dataclass(frozen=True)
class SandboxResult:
    """What a sandboxed run did.

    ``status``: ``ok`` (exit 0, nothing blocked), ``error`` (nonzero exit),
    ``timeout`` (wall or CPU limit), ``memory`` (``MemoryError``),
    ``blocked`` (the audit hook refused something), ``output_limit``
    (``RLIMIT_FSIZE`` reached).
    """

    status: str
    returncode: int | None
    stdout: str
    stderr: str
    wall_s: float
    violations: tuple[str, ...] = ()
    network_isolated: bool = False
    details: Mapping[str, object] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Exited 0 within every limit and without a blocked event."""
        return self.status == "ok"


@functools.cache
def network_namespace_available() -> bool:
    """Whether ``unshare --user --map-root-user --net`` can start Python here (cached)."""
    exe = shutil.which("unshare")
    if exe is None or not sys.platform.startswith("linux"):
        return False
    try:
        done = subprocess.run(
            [exe, "--user", "--map-root-user", "--net", "--", sys.executable, "-I", "-c", "pass"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def _safe_name(name: str) -> PurePosixPath:
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts or not path.parts:
        raise DataError(f"bad sandbox file name {name!r}", "use a relative path without '..'")
    return path


def _read(path: Path, limit: int) -> str:
    with path.open("rb") as fh:
        data = fh.read(limit)
    return data.decode("utf-8", errors="replace")


def _classify(timed_out: bool, rc: int | None, stderr: str, violations: tuple[str, ...]) -> str:
    if timed_out or rc in (-signal.SIGXCPU, -signal.SIGKILL):
        return "timeout"
    if rc == -signal.SIGXFSZ or "[Errno 27] File too large" in stderr:
        return "output_limit"  # Python ignores SIGXFSZ, so the write fails with EFBIG
    if violations:
        return "blocked"
    if "MemoryError" in stderr:
        return "memory"
    return "ok" if rc == 0 else "error"


def _command(guard: Path, work: str, main: str, lim: SandboxLimits, *, isolate: bool) -> list[str]:
    """The child's command line: an isolated Python (``-I -B``) running the ``guard`` script,
    which sets the resource limits and runs ``main`` in ``work``; with ``isolate``, inside
    a new user and network namespace (``unshare``)."""
    cmd = [
        sys.executable,
        "-I",
        "-B",
        str(guard),
        work,
        main,
        str(lim.cpu_s),
        str(lim.memory_bytes),
        str(lim.file_bytes),
        str(lim.open_files),
    ]
    if isolate:
        cmd = ["unshare", "--user", "--map-root-user", "--net", "--", *cmd]
    return cmd


def run_python(
    files: Mapping[str, str],
    main: str,
    *,
    limits: SandboxLimits | None = None,
    env: Mapping[str, str] | None = None,
) -> SandboxResult:
    """Write ``files`` (relative name -> text) into a fresh directory and run ``main`` there.

    ``env`` adds variables to the minimal environment. Never raises for what
    the child does; every outcome is a :class:`SandboxResult`.
    """
    lim = limits or SandboxLimits()
    _safe_name(main)
    if main not in files:
        raise DataError(f"sandbox main script {main!r} is not among the files", "add it to files")
    isolate = lim.network_namespace and network_namespace_available()
    with (
        tempfile.TemporaryDirectory(prefix="gate-sandbox-") as work,
        tempfile.TemporaryDirectory(prefix="gate-sandbox-io-") as io_dir,
    ):
        for name, text in files.items():
            target = Path(work, _safe_name(name))
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
        guard = Path(io_dir, "guard.py")
        guard.write_text(_GUARD, encoding="utf-8")
        cmd = _command(guard, work, main, lim, isolate=isolate)
        child_env = {"PATH": os.defpath, "HOME": work, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
        child_env.update(env or {})
        out_path, err_path = Path(io_dir, "stdout"), Path(io_dir, "stderr")
        started = time.perf_counter()
        timed_out = False
        with out_path.open("wb") as out, err_path.open("wb") as err:
            proc = subprocess.Popen(
                cmd,
                cwd=work,
                env=child_env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
            rc: int | None
            try:
                rc = proc.wait(timeout=lim.wall_s)
            except subprocess.TimeoutExpired:
                timed_out, rc = True, None
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)  # the child and anything it started
                proc.wait()
        elapsed = time.perf_counter() - started
        read_limit = lim.file_bytes + 4096
        stdout, stderr = _read(out_path, read_limit), _read(err_path, read_limit)
    violations = tuple(
        line[len(BLOCK_MARK) :].strip()
        for line in stderr.splitlines()
        if line.startswith(BLOCK_MARK)
    )
    return SandboxResult(
        status=_classify(timed_out, rc, stderr, violations),
        returncode=rc,
        stdout=stdout,
        stderr=stderr,
        wall_s=elapsed,
        violations=violations,
        network_isolated=isolate,
    )

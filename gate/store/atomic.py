"""Crash-safe file writes for the baseline store and the reports.

Primitives built on "write a temporary file in the destination directory,
flush it to disk, then make it visible in one atomic step":

* :func:`write_atomic` replaces ``path`` with ``os.replace`` — readers see the
  old content or the new one, never a truncated mix (refs, results JSON).
* :func:`stage` writes the temporary file only; :func:`publish_exclusive` then
  gives it its final name only if that name does not exist yet (``os.link``
  fails on an existing name). :func:`create_exclusive` is both in one call.
  Several files that must appear together are staged first and published
  last, so the slow part (copying) is done before anything becomes visible.
* :func:`file_lock` is an advisory, exclusive lock with a timeout
  (``fcntl.flock``; the kernel releases it when the holder dies, so a killed
  process never leaves a stale lock).

After the rename/link the directory itself is fsynced so that the new name
survives a power loss. A process killed at any point leaves at most a stray
``.<name>.*.tmp`` file (:func:`is_temporary`), which every reader ignores.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

#: Prefix/suffix of temporary files; readers skip names of this shape.
TMP_PREFIX = "."
TMP_SUFFIX = ".tmp"
#: ``os.link`` errors that mean "this file system has no hard links" (use the fallback).
_NO_LINK_ERRNOS = frozenset(
    getattr(errno, name)
    for name in ("EPERM", "ENOTSUP", "EOPNOTSUPP", "EXDEV", "EMLINK")
    if hasattr(errno, name)
)


class LockTimeout(Exception):
    """:func:`file_lock` waited ``timeout`` seconds without getting the lock."""

    def __init__(self, path: Path, timeout: float) -> None:
        super().__init__(f"{path} is still locked after {timeout:g} s")
        self.path = path
        self.timeout = timeout


def is_temporary(name: str) -> bool:
    """Whether ``name`` is a temporary file left by an interrupted write."""
    return name.startswith(TMP_PREFIX) and name.endswith(TMP_SUFFIX)


def _fsync_dir(directory: Path) -> None:
    """Flush a directory entry change to disk (no-op where unsupported)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)


def _umask() -> int:
    current = os.umask(0o022)
    os.umask(current)
    return current


def stage(path: Path, data: bytes | Path) -> Path:
    """Write ``data`` (bytes, or the content of a file) to a temp file beside ``path``; fsync it.

    Returns the temp file (named ``.<name>.*.tmp``); the caller publishes or unlinks it.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(
        prefix=f"{TMP_PREFIX}{path.name}.", suffix=TMP_SUFFIX, dir=path.parent
    )
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; publish with the usual mode
        with os.fdopen(fd, "wb") as handle:
            if isinstance(data, Path):
                with data.open("rb") as source:
                    shutil.copyfileobj(source, handle, 1 << 20)
            else:
                handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        if isinstance(exc, OSError) and exc.filename is None:
            exc.filename = str(path)  # name the file a failed write (ENOSPC, EFBIG) was for
        raise
    return Path(tmp_name)


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically (temp file, fsync, rename, fsync dir)."""
    path = Path(path)
    tmp = stage(path, data)
    try:
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


def publish_exclusive(tmp: Path, path: Path) -> None:
    """Give the staged file ``tmp`` the name ``path``; ``FileExistsError`` if ``path`` exists.

    The content is complete on disk before the name appears (hard link of the
    fsynced temp file). Where hard links are unsupported, the name is reserved
    with ``O_CREAT | O_EXCL`` and then replaced; a crash in between leaves an
    empty file, which the store reports as corrupt rather than overwriting.
    ``tmp`` is left in place when linked (the caller unlinks it) and consumed
    by the fallback.
    """
    path = Path(path)
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise
    except OSError as exc:
        if exc.errno not in _NO_LINK_ERRNOS:
            raise
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        os.close(fd)
        os.replace(tmp, path)
    _fsync_dir(path.parent)


def create_exclusive(path: Path, data: bytes | Path) -> None:
    """Create ``path`` with ``data`` atomically; raise ``FileExistsError`` if it exists.

    :func:`stage` then :func:`publish_exclusive`; the temp file never outlives the call.
    """
    path = Path(path)
    tmp = stage(path, data)
    try:
        publish_exclusive(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


@contextlib.contextmanager
def file_lock(path: Path, *, timeout: float, poll: float = 0.02) -> Iterator[None]:
    """Hold an exclusive advisory lock on ``path`` (created if missing) for the block.

    Waits at most ``timeout`` seconds, then raises :class:`LockTimeout`. The
    lock belongs to the open file, so the kernel drops it when the holder
    exits or is killed; the lock file itself is left in place (removing it
    would let two processes lock two different files of one name).
    Where ``fcntl`` is missing (non-POSIX) the block runs unlocked.
    """
    with Path(path).open("a") as handle:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - non-POSIX: atomic publication only
            yield
            return
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise LockTimeout(Path(path), timeout) from None
                time.sleep(poll)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

"""Crash-safe file writes for the baseline store and the reports.

Two primitives, both built on "write a temporary file in the destination
directory, flush it to disk, then make it visible in one atomic step":

* :func:`write_atomic` replaces ``path`` with ``os.replace`` — readers see the
  old content or the new one, never a truncated mix (refs, results JSON).
* :func:`create_exclusive` publishes ``path`` only if it does not exist yet,
  with ``os.link`` (which fails on an existing name) — numbered baselines are
  never overwritten, and two writers racing for one number cannot both win.

After the rename/link the directory itself is fsynced so that the new name
survives a power loss. A process killed at any point leaves at most a stray
``.<name>.*.tmp`` file, which every reader ignores.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

#: Prefix/suffix of temporary files; readers skip names of this shape.
TMP_PREFIX = "."
TMP_SUFFIX = ".tmp"


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


def _write_temp(path: Path, data: bytes | Path) -> Path:
    """Write ``data`` (bytes, or the content of a file) to a temp file beside ``path``; fsync it."""
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
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        raise
    return Path(tmp_name)


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically (temp file, fsync, rename, fsync dir)."""
    path = Path(path)
    tmp = _write_temp(path, data)
    try:
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


def create_exclusive(path: Path, data: bytes | Path) -> None:
    """Create ``path`` with ``data`` atomically; raise ``FileExistsError`` if it exists.

    The content is complete on disk before the name appears (hard link of the
    fsynced temp file). Where hard links are unsupported, the name is reserved
    with ``O_CREAT | O_EXCL`` and then replaced; a crash in between leaves an
    empty file, which the store reports as corrupt rather than overwriting.
    """
    path = Path(path)
    tmp = _write_temp(path, data)
    try:
        try:
            os.link(tmp, path)
        except FileExistsError:
            raise
        except OSError:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            os.close(fd)
            os.replace(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    _fsync_dir(path.parent)


def copy_exclusive(source: Path, dest: Path) -> None:
    """Copy ``source`` to a new file ``dest`` with :func:`create_exclusive` (streamed)."""
    create_exclusive(dest, Path(source))

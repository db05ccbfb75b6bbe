"""Output paths: refused before any work when they cannot be written, one line when a write fails.

Every file the gate writes for the user (the results JSON, the HTML, JUnit and
markdown reports, plots, a server log, the latency history, the GitHub step
summary) goes through two guards:

* :func:`check_writable` / :func:`check_writable_dir`, called where a command
  validates its inputs (before a model loads), refuse a path whose directory
  cannot be created or written. Nothing is left behind: a probe file is
  created and removed in the nearest existing directory, and no missing
  directory is created.
* :func:`writing` wraps the write itself, so that an ``OSError`` there (the
  disk filled up, the directory vanished) is the same one-line
  :class:`~gate.errors.UsageError`, exit 4, naming the path, the operating
  system's reason and the fix, never an internal error with a traceback.
"""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from gate.errors import UsageError
from gate.store.atomic import TMP_PREFIX, TMP_SUFFIX

#: The fix for a path that cannot be written, by ``errno`` (default :data:`FIX`).
_FIXES: dict[int, str] = {
    errno.ENOSPC: "free disk space or choose a directory on another disk",
    errno.EDQUOT: "free disk quota or choose a directory on another disk",
    errno.ENAMETOOLONG: "choose a shorter file name",
}
#: How to fix an unwritable path.
FIX = "choose a writable directory"


def os_reason(exc: OSError) -> str:
    """The operating system's reason for ``exc`` (``"Not a directory"``)."""
    return exc.strerror or str(exc) or type(exc).__name__


def unwritable(what: str, path: Path | str, exc: OSError, hint: str | None = None) -> UsageError:
    """The one-line error for ``what`` (``"--json"``, ``"the HTML report"``) at ``path``."""
    fix = hint or _FIXES.get(exc.errno or 0, FIX)
    return UsageError(f"cannot write {what} {path}: {os_reason(exc)}", fix)


@contextlib.contextmanager
def writing(what: str, path: Path | str, hint: str | None = None) -> Iterator[None]:
    """Run the block that writes ``path``; an ``OSError`` in it becomes :func:`unwritable`."""
    try:
        yield
    except OSError as exc:
        raise unwritable(what, path, exc, hint) from None


def _nearest_existing(path: Path) -> Path:
    """``path`` or its nearest ancestor that exists (``OSError`` when it cannot be looked at)."""
    ancestor = path
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    return ancestor


def _probe(directory: Path, name: str) -> None:
    """Create and remove a temporary file named like ``name``'s staging file in ``directory``."""
    fd, probe = tempfile.mkstemp(prefix=f"{TMP_PREFIX}{name}.", suffix=TMP_SUFFIX, dir=directory)
    os.close(fd)
    os.unlink(probe)


def check_writable(path: Path, what: str) -> None:
    """``path`` can be created or replaced (else :class:`UsageError`, exit 4).

    It is not a directory, its nearest existing ancestor is a directory, and a
    file named like it can be created there (missing directories are created
    when the file is written; none is created here).
    """
    path = Path(path)
    try:
        if path.is_dir():
            raise UsageError(f"{what} {path} is a directory", "name a file to write the report to")
        ancestor = _nearest_existing(path.parent)
        if not ancestor.is_dir():
            raise UsageError(f"{what} {path}: {ancestor} is not a directory", FIX)
        _probe(ancestor, path.name)
    except OSError as exc:
        raise unwritable(what, path, exc) from None


def check_writable_dir(path: Path, what: str) -> None:
    """``path`` is a writable directory or can be created as one (else :class:`UsageError`)."""
    path = Path(path)
    try:
        if path.exists() and not path.is_dir():
            raise UsageError(f"{what} {path} is not a directory", "name a directory for the output")
        if path.is_dir():
            _probe(path, "probe")
            return
    except OSError as exc:
        raise unwritable(what, path, exc) from None
    check_writable(path, what)


__all__ = ["FIX", "check_writable", "check_writable_dir", "os_reason", "unwritable", "writing"]

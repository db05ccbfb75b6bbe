"""Progress of long work: a live bar on a terminal, plain one-line messages in CI logs.

Usage (tiers, loaders, the runner)::

    from gate import progress

    with progress.task("fidelity: scoring", total=len(prompts)) as step:
        for batch in batches:
            ...
            step(len(batch))          # advance by the number of items done

    progress.note("candidate 2/3: nf4 (bnb-nf4)")   # a one-line status message

Where it goes: the sink installed with :func:`to_stream` or :func:`terminal`
(the runner installs :func:`terminal` around each gate pytest session, so
progress reaches the real stderr although pytest captures it), else
``sys.stderr`` at call time. The style is ``rich`` (a live bar, kept on screen
when done) when that stream is a terminal, else ``plain``: a start line, at
most one line per tenth of the total (and at most one per ``interval``
seconds), and a done line with the elapsed time. The environment variable
``GATE_PROGRESS=rich|plain|off`` forces a style.

The sink lives in a :class:`contextvars.ContextVar`, never in a module global,
and progress output never raises into the work it reports on.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TextIO

Style = Literal["rich", "plain", "off"]
STYLES: tuple[Style, ...] = ("rich", "plain", "off")
ENV_VAR = "GATE_PROGRESS"
PREFIX = "gate: "


class Step(Protocol):
    """Advance a task by ``n`` items (``step()`` is one item)."""

    def __call__(self, n: int = 1) -> None:
        """Record ``n`` more items done."""
        ...


def choose_style(stream: TextIO, requested: str | None = None) -> Style:
    """``requested`` or ``$GATE_PROGRESS`` when valid, else rich on a terminal, plain otherwise."""
    wanted = (requested or os.environ.get(ENV_VAR, "")).strip().lower()
    if wanted in STYLES:
        return wanted  # type: ignore[return-value]
    try:
        tty = bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        tty = False
    if tty and os.environ.get("TERM", "") != "dumb":
        return "rich"
    return "plain"


def _fmt_seconds(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes}m{secs:02d}s"


@dataclass
class _PlainTask:
    """One task of the plain style: counts and the throttling state."""

    sink: Sink
    description: str
    total: int | None
    done: int = 0
    started: float = field(default_factory=time.monotonic)
    last_line: float = field(default_factory=time.monotonic)
    last_tenth: int = 0

    def __call__(self, n: int = 1) -> None:
        self.done += n
        now = time.monotonic()
        if now - self.last_line < self.sink.interval:
            return
        if self.total:
            tenth = min(10, self.done * 10 // self.total)
            if tenth <= self.last_tenth:
                return
            self.last_tenth = tenth
            pct = 100 * self.done // self.total
            self.sink.write(f"{self.description}: {self.done}/{self.total} ({pct}%)")
        else:
            self.sink.write(f"{self.description}: {self.done} done")
        self.last_line = now

    def finish(self, failed: bool) -> None:
        elapsed = _fmt_seconds(time.monotonic() - self.started)
        count = f"{self.done}/{self.total}" if self.total else f"{self.done}" if self.done else ""
        state = "failed" if failed else "done"
        self.sink.write(f"{self.description}: {state}{' ' + count if count else ''} in {elapsed}")


@dataclass
class Sink:
    """Where progress goes and how it looks; one rich display is shared by nested tasks."""

    stream: TextIO
    style: Style
    #: Plain style: minimum seconds between two intermediate lines of one task.
    interval: float = 2.0
    _progress: Any = field(default=None, repr=False)
    _active: int = 0

    def write(self, text: str) -> None:
        """One plain line (never raises: progress must not break the work)."""
        if self.style == "off":
            return
        try:
            if self._progress is not None:
                self._progress.console.print(PREFIX + text, markup=False, highlight=False)
            else:
                self.stream.write(PREFIX + text + "\n")
                self.stream.flush()
        except (OSError, ValueError):
            pass

    @contextlib.contextmanager
    def task(self, description: str, total: int | None) -> Iterator[Step]:
        """A task shown as a bar (rich) or start/progress/done lines (plain)."""
        if self.style == "off":
            yield _ignore
            return
        if self.style == "rich":
            with self._rich_task(description, total) as step:
                yield step
            return
        self.write(f"{description} ..." if not total else f"{description}: 0/{total}")
        plain = _PlainTask(self, description, total)
        failed = True
        try:
            yield plain
            failed = False
        finally:
            plain.finish(failed)

    @contextlib.contextmanager
    def _rich_task(self, description: str, total: int | None) -> Iterator[Step]:
        progress = self._ensure_progress()
        task_id = progress.add_task(description, total=total)

        def step(n: int = 1) -> None:
            progress.advance(task_id, n)

        self._active += 1
        try:
            yield step
            if total is not None:
                progress.update(task_id, completed=total)
            else:
                progress.update(task_id, total=1, completed=1)
        finally:
            self._active -= 1
            if self._active == 0:
                progress.stop()
                self._progress = None

    def _ensure_progress(self) -> Any:
        if self._progress is None:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                SpinnerColumn,
                TextColumn,
                TimeElapsedColumn,
            )

            console = Console(file=self.stream, force_terminal=True, stderr=True)
            self._progress = Progress(
                SpinnerColumn(),
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=console,
                transient=False,
                refresh_per_second=4,  # a low rate keeps the refresh thread off the work's cores
            )
            self._progress.start()
        return self._progress


def _ignore(n: int = 1) -> None:
    return None


_SINK: contextvars.ContextVar[Sink | None] = contextvars.ContextVar("gate_progress", default=None)


def current() -> Sink:
    """The installed sink, else one on ``sys.stderr`` (as it is at call time)."""
    sink = _SINK.get()
    if sink is not None:
        return sink
    return Sink(sys.stderr, choose_style(sys.stderr))


@contextlib.contextmanager
def task(description: str, total: int | None = None) -> Iterator[Step]:
    """Show progress of ``total`` items (``None``: unknown, a spinner / start and done lines)."""
    with current().task(description, total) as step:
        yield step


def note(message: str) -> None:
    """A one-line status message (``gate: <message>``) through the current sink."""
    current().write(message)


@contextlib.contextmanager
def to_stream(stream: TextIO, *, style: str | None = None, interval: float = 2.0) -> Iterator[Sink]:
    """Send progress to ``stream`` inside the block (style from :func:`choose_style`)."""
    sink = Sink(stream, choose_style(stream, style), interval=interval)
    token = _SINK.set(sink)
    try:
        yield sink
    finally:
        _SINK.reset(token)


@contextlib.contextmanager
def terminal(*, style: str | None = None) -> Iterator[Sink]:
    """Progress to the process's real stderr (file descriptor 2 as it is now).

    The descriptor is duplicated first, so progress still reaches the terminal
    or CI log while pytest captures descriptor 2 during the tier tests.
    """
    try:
        fd = os.dup(sys.stderr.fileno())
    except (AttributeError, ValueError, OSError):
        with to_stream(sys.stderr, style=style) as sink:
            yield sink
        return
    stream = os.fdopen(fd, "w", encoding="utf-8", errors="replace", buffering=1)
    try:
        with to_stream(stream, style=style) as sink:
            yield sink
    finally:
        with contextlib.suppress(OSError):
            stream.close()


__all__ = [
    "ENV_VAR",
    "STYLES",
    "Sink",
    "Step",
    "Style",
    "choose_style",
    "current",
    "note",
    "task",
    "terminal",
    "to_stream",
]

"""Progress of long work: a live bar on a terminal, plain one-line messages in CI logs.

Usage (tiers, loaders, the runner)::

    from gate import progress

    with progress.task("fidelity: scoring", total=len(prompts)) as step:
        for batch in batches:
            ...
            step(len(batch))          # advance by the number of items done

    for question in progress.track(questions, "accuracy: MCQ"):   # one step per item
        ...

    # the backend's own batch loop counts the items (progress.advance):
    with progress.task("fidelity: generating", total=len(prompts), counted_below=True):
        outputs = backend.generate(prompts, max_new_tokens=64)

    progress.note("candidate 2/3: nf4 (bnb-nf4)")   # a one-line status message

A task opened with ``counted_below=True`` is advanced by :func:`advance`, which
the backends call from their batch loops (each leaf loop once per item done);
outside such a task :func:`advance` does nothing, and any task shadows the
tasks around it, so an item is never counted twice.

Where it goes: the sink installed with :func:`to_stream` or :func:`terminal`
(the runner installs :func:`terminal` around each gate pytest session, so
progress reaches the real stderr although pytest captures it), else
``sys.stderr`` at call time. The style is ``rich`` (a live bar with the count,
elapsed and remaining time, kept on screen when done) when that stream is a
terminal, else ``plain``: a start line; a line when the count crosses the next
tenth of the total or when ``every`` seconds have passed with some work done,
never two within ``interval`` seconds (and none at the total: the done line
follows); a heartbeat line from a background thread once ``every`` seconds
have passed without a line (loading, or one long batch); and a done line with
the elapsed time.
The environment variable ``GATE_PROGRESS=rich|plain|off`` forces a style.

One voice: the ``gate`` command calls :func:`speak_alone` once, before any
command runs, so that gate's progress is the only progress on stderr whatever
the style: it turns off the bars of the libraries gate loads and measures
models with (tqdm's own default, huggingface_hub's and through it
transformers', such as "Loading weights", and datasets') — gate shows those
phases itself (loading a model is a gate task) — and ``-q`` sets
``GATE_PROGRESS=off``. Their switches are environment variables, read when a
library is imported and inherited by the processes gate starts; a library
already imported is switched off by its own call as well.

The time left is ``elapsed / done * (total - done)`` (:func:`eta`): the mean
time per item so far times the items left.

The sink lives in a :class:`contextvars.ContextVar`, never in a module global,
and progress output never raises into the work it reports on. The clock is
injectable (``clock=``) so that tests of the output are deterministic.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TextIO, TypeVar

Style = Literal["rich", "plain", "off"]
STYLES: tuple[Style, ...] = ("rich", "plain", "off")
ENV_VAR = "GATE_PROGRESS"
PREFIX = "gate: "
#: Plain style: minimum seconds between two intermediate lines of one task.
INTERVAL_S = 2.0
#: Plain style: a line at least this often (seconds) while items are being done.
EVERY_S = 30.0

#: The switches that turn other libraries' progress bars off, each read when its library
#: is imported: tqdm's default for every bar (``disable``), huggingface_hub's (transformers
#: follows it: "Loading weights") and datasets'.
OTHER_BARS_OFF: Mapping[str, str] = {
    "TQDM_DISABLE": "1",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
}
#: ``(module, function)``: the call that turns a library's bars off once it is imported.
OTHER_BARS_CALLS: tuple[tuple[str, str], ...] = (
    ("huggingface_hub.utils", "disable_progress_bars"),
    ("transformers.utils.logging", "disable_progress_bar"),
    ("datasets.utils.tqdm", "disable_progress_bars"),
)

Clock = Callable[[], float]
T = TypeVar("T")


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


def speak_alone(*, quiet: bool = False) -> None:
    """Make gate's progress the only progress on stderr, for this process and the
    processes it starts (module doc): the other libraries' bars off
    (:data:`OTHER_BARS_OFF`, and :data:`OTHER_BARS_CALLS` for those already imported);
    ``quiet`` (``gate -q``) also turns gate's own off (``GATE_PROGRESS=off``)."""
    if quiet:
        os.environ[ENV_VAR] = "off"
    os.environ.update(OTHER_BARS_OFF)
    for module_name, function in OTHER_BARS_CALLS:
        module = sys.modules.get(module_name)
        if module is None:
            continue
        with contextlib.suppress(Exception), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a library that refuses (its own variable set) stays
            getattr(module, function)()


def eta(elapsed: float, done: int, total: int | None) -> float | None:
    """Seconds left: ``elapsed / done * (total - done)``; ``None`` before the first item or
    without a total (never negative: a count past the total leaves 0)."""
    if not total or done <= 0:
        return None
    return max(0.0, elapsed / done * (total - done))


def format_seconds(seconds: float) -> str:
    """``12.3s`` below a minute, ``4m05s`` below an hour, ``1h02m`` above."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


@dataclass
class _PlainTask:
    """One task of the plain style: counts and the throttling state."""

    sink: Sink
    description: str
    total: int | None
    started: float
    done: int = 0
    last_line: float = 0.0
    done_at_last_line: int = 0
    last_tenth: int = 0
    #: The heartbeat thread and the work's thread both update the counters.
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        self.last_line = self.started

    def __call__(self, n: int = 1) -> None:
        with self.lock:
            self.done += n
            now = self.sink.clock()
            since = now - self.last_line
            if since < self.sink.interval:
                return
            if self.total and self.done >= self.total:
                return  # the done line follows
            tenth = self.done * 10 // self.total if self.total else 0
            due = since >= self.sink.every and self.done > self.done_at_last_line
            if tenth <= self.last_tenth and not due:
                return
            self.last_tenth = max(self.last_tenth, tenth)
            self._line_at(now)

    def beat(self) -> None:
        """The heartbeat: a line once ``every`` seconds have passed without one, whether
        or not an item was done (a model loading, or one long batch, still shows)."""
        with self.lock:
            now = self.sink.clock()
            if now - self.last_line >= self.sink.every:
                self._line_at(now)

    def _line_at(self, now: float) -> None:
        self.sink.write(self.line(now))
        self.last_line = now
        self.done_at_last_line = self.done

    def line(self, now: float) -> str:
        """``label: 16/64 (25%), 12.0s elapsed, ~36.0s left`` (no total: ``label: 16 done,
        12.0s elapsed``, or ``label: working, ...`` before the first item)."""
        elapsed = now - self.started
        if not self.total:
            counted = f"{self.done} done" if self.done else "working"
            return f"{self.description}: {counted}, {format_seconds(elapsed)} elapsed"
        pct = 100 * self.done // self.total
        left = eta(elapsed, self.done, self.total)
        tail = f", ~{format_seconds(left)} left" if left is not None else ""
        return (
            f"{self.description}: {self.done}/{self.total} ({pct}%), "
            f"{format_seconds(elapsed)} elapsed{tail}"
        )

    def finish(self, state: str) -> None:
        with self.lock:
            self._finish(state)

    def _finish(self, state: str) -> None:
        elapsed = format_seconds(self.sink.clock() - self.started)
        count = f"{self.done}/{self.total}" if self.total else f"{self.done}" if self.done else ""
        self.sink.write(f"{self.description}: {state}{' ' + count if count else ''} in {elapsed}")


@dataclass
class Sink:
    """Where progress goes and how it looks; one rich display is shared by nested tasks."""

    stream: TextIO
    style: Style
    #: Plain style: minimum seconds between two intermediate lines of one task.
    interval: float = INTERVAL_S
    #: Plain style: a line at least this often (seconds): on a step with work done since
    #: the last line, else from the heartbeat.
    every: float = EVERY_S
    #: Seconds from an arbitrary origin (``time.monotonic``; a fake one in tests).
    clock: Clock = time.monotonic
    #: Plain style: a thread that calls each open task's heartbeat (off in unit tests).
    heartbeat: bool = True
    _progress: Any = field(default=None, repr=False)
    _active: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def write(self, text: str) -> None:
        """One plain line (never raises: progress must not break the work)."""
        if self.style == "off":
            return
        with self._lock:
            self._write(text)

    def _write(self, text: str) -> None:
        try:
            if self._progress is not None:
                self._progress.console.print(PREFIX + text, markup=False, highlight=False)
            else:
                self.stream.write(PREFIX + text + "\n")
                self.stream.flush()
        except (OSError, ValueError):
            pass

    def refresh(self) -> None:
        """Redraw the live bar now (rich's own thread redraws it four times a second)."""
        if self._progress is not None:
            with contextlib.suppress(OSError, ValueError):
                self._progress.refresh()

    @contextlib.contextmanager
    def task(
        self, description: str, total: int | None, *, counted_below: bool = False
    ) -> Iterator[Step]:
        """A task shown as a bar (rich) or start/progress/done lines (plain).

        ``counted_below``: :func:`advance` steps this task while it is the innermost one.
        """
        if self.style == "off":
            with _counting(_ignore if counted_below else None):
                yield _ignore
            return
        if self.style == "rich":
            with (
                self._rich_task(description, total) as step,
                _counting(step if counted_below else None),
            ):
                yield step
            return
        self.write(f"{description} ..." if not total else f"{description}: 0/{total}")
        plain = _PlainTask(self, description, total, started=self.clock())
        state = "failed"
        try:
            with _counting(plain if counted_below else None), self._beating(plain):
                yield plain
            state = "done"
        except GeneratorExit:  # a tracked iteration left early
            state = "stopped"
            raise
        finally:
            plain.finish(state)

    @contextlib.contextmanager
    def _beating(self, plain: _PlainTask) -> Iterator[None]:
        """Call ``plain.beat`` from a daemon thread (every third of ``every``) inside the block."""
        if not self.heartbeat or self.every <= 0:
            yield
            return
        stop = threading.Event()

        def run() -> None:
            while not stop.wait(self.every / 3):
                with contextlib.suppress(Exception):  # progress never breaks the work
                    plain.beat()

        thread = threading.Thread(target=run, name="gate-progress-heartbeat", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(timeout=1.0)

    @contextlib.contextmanager
    def _rich_task(self, description: str, total: int | None) -> Iterator[Step]:
        progress = self._ensure_progress()
        task_id = progress.add_task(description, total=total)

        def step(n: int = 1) -> None:
            progress.update(task_id, advance=n, stepped_at=self.clock())

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
                _time_left_column(),
                console=console,
                transient=False,
                refresh_per_second=4,  # a low rate keeps the refresh thread off the work's cores
                # what the work prints stays where it goes (pytest captures it in the tiers)
                redirect_stdout=False,
                redirect_stderr=False,
                get_time=self.clock,
            )
            self._progress.start()
        return self._progress


def _time_left_column() -> Any:
    """A rich column: ``~36.0s left``, the plain lines' :func:`eta` at the last step less
    the time since (so it counts down between steps); blank before the first item,
    without a total and once finished."""
    from rich.progress import ProgressColumn
    from rich.text import Text

    class TimeLeft(ProgressColumn):
        def render(self, task: Any) -> Text:
            total = int(task.total) if task.total is not None else None
            stepped_at = task.fields.get("stepped_at")
            if stepped_at is None or task.start_time is None or task.finished:
                return Text("")
            now = task.start_time + (task.elapsed or 0.0)
            left = eta(stepped_at - task.start_time, int(task.completed), total)
            if left is None:
                return Text("")
            left = max(0.0, left - (now - stepped_at))
            return Text(f"~{format_seconds(left)} left", style="progress.remaining")

    return TimeLeft()


def _ignore(n: int = 1) -> None:
    return None


_SINK: contextvars.ContextVar[Sink | None] = contextvars.ContextVar("gate_progress", default=None)
#: The step :func:`advance` drives: the innermost task's, when it was opened ``counted_below``.
_COUNTED: contextvars.ContextVar[Step | None] = contextvars.ContextVar(
    "gate_progress_counted", default=None
)


@contextlib.contextmanager
def _counting(step: Step | None) -> Iterator[None]:
    token = _COUNTED.set(step)
    try:
        yield
    finally:
        _COUNTED.reset(token)


def current() -> Sink:
    """The installed sink, else one on ``sys.stderr`` (as it is at call time)."""
    sink = _SINK.get()
    if sink is not None:
        return sink
    return Sink(sys.stderr, choose_style(sys.stderr))


@contextlib.contextmanager
def task(
    description: str, total: int | None = None, *, counted_below: bool = False
) -> Iterator[Step]:
    """Show progress of ``total`` items (``None``: unknown, a spinner / start and done lines).

    With ``counted_below`` the work inside counts its items with :func:`advance`
    (a backend's batch loop); the yielded step may still be called directly.
    """
    with current().task(description, total, counted_below=counted_below) as step:
        yield step


def track(items: Iterable[T], description: str, total: int | None = None) -> Iterator[T]:
    """Each of ``items``, one step after each (``total`` defaults to ``len(items)`` if it has one)."""
    if total is None:
        try:
            total = len(items)  # type: ignore[arg-type]
        except TypeError:
            total = None
    with task(description, total) as step:
        for item in items:
            yield item
            step()


def advance(n: int = 1) -> None:
    """``n`` more items done in the innermost task opened with ``counted_below`` (else nothing)."""
    step = _COUNTED.get()
    if step is not None:
        with contextlib.suppress(Exception):  # progress never breaks the work
            step(n)


def note(message: str) -> None:
    """A one-line status message (``gate: <message>``) through the current sink."""
    current().write(message)


@contextlib.contextmanager
def to_stream(
    stream: TextIO,
    *,
    style: str | None = None,
    interval: float = INTERVAL_S,
    every: float = EVERY_S,
    clock: Clock = time.monotonic,
    heartbeat: bool = True,
) -> Iterator[Sink]:
    """Send progress to ``stream`` inside the block (style from :func:`choose_style`)."""
    sink = Sink(
        stream,
        choose_style(stream, style),
        interval=interval,
        every=every,
        clock=clock,
        heartbeat=heartbeat,
    )
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
    "EVERY_S",
    "INTERVAL_S",
    "OTHER_BARS_CALLS",
    "OTHER_BARS_OFF",
    "STYLES",
    "Clock",
    "Sink",
    "Step",
    "Style",
    "advance",
    "choose_style",
    "current",
    "eta",
    "format_seconds",
    "note",
    "speak_alone",
    "task",
    "terminal",
    "to_stream",
    "track",
]

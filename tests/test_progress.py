"""The progress API (:mod:`gate.progress`): plain lines, their rate, the time left, the bar.

A fake clock and a ``StringIO`` make every line exact; nothing here sleeps.
"""

from __future__ import annotations

import io
import os
import re
import threading
from collections.abc import Iterator
from typing import Any, cast

import pytest

from gate import progress


class FakeClock:
    """Seconds that move only when the test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def tick(self, seconds: float) -> None:
        self.now += seconds


def plain(clock: FakeClock, **kwargs: float) -> tuple[io.StringIO, Any]:
    """Plain lines into a ``StringIO`` on the fake clock; no heartbeat thread (tests call
    ``beat()`` themselves)."""
    out = io.StringIO()
    return out, progress.to_stream(out, style="plain", clock=clock, heartbeat=False, **kwargs)


def lines_of(out: io.StringIO) -> list[str]:
    return out.getvalue().splitlines()


def test_eta_is_mean_time_per_item_times_items_left() -> None:
    assert progress.eta(12.0, 16, 64) == pytest.approx(12.0 / 16 * 48)  # 36 s
    assert progress.eta(10.0, 0, 64) is None  # nothing done: no estimate
    assert progress.eta(10.0, 5, None) is None and progress.eta(10.0, 5, 0) is None
    assert progress.eta(10.0, 70, 64) == 0.0  # past the total: never negative
    assert progress.format_seconds(36.0) == "36.0s"
    assert progress.format_seconds(245.0) == "4m05s"
    assert progress.format_seconds(3720.0) == "1h02m"


def test_plain_lines_every_tenth_with_elapsed_and_time_left() -> None:
    clock = FakeClock()
    out, sink = plain(clock)
    with sink, progress.task("fidelity: scoring", total=20) as step:
        for _ in range(20):
            clock.tick(3.0)  # 3 s an item: each item clears the 2 s gap
            step()
    lines = lines_of(out)
    assert lines[0] == "gate: fidelity: scoring: 0/20"
    # 2 items in 6 s -> 3 s an item, 18 left -> 54 s
    assert lines[1] == "gate: fidelity: scoring: 2/20 (10%), 6.0s elapsed, ~54.0s left"
    assert lines[5] == "gate: fidelity: scoring: 10/20 (50%), 30.0s elapsed, ~30.0s left"
    assert lines[9] == "gate: fidelity: scoring: 18/20 (90%), 54.0s elapsed, ~6.0s left"
    assert lines[10] == "gate: fidelity: scoring: done 20/20 in 1m00s"
    assert len(lines) == 11  # start, one per tenth but the last, done: never one per item


def test_plain_lines_are_rate_limited_by_time_as_well() -> None:
    clock = FakeClock()
    out, sink = plain(clock, interval=2.0, every=30.0)
    with sink, progress.task("accuracy: MCQ", total=1000) as step:
        for _ in range(1000):
            clock.tick(0.001)  # fast items: ten tenths cross in one second
            step()
    # all within 1 s of the start: no intermediate line passes the 2 s gap
    assert lines_of(out) == [
        "gate: accuracy: MCQ: 0/1000",
        "gate: accuracy: MCQ: done 1000/1000 in 1.0s",
    ]

    clock = FakeClock()
    out, sink = plain(clock, interval=2.0, every=30.0)
    with sink, progress.task("probes", total=1000) as step:
        for _ in range(60):
            clock.tick(10.0)  # slow items: a tenth takes 1000 s, but a line comes every 30 s
            step()
    lines = lines_of(out)
    assert lines[1] == "gate: probes: 3/1000 (0%), 30.0s elapsed, ~2h46m left"
    assert len(lines) == 1 + 60 * 10 // 30 + 1  # one line per 30 s over 600 s


def test_no_line_without_work_done_and_unknown_totals() -> None:
    clock = FakeClock()
    out, sink = plain(clock)
    with sink, progress.task("loading demo") as step:
        clock.tick(40.0)
        step(0)  # a call that did nothing: no line although 30 s passed
        clock.tick(1.0)
        step(3)
    assert lines_of(out) == [
        "gate: loading demo ...",
        "gate: loading demo: 3 done, 41.0s elapsed",
        "gate: loading demo: done 3 in 41.0s",
    ]


def test_heartbeat_shows_a_phase_without_steps_is_alive() -> None:
    clock = FakeClock()
    out, sink = plain(clock, every=30.0)
    with sink:
        with progress.task("loading demo") as step:
            beat = cast(Any, step).beat  # what the heartbeat thread calls
            clock.tick(29.0)
            beat()  # under 30 s since the start line: nothing
            clock.tick(1.0)
            beat()
            clock.tick(10.0)
            beat()  # 10 s after the last line: nothing
            clock.tick(20.0)
            beat()
        with progress.task("generating", total=64) as step:
            clock.tick(45.0)
            cast(Any, step).beat()  # inside one long first batch
            step(8)  # 45 s after the heartbeat line: a tenth crossed
    assert lines_of(out) == [
        "gate: loading demo ...",
        "gate: loading demo: working, 30.0s elapsed",
        "gate: loading demo: working, 1m00s elapsed",
        "gate: loading demo: done in 1m00s",
        "gate: generating: 0/64",
        "gate: generating: 0/64 (0%), 45.0s elapsed",
        "gate: generating: done 8/64 in 45.0s",
    ]


def test_heartbeat_thread_writes_while_the_work_blocks() -> None:
    out = io.StringIO()
    with (
        progress.to_stream(out, style="plain", every=0.03),
        progress.task("one long batch", total=4),
    ):
        for _ in range(500):  # the work blocks; only the thread can write
            if "one long batch: 0/4 (0%)" in out.getvalue():
                break
            threading.Event().wait(0.01)
    assert "gate: one long batch: 0/4 (0%), " in out.getvalue()
    assert not any(t.name == "gate-progress-heartbeat" for t in threading.enumerate())


def test_zero_total_and_empty_tracks() -> None:
    clock = FakeClock()
    out, sink = plain(clock)
    with sink:
        with progress.task("nothing", total=0) as step:
            step(0)
        assert list(progress.track([], "empty")) == []
    assert lines_of(out) == [
        "gate: nothing ...",
        "gate: nothing: done in 0.0s",
        "gate: empty ...",
        "gate: empty: done in 0.0s",
    ]


def test_exceptions_inside_are_reported_and_raised_unchanged() -> None:
    clock = FakeClock()
    out, sink = plain(clock, interval=3600.0)
    with sink, pytest.raises(RuntimeError, match="boom"), progress.task("scoring", 100) as step:
        step(50)
        clock.tick(5.0)
        raise RuntimeError("boom")
    assert lines_of(out) == ["gate: scoring: 0/100", "gate: scoring: failed 50/100 in 5.0s"]


def test_track_counts_each_item_and_says_when_left_early() -> None:
    clock = FakeClock()
    out, sink = plain(clock, interval=0.0)
    with sink:
        seen = []
        for item in progress.track(["a", "b", "c", "d"], "checking"):
            clock.tick(1.0)
            seen.append(item)
        tracked = progress.track(iter(range(10)), "generator", total=10)
        for item in tracked:
            if item == 2:
                break
        tracked.close()  # type: ignore[attr-defined]
    assert seen == ["a", "b", "c", "d"]
    lines = lines_of(out)
    assert lines[0] == "gate: checking: 0/4"
    assert lines[1] == "gate: checking: 1/4 (25%), 1.0s elapsed, ~3.0s left"
    assert lines[4] == "gate: checking: done 4/4 in 4.0s"
    assert lines[-1] == "gate: generator: stopped 2/10 in 0.0s"


def test_advance_counts_into_the_innermost_counted_task_only() -> None:
    clock = FakeClock()
    out, sink = plain(clock, interval=0.0)
    progress.advance(5)  # no task: nothing happens
    with sink:
        with progress.task("generating", total=8, counted_below=True):
            progress.advance(4)  # what a backend's batch loop does
            with progress.task("inner", total=2) as inner:
                progress.advance(100)  # shadowed: counted nowhere
                inner(2)
            progress.advance(4)
        progress.advance(7)  # closed: nothing
    lines = lines_of(out)
    assert "gate: generating: 4/8 (50%), 0.0s elapsed, ~0.0s left" in lines
    assert "gate: inner: done 2/2 in 0.0s" in lines
    assert lines[-1] == "gate: generating: done 8/8 in 0.0s"


def test_off_prints_nothing_and_advance_stays_harmless() -> None:
    silent = io.StringIO()
    with progress.to_stream(silent, style="off"):
        with progress.task("x", total=3, counted_below=True) as step:
            progress.advance(2)
            step(1)
        progress.note("hidden")
    assert silent.getvalue() == ""


def test_style_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(progress.ENV_VAR, raising=False)
    assert progress.choose_style(io.StringIO()) == "plain"  # not a terminal: CI logs

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setenv("TERM", "xterm")
    assert progress.choose_style(Tty()) == "rich"
    monkeypatch.setenv("TERM", "dumb")
    assert progress.choose_style(Tty()) == "plain"
    monkeypatch.setenv(progress.ENV_VAR, "off")
    assert progress.choose_style(io.StringIO()) == "off"
    assert progress.choose_style(io.StringIO(), "rich") == "rich"


def test_rich_bar_shows_the_same_time_left_as_the_plain_lines() -> None:
    clock = FakeClock()
    out = io.StringIO()
    with (
        progress.to_stream(out, style="rich", clock=clock) as sink,
        progress.task("scoring", total=8) as step,
    ):
        clock.tick(4.0)
        step(2)
        sink.refresh()
        clock.tick(3.0)  # between steps the estimate counts down
        sink.refresh()
        progress.note("mid-way")
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.getvalue())  # colours and cursor moves
    assert "2/8" in text and "~12.0s left" in text  # 4 s / 2 items * 6 left
    assert "~9.0s left" in text  # 3 s later
    assert "8/8" in text and "gate: mid-way" in text


def test_rich_bar_shows_count_and_time_left() -> None:
    clock = FakeClock()
    out = io.StringIO()
    with progress.to_stream(out, style="rich", clock=clock):
        with progress.task("outer", total=2) as outer:
            with progress.task("inner", total=3, counted_below=True):
                clock.tick(1.0)
                progress.advance(3)
            outer(2)
        progress.note("after")
    text = out.getvalue()
    assert "outer" in text and "inner" in text and "3/3" in text and "2/2" in text
    assert "\x1b[" in text  # a live display: terminal control codes
    assert "gate: after" in text


def test_rich_task_failure_propagates_and_closes_the_display() -> None:
    out = io.StringIO()
    with progress.to_stream(out, style="rich", clock=FakeClock()) as sink:
        with pytest.raises(ValueError, match="bad"), progress.task("work", total=4) as step:
            step(1)
            raise ValueError("bad")
        assert sink._progress is None  # the display stopped with its last task
    assert "1/4" in out.getvalue()


# ------------------------------------------------------------ the loops that count


def test_an_in_process_backend_counts_each_batch_into_the_phase(tiny_backend: Any) -> None:
    from gate.models.backends.base import ScoreRequest

    clock = FakeClock()
    out, sink = plain(clock, interval=0.0)
    with sink:
        with progress.task("generating", total=5, counted_below=True):
            tiny_backend.generate([[1, 2, 3]] * 5, max_new_tokens=2, batch_size=2)
        with progress.task("scoring", total=5, counted_below=True):
            tiny_backend.score([ScoreRequest([1, 2], [3, 4])] * 5, top_k=2, batch_size=2)
    for phase in ("generating", "scoring"):
        assert [line for line in lines_of(out) if line.startswith(f"gate: {phase}")] == [
            f"gate: {phase}: 0/5",
            f"gate: {phase}: 2/5 (40%), 0.0s elapsed, ~0.0s left",  # one line per batch of 2
            f"gate: {phase}: 4/5 (80%), 0.0s elapsed, ~0.0s left",
            f"gate: {phase}: done 5/5 in 0.0s",
        ]


def test_requests_to_a_server_count_one_item_each() -> None:
    import asyncio

    from gate.engines.client import counted, gather_bounded

    async def answer(value: int) -> int:
        await asyncio.sleep(0)
        return value

    def factory(value: int) -> Any:
        return lambda: answer(value)

    out, sink = plain(FakeClock(), interval=0.0)
    with sink, progress.task("requests", total=6, counted_below=True):
        got = asyncio.run(gather_bounded([counted(factory(v)) for v in range(6)], 2))
    assert got == list(range(6))
    assert lines_of(out)[-1] == "gate: requests: done 6/6 in 0.0s"


@pytest.fixture
def environ_restored() -> Iterator[None]:
    """``os.environ`` as it was before the test (the command sets variables for good)."""
    saved = dict(os.environ)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def test_quiet_turns_progress_off_for_the_command(environ_restored: None) -> None:
    from click.testing import CliRunner

    from gate.commands.group import cli

    os.environ.pop(progress.ENV_VAR, None)
    assert "-q, --quiet" in CliRunner().invoke(cli, ["--help"]).output
    assert progress.choose_style(io.StringIO()) == "plain"
    result = CliRunner().invoke(cli, ["-q", "baseline", "--help"])
    assert result.exit_code == 0, result.output
    assert progress.choose_style(io.StringIO()) == "off"  # the sessions it starts inherit it


def test_other_libraries_bars_are_off_whatever_gates_style(environ_restored: None) -> None:
    import huggingface_hub.utils as hub
    import transformers.utils.logging as hf_logging

    for name in (progress.ENV_VAR, *progress.OTHER_BARS_OFF):
        os.environ.pop(name, None)
    was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.enable_progress_bar()  # as a fresh process has it
    try:
        shown = io.StringIO()
        assert list(hf_logging.tqdm(range(3), desc="Loading weights", file=shown)) == [0, 1, 2]
        assert "Loading weights: 100%|" in shown.getvalue()  # the bar that leaked into CI logs
        progress.speak_alone()
        assert {name: os.environ[name] for name in progress.OTHER_BARS_OFF} == dict(
            progress.OTHER_BARS_OFF
        )  # read by the libraries imported later, here or in the processes gate starts
        assert progress.choose_style(io.StringIO()) == "plain"  # gate's own lines stay
        assert hub.are_progress_bars_disabled() and not hf_logging.is_progress_bar_enabled()
        shown = io.StringIO()  # transformers' "Loading weights" bar, as from_pretrained opens it
        assert list(hf_logging.tqdm(range(3), desc="Loading weights", file=shown)) == [0, 1, 2]
        assert shown.getvalue() == ""
        progress.speak_alone(quiet=True)
        assert progress.choose_style(io.StringIO()) == "off"
    finally:
        if was_on:
            hf_logging.enable_progress_bar()
        else:
            hf_logging.disable_progress_bar()

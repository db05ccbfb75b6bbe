"""Output paths that cannot be written: exit 4, one line naming the path, the reason and the fix.

Every file the gate writes for the user (reports, plots, the step summary, the
latency history, a server log) is checked where the command validates its
inputs, before anything is read, measured or loaded; a write that still fails
(the disk filled up, a directory could not be created) is the same one-line
error, exit 4, never ``internal error`` (exit 3) with a traceback. The tests
run as root, where permission bits do not stop a write: a regular file where a
directory is needed, an over-long name and monkeypatched ``os.mkdir`` /
``tempfile.mkstemp`` stand in for a read-only or full file system.
"""

from __future__ import annotations

import errno
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest

from gate.cli import main
from gate.errors import ExitCode, UsageError
from gate.report.outputs import ReportTargets
from gate.session.finish import store_or_compare
from gate.session.inputs import prepare_session
from gate.session.options import SessionOptions
from gate.session.run import GateRun
from gate.store.writable import check_writable, check_writable_dir, writing
from gate.workflows.plan import packaged_store

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
REPORT_OPTIONS = ("--json", "--html", "--junit", "--markdown")


def _compare(*extra: str, candidate: Path = EXAMPLES / "candidate-critical.json") -> list[str]:
    return ["compare", str(candidate), "--baseline", str(EXAMPLES / "baseline.json"),
            "--thresholds", str(EXAMPLES / "thresholds.toml"), "--no-color", *extra]  # fmt: skip


def _a_file(tmp_path: Path) -> Path:
    path = tmp_path / "plain-file"
    path.write_text("x")
    return path


def _one_error_line(err: str, *needles: str) -> str:
    """stderr is one ``gate: error:`` line, exit 4, no traceback, naming every needle."""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err and "internal error" not in err, err
    assert lines[0].startswith("gate: error: "), err
    assert lines[0].endswith("ERROR (input, exit 4)"), err
    for needle in needles:
        assert needle in lines[0], err
    return lines[0]


def _refuse(
    monkeypatch: pytest.MonkeyPatch, function: str, number: int, under: Path | None = None
) -> None:
    """``os.mkdir`` or ``tempfile.mkstemp`` fail with ``number`` (for paths ``under`` a
    directory, when given): a read-only or full file system, which root cannot make."""
    module = os if function == "mkdir" else tempfile
    real = getattr(module, function)

    def refuse(*args: Any, **kwargs: Any) -> Any:
        where = str(args[0]) if args else str(kwargs.get("dir", ""))
        if under is not None and not where.startswith(str(under)):
            return real(*args, **kwargs)
        raise OSError(number, os.strerror(number), where or None)

    monkeypatch.setattr(module, function, refuse)


# ----------------------------------------------------------------------------- the checks


def test_check_writable_refuses_a_file_where_a_directory_is_needed(tmp_path: Path) -> None:
    target = _a_file(tmp_path) / "out" / "results.json"
    with pytest.raises(UsageError) as info:
        check_writable(target, "--json")
    line = info.value.format_line()
    assert (
        line
        == f"--json {target}: {target.parents[1]} is not a directory (choose a writable directory)"
    )
    assert info.value.exit_code == ExitCode.USAGE_ERROR


def test_check_writable_names_the_os_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "out" / "results.json"
    _refuse(monkeypatch, "mkstemp", errno.EACCES)  # a read-only directory, as a user sees it
    with pytest.raises(UsageError) as info:
        check_writable(target, "--html")
    assert info.value.format_line() == (
        f"cannot write --html {target}: Permission denied (choose a writable directory)"
    )


def test_check_writable_creates_nothing(tmp_path: Path) -> None:
    check_writable(tmp_path / "a" / "b" / "results.json", "--json")
    check_writable_dir(tmp_path / "c" / "d", "--json-dir")
    check_writable_dir(tmp_path, "--json-dir")
    assert list(tmp_path.iterdir()) == []  # no directory, no probe file left


def test_check_writable_refuses_an_over_long_name(tmp_path: Path) -> None:
    for target in (tmp_path / ("a" * 300) / "r.json", tmp_path / ("b" * 250 + ".json")):
        with pytest.raises(UsageError) as info:
            check_writable(target, "--junit")
        assert "File name too long" in info.value.message
        assert info.value.hint == "choose a shorter file name"


def test_check_writable_dir_refuses_a_file_and_an_unwritable_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(UsageError, match="is not a directory"):
        check_writable_dir(_a_file(tmp_path), "--json-dir")
    _refuse(monkeypatch, "mkstemp", errno.EROFS)
    with pytest.raises(UsageError, match="Read-only file system"):
        check_writable_dir(tmp_path, "--json-dir")


@pytest.mark.parametrize(
    ("number", "hint"),
    [
        (errno.EACCES, "choose a writable directory"),
        (errno.ENOTDIR, "choose a writable directory"),
        (errno.ENOSPC, "free disk space or choose a directory on another disk"),
    ],
)
def test_writing_turns_an_os_error_into_one_line(number: int, hint: str) -> None:
    with pytest.raises(UsageError) as info, writing("the HTML report", "out/r.html"):
        raise OSError(number, os.strerror(number))
    assert info.value.format_line() == (
        f"cannot write the HTML report out/r.html: {os.strerror(number)} ({hint})"
    )


# ------------------------------------------------------------------------- gate compare


@pytest.mark.parametrize("option", REPORT_OPTIONS)
def test_compare_refuses_a_report_under_a_file_before_reading_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str
) -> None:
    target = _a_file(tmp_path) / "out" / "report.out"
    missing = tmp_path / "no-such-measurements.json"  # never read: the path is refused first
    assert main(_compare(option, str(target), candidate=missing)) == ExitCode.USAGE_ERROR
    captured = capsys.readouterr()
    _one_error_line(captured.err, option, str(target), "is not a directory", "writable directory")
    assert captured.out == ""


@pytest.mark.parametrize("option", REPORT_OPTIONS)
def test_compare_refuses_an_unwritable_directory_up_front(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    option: str,
) -> None:
    target = tmp_path / "ro" / "report.out"
    _refuse(monkeypatch, "mkstemp", errno.EACCES)
    assert main(_compare(option, str(target))) == ExitCode.USAGE_ERROR
    captured = capsys.readouterr()
    _one_error_line(
        captured.err, f"cannot write {option} {target}: Permission denied", "writable directory"
    )
    assert captured.out == ""
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("option", REPORT_OPTIONS)
def test_compare_turns_a_failed_write_into_exit_4_and_writes_the_other_reports(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    option: str,
) -> None:
    """The check passes (nothing is created then); creating the directory fails at write time."""
    target = tmp_path / "new-dir" / "report.out"
    other = "--markdown" if option != "--markdown" else "--json"
    written = tmp_path / "other.out"
    _refuse(monkeypatch, "mkdir", errno.EACCES, under=tmp_path)
    code = main(_compare(option, str(target), other, str(written)))
    captured = capsys.readouterr()
    assert code == ExitCode.USAGE_ERROR
    _one_error_line(captured.err, str(target), "Permission denied", "choose a writable directory")
    assert "BLOCKED" in captured.out  # the comparison is still shown
    assert written.is_file()  # the report that could be written was written
    assert not target.parent.exists()


def test_compare_unwritable_github_step_summary_is_exit_4(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    summary = _a_file(tmp_path) / "summary.md"
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    out = tmp_path / "results.json"
    assert main(_compare("--json", str(out))) == ExitCode.USAGE_ERROR
    _one_error_line(capsys.readouterr().err, "GITHUB_STEP_SUMMARY", str(summary), "Not a directory")
    assert json.loads(out.read_text())["verdict"] == "block"


def test_import_refuses_a_json_under_a_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = _a_file(tmp_path) / "r.json"
    missing = tmp_path / "nope.jsonl"
    code = main(["import", "lm-eval", str(missing), str(missing), "--json", str(target)])
    assert code == ExitCode.USAGE_ERROR
    _one_error_line(capsys.readouterr().err, "--json", str(target), "writable directory")


# ------------------------------------------------------------- gate run, audit, demo


@pytest.mark.parametrize(
    "extra",
    [
        ("--tiers", "latency", "--history", "{file}/history"),
        ("--tiers", "fidelity", "--serve", "true", "--server-log", "{file}/logs/s.log"),
        ("--tiers", "fidelity", "--html", "{file}/r.html"),
    ],
)
def test_run_refuses_unwritable_outputs_before_loading(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: tuple[str, ...]
) -> None:
    file = _a_file(tmp_path)
    args = [arg.replace("{file}", str(file)) for arg in extra]
    argv = ["run", "--candidate", "demo", "--against", "fp32", "--store", str(packaged_store())]
    assert main([*argv, *args, "--dry-run"]) == ExitCode.USAGE_ERROR
    captured = capsys.readouterr()
    _one_error_line(captured.err, args[-2], str(file), "is not a directory")
    assert "dry run OK" not in captured.out


def test_audit_refuses_a_plot_under_a_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    history = tmp_path / "history"
    history.mkdir()
    plot = _a_file(tmp_path) / "plots" / "drift.png"
    argv = ["audit", "latency", "--history", str(history), "--plot", str(plot)]
    assert main(argv) == ExitCode.USAGE_ERROR
    _one_error_line(capsys.readouterr().err, "--plot", str(plot), "is not a directory")


def test_demo_refuses_a_json_dir_it_cannot_create(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _refuse(monkeypatch, "mkstemp", errno.EROFS)
    json_dir = tmp_path / "demo-results"
    assert main(["demo", "--tiers", "fidelity", "--json-dir", str(json_dir)]) == 4
    _one_error_line(capsys.readouterr().err, "--json-dir", "Read-only file system")
    assert not json_dir.exists()


# ---------------------------------------------------------------- a session's report


def test_a_session_whose_report_cannot_be_written_ends_4_and_still_shows_the_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After an hour of measuring, a failed write loses nothing: the report is still
    rendered, the other files are written, the run ends with the write's one line, exit 4."""
    target = tmp_path / "new-dir" / "results.json"
    html = tmp_path / "report.html"
    reports = ReportTargets(json=target, html=html)
    options = SessionOptions(store=packaged_store(), against=("fp32",), reports=reports)
    inputs = prepare_session("run", "demo", options)
    baseline = inputs.baselines["fp32"]
    run = GateRun(
        mode="run",
        model="demo",
        model_slug="demo",
        backend_factory=lambda: None,  # type: ignore[arg-type,return-value]
        tier_settings=inputs.tier_settings,
        baselines=inputs.baselines,
        measurements=dict(baseline.measurements),
    )
    _refuse(monkeypatch, "mkdir", errno.ENOSPC, under=tmp_path)
    end = store_or_compare(run, inputs, problem=None, lines=[])
    assert end.code == ExitCode.USAGE_ERROR
    assert end.render is not None  # the comparison is still printed
    (line,) = end.lines
    assert line == (
        f"gate: error: cannot write the results JSON {target}: No space left on device "
        "(free disk space or choose a directory on another disk)"
    )
    assert html.is_file() and not target.exists()


# ------------------------------------------------------------ the files a session appends to


def test_an_unwritable_latency_history_is_one_line(tmp_path: Path) -> None:
    from gate.hw.fingerprint import Fingerprint
    from gate.measurement import Measurement
    from gate.store import history

    directory = _a_file(tmp_path) / "history"
    fingerprint = Fingerprint(
        device="cpu", gpu_name=None, driver=None, cuda=None, torch="2.4.0",
        cpu_model="Fake CPU", cpu_cores=2,
    )  # fmt: skip
    with pytest.raises(UsageError) as info:
        history.append(directory, fingerprint, [Measurement("latency.e2e_p50", 0.4)])
    line = info.value.format_line()
    assert line.startswith(f"cannot write the latency history {directory}/")
    assert line.endswith(": Not a directory (choose a writable directory)")


def test_an_unwritable_server_log_is_one_line_and_starts_nothing(tmp_path: Path) -> None:
    from gate.engines.serve import ManagedServer

    log = _a_file(tmp_path) / "logs" / "server.log"
    server = ManagedServer(["true"], log_path=log)
    with pytest.raises(UsageError) as info:
        server.start()
    assert info.value.format_line() == (
        f"cannot write the server log {log}: Not a directory "
        "(give --server-log a path in a writable directory)"
    )
    assert server.process is None

"""History files and the weekly drift audit, on synthetic 12-week histories."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest

from gate.cli import main
from gate.errors import ExitCode
from gate.gating.drift import audit, change_point
from gate.hw.fingerprint import Fingerprint
from gate.measurement import Measurement
from gate.metrics.registry import all_metrics
from gate.store import history

FP = Fingerprint(
    device="cuda",
    gpu_name="NVIDIA Fake GPU 80GB",
    driver="550.54.15",
    cuda="12.4",
    torch="2.4.0",
    cpu_model="Fake CPU",
    cpu_cores=16,
    linear_classes=("Linear8bitLt",),
)
WEEK0 = datetime(2025, 3, 3, 3, 0, tzinfo=timezone.utc)


def write_weeks(directory: Path, e2e: list[float], tps: list[float]) -> Path:
    path = directory
    for week, (e, t) in enumerate(zip(e2e, tps, strict=True), start=1):
        path = history.append(
            directory,
            FP,
            [Measurement("latency.e2e_p50", e), Measurement("latency.tokens_per_s", t)],
            label=f"week {week}",
            time=WEEK0 + timedelta(weeks=week - 1),
        )
    return path


def noisy(level: float, n: int, seed: int, cv: float = 0.02) -> list[float]:
    rng = np.random.default_rng(seed)
    return list(level * (1 + cv * rng.standard_normal(n)))


def step_history(tmp_path: Path) -> Path:
    """12 weeks; from week 7 on, e2e is 30 % slower and throughput 23 % lower."""
    e2e = noisy(0.40, 6, 1) + noisy(0.52, 6, 2)
    tps = noisy(80.0, 6, 3) + noisy(61.5, 6, 4)
    write_weeks(tmp_path, e2e, tps)
    return tmp_path


def test_change_point_locates_a_step() -> None:
    values = noisy(1.0, 6, 5) + noisy(1.3, 6, 6)
    cp = change_point(values, seed=0)
    assert cp is not None and cp.index == 6 and cp.p_value < 0.01


def test_step_at_week_7_is_reported(tmp_path: Path) -> None:
    path = history.histories(step_history(tmp_path))[0]
    records, warnings = history.read(path)
    assert len(records) == 12 and warnings == []
    drifts = {d.metric: d for d in audit(records, all_metrics(), window=4)}
    for name in ("latency.e2e_p50", "latency.tokens_per_s"):
        d = drifts[name]
        assert d.severity.label == "critical", d.reason
        assert [cp.index + 1 for cp in d.change_points] == [7]
        assert "week 7" in d.reason


TIMINGS = {"latency.e2e_p50", "latency.tokens_per_s"}


def test_flat_noisy_history_audits_both_timings_and_passes_them(tmp_path: Path) -> None:
    for seed in range(5):
        directory = tmp_path / str(seed)
        write_weeks(directory, noisy(0.40, 12, 10 + seed, 0.03), noisy(80.0, 12, 20 + seed, 0.03))
        records, _ = history.read(history.histories(directory)[0])
        drifts = audit(records, all_metrics(), window=4)
        assert {d.metric for d in drifts} == TIMINGS
        for d in drifts:
            assert d.severity.label == "pass", (seed, d.metric, d.reason)


def test_faster_and_higher_throughput_history_audits_both_timings_and_passes_them(
    tmp_path: Path,
) -> None:
    write_weeks(tmp_path, noisy(0.40, 6, 1) + noisy(0.25, 6, 2), noisy(80, 6, 3) + noisy(120, 6, 4))
    records, _ = history.read(history.histories(tmp_path)[0])
    drifts = audit(records, all_metrics())
    assert {d.metric for d in drifts} == TIMINGS
    assert [d.severity.label for d in drifts] == ["pass", "pass"], [d.reason for d in drifts]
    # the same step the other way round is drift: the audit can tell the two apart
    worse = tmp_path / "worse"
    write_weeks(worse, noisy(0.25, 6, 1) + noisy(0.40, 6, 2), noisy(120, 6, 3) + noisy(80, 6, 4))
    records, _ = history.read(history.histories(worse)[0])
    assert {d.severity.label for d in audit(records, all_metrics())} == {"critical"}


def test_corrupt_and_partial_lines_are_skipped_with_a_warning(tmp_path: Path) -> None:
    path = history.histories(step_history(tmp_path))[0]
    lines = path.read_text().splitlines()
    lines.insert(3, "{not json")
    lines.insert(5, json.dumps({"schema": 99, "metrics": {}}))
    path.write_text("\n".join(lines) + "\n" + lines[-1][:40])  # a write cut mid-line
    records, warnings = history.read(path)
    assert len(records) == 12 and len(warnings) == 3
    # the next append starts on a fresh line and is readable
    history.append(
        tmp_path, FP, [Measurement("latency.e2e_p50", 0.5)], time=WEEK0 + timedelta(weeks=12)
    )
    records, warnings = history.read(path)
    assert len(records) == 13 and len(warnings) == 3


def test_cli_exit_1_on_drift_with_plots(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    step_history(tmp_path / "h")
    for suffix in (".png", ".svg"):
        out = tmp_path / f"drift{suffix}"
        code = main(["audit", "latency", "--history", str(tmp_path / "h"), "--plot", str(out)])
        assert code == ExitCode.BLOCKED
        assert out.stat().st_size > 1000
    text = capsys.readouterr().out
    assert "run 7 (week 7" in text and "DRIFT" in text


def test_cli_exit_0_on_flat_history_and_warns_on_corrupt_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_weeks(tmp_path, noisy(0.40, 12, 7), noisy(80.0, 12, 8))
    with open(path, "a") as fh:
        fh.write("garbage\n")
    assert main(["audit", "latency", "--history", str(tmp_path)]) == ExitCode.OK
    captured = capsys.readouterr()
    assert "NO DRIFT" in captured.out and "skipped unreadable record" in captured.err


def test_cli_bad_input_is_exit_4(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["audit", "latency", "--history", str(tmp_path / "missing")]) == ExitCode.USAGE_ERROR
    )
    assert main(["audit", "latency", "--history", str(tmp_path)]) == ExitCode.USAGE_ERROR
    step_history(tmp_path)
    bad_plot = ["audit", "latency", "--history", str(tmp_path), "--plot", str(tmp_path / "x.jpg")]
    assert main(bad_plot) == ExitCode.USAGE_ERROR
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("gate: error:") == 3


def test_cli_short_history_is_exit_5(tmp_path: Path) -> None:
    write_weeks(tmp_path, [0.4, 0.41], [80.0, 79.0])
    assert main(["audit", "latency", "--history", str(tmp_path)]) == ExitCode.NO_MEASUREMENTS


def test_thresholds_file_bounds_apply(tmp_path: Path) -> None:
    """A 30 % step passes when the thresholds allow 50 %/100 % relative."""
    step_history(tmp_path / "h")
    toml = tmp_path / "thresholds.toml"
    toml.write_text(
        '[metrics."latency.e2e_p50"]\nwarn = 0.5\ncritical = 1.0\nmode = "relative"\n'
        '[metrics."latency.tokens_per_s"]\nwarn = 0.5\ncritical = 1.0\nmode = "relative"\n'
    )
    args = ["audit", "latency", "--history", str(tmp_path / "h"), "--thresholds", str(toml)]
    assert main(args) == ExitCode.OK


def test_the_working_directorys_thresholds_apply_without_the_flag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Like every other command, the audit reads ./thresholds.toml when --thresholds is not given:
    the same 30 % step that blocks under the packaged bounds passes under 50 %/100 % ones."""
    step_history(tmp_path / "h")
    monkeypatch.chdir(tmp_path)
    args = ["audit", "latency", "--history", "h"]
    assert main(args) == ExitCode.BLOCKED
    assert "bounds: " in capsys.readouterr().out
    (tmp_path / "thresholds.toml").write_text(
        '[metrics."latency.e2e_p50"]\nwarn = 0.5\ncritical = 1.0\nmode = "relative"\n'
        '[metrics."latency.tokens_per_s"]\nwarn = 0.5\ncritical = 1.0\nmode = "relative"\n'
    )
    assert main(args) == ExitCode.OK
    assert f"bounds: {tmp_path / 'thresholds.toml'}" in capsys.readouterr().out

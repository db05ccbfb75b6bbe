"""``gate compare`` and ``gate baseline`` end to end, on the shipped example files."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from gate.cli import main
from gate.gating.thresholds import packaged_thresholds_path
from gate.measurement import from_samples
from gate.report.results_json import results_from_json
from gate.store.atomic import is_temporary
from gate.store.baseline import BaselineStore
from gate.store.measurements_file import save_measurements

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
THRESHOLDS = str(EXAMPLES / "thresholds.toml")
BASELINE = str(EXAMPLES / "baseline.json")


def _compare(candidate: str, *extra: str, baseline: str = BASELINE) -> list[str]:
    return [
        "compare",
        str(EXAMPLES / candidate),
        "--baseline",
        baseline,
        "--thresholds",
        THRESHOLDS,
        *extra,
    ]


def test_equal_candidate_is_approved(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(_compare("candidate-equal.json")) == 0
    out = capsys.readouterr().out
    assert "gate: APPROVED (exit 0)" in out
    assert "CRITICAL" not in out and "WARN " not in out


def test_warn_candidate_passes_unless_strict(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(_compare("candidate-warn.json")) == 0
    out = capsys.readouterr().out
    assert "APPROVED WITH WARNINGS (exit 0)" in out
    assert "WARN accuracy.mcq_acc vs" in out
    assert main(_compare("candidate-warn.json", "--strict")) == 1
    assert "gate: BLOCKED (exit 1)" in capsys.readouterr().out


def test_critical_candidate_blocks_and_names_metric_delta_bound(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out_json = tmp_path / "results.json"
    assert main(_compare("candidate-critical.json", "--json", str(out_json))) == 1
    out = capsys.readouterr().out
    assert "gate: BLOCKED (exit 1)" in out
    line = next(li for li in out.splitlines() if "CRITICAL accuracy.mcq_acc vs" in li)
    assert "-0.09" in line and "past critical -0.05" in line
    results = results_from_json(out_json)
    assert (results.verdict, results.exit_code) == ("block", 1)
    by_key = {v.key: v for v in results.verdicts}
    assert by_key["accuracy.mcq_acc"].severity.label == "critical"
    assert by_key["accuracy.mcq_acc"].delta == pytest.approx(-0.09)
    threshold = by_key["accuracy.mcq_acc"].threshold
    assert threshold is not None and threshold.bound.critical == 0.05
    assert results.candidate.recipe == "quanto-int2"


def test_store_refs_and_several_baselines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = ["--store", str(tmp_path / "baselines")]
    add = ["baseline", "add", BASELINE, "--model", "example-7b", *store]
    assert main([*add, "--label", "fp16", "--ref", "fp16"]) == 0
    warn = str(EXAMPLES / "candidate-warn.json")
    assert main(["baseline", "add", warn, "--model", "example-7b", "--label", "int8", *store]) == 0
    assert main(["baseline", "promote", "prod", "2", "--model", "example-7b", *store]) == 0
    assert main(["baseline", "promote", "prod", "1", "--model", "example-7b", *store]) == 0
    out = capsys.readouterr().out
    assert "stored baseline example-7b#0002 (int8)" in out
    assert "prev-prod -> #0002" in out
    assert main(["baseline", "list", *store]) == 0
    listing = capsys.readouterr().out
    assert "fp16, prod" in listing and "prev-prod" in listing
    assert main(["baseline", "show", "prev-prod", *store]) == 0
    assert "accuracy.mcq_acc" in capsys.readouterr().out
    code = main([*_compare("candidate-equal.json", baseline="fp16"), "-b", "prev-prod", *store])
    assert code == 0
    out = capsys.readouterr().out
    assert "vs" in out and "prev-prod" in out and "fp16" in out


# ----------------------------------------------------------------------------- crash safety

#: Runs ``gate ARGS`` with every file opened for writing in DIR wrapped so that its
#: first write puts only CUT (a fraction) of the bytes on disk, fsyncs them, says
#: READY on stderr and waits to be killed: a SIGKILL in the middle of the write,
#: whatever file (temporary or final) the command writes through.
_KILL_MID_WRITE = textwrap.dedent(
    """
    import builtins, io, os, sys, time

    target_dir, cut, args = os.path.realpath(sys.argv[1]), float(sys.argv[2]), sys.argv[3:]
    real_open = io.open

    class Stalling:
        def __init__(self, handle):
            self._handle = handle

        def write(self, data):
            self._handle.write(data[: int(len(data) * cut)])
            self._handle.flush()
            os.fsync(self._handle.fileno())
            print("READY", file=sys.stderr, flush=True)
            time.sleep(120)

        def __getattr__(self, name):
            return getattr(self._handle, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return self._handle.__exit__(*exc)

    def stalling_open(file, mode="r", *rest, **kwargs):
        handle = real_open(file, mode, *rest, **kwargs)
        name = os.readlink(f"/proc/self/fd/{file}") if isinstance(file, int) else file
        writing = any(flag in mode for flag in "wax+")
        if writing and os.path.dirname(os.path.realpath(name)) == target_dir:
            return Stalling(handle)
        return handle

    io.open = builtins.open = stalling_open
    from gate.cli import main
    main(args)
    """
)


def _kill_mid_write(directory: Path, cut: float, argv: list[str]) -> None:
    """Run ``gate argv`` until it is part-way through writing into ``directory``; SIGKILL it."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _KILL_MID_WRITE, str(directory), str(cut), *argv],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    try:
        seen = []
        for line in proc.stderr:  # until the write stalls (or the command ends without one)
            if line.strip() == "READY":
                break
            seen.append(line)
        else:
            pytest.fail(f"gate {argv[0]} wrote nothing into {directory}: {''.join(seen)}")
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL


def _published(directory: Path) -> dict[str, bytes]:
    """The files a reader sees: everything but the temporaries of interrupted writes."""
    return {p.name: p.read_bytes() for p in directory.iterdir() if not is_temporary(p.name)}


@pytest.mark.slow
def test_results_json_killed_mid_write_is_absent_or_the_previous_complete_file(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    target = out / "results.json"
    argv = _compare("candidate-critical.json", "--json", str(target))
    _kill_mid_write(out, 0.5, argv)
    assert _published(out) == {}  # the first write died: no results file at all
    assert main(argv) == 1
    complete = target.read_bytes()
    assert json.loads(complete)["verdict"] == "block"
    for cut in (0.0, 0.5, 1.0):  # a rewrite killed early, halfway, with every byte written
        _kill_mid_write(out, cut, _compare("candidate-equal.json", "--json", str(target)))
        assert _published(out) == {"results.json": complete}, cut


@pytest.mark.slow
def test_baseline_add_killed_mid_write_stores_nothing_and_numbers_stay(tmp_path: Path) -> None:
    store = tmp_path / "store"
    add = ["baseline", "add", BASELINE, "--model", "m", "--store", str(store), "--ref", "prod"]
    assert main([*add, "--label", "v1"]) == 0
    before = _published(store / "m")
    assert {"0001-v1.json", "refs.json"} <= set(before)
    for cut in (0.5, 1.0):
        _kill_mid_write(store / "m", cut, [*add, "--label", "v2"])
        assert _published(store / "m") == before, cut
    assert main([*add, "--label", "v2"]) == 0
    assert BaselineStore(store).resolve("prod", "m").number == 2  # numbering carried on


# ----------------------------------------------------------------------------- bad input


def _bad(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _assert_one_line_exit_4(
    argv: list[str], capsys: pytest.CaptureFixture[str], *needles: str
) -> None:
    assert main(argv) == 4
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("gate: error: ")
    for needle in needles:
        assert needle in err, err


def test_truncated_baseline(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = Path(BASELINE).read_text()
    bad = _bad(tmp_path, "trunc.json", text[: len(text) // 2])
    _assert_one_line_exit_4(
        _compare("candidate-equal.json", baseline=bad), capsys, "not valid JSON"
    )


def test_unknown_schema_version(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = json.loads(Path(BASELINE).read_text())
    data["schema_version"] = 7
    bad = _bad(tmp_path, "new.json", json.dumps(data))
    _assert_one_line_exit_4(
        _compare("candidate-equal.json", baseline=bad), capsys, "schema_version 7", "upgrade"
    )


def test_nan_measurements(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = Path(EXAMPLES / "candidate-equal.json").read_text()
    bad = _bad(tmp_path, "nan.json", text.replace('"value": 1.0', '"value": NaN', 1))
    assert '"value": NaN' in Path(bad).read_text()
    argv = ["compare", bad, "--baseline", BASELINE, "--thresholds", THRESHOLDS]
    _assert_one_line_exit_4(argv, capsys, "non-finite")


def test_missing_ref(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "baselines"
    assert (
        main(
            ["baseline", "add", BASELINE, "--model", "m", "--label", "fp16", "--store", str(store)]
        )
        == 0
    )
    capsys.readouterr()
    argv = [*_compare("candidate-equal.json", baseline="fp61"), "--store", str(store)]
    _assert_one_line_exit_4(argv, capsys, "unknown baseline ref 'fp61'", "did you mean 'fp16'?")


@pytest.mark.parametrize(
    ("toml", "needle"),
    [
        ('[metrics."accuracy.mcq_ac"]\nwarn = 0.02\n', "did you mean 'accuracy.mcq_acc'?"),
        ('[metrics."accuracy.mcq_acc"]\nwarn = -0.02\n', "negative bound"),
        ('[metrics."accuracy.mcq_acc"]\nwarn = nan\n', "bound is nan"),
    ],
)
def test_bad_thresholds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], toml: str, needle: str
) -> None:
    bad = _bad(tmp_path, "thresholds.toml", toml)
    argv = [
        "compare",
        str(EXAMPLES / "candidate-equal.json"),
        "--baseline",
        BASELINE,
        "--thresholds",
        bad,
    ]
    _assert_one_line_exit_4(argv, capsys, needle)


def test_incompatible_tokenizer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = json.loads((EXAMPLES / "candidate-equal.json").read_text())
    data["model"]["tokenizer_sha256"] = "00" * 32
    bad = _bad(tmp_path, "other.json", json.dumps(data))
    argv = ["compare", bad, "--baseline", BASELINE, "--thresholds", THRESHOLDS]
    _assert_one_line_exit_4(argv, capsys, "has tokenizer")


def test_console_script_has_no_traceback(tmp_path: Path) -> None:
    """The installed `gate` script (a real process): exit 4, one line on stderr."""
    text = Path(BASELINE).read_text()
    bad = _bad(tmp_path, "trunc.json", text[:100])
    exe = shutil.which("gate")
    cmd = [exe] if exe else [sys.executable, "-m", "gate.cli"]
    proc = subprocess.run(
        [*cmd, *_compare("candidate-equal.json", baseline=bad)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 4
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().startswith("gate: error: baseline")
    assert len(proc.stderr.strip().splitlines()) == 1


# ------------------------------------------------------------------------------ power


def _cga_files(tmp_path: Path, cand: np.ndarray, base: np.ndarray) -> tuple[Path, Path]:
    """A candidate and a baseline measurements file holding fidelity.cga per prompt."""
    ids = [f"p{i:03d}" for i in range(cand.size)]
    paths = (tmp_path / "cand.json", tmp_path / "base.json")
    for path, values in zip(paths, (cand, base), strict=True):
        save_measurements(path, [from_samples("fidelity.cga", [float(x) for x in values], ids)])
    return paths


def _power_compare(cand: Path, base: Path, out: Path, *extra: str) -> list[str]:
    return ["compare", str(cand), "--baseline", str(base), "--json", str(out),
            "--thresholds", str(packaged_thresholds_path()), *extra]  # fmt: skip


def test_small_cga_comparison_is_underpowered_and_strict_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """12 prompts, paired sd 0.2, no change: PASS, but a 0.10 drop could not have been seen."""
    rng = np.random.default_rng(4)
    base = rng.uniform(0.55, 0.65, 12)
    z = rng.normal(size=12)
    cand = base + 0.2 * (z - z.mean()) / z.std(ddof=1)
    assert float(np.std(cand - base, ddof=1)) == pytest.approx(0.2)
    cand_path, base_path = _cga_files(tmp_path, cand, base)
    out_json = tmp_path / "r.json"
    assert main(_power_compare(cand_path, base_path, out_json)) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert (
        "fidelity.cga: n = 12 can only detect a drop of 0.18; the critical bound is 0.10"
        " - UNDERPOWERED" in out
    )
    assert "gate: APPROVED (exit 0) - 0 critical, 0 warnings, 1 passed, 1 underpowered" in out
    doc = json.loads(out_json.read_text())
    (entry,) = doc["metrics"]
    assert entry["severity"] == "pass" and entry["mde"]["underpowered"] is True
    assert 0.10 < entry["mde"]["value"] < 0.2 and entry["mde"]["test"] == "paired bootstrap"
    assert doc["underpowered"] == [
        {"name": "fidelity.cga", "slice": None, "against": str(base_path),
         "message": "fidelity.cga: n = 12 can only detect a drop of 0.18; the critical bound"
                    " is 0.10 - UNDERPOWERED"}
    ]  # fmt: skip
    assert main(_power_compare(cand_path, base_path, out_json, "--strict")) == 1
    assert "gate: BLOCKED (exit 1)" in capsys.readouterr().out
    assert json.loads(out_json.read_text())["headline"] == "BLOCKED"
    strict_file = tmp_path / "thresholds.toml"
    strict_file.write_text(
        packaged_thresholds_path()
        .read_text()
        .replace("require_power = false", "require_power = true")
    )
    argv = _power_compare(cand_path, base_path, out_json)
    argv[argv.index("--thresholds") + 1] = str(strict_file)
    assert main(argv) == 1  # require_power blocks without --strict


def test_large_cga_comparison_with_tiny_spread_is_not_underpowered(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """400 prompts within 0.004 of the ideal: the MDE is far below the 0.10 bound."""
    cand = 1.0 - 0.004 * np.linspace(0.0, 1.0, 400)
    cand_path, base_path = _cga_files(tmp_path, cand, np.ones(400))
    out_json = tmp_path / "r.json"
    assert main(_power_compare(cand_path, base_path, out_json, "--strict")) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "UNDERPOWERED" not in out and "underpowered" not in out
    assert "gate: APPROVED (exit 0) - 0 critical, 0 warnings, 1 passed" in out
    doc = json.loads(out_json.read_text())
    (entry,) = doc["metrics"]
    assert entry["mde"]["underpowered"] is False and 0.0 < entry["mde"]["value"] < 0.01
    assert doc["underpowered"] == []

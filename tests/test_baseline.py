"""The baseline store: numbering, refs, artifacts, refusal of bad files, crash safety."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from gate.errors import BaselineError, DataError, ExitCode
from gate.measurement import Measurement, from_samples
from gate.provenance import ModelProvenance, sha256_file
from gate.store.atomic import create_exclusive, write_atomic
from gate.store.baseline import (
    Baseline,
    BaselineStore,
    check_compatible,
    load_baseline_file,
)


def _measurements(shift: float = 0.0) -> list[Measurement]:
    return [
        from_samples("accuracy.mcq_acc", [1.0, 0.0, 1.0, 1.0], ["q1", "q2", "q3", "q4"]),
        from_samples("latency.ttft_p50", [0.05 + shift, 0.051 + shift, 0.049 + shift]),
    ]


def _add(store: BaselineStore, label: str = "fp16", **kw: object) -> Baseline:
    return store.add(
        "tiny",
        label,
        _measurements(),
        provenance=ModelProvenance(model_family="llama", tokenizer_sha256="ab" * 32),
        environment={"python": "3.11"},
        **kw,  # type: ignore[arg-type]
    )


def test_add_numbers_and_roundtrips(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    first = _add(store)
    second = _add(store, "nf4")
    assert (first.number, second.number) == (1, 2)
    assert first.path.name == "0001-fp16.json"
    loaded = store.resolve("1", "tiny")
    assert loaded.measurements["accuracy.mcq_acc"].samples == (1.0, 0.0, 1.0, 1.0)
    assert loaded.measurements["accuracy.mcq_acc"].sample_ids == ("q1", "q2", "q3", "q4")
    assert loaded.provenance.model_family == "llama"
    assert [b.number for b in store.list("tiny")] == [1, 2]
    assert store.resolve("latest", "tiny").number == 2
    assert store.resolve("fp16").number == 1  # by label, the only model picked implicitly
    assert store.resolve("tiny/nf4").number == 2
    assert store.resolve(str(second.path)).label == "nf4"


def test_never_overwrites_a_number_taken_by_a_racing_writer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = BaselineStore(tmp_path)
    first = _add(store)
    before = first.path.read_bytes()
    # Simulate a writer that computed its number before `first` landed.
    calls = iter([1])
    original = BaselineStore._next_number
    monkeypatch.setattr(
        BaselineStore,
        "_next_number",
        lambda self, d: next(calls, None) or original(self, d),
    )
    second = _add(store, "fp16")
    assert second.number == 2
    assert first.path.read_bytes() == before


def test_concurrent_writers_get_distinct_numbers(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    results: list[int] = []
    lock = threading.Lock()

    def work() -> None:
        b = _add(store, "run")
        with lock:
            results.append(b.number)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == list(range(1, 9))
    assert len(store.list("tiny")) == 8


def test_create_exclusive_refuses_existing(tmp_path: Path) -> None:
    target = tmp_path / "x.json"
    create_exclusive(target, b"one")
    with pytest.raises(FileExistsError):
        create_exclusive(target, b"two")
    assert target.read_bytes() == b"one"
    assert [p.name for p in tmp_path.iterdir()] == ["x.json"]  # no temp file left


def test_promote_moves_ref_and_keeps_previous(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    _add(store)
    _add(store, "v2")
    assert store.promote("tiny", "prod", 1) is None
    assert store.refs("tiny") == {"prod": 1}
    assert store.promote("tiny", "prod", 2) == 1
    assert store.refs("tiny") == {"prod": 2, "prev-prod": 1}
    assert store.resolve("prod", "tiny").number == 2
    assert store.resolve("prev-prod", "tiny").number == 1
    with pytest.raises(BaselineError, match="does not exist"):
        store.promote("tiny", "prod", 9)


def test_artifacts_are_copied_hashed_and_verified(tmp_path: Path) -> None:
    pack = tmp_path / "pack.npz"
    pack.write_bytes(b"reference pack bytes")
    store = BaselineStore(tmp_path / "store")
    stored = _add(store, artifacts={"reference-pack": pack})
    path = stored.artifact_path("reference-pack")
    assert path.name == "0001-fp16.reference-pack.npz"
    assert stored.artifacts["reference-pack"]["sha256"] == sha256_file(pack)
    # A fresh load verifies again, and a tampered file is refused.
    reloaded = store.resolve("fp16", "tiny")
    path.write_bytes(b"tampered")
    with pytest.raises(BaselineError, match="does not match its sha256"):
        reloaded.artifact_path("reference-pack")
    with pytest.raises(BaselineError, match="no artifact 'other'"):
        reloaded.artifact_path("other")
    # Artifact files never shadow baseline files in listings.
    assert [b.number for b in store.list("tiny")] == [1]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"schema_version": 1, "kind": "baseline", "model_slug": "tiny", "num', "not valid JSON"),
        ("", "not valid JSON"),
        ('{"schema_version": 2, "kind": "baseline"}', "schema_version 2"),
        ('{"schema_version": 1, "kind": "baseline", "label": "x"}', "lacks"),
        ('{"schema_version": "1"}', "no integer schema_version"),
        ("[1, 2]", "not a JSON object"),
    ],
)
def test_bad_baseline_files_are_refused(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "tiny" / "0001-fp16.json"
    path.parent.mkdir()
    path.write_text(content)
    with pytest.raises(BaselineError, match=message) as info:
        BaselineStore(tmp_path).resolve("1", "tiny")
    assert info.value.exit_code == ExitCode.USAGE_ERROR
    assert "\n" not in info.value.format_line()


def test_nan_in_baseline_is_refused(tmp_path: Path) -> None:
    stored = _add(BaselineStore(tmp_path))
    text = stored.path.read_text().replace("0.05,", "NaN,", 1)
    stored.path.write_text(text)
    with pytest.raises((BaselineError, DataError), match="non-finite"):
        load_baseline_file(stored.path)


def test_unknown_ref_suggests_close_names(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    _add(store)
    store.promote("tiny", "prod", 1)
    with pytest.raises(BaselineError, match="unknown baseline ref 'prdo'") as info:
        store.resolve("prdo", "tiny")
    assert "did you mean 'prod'?" in info.value.format_line()
    with pytest.raises(BaselineError, match="no baselines for model 'tinyy'"):
        store.resolve("prod", "tinyy")
    with pytest.raises(BaselineError, match="does not exist"):
        store.resolve("missing.json")


def test_incompatible_tokenizer_or_family_is_refused(tmp_path: Path) -> None:
    stored = _add(BaselineStore(tmp_path))
    check_compatible(stored, ModelProvenance(model_family="llama"))  # no tokenizer hash
    check_compatible(stored, ModelProvenance())  # another tool's file: nothing to compare
    with pytest.raises(BaselineError, match="tokenizer"):
        check_compatible(stored, ModelProvenance(tokenizer_sha256="cd" * 32))
    # a backend's provenance names the vocabulary file's digest
    files = {"tokenizer.json": "ab" * 32, "x.jinja": "0"}
    check_compatible(stored, ModelProvenance(tokenizer_files=files))
    with pytest.raises(BaselineError, match="tokenizer"):
        check_compatible(stored, ModelProvenance(tokenizer_files={"tokenizer.json": "ef" * 32}))
    with pytest.raises(BaselineError, match="model_family"):
        check_compatible(stored, ModelProvenance(model_family="qwen2"))


def test_bad_names_are_refused(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    with pytest.raises(BaselineError, match="invalid label"):
        _add(store, "Bad Label")
    with pytest.raises(BaselineError, match="invalid model slug"):
        store.add("../escape", "x", _measurements(), ModelProvenance(), {})
    with pytest.raises(DataError, match="non-finite"):
        nan = [Measurement("accuracy.mcq_acc", float("nan"))]
        store.add("tiny", "x", nan, ModelProvenance(), {})


def test_write_atomic_replaces(tmp_path: Path) -> None:
    target = tmp_path / "refs.json"
    write_atomic(target, b"old")
    write_atomic(target, b"new")
    assert target.read_bytes() == b"new"
    umask = os.umask(0o022)
    os.umask(umask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~umask
    assert [p.name for p in tmp_path.iterdir()] == ["refs.json"]


# --------------------------------------------------------------------------- crash safety

_KILL_SCRIPT = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    import gate.store.atomic as atomic

    def pause(*args, **kwargs):  # between the fsynced temp file and its publication
        print("READY", flush=True)
        time.sleep(60)

    atomic.os.link = pause
    atomic.os.replace = pause
    from gate.cli import main
    main(sys.argv[1:])
    """
)


def _run_and_kill(args: list[str], cwd: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", _KILL_SCRIPT, *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip() == "READY", (line, proc.stderr.read() if proc.stderr else "")
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL


@pytest.mark.slow
def test_sigkill_during_write_and_promote_leaves_previous_files(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path / "baselines")
    _add(store)
    _add(store, "v2")
    store.promote("tiny", "prod", 1)
    snapshot = {p.name: p.read_bytes() for p in store.model_dir("tiny").iterdir()}
    measurements = tmp_path / "m.json"
    measurements.write_text(
        json.dumps(
            {
                "schema_version": 1,
                "kind": "measurements",
                "metrics": [{"name": "accuracy.mcq_acc", "value": 0.5}],
            }
        )
    )
    store_arg = ["--store", str(tmp_path / "baselines"), "--model", "tiny"]
    _run_and_kill(["baseline", "add", str(measurements), "--label", "v3", *store_arg], tmp_path)
    _run_and_kill(["baseline", "promote", "prod", "2", *store_arg], tmp_path)
    after = {
        p.name: p.read_bytes()
        for p in store.model_dir("tiny").iterdir()
        if not p.name.endswith(".tmp")
    }
    assert after == snapshot  # stray temp files only; every previous file intact
    assert store.refs("tiny") == {"prod": 1}
    assert [b.number for b in store.list("tiny")] == [1, 2]
    # The store keeps working after the crash: the next baseline is number 3.
    assert _add(store, "v3").number == 3

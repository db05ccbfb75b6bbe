"""Faults of the baseline store through the real CLI (docs/store-faults.md).

Concurrent writers, writers killed or interrupted between a baseline and its
artifacts, stores already inconsistent, bad arguments, and stores that cannot
be written (read-only, no permission, full disk). Each case checks the exit
code, that the message is one line naming the file or store, and what is on
disk afterwards.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gate.cli import main
from gate.errors import BaselineError
from gate.store.baseline import BaselineStore, load_baseline_file

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
MEASUREMENTS = str(EXAMPLES / "baseline.json")
_JSON_NAME = re.compile(r"^\d{4,}-[a-z0-9_-]+\.json$")


def _add_argv(store: Path, label: str, *extra: str, model: str = "m") -> list[str]:
    return ["baseline", "add", MEASUREMENTS, "--model", model, "--label", label,
            "--store", str(store), *extra]  # fmt: skip


def _files(directory: Path) -> dict[str, bytes]:
    if not directory.is_dir():
        return {}
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.name != ".lock"}


def _one_line_error(capsys: pytest.CaptureFixture[str], *needles: str) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("gate: error: "), err
    for needle in needles:
        assert needle in err, err
    return err


def _artifact(tmp_path: Path) -> Path:
    path = tmp_path / "mcq.json"
    path.write_text('{"kind": "gate.mcq_results", "questions": []}\n')
    return path


def _assert_complete_store(directory: Path) -> list[int]:
    """Every baseline loads with verified artifacts; every ref names one; returns the numbers."""
    store = BaselineStore(directory.parent)
    baselines = store.list(directory.name)
    for item in baselines:
        for name in item.artifacts:
            item.artifact_path(name)
    numbers = [b.number for b in baselines]
    for ref, number in store.refs(directory.name).items():
        assert number in numbers, (ref, number, numbers)
    return numbers


# ----------------------------------------------------------------------------- concurrency

_RACE_SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    from gate.cli import main
    import gate.commands.group  # loaded once here, not again in every forked writer

    store, measurements, artifact, rounds, writers = sys.argv[1:6]
    report = []
    for r in range(int(rounds)):
        slug = f"race{r}"
        go_read, go_write = os.pipe()
        children = {}
        for i in range(int(writers)):
            argv = ["baseline", "add", measurements, "--model", slug,
                    "--label", f"l{i % 5}", "--store", store]
            if i % 3 == 0:
                argv += ["--ref", "prod"]
            if i % 4 == 0:
                argv += ["--ref", f"r{i}"]
            if i % 2 == 0:
                argv += ["--artifact", f"mcq={artifact}"]
            pid = os.fork()
            if pid == 0:
                os.close(go_write)
                os.read(go_read, 1)  # all writers start together
                out = os.open(f"{store}/{slug}-{i}.log", os.O_WRONLY | os.O_CREAT, 0o644)
                os.dup2(out, 1)
                os.dup2(out, 2)
                code = main(argv)
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
            children[pid] = argv
        os.close(go_read)
        os.close(go_write)  # releases every writer at once
        for pid, argv in children.items():
            code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
            report.append({"slug": slug, "argv": argv, "code": code})
    print(json.dumps(report))
    """
)


@pytest.mark.slow
def test_sixteen_concurrent_adds_ten_times_get_distinct_contiguous_numbers(
    tmp_path: Path,
) -> None:
    """16 writer processes released at once (mixed labels, refs, artifacts), 10 rounds."""
    store = tmp_path / "store"
    store.mkdir()
    rounds, writers = 10, 16
    result = subprocess.run(
        [sys.executable, "-c", _RACE_SCRIPT, str(store), MEASUREMENTS,
         str(_artifact(tmp_path)), str(rounds), str(writers)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert len(report) == rounds * writers
    assert all(entry["code"] == 0 for entry in report), report
    for r in range(rounds):
        directory = store / f"race{r}"
        assert _assert_complete_store(directory) == list(range(1, writers + 1))
        claimed = []
        for i in range(writers):
            log = (store / f"race{r}-{i}.log").read_text()
            found = re.search(r"stored baseline race\d+#(\d{4}) \((l\d)\)", log)
            assert found is not None, log
            assert found.group(2) == f"l{i % 5}"
            claimed.append(int(found.group(1)))
        assert sorted(claimed) == list(range(1, writers + 1))  # each writer its own number
        refs = BaselineStore(store).refs(f"race{r}")
        prod_writers = {claimed[i] for i in range(writers) if i % 3 == 0}
        assert refs["prod"] in prod_writers and refs["prev-prod"] in prod_writers
        for i in range(0, writers, 4):
            assert refs[f"r{i}"] == claimed[i]
        names = {p.name for p in directory.iterdir()}
        assert not [n for n in names if n.endswith(".tmp")]


# ----------------------------------------------------------------------------- interruption

_PAUSE_AT_COMMIT = textwrap.dedent(
    """
    import os, re, sys, time
    import gate.store.atomic as atomic

    real_link = os.link

    def link(src, dst, *args, **kwargs):
        if re.match(r"^\\d{4,}-[a-z0-9_-]+\\.json$", os.path.basename(dst)):
            print("READY", flush=True)  # artifacts published, the baseline JSON not yet
            time.sleep(60)
        return real_link(src, dst, *args, **kwargs)

    atomic.os.link = link
    from gate.cli import main
    sys.exit(main(sys.argv[1:]))
    """
)


def _interrupt_at_commit(argv: list[str], sig: signal.Signals) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", _PAUSE_AT_COMMIT, *argv],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.strip() == "READY", (line, proc.stderr.read() if proc.stderr else "")
    proc.send_signal(sig)
    proc.wait(timeout=60)
    return proc


@pytest.mark.slow
def test_sigkill_between_artifacts_and_baseline_skips_no_number(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "store"
    assert main(_add_argv(store, "fp16", "--ref", "prod")) == 0
    before = _files(store / "m")
    argv = _add_argv(store, "sig", "--artifact", f"mcq={_artifact(tmp_path)}", "--ref", "prod")
    proc = _interrupt_at_commit(argv, signal.SIGKILL)
    assert proc.returncode == -signal.SIGKILL
    # Readers see the store as it was: the uncommitted number does not exist.
    assert [b.number for b in BaselineStore(store).list("m")] == [1]
    assert BaselineStore(store).refs("m") == {"prod": 1}
    assert "0002-sig.mcq.json" in _files(store / "m")  # the killed writer's leftover
    capsys.readouterr()
    # The next writer removes the leftovers with a warning and takes number 2.
    assert main(_add_argv(store, "next", "--artifact", f"mcq={_artifact(tmp_path)}")) == 0
    err = capsys.readouterr().err
    assert "warning: removed" in err and "0002-sig.mcq.json" in err, err
    after = _files(store / "m")
    assert set(after) - set(before) == {"0002-next.json", "0002-next.mcq.json"}
    assert _assert_complete_store(store / "m") == [1, 2]


@pytest.mark.slow
def test_sigint_between_artifacts_and_baseline_leaves_the_store_as_it_was(
    tmp_path: Path,
) -> None:
    store = tmp_path / "store"
    assert main(_add_argv(store, "fp16", "--ref", "prod")) == 0
    before = _files(store / "m")
    argv = _add_argv(store, "sig", "--artifact", f"mcq={_artifact(tmp_path)}", "--ref", "prod")
    proc = _interrupt_at_commit(argv, signal.SIGINT)
    assert proc.returncode == 2
    assert proc.stderr is not None and "gate: interrupted" in proc.stderr.read()
    assert _files(store / "m") == before  # no orphan artifact, no temp file, refs unchanged
    assert main(_add_argv(store, "next")) == 0
    assert _assert_complete_store(store / "m") == [1, 2]


# ----------------------------------------------------------------------------- bad arguments


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--ref", "Prod!"], "invalid ref 'Prod!'"),
        (["--ref", "latest"], "'latest' is reserved"),
        (["--ref", "prod", "--ref", "Bad Ref"], "invalid ref 'Bad Ref'"),
        (["--artifact", "mcq"], "bad --artifact 'mcq'"),
        (["--artifact", "mcq=/no/such/file.json"], "does not exist"),
        (["--artifact", "Bad Name=x"], "invalid artifact name"),
    ],
)
def test_bad_arguments_write_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], needle: str
) -> None:
    store = tmp_path / "store"
    assert main(_add_argv(store, "fp16", "--ref", "prod")) == 0
    before = _files(store / "m")
    capsys.readouterr()
    assert main(_add_argv(store, "x", *extra)) == 4
    _one_line_error(capsys, needle)
    assert _files(store / "m") == before


def test_bad_label_or_slug_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "store"
    assert main(_add_argv(store, "Bad Label")) == 4
    _one_line_error(capsys, "invalid label 'Bad Label'")
    assert main(_add_argv(store, "x", model="../up")) == 4
    _one_line_error(capsys, "invalid model slug")
    assert not store.exists()


# ----------------------------------------------------------------------------- inconsistent stores


def _store_with_two(tmp_path: Path) -> Path:
    store = tmp_path / "store"
    assert main(_add_argv(store, "fp16", "--ref", "prod")) == 0
    assert main(_add_argv(store, "int8")) == 0
    return store


def _rewrite(path: Path, **changes: object) -> None:
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


_READERS = [
    ["baseline", "show", "1", "--model", "m"],
    ["baseline", "list"],
    ["baseline", "promote", "prod", "1", "--model", "m"],
    ["compare", MEASUREMENTS, "--baseline", "m/1"],
]


@pytest.mark.parametrize("command", _READERS, ids=lambda c: " ".join(c[:2]))
def test_two_files_claiming_one_number_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    store = _store_with_two(tmp_path)
    twin = store / "m" / "0001-other.json"
    shutil.copy(store / "m" / "0001-fp16.json", twin)
    _rewrite(twin, label="other")
    refs_before = (store / "m" / "refs.json").read_bytes()
    capsys.readouterr()
    assert main([*command, "--store", str(store)]) == 4
    _one_line_error(capsys, "two baseline files claim #0001", "0001-fp16.json", "0001-other.json")
    assert (store / "m" / "refs.json").read_bytes() == refs_before


def test_a_writer_refuses_a_store_with_two_files_claiming_one_number(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = _store_with_two(tmp_path)
    twin = store / "m" / "0002-other.json"
    shutil.copy(store / "m" / "0002-int8.json", twin)
    _rewrite(twin, label="other")
    before = _files(store / "m")
    capsys.readouterr()
    assert main(_add_argv(store, "x")) == 4
    _one_line_error(capsys, "two baseline files claim #0002")
    assert _files(store / "m") == before


@pytest.mark.parametrize("command", _READERS, ids=lambda c: " ".join(c[:2]))
def test_a_number_contradicting_the_file_name_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    store = _store_with_two(tmp_path)
    _rewrite(store / "m" / "0001-fp16.json", number=5)
    capsys.readouterr()
    assert main([*command, "--store", str(store)]) == 4
    _one_line_error(capsys, "0001-fp16.json", "says #0005 (fp16)", "file name says #0001")


@pytest.mark.parametrize("command", _READERS, ids=lambda c: " ".join(c[:2]))
def test_an_unknown_metric_in_a_stored_baseline_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    store = _store_with_two(tmp_path)
    path = store / "m" / "0001-fp16.json"
    data = json.loads(path.read_text())
    data["metrics"][0]["name"] = "accuracy.mcq_accc"
    path.write_text(json.dumps(data))
    capsys.readouterr()
    assert main([*command, "--store", str(store)]) == 4
    _one_line_error(capsys, "0001-fp16.json", "unknown metric 'accuracy.mcq_accc'", "did you mean")


# ----------------------------------------------------------------------------- unwritable stores


def _fail_with(code: int) -> OSError:
    return OSError(code, os.strerror(code))


@pytest.mark.parametrize(
    ("target", "code"),
    [
        ("fsync", errno.ENOSPC),  # the disk fills while the data is flushed
        ("mkstemp", errno.EROFS),  # the file system is mounted read-only
        ("mkstemp", errno.EACCES),
    ],
)
def test_add_to_an_unwritable_store_is_exit_4_and_writes_nothing(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    target: str,
    code: int,
) -> None:
    store = tmp_path / "store"
    assert main(_add_argv(store, "fp16", "--ref", "prod")) == 0
    before = _files(store / "m")
    capsys.readouterr()

    def fail(*args: object, **kwargs: object) -> None:
        raise _fail_with(code)

    import gate.store.atomic as atomic

    module = atomic.os if target == "fsync" else atomic.tempfile
    monkeypatch.setattr(module, target, fail)
    argv = _add_argv(store, "x", "--artifact", f"mcq={_artifact(tmp_path)}", "--ref", "prod")
    assert main(argv) == 4
    _one_line_error(capsys, f"cannot write to the baseline store {store}", os.strerror(code))
    monkeypatch.undo()
    assert _files(store / "m") == before


def test_promote_in_a_read_only_store_is_exit_4_and_keeps_the_refs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _store_with_two(tmp_path)
    before = _files(store / "m")
    capsys.readouterr()
    import gate.store.atomic as atomic

    def read_only(*args: object, **kwargs: object) -> None:
        raise _fail_with(errno.EROFS)

    monkeypatch.setattr(atomic.tempfile, "mkstemp", read_only)
    assert main(["baseline", "promote", "prod", "2", "--model", "m", "--store", str(store)]) == 4
    _one_line_error(capsys, str(store), "Read-only file system")
    monkeypatch.undo()
    assert _files(store / "m") == before


def test_record_checks_the_store_and_names_before_measuring(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import gate.session.runner as runner
    import gate.store.atomic as atomic

    def never(*args: object, **kwargs: object) -> int:
        raise AssertionError("the tiers ran although the input was bad")

    monkeypatch.setattr(runner, "run_request", never)  # every session starts through it
    store = tmp_path / "store"
    record = ["baseline", "record", "--model", "demo", "--store", str(store)]
    assert main([*record, "--ref", "Prod!"]) == 4
    _one_line_error(capsys, "invalid ref 'Prod!'")
    assert main([*record, "--label", "Bad Label"]) == 4
    _one_line_error(capsys, "invalid label")

    def read_only(*args: object, **kwargs: object) -> None:
        raise _fail_with(errno.EROFS)

    monkeypatch.setattr(atomic.tempfile, "mkstemp", read_only)
    assert main(record) == 4
    _one_line_error(capsys, f"cannot write to the baseline store {store}", "Read-only")
    assert not store.exists()


def _gate_child(argv: list[str], **popen: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gate.cli", *argv],
        capture_output=True, text=True, timeout=300, **popen,  # type: ignore[call-overload]
    )  # fmt: skip


def _without_permission_override() -> list[str] | None:
    """A command prefix under which permission bits apply (root ignores them), or None."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return None
    caps = "-dac_override,-dac_read_search"
    prefix = [setpriv, f"--inh-caps={caps}", f"--bounding-set={caps}"]
    probe = subprocess.run([*prefix, "true"], capture_output=True)
    return prefix if probe.returncode == 0 else None


@pytest.mark.slow
def test_a_really_read_only_store_directory(tmp_path: Path) -> None:
    """A store directory without write permission, for a process that obeys permissions."""
    prefix = _without_permission_override()
    if prefix is None:
        pytest.skip("cannot run a child that obeys permission bits here")
    store = tmp_path / "store"
    assert main(_add_argv(store, "fp16")) == 0
    before = _files(store / "m")
    (store / "m").chmod(0o555)
    try:
        result = subprocess.run(
            [*prefix, sys.executable, "-m", "gate.cli", *_add_argv(store, "x", "--ref", "prod")],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    finally:
        (store / "m").chmod(0o755)
    assert result.returncode == 4, result.stderr
    err = result.stderr.strip()
    assert len(err.splitlines()) == 1, err
    assert f"cannot write to the baseline store {store}" in err and "Permission denied" in err
    assert _files(store / "m") == before


@pytest.mark.slow
def test_a_file_size_limit_during_add(tmp_path: Path) -> None:
    """A real failing write (RLIMIT_FSIZE: EFBIG, as a full disk fails with ENOSPC)."""
    import resource

    store = tmp_path / "store"
    assert main(_add_argv(store, "fp16")) == 0
    before = _files(store / "m")

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))

    result = _gate_child(_add_argv(store, "x"), preexec_fn=limit)
    assert result.returncode == 4, result.stderr
    err = result.stderr.strip()
    assert len(err.splitlines()) == 1, err
    assert f"cannot write to the baseline store {store}" in err and "File too large" in err
    assert _files(store / "m") == before


# ----------------------------------------------------------------------------- lock


def test_a_writer_gives_up_on_a_held_lock_with_one_line(tmp_path: Path) -> None:
    import fcntl

    store = BaselineStore(tmp_path, lock_timeout=0.2)
    directory = store.model_dir("m")
    directory.mkdir()
    with (directory / ".lock").open("a") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        from gate.store.measurements_file import load_measurements

        parsed = load_measurements(Path(MEASUREMENTS))
        with pytest.raises(BaselineError, match="still locked by another writer") as info:
            store.add("m", "x", parsed.measurements, parsed.model, {})
    assert "\n" not in info.value.format_line()
    assert _files(directory) == {}


def test_load_refuses_a_file_whose_label_contradicts_its_name(tmp_path: Path) -> None:
    store = _store_with_two(tmp_path)
    path = store / "m" / "0002-int8.json"
    _rewrite(path, label="fp16")
    with pytest.raises(BaselineError, match="file name says #0002 \\(int8\\)"):
        load_baseline_file(path)

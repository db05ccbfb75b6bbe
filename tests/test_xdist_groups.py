"""The suite's xdist groups are honoured by the installed pytest and pytest-xdist.

scripts/test.sh runs the suite on two workers with ``--dist loadgroup``, and
tests/conftest.py groups the tests: every file whole on one worker (its module
fixtures built once), the engine tests that share the session's vLLM servers
together on one worker (each server started once). pytest-xdist reads the
groups from the test ids; a pytest release that keeps the id elsewhere (9.2
with pytest-xdist 3.8) makes it ignore them without a word, and the suite
then builds every module fixture and starts every server on both workers.
This runs a small suite with the suite's own grouping hook on two workers and
checks where each test ran.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: scripts/test.sh's distribution options (checked against the script below).
DISTRIBUTION = ("--dist", "loadgroup", "--no-loadscope-reorder")

CONFTEST = """
import json, os
from pathlib import Path

import pytest

from tests.xdist_groups import pytest_collection_modifyitems  # the suite's grouping

LOG = Path(os.environ["GROUPS_LOG"])


def _log(kind, name):
    with LOG.open("a") as handle:
        handle.write(json.dumps([kind, name, os.environ["PYTEST_XDIST_WORKER"]]) + "\\n")


@pytest.fixture(scope="session")
def served():
    _log("server", "served")
    return "served"


@pytest.fixture(scope="module")
def module_fixture(request):
    _log("module", request.module.__name__)
"""

MODULE = """
import pytest

{mark}

@pytest.mark.parametrize("case", range({cases}))
def test_case({fixture}, case, request):
    from conftest import _log
    _log("test", request.node.nodeid)
"""


def test_files_and_the_engine_group_run_whole_on_one_worker(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "conftest.py").write_text(CONFTEST)
    # the light files hold the most tests: xdist's own order (by number of tests) would
    # hand them out first
    for name in ("alpha", "beta", "gamma"):
        module = MODULE.format(mark="", fixture="module_fixture", cases=6)
        (suite / f"test_{name}.py").write_text(module)
    for name in ("engine_one", "engine_two"):  # two files sharing the session's server
        module = MODULE.format(mark="pytestmark = pytest.mark.engine", fixture="served", cases=4)
        (suite / f"test_{name}.py").write_text(module)
    # an engine file with a server of its own (a module fixture): whole on one worker too
    own = MODULE.format(mark="pytestmark = pytest.mark.engine", fixture="module_fixture", cases=2)
    (suite / "test_engine_own.py").write_text(own)
    (suite / "pytest.ini").write_text("[pytest]\nmarkers =\n    engine: uses a server\n")
    log = tmp_path / "groups.jsonl"
    env = dict(os.environ, GROUPS_LOG=str(log), PYTHONPATH=str(ROOT))
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        env.pop(name, None)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-n",
            "2",
            *DISTRIBUTION,
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:randomly",
            str(suite),
        ],
        cwd=suite,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    tests = [(name, worker) for kind, name, worker in rows if kind == "test"]
    assert len(tests) == 28 and len({worker for _, worker in tests}) == 2  # both workers used
    workers_of: dict[str, set[str]] = {}
    for nodeid, worker in tests:
        workers_of.setdefault(nodeid.split("::", 1)[0], set()).add(worker)
    assert all(len(workers) == 1 for workers in workers_of.values()), workers_of
    assert workers_of["test_engine_one.py"] == workers_of["test_engine_two.py"]
    # each module fixture built once, the shared server started once
    builds = [name for kind, name, _ in rows if kind in ("module", "server")]
    assert sorted(builds) == [
        "served",
        "test_alpha",
        "test_beta",
        "test_engine_own",
        "test_gamma",
    ], builds
    # the longest first: the engine group opens one worker, the file with a server of its
    # own the other; on each worker the light files come after them
    first_on = {worker: nodeid.split("::", 1)[0] for nodeid, worker in reversed(tests)}
    assert sorted(first_on.values()) == ["test_engine_one.py", "test_engine_own.py"], first_on
    rank = {"test_engine_one.py": 0, "test_engine_two.py": 0, "test_engine_own.py": 1}
    for worker in first_on:
        ranks = [rank.get(n.split("::", 1)[0], 2) for n, w in tests if w == worker]
        assert ranks == sorted(ranks), (worker, tests)


def test_the_suite_script_distributes_as_checked_here() -> None:
    script = (ROOT / "scripts" / "test.sh").read_text(encoding="utf-8")
    assert f'-n "$WORKERS" {" ".join(DISTRIBUTION)})' in script

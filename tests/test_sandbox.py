"""The code sandbox: misbehaving answers fail, the gate goes on, correct answers pass."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from gate.data.probes import build_probes
from gate.data.probes.code import CodeTests, extract_code
from gate.data.probes.sandbox import SandboxLimits, network_namespace_available, run_python
from gate.errors import DataError

FAST = SandboxLimits(wall_s=2.0, cpu_s=1, memory_bytes=256 * 1024**2)

#: A hidden-test checker for ``add(a, b) -> a + b``.
ADD = CodeTests(
    "add",
    json.dumps([{"args": [1, 2], "expected": 3}, {"args": [-5, 5], "expected": 0}]),
    FAST,
)


def _run(code: str) -> tuple[str, float]:
    started = time.perf_counter()
    result = run_python({"main.py": code}, "main.py", limits=FAST)
    return result.status, time.perf_counter() - started


def test_correct_answer_passes() -> None:
    reply = "Here you go:\n```python\ndef add(a, b):\n    return a + b\n```\n"
    result = ADD.check(reply)
    assert result.passed, result.reason
    assert result.reason == "2/2 hidden tests passed"


def test_wrong_answer_and_type_strictness_fail() -> None:
    assert not ADD.check("def add(a, b):\n    return a - b").passed
    strict = CodeTests("f", json.dumps([{"args": [2], "expected": True}]), FAST)
    assert strict.check("def f(n):\n    return n % 2 == 0").passed
    assert not strict.check("def f(n):\n    return 1").passed  # 1 is not True
    assert not ADD.check("").passed
    assert not ADD.check("def other(a, b):\n    return a + b").passed


def test_early_exit_with_status_zero_does_not_pass() -> None:
    assert not ADD.check("import os\nos._exit(0)").passed
    assert not ADD.check("import sys\nsys.exit(0)").passed


def test_infinite_loop_is_a_timeout() -> None:
    status, seconds = _run("while True:\n    pass")
    assert status == "timeout"
    assert seconds < FAST.wall_s + 2
    assert not ADD.check("def add(a, b):\n    while True:\n        pass").passed


def test_sleeping_forever_hits_the_wall_clock() -> None:
    status, seconds = _run("import time\ntime.sleep(3600)")
    assert status == "timeout"
    assert seconds < FAST.wall_s + 2


def test_ten_gigabytes_fail_with_memory_error() -> None:
    status, seconds = _run("x = bytearray(10 * 1024**3)\nprint(len(x))")
    assert status == "memory"
    assert seconds < 2.5
    assert not ADD.check("BIG = bytearray(10 * 1024**3)\ndef add(a, b):\n    return a + b").passed


@pytest.mark.parametrize(
    "code",
    [
        "import socket\nsocket.socket(socket.AF_INET, socket.SOCK_STREAM)",
        "import socket\nsocket.create_connection(('127.0.0.1', 9))",
        "import socket\nsocket.getaddrinfo('example.com', 80)",
        "import urllib.request\nurllib.request.urlopen('http://127.0.0.1:9')",
        # swallowing the error does not hide the attempt
        "import socket\ntry:\n    socket.socket()\nexcept Exception:\n    pass",
    ],
)
def test_sockets_are_blocked(code: str) -> None:
    result = run_python({"main.py": code}, "main.py", limits=FAST)
    assert result.status == "blocked"
    assert any(v.startswith(("socket.", "urllib.")) for v in result.violations)


def test_socket_answer_scores_fail() -> None:
    code = "import socket\nsocket.socket()\ndef add(a, b):\n    return a + b"
    assert not ADD.check(code).passed
    swallowed = "import socket\ntry:\n    socket.socket()\nexcept OSError:\n    pass\n"
    assert not ADD.check(swallowed + "def add(a, b):\n    return a + b").passed


def test_deleting_and_writing_outside_are_blocked(tmp_path: Path) -> None:
    victim = tmp_path / "keep.txt"
    victim.write_text("precious")
    folder = tmp_path / "tree"
    folder.mkdir()
    (folder / "inner.txt").write_text("x")
    attempts = [
        f"import os\nos.remove({str(victim)!r})",
        f"import os\nos.unlink({str(victim)!r})",
        f"import shutil\nshutil.rmtree({str(folder)!r})",
        f"import os\nos.rename({str(victim)!r}, 'stolen.txt')",
        f"open({str(victim)!r}, 'w').write('gone')",
        f"import os\nos.symlink({str(victim)!r}, 'link')",
        f"import os\nfd = os.open({str(tmp_path)!r}, os.O_RDONLY)\nos.unlink('keep.txt', dir_fd=fd)",
        "import subprocess\nsubprocess.run(['rm', '-rf', '/tmp/x'])",
    ]
    for code in attempts:
        result = run_python({"main.py": code}, "main.py", limits=FAST)
        assert result.status == "blocked", (code, result.stderr[-300:])
    assert victim.read_text() == "precious"
    assert (folder / "inner.txt").exists()
    code = f"import os\nos.remove({str(victim)!r})\ndef add(a, b):\n    return a + b"
    assert not ADD.check(code).passed
    assert victim.exists()


def test_files_inside_the_work_directory_are_allowed() -> None:
    code = (
        "import os, shutil\n"
        "os.mkdir('d')\n"
        "open('d/f.txt', 'w').write('x')\n"
        "os.rename('d/f.txt', 'd/g.txt')\n"
        "shutil.rmtree('d')\n"
        "print('done')\n"
    )
    result = run_python({"main.py": code}, "main.py", limits=FAST)
    assert result.status == "ok", result.stderr
    assert result.stdout.strip() == "done"


def test_output_flood_is_capped() -> None:
    limits = SandboxLimits(wall_s=3.0, cpu_s=2, file_bytes=64 * 1024)
    result = run_python({"main.py": "print('x' * 10_000_000)"}, "main.py", limits=limits)
    assert result.status == "output_limit"
    assert len(result.stdout) <= limits.file_bytes + 4096


def test_network_namespace_when_available() -> None:
    result = run_python({"main.py": "print(1)"}, "main.py", limits=FAST)
    assert result.ok
    assert result.network_isolated is network_namespace_available()


def test_bad_inputs_are_data_errors() -> None:
    with pytest.raises(DataError):
        run_python({"../evil.py": "1"}, "../evil.py")
    with pytest.raises(DataError):
        run_python({"a.py": "1"}, "b.py")
    with pytest.raises(DataError):
        SandboxLimits(memory_bytes=1024)


def test_extract_code() -> None:
    assert extract_code("```python\ndef f():\n    return 1\n```") == "def f():\n    return 1"
    assert extract_code("def f(): return 1") == "def f(): return 1"
    assert extract_code("text\n```\nx = 1\n```\nmore ```y = 2```") == "x = 1"


def test_code_probes_reference_solutions_pass() -> None:
    """Every generated task is solvable: a hand-written solution per task passes its hidden tests."""
    solutions = {
        "sum_list": "def sum_list(xs):\n    return sum(xs)",
        "reverse_string": "def reverse_string(s):\n    return s[::-1]",
        "is_even": "def is_even(n):\n    return n % 2 == 0",
        "max_of": "def max_of(xs):\n    return max(xs)",
        "count_vowels": "def count_vowels(s):\n    return sum(c in 'aeiou' for c in s)",
        "factorial": "import math\ndef factorial(n):\n    return math.factorial(n)",
        "fib": "def fib(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a",
        "sort_desc": "def sort_desc(xs):\n    return sorted(xs, reverse=True)",
        "is_palindrome": "def is_palindrome(s):\n    return s == s[::-1]",
        "count_words": "def count_words(s):\n    return len(s.split())",
    }
    probes = build_probes("code", 20, seed=10_000)
    assert probes == build_probes("code", 20, seed=10_000)
    checked = 0
    for p in probes:
        task = p.tags[0].split(":")[1]
        if task in solutions:
            assert isinstance(p.checker, CodeTests)
            assert p.checker.check(solutions[task]).passed, (task, p.prompt)
            checked += 1
    assert checked >= 3

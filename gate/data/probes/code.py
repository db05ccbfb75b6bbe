"""Small Python code tasks run against hidden tests in :mod:`gate.data.probes.sandbox`.

Prompt: ``Write a Python function `{signature}` that {description}.`` The hidden
tests are input/expected-output pairs computed at generation time by a
reference implementation (seeded inputs), stored in the checker and never shown
to the model.

Checker (:class:`CodeTests`), exact:

1. the code is the content of the first fenced block of the reply (three
   backticks, any language tag), or the whole reply when it has no fence;
2. it runs as ``solution.py`` in the sandbox under a harness that imports it,
   calls the function on every case and compares the result with the expected
   value by *type and value* (``True`` is not ``1``; a tuple is not a list);
3. the probe passes only when the sandbox status is ``ok`` (no limit hit, no
   blocked event) and the harness reports every case correct on a line tagged
   with a per-run random token, which the harness removes from the environment
   before the answer's code runs (so an answer that exits early with status 0
   does not pass).
"""

from __future__ import annotations

import json
import math
import random
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gate.data.probes import CheckResult, Probe, unique_draws
from gate.data.probes.sandbox import SandboxLimits, run_python

__all__ = ["HARNESS", "CodeTests", "extract_code", "generate"]

_FENCE = re.compile(r"```(?:[\w+.-]*[ \t]*\n)?(.*?)```", flags=re.DOTALL)

#: The test harness run in the sandbox (reads ``cases.json``, imports ``solution.py``).
HARNESS = r"""
import importlib.util, json, os, sys

token = os.environ.pop("GATE_CODE_TOKEN", "")
with open("cases.json", encoding="utf-8") as fh:
    spec_data = json.load(fh)


def same(a, b):
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


spec = importlib.util.spec_from_file_location("solution", "solution.py")
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
fn = getattr(module, spec_data["function"])
good = 0
for case in spec_data["cases"]:
    try:
        got = fn(*case["args"])
    except Exception as exc:
        print("case failed:", type(exc).__name__, file=sys.stderr)
        continue
    if same(got, case["expected"]):
        good += 1
print("%s %d/%d" % (token, good, len(spec_data["cases"])))
"""


def extract_code(reply: str) -> str:
    """The first fenced block's content, or the whole reply when there is no fence."""
    fenced = _FENCE.search(reply)
    return (fenced.group(1) if fenced else reply).strip("\n")


@dataclass(frozen=True)
class CodeTests:
    """Run ``function`` from the reply's code on hidden ``cases`` (JSON) in the sandbox."""

    function: str
    #: JSON text: a list of ``{"args": [...], "expected": ...}``.
    cases: str
    limits: SandboxLimits = field(default_factory=SandboxLimits)
    kind: str = "code_tests"

    def check(self, reply: str) -> CheckResult:
        """Pass when every hidden case is right and the sandbox reports ``ok``."""
        code = extract_code(reply)
        if not code.strip():
            return CheckResult(False, "no code in the reply")
        token = secrets.token_hex(16)
        payload = json.dumps({"function": self.function, "cases": json.loads(self.cases)})
        result = run_python(
            {"solution.py": code, "harness.py": HARNESS, "cases.json": payload},
            "harness.py",
            limits=self.limits,
            env={"GATE_CODE_TOKEN": token},
        )
        if not result.ok:
            why = ", ".join(result.violations) or (result.stderr.strip().splitlines() or [""])[-1]
            return CheckResult(False, f"sandbox {result.status}: {why[:160]}")
        tagged = [ln for ln in result.stdout.splitlines() if ln.startswith(token + " ")]
        if not tagged:
            return CheckResult(False, "the tests did not run to the end")
        good, total = (int(x) for x in tagged[-1].split()[1].split("/"))
        return CheckResult(good == total, f"{good}/{total} hidden tests passed")


@dataclass(frozen=True)
class _Task:
    name: str
    signature: str
    description: str
    reference: Callable[..., Any]
    inputs: Callable[[random.Random], tuple[Any, ...]]


def _ints(rng: random.Random, lo: int = -20, hi: int = 20) -> list[int]:
    return [rng.randint(lo, hi) for _ in range(rng.randint(1, 7))]


def _word(rng: random.Random) -> str:
    return "".join(rng.choice("abcdeioprstu") for _ in range(rng.randint(1, 8)))


def _tasks(rng: random.Random) -> list[_Task]:
    k = rng.randint(2, 9)
    lo = rng.randint(-5, 0)
    hi = lo + rng.randint(3, 10)
    return [
        _Task("sum_list", "sum_list(xs)", "returns the sum of a list of integers", sum,
              lambda r: (_ints(r),)),
        _Task("scale", "scale(x)", f"returns x multiplied by {k}", lambda x: x * k,
              lambda r: (r.randint(-50, 50),)),
        _Task("reverse_string", "reverse_string(s)", "returns the string s reversed",
              lambda s: s[::-1], lambda r: (_word(r),)),
        _Task("is_even", "is_even(n)", "returns True when the integer n is even and False otherwise",
              lambda n: n % 2 == 0, lambda r: (r.randint(-30, 30),)),
        _Task("max_of", "max_of(xs)", "returns the largest element of a non-empty list of integers",
              max, lambda r: (_ints(r),)),
        _Task("count_vowels", "count_vowels(s)",
              "returns how many characters of the string s are one of a, e, i, o, u",
              lambda s: sum(ch in "aeiou" for ch in s), lambda r: (_word(r),)),
        _Task("factorial", "factorial(n)", "returns n! for an integer n >= 0",
              math.factorial, lambda r: (r.randint(0, 10),)),
        _Task("fib", "fib(n)", "returns the n-th Fibonacci number, with fib(0) = 0 and fib(1) = 1",
              _fib, lambda r: (r.randint(0, 20),)),
        _Task("sort_desc", "sort_desc(xs)",
              "returns a new list with the integers of xs in descending order",
              lambda xs: sorted(xs, reverse=True), lambda r: (_ints(r),)),
        _Task("is_palindrome", "is_palindrome(s)",
              "returns True when the string s reads the same forwards and backwards",
              lambda s: s == s[::-1], lambda r: (r.choice([_word(r), "abba", "level", "abc"]),)),
        _Task("count_words", "count_words(s)",
              "returns the number of words in s, where words are separated by spaces",
              lambda s: len(s.split()),
              lambda r: (" ".join(_word(r) for _ in range(r.randint(0, 5))),)),
        _Task("clamp", "clamp(x)", f"returns x limited to the range {lo} to {hi} inclusive",
              lambda x: min(max(x, lo), hi), lambda r: (r.randint(lo - 10, hi + 10),)),
        _Task("add_to_all", "add_to_all(xs)", f"returns a new list with {k} added to every element of xs",
              lambda xs: [x + k for x in xs], lambda r: (_ints(r),)),
        _Task("count_above", "count_above(xs)",
              f"returns how many elements of the list xs are greater than {k}",
              lambda xs: sum(x > k for x in xs), lambda r: (_ints(r, -5, 15),)),
    ]  # fmt: skip


def _fib(n: int) -> int:
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


def _draw_with(limits: SandboxLimits, cases: int) -> Callable[[random.Random], Probe]:
    def draw(rng: random.Random) -> Probe:
        task = rng.choice(_tasks(rng))
        rows = []
        for _ in range(cases):
            args = task.inputs(rng)
            rows.append({"args": list(args), "expected": task.reference(*args)})
        prompt = f"Write a Python function `{task.signature}` that {task.description}."
        checker = CodeTests(task.name, json.dumps(rows), limits)
        return Probe("", "code", "code", prompt, checker, (f"task:{task.name}",), 160)

    return draw


def generate(
    family: str,
    n: int,
    seed: int,
    *,
    limits: SandboxLimits | None = None,
    cases: int = 5,
) -> list[Probe]:
    """``n`` distinct code probes with ``cases`` hidden tests each, run under ``limits``."""
    return unique_draws(family, n, seed, _draw_with(limits or SandboxLimits(), cases))

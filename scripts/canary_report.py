"""The upgrade canary's report: which releases it tried instead of the lock, and what broke.

    python scripts/canary_report.py requirements/lock.txt out/canary/lock.txt \
        --junit out/canary/junit.xml --failed out/canary/failed.txt > out/canary/report.md

Reads the pins (``name==version``) of both locks, the suite's JUnit XML and
the names of the checks that failed (ruff, mypy, ...), and prints markdown.
"""

from __future__ import annotations

import argparse
import re
import xml.etree.ElementTree as ET
from pathlib import Path

PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)", re.M)


def pins(path: Path) -> dict[str, str]:
    """``{name: version}`` of a lock file."""
    return {name.lower(): version for name, version in PIN.findall(path.read_text())}


def changed(locked: dict[str, str], latest: dict[str, str]) -> list[tuple[str, str, str]]:
    """``(name, locked, newest)`` for every package whose version differs, added or dropped."""
    names = sorted(set(locked) | set(latest))
    return [
        (n, locked.get(n, "-"), latest.get(n, "-")) for n in names if locked.get(n) != latest.get(n)
    ]


def junit_summary(path: Path) -> tuple[dict[str, int], list[str]]:
    """Counts (tests, failures, errors, skipped) and the ids of failed or errored tests."""
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    failed: list[str] = []
    if not path.is_file():
        return counts, failed
    root = ET.parse(path).getroot()
    for suite in root.iter("testsuite"):
        for key in counts:
            counts[key] += int(suite.get(key, 0))
    for case in root.iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            failed.append(f"{case.get('classname', '')}::{case.get('name', '')}")
    return counts, failed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("lock", type=Path)
    parser.add_argument("latest", type=Path)
    parser.add_argument("--junit", type=Path, required=True)
    parser.add_argument("--failed", type=Path, required=True)
    args = parser.parse_args()
    diff = changed(pins(args.lock), pins(args.latest))
    counts, failed_tests = junit_summary(args.junit)
    failed_checks = args.failed.read_text().split("\n") if args.failed.is_file() else []
    failed_checks = [line for line in failed_checks if line.strip()]
    print("# Upgrade canary\n")
    if diff:
        print(f"Newest releases tried instead of the lock ({len(diff)}):\n")
        print("| package | lock | newest |\n| --- | --- | --- |")
        for name, old, new in diff:
            print(f"| {name} | {old} | {new} |")
    else:
        print("The newest releases are the lock's: nothing new to try.")
    verdict = "FAILED" if failed_checks or failed_tests else "PASSED"
    print(f"\n## Result: {verdict}\n")
    print(
        f"pytest: {counts['tests']} tests, {counts['failures']} failed, "
        f"{counts['errors']} errors, {counts['skipped']} skipped"
    )
    for line in failed_checks:
        print(f"- {line}")
    if failed_tests:
        print("\nFailed tests:\n")
        for test in failed_tests[:100]:
            print(f"- `{test}`")
        if len(failed_tests) > 100:
            print(f"- ... and {len(failed_tests) - 100} more (out/canary/junit.xml)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

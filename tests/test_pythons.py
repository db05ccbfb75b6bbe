"""The Pythons the distribution supports, and the one the project's locked set-up uses, agree.

pyproject's ``requires-python`` and classifiers, the CI job that installs the
wheel under each supported Python, and the docs name the same range (3.10 to
3.13); scripts/setup.sh accepts only the lock's Python (3.11), which is inside it.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import yaml
from packaging.specifiers import SpecifierSet

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
SUPPORTED = ["3.10", "3.11", "3.12", "3.13"]


def test_requires_python_and_the_classifiers_name_the_supported_range() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    spec = SpecifierSet(project["requires-python"])
    candidates = [f"3.{minor}" for minor in range(6, 20)]
    assert [v for v in candidates if spec.contains(f"{v}.0")] == SUPPORTED
    classified = [
        c.rsplit(":: ", 1)[1]
        for c in project["classifiers"]
        if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
    ]
    assert classified == SUPPORTED


def test_ci_installs_the_wheel_under_every_supported_python() -> None:
    ci = yaml.safe_load((ROOT / ".github" / "workflows" / "ci.yml").read_text())
    install = ci["jobs"]["install"]
    assert install["strategy"]["matrix"]["python"] == SUPPORTED
    assert "scripts/check_install.sh" in install["steps"][-1]["run"]


def test_setup_accepts_the_locks_python_which_the_distribution_supports() -> None:
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    (major, minor), *_ = re.findall(r"sys\.version_info\[:2\] != \((\d+), (\d+)\)", setup) or [
        (None, None)
    ]
    assert major is not None, "scripts/setup.sh no longer checks the Python version"
    locked = f"{major}.{minor}"
    assert f"CPython {locked}" in (ROOT / "requirements" / "lock.txt").read_text().splitlines()[0]
    assert locked in SUPPORTED
    readme = (ROOT / "README.md").read_text()
    assert f"CPython {locked}" in readme and "CPython 3.10-3.13" in readme
    assert "CPython 3.10 to 3.13" in (ROOT / "docs" / "github-action.md").read_text()

"""docs/architecture.md lists every module of the package.

The module table ("Modules and ownership of concerns") names each module by
its path. A cell may name several: a path relative to the first one's
directory (`gate/models/backends/hf.py`, `loading.py`), a directory that
covers everything below it (`gate/hw/`), a glob (`gate/commands/*.py`), or a
placeholder in angle brackets standing for any name (`gate/tiers/<tier>.py`).
A module of the package (``__init__.py`` aside) that no cell names fails here:
a new module gets its row when it is added.
"""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
#: The heading of the module table.
HEADING = "## Modules and ownership of concerns"


def table_patterns(text: str) -> list[str]:
    """The path patterns the first column of the module table names."""
    section = text.split(HEADING, 1)[1].split("\n## ", 1)[0]
    patterns: list[str] = []
    for line in section.splitlines():
        if not line.startswith("| `"):
            continue
        first_cell = line.split("|")[1]
        names = re.findall(r"`([^`]+)`", first_cell)
        base = ""
        for name in names:
            name = re.sub(r"<[^>]+>", "*", name)
            if "/" in name:
                base = name.rsplit("/", 1)[0] + "/" if not name.endswith("/") else name
                patterns.append(name)
            else:  # relative to the first path's directory
                patterns.append(base + name)
    return patterns


def covered(module: str, patterns: list[str]) -> bool:
    for pattern in patterns:
        if pattern.endswith("/") and module.startswith(pattern):
            return True
        if fnmatch.fnmatchcase(module, pattern):
            return True
    return False


def package_modules() -> list[str]:
    modules = []
    for root in ("gate", "suites"):
        for path in sorted((ROOT / root).rglob("*.py")):
            if path.name != "__init__.py" and "__pycache__" not in path.parts:
                modules.append(path.relative_to(ROOT).as_posix())
    return modules


def test_the_pattern_reader_reads_relative_paths_directories_globs_and_placeholders() -> None:
    text = (
        f"{HEADING}\n\n| module | concern |\n| --- | --- |\n"
        "| `gate/a/b.py`, `c.py` | x |\n| `gate/hw/` | y |\n| `gate/t/<tier>.py` | z |\n"
    )
    patterns = table_patterns(text)
    assert patterns == ["gate/a/b.py", "gate/a/c.py", "gate/hw/", "gate/t/*.py"]
    assert covered("gate/a/c.py", patterns) and covered("gate/hw/clock.py", patterns)
    assert covered("gate/t/fidelity.py", patterns)
    assert not covered("gate/a/d.py", patterns)


def test_every_module_of_the_package_has_a_row_in_the_architecture_doc() -> None:
    patterns = table_patterns(ARCHITECTURE.read_text(encoding="utf-8"))
    missing = [m for m in package_modules() if not covered(m, patterns)]
    assert not missing, f"modules without a row in {ARCHITECTURE.name}: {missing}"

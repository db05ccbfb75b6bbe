"""docs/architecture.md holds, sentence by sentence, where a test can read it.

* every module, attribute and file the document names exists: a dotted name
  ``gate.x.y`` (a module of the package, then attributes declared in it), a path
  ``gate/x/y.py`` (``suites/``, ``tests/``, ``docs/`` ... too; ``<tier>`` and ``*``
  stand for any name), and a bare ``y.py`` in a row of the module table (a file
  beside the row's first path);
* the top level holds only the faces the document lists, and each has its row
  in the layer table (``tests/test_layers.py`` checks the rows' rules);
* ``gate.cli`` is the one place an exception becomes the command's exit code:
  below it a ``GateError`` is read as an exit code only in the modules the
  document's sentence names, each ending one part of a command while the rest
  goes on;
* the modules the module table calls standard library only import no other
  library (``gate watched`` runs on a small hosted runner).

Everything else is read with :mod:`ast` and the file tree: nothing is imported.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
#: Where each package's modules live: the suites ship as ``gate.suites`` from ``suites/``.
PACKAGE_ROOTS: dict[str, Path] = {"gate.suites": ROOT / "suites", "gate": ROOT / "gate"}
#: Spellings of ``gate.<something>`` in the document that name no module, and what they are.
NOT_MODULES = {
    "gate.toml": "the run config file",
    "gate.mcq_results": "the kind of the per-question MCQ results file",
}


def doc_text() -> str:
    return ARCHITECTURE.read_text(encoding="utf-8")


# ------------------------------------------------------------------- names that resolve


def module_path(dotted: str) -> Path | None:
    """The source file of the package module ``dotted``, or ``None`` when there is none."""
    for package, directory in PACKAGE_ROOTS.items():
        if dotted == package or dotted.startswith(package + "."):
            base = directory.joinpath(*dotted.split(".")[package.count(".") + 1 :])
            for path in (base.with_suffix(".py"), base / "__init__.py"):
                if base != directory and path.is_file():
                    return path
            return directory / "__init__.py" if base == directory else None
    return None


@cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _declared(body: list[ast.stmt]) -> dict[str, ast.stmt]:
    """The names a module or class body binds: functions, classes, assignments, imports."""
    names: dict[str, ast.stmt] = {}
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names[node.name] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        names[name.id] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = node
        elif isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                names[(alias.asname or alias.name).split(".")[0]] = node
        elif isinstance(node, ast.If | ast.Try):
            names.update(_declared(node.body))
    return names


def resolves(dotted: str) -> bool:
    """Whether ``dotted`` is a module of the package, or a module then names declared in it
    (``gate.session.run.GateRun``; a class's own members for a further name)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        path = module_path(".".join(parts[:cut]))
        if path is None:
            continue
        body: list[ast.stmt] | None = _tree(path).body
        for name in parts[cut:]:
            if body is None:
                return True  # an attribute of a value: past what the source says
            found = _declared(body).get(name)
            if found is None:
                return False
            body = found.body if isinstance(found, ast.ClassDef) else None
        return True
    return False


_DOTTED = re.compile(r"(?<![\w./-])gate(?:\.[A-Za-z_]\w*)+")
_PATH = re.compile(r"(?<![\w./-])(?:gate|suites|tests|scripts|docs|examples)/[\w./<>*-]*")


def dotted_names(text: str) -> set[str]:
    return {name for name in _DOTTED.findall(text) if name not in NOT_MODULES}


def path_exists(text: str) -> bool:
    """Whether a path of the document exists (``<tier>`` and ``*`` match any name)."""
    pattern = re.sub(r"<[^>]+>", "*", text.rstrip("."))
    return any(ROOT.glob(pattern.rstrip("/"))) if "*" in pattern else (ROOT / pattern).exists()


def test_the_resolver_sees_modules_attributes_and_what_is_missing() -> None:
    assert resolves("gate.session.run.GateRun")
    assert resolves("gate.session.run.GateRun.load_build")
    assert resolves("gate.models.backends.loading.load_backend")
    assert resolves("gate.suites.test_latency")
    assert resolves("gate")
    assert not resolves("gate.session.multirun")
    assert not resolves("gate.session.run.NoSuchThing")
    assert not resolves("gate.session.run.GateRun.no_such_method")
    assert dotted_names("`gate.toml`, gate.cli.main and aggregate.py (`gate.x`).") == {
        "gate.cli.main",
        "gate.x",
    }
    assert path_exists("gate/tiers/<tier>.py") and path_exists("gate/commands/*.py")
    assert not path_exists("gate/session/multirun.py")


def test_every_module_and_attribute_the_document_names_exists() -> None:
    missing = sorted(name for name in dotted_names(doc_text()) if not resolves(name))
    assert not missing, f"docs/architecture.md names what the package lacks: {missing}"


def test_every_path_the_document_names_exists() -> None:
    missing = sorted({p for p in _PATH.findall(doc_text()) if not path_exists(p)})
    assert not missing, f"docs/architecture.md names paths the tree lacks: {missing}"


def _module_table_rows(text: str) -> list[list[str]]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(r"\|\s*module\s*\|\s*concern", line))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def test_the_files_a_module_row_names_lie_beside_its_first_path() -> None:
    """``| `gate/store/history.py`, `atomic.py` |``: ``atomic.py`` is ``gate/store/atomic.py``."""
    missing = []
    for row in _module_table_rows(doc_text()):
        first = _PATH.search(row[0])
        if first is None:
            continue
        spelt = first.group(0)
        directory = ROOT / (spelt if spelt.endswith("/") else spelt.rpartition("/")[0])
        for name in re.findall(r"`([\w-]+\.py)`", " ".join(row)):
            if "<" not in spelt and not (directory / name).is_file():
                missing.append(f"{row[0]}: {name}")
    assert not missing, f"files the module table names beside a row's path are missing: {missing}"


# --------------------------------------------------------- one place for the exit code

#: The sentence naming where below ``gate.cli`` a GateError is read as an exit code.
_EXIT_SENTENCE = re.compile(
    r"Below it a `GateError` is read as an exit code only where (.*?)\(checked by", re.S
)
#: What an exception is called where it is read: ``exc``, ``error``, ``state.errors[0]``,
#: ``failure``.
_ERROR_WORD = re.compile(r"(?:^|_)(?:exc|err|error|errors|failure)$")


def _bound_by_handlers(tree: ast.AST) -> set[str]:
    return {
        node.name for node in ast.walk(tree) if isinstance(node, ast.ExceptHandler) and node.name
    }


def _names_an_error(node: ast.expr, caught: set[str]) -> bool:
    while isinstance(node, ast.Subscript | ast.Call):
        node = node.value if isinstance(node, ast.Subscript) else node.func
    if isinstance(node, ast.Name):
        return node.id in caught or bool(_ERROR_WORD.search(node.id))
    if isinstance(node, ast.Attribute):
        return bool(_ERROR_WORD.search(node.attr))
    return False


def exception_exit_reads(source: str) -> list[int]:
    """The lines of ``source`` that read ``.exit_code`` of an exception: a name an ``except``
    clause binds, or a value called like one (``exc``, ``error``, ``errors[0]``, ``failure``).
    A result's, an outcome's or a candidate's ``exit_code`` is a decided code, not this."""
    tree = ast.parse(source)
    caught = _bound_by_handlers(tree)
    return sorted(
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr == "exit_code"
        and isinstance(node.ctx, ast.Load)
        and _names_an_error(node.value, caught)
    )


def test_the_exit_code_check_tells_an_error_from_a_result() -> None:
    source = (
        "try:\n    f()\nexcept GateError as problem:\n    code = problem.exit_code\n"
        "code = results.exit_code\n"
        "code = state.errors[0].exit_code\n"
        "code = failure.exit_code if failure else outcome.exit_code\n"
        "code = self.last_error.exit_code\n"
        "code = item.results.exit_code\n"
        "self.exit_code = 3\n"
    )
    assert exception_exit_reads(source) == [4, 6, 7, 8]


def test_only_the_cli_and_the_parts_the_document_names_read_an_errors_exit_code() -> None:
    found = _EXIT_SENTENCE.search(" ".join(doc_text().split()))
    assert found, "docs/architecture.md lost its sentence on where an error is an exit code"
    named = set(re.findall(r"`(gate(?:\.\w+)+)`", found.group(1)))
    readers = set()
    for package, directory in PACKAGE_ROOTS.items():
        for path in directory.rglob("*.py"):
            if exception_exit_reads(path.read_text(encoding="utf-8")):
                parts = path.relative_to(directory).with_suffix("").parts
                readers.add(".".join((package, *parts)).removesuffix(".__init__"))
    assert "gate.cli" in readers, "the check no longer sees gate.cli's conversion"
    assert readers - {"gate.cli"} == named, (
        f"a GateError read as an exit code outside gate.cli: {sorted(readers - named - {'gate.cli'})}"
        f"; named by the document but reading none: {sorted(named - readers)}"
    )


# ----------------------------------------------------------------------- the top level


def test_the_top_level_holds_only_the_faces_the_document_lists() -> None:
    found = re.search(r"The top level holds only the faces\s+\(([^)]*)\)", doc_text())
    assert found, "docs/architecture.md lost its list of the top level's faces"
    listed = set(re.findall(r"`(\w+)`", found.group(1)))
    faces = {p.stem for p in (ROOT / "gate").glob("*.py") if p.name != "__init__.py"}
    assert listed == faces, (
        f"listed, not in gate/: {listed - faces}; in gate/, not listed: {faces - listed}"
    )


# ------------------------------------------------------------- standard library only

_THIRD_PARTY = """
import importlib, json, sys
def libraries():
    tops = {m.split(".")[0] for m in sys.modules}
    return {m for m in tops if m not in sys.stdlib_module_names and m[0] != "_"} - {"gate"}
found, seen = {}, libraries()
for name in sys.argv[1:]:
    importlib.import_module(name)  # each one's own libraries, not those loaded before it
    found[name], seen = sorted(libraries() - seen), seen | libraries()
print(json.dumps(found))
"""


def test_the_modules_the_document_calls_standard_library_only_import_no_other_library() -> None:
    """``gate watched`` runs on the gate workflow's small hosted runner: no numpy, no torch."""
    named = []
    for row in _module_table_rows(doc_text()):
        path = _PATH.search(row[0])
        if "standard library" in row[1] and path is not None:
            named.append(".".join(Path(path.group(0)).with_suffix("").parts))
    assert "gate.ci.watched" in named, "the module table no longer says what gate watched needs"
    done = subprocess.run(
        [sys.executable, "-c", _THIRD_PARTY, *named],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert all(not libraries for libraries in loaded.values()), loaded

"""The layers of docs/architecture.md hold.

* no two modules of the package import each other, directly or round a longer
  cycle (imports inside functions included; imports only type checkers see are
  not executed and do not count for cycles);
* every "never imports" rule of the layer table in docs/architecture.md holds
  for every import of every module, those inside functions and under
  ``TYPE_CHECKING`` included;
* a tier takes nothing from the store but the public names of the reference
  pack's reader, ``gate.store.reference`` (no other store module, no private
  name, no pack arrays);
* validating input (recipes, model specs, the store, thresholds, the metric
  registry, a run config, the CLI itself) never imports torch or transformers;
* the explicit package list of pyproject.toml is the list of packages in the tree.

Imports are read from the source with :mod:`ast`, so nothing here depends on
what happens to be importable on this machine.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
#: Where each package's modules live: the suites ship as ``gate.suites`` from ``suites/``.
PACKAGE_ROOTS: dict[str, Path] = {"gate": ROOT / "gate", "gate.suites": ROOT / "suites"}
ARCHITECTURE = ROOT / "docs" / "architecture.md"


# ------------------------------------------------------------------------------- the tree


def _package_modules(package: str, directory: Path) -> Iterator[tuple[str, Path]]:
    for path in sorted(directory.rglob("*.py")):
        parts = path.relative_to(directory).with_suffix("").parts
        if "__pycache__" in parts or any(
            not (directory.joinpath(*parts[:i]) / "__init__.py").is_file()
            for i in range(1, len(parts))
        ):
            continue  # not inside a package (no __init__.py on the way)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        yield ".".join((package, *parts)), path


@cache
def all_modules() -> dict[str, Path]:
    """Every module of the package, by dotted name (``gate.suites.*`` from ``suites/``)."""
    modules: dict[str, Path] = {}
    for package, directory in PACKAGE_ROOTS.items():
        modules.update(_package_modules(package, directory))
    return modules


def tree_packages() -> set[str]:
    """Every package (a directory with ``__init__.py``) of the tree, by dotted name."""
    return {name for name, path in all_modules().items() if path.name == "__init__.py"}


# ---------------------------------------------------------------------------- the imports


@dataclass(frozen=True)
class Import:
    """One imported module: where (module and line), and whether only type checkers see it."""

    source: str
    target: str
    line: int
    type_only: bool


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _type_only_nodes(tree: ast.AST) -> set[int]:
    """Ids of the import nodes inside an ``if TYPE_CHECKING:`` body."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for statement in node.body:
                found.update(id(inner) for inner in ast.walk(statement))
    return found


def _absolute(module: str, is_package: bool, level: int, name: str | None) -> str:
    """The absolute module a (possibly relative) ``from`` import names."""
    if level == 0:
        return name or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, name] if name else base)


def module_imports(module: str, path: Path, modules: dict[str, Path]) -> list[Import]:
    """Every module ``module`` imports: package modules resolved, third parties by top name."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    type_only = _type_only_nodes(tree)
    out: list[Import] = []

    def add(target: str, node: ast.stmt) -> None:
        if target.split(".")[0] != "gate":
            target = target.split(".")[0]  # a third-party library, by its top-level name
        out.append(Import(module, target, node.lineno, id(node) in type_only))

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, node)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(module, path.name == "__init__.py", node.level, node.module)
            add(base, node)
            for alias in node.names:
                if f"{base}.{alias.name}" in modules:  # ``from pkg import submodule``
                    add(f"{base}.{alias.name}", node)
    return out


@cache
def all_imports() -> tuple[Import, ...]:
    """Every import of every module of the package."""
    modules = all_modules()
    return tuple(i for name, path in modules.items() for i in module_imports(name, path, modules))


def _covers(prefix: str, module: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


# ------------------------------------------------------------------------------ (a) cycles


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import cycle (``[a, b, ..., a]``) of the graph, or ``None`` when it has none."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(edges):
        if start not in state:
            cycle = visit(start)
            if cycle:
                return cycle
    return None


def test_the_cycle_finder_reports_a_cycle_and_accepts_a_tree() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"a"}}) == ["a", "a"]


def test_no_module_of_the_package_is_in_an_import_cycle() -> None:
    """Every import counts, those only type checkers see (``if TYPE_CHECKING:``) too: a
    circle hidden behind one is a circle of meaning all the same."""
    modules = all_modules()
    edges: dict[str, set[str]] = {name: set() for name in modules}
    for imp in all_imports():
        if imp.target in modules and imp.target != imp.source:
            edges[imp.source].add(imp.target)
    cycle = find_cycle(edges)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def _part(module: str) -> str:
    """The top-level part of a module: ``gate.session.plugin`` -> ``gate.session``; a face
    (``gate.cli``) is its own part."""
    return ".".join(module.split(".")[:2])


def test_no_two_top_level_parts_import_each_other_even_through_others() -> None:
    """Every arrow between the parts (``gate.models``, ``gate.store``, ``gate.cli`` ...)
    points down: the graph of parts, every import counted, has no cycle."""
    modules = all_modules()
    edges: dict[str, set[str]] = {_part(name): set() for name in modules if name != "gate"}
    for imp in all_imports():
        if imp.target not in modules or imp.target == "gate" or imp.source == "gate":
            continue
        source, target = _part(imp.source), _part(imp.target)
        if source != target:
            edges[source].add(target)
    assert len(edges) > 10 and any(edges.values())  # the walk saw the package
    cycle = find_cycle(edges)
    assert cycle is None, "the parts import each other: " + " -> ".join(cycle or [])


def test_the_walk_sees_imports_inside_functions_and_from_imports_of_submodules() -> None:
    imports = {(i.source, i.target) for i in all_imports()}
    # a function-level import (ModelSpec is imported where it is needed in the plugin)
    assert ("gate.session.plugin", "gate.models.model_spec") in imports
    # ``from gate.models.compress import quanto`` reaches the submodule
    assert ("gate.localize.locate", "gate.models.compress.quanto") in imports
    assert ("gate.models.backends.hf", "torch") in imports
    assert "gate.suites.test_latency" in all_modules()


def test_imports_only_type_checkers_see_are_marked(tmp_path: Path) -> None:
    source = tmp_path / "mod.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "import numpy as np\n"
        "if TYPE_CHECKING:\n"
        "    from gate.session.run import GateRun\n"
        "def f():\n"
        "    from . import sibling\n",
        encoding="utf-8",
    )
    found = {
        (i.target, i.type_only)
        for i in module_imports("gate.store.mod", source, {"gate.store.sibling": source})
    }
    assert found == {
        ("typing", False),
        ("numpy", False),
        ("gate.session.run", True),
        ("gate.store", False),
        ("gate.store.sibling", False),
    }


# ------------------------------------------------------------------------ (b) layer rules


@dataclass(frozen=True)
class Rule:
    """``subject`` never imports anything under ``denied`` unless it is under ``allowed``."""

    subject: str
    denied: tuple[str, ...]
    allowed: tuple[str, ...]

    def forbids(self, source: str, target: str) -> bool:
        if not _covers(self.subject, source) or target == "gate":
            return False  # another part's rule, or the package root (only __version__)
        if target.startswith("gate") and _covers(self.subject, target):
            return False  # inside the part itself
        if any(_covers(name, target) for name in self.allowed):
            return False
        return any(_covers(name, target) for name in self.denied)


_NAME = re.compile(r"`([A-Za-z_][\w.]*)`")


def parse_rules(markdown: str) -> list[Rule]:
    """The rules of the ``| part | owns | never imports |`` table of docs/architecture.md."""
    lines = markdown.splitlines()
    try:
        start = next(
            i for i, line in enumerate(lines) if re.match(r"\|\s*part\s*\|.*never imports", line)
        )
    except StopIteration:
        raise AssertionError(
            "docs/architecture.md has no '| part | owns | never imports |' table"
        ) from None
    rules: list[Rule] = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        subject = _NAME.fullmatch(cells[0])
        assert subject and len(cells) == 3, f"malformed layer row: {line}"
        for clause in cells[2].split(";"):
            denied, _, allowed = clause.partition(" except ")
            rules.append(
                Rule(subject.group(1), tuple(_NAME.findall(denied)), tuple(_NAME.findall(allowed)))
            )
    return rules


RULES = parse_rules(ARCHITECTURE.read_text(encoding="utf-8"))


def test_the_layer_table_names_every_part_and_only_real_modules() -> None:
    modules = all_modules()
    subjects = {rule.subject for rule in RULES}
    faces = {  # the top level's own modules (gate/*.py), each a part with its row
        name
        for name, path in modules.items()
        if name.count(".") == 1 and name.startswith("gate.") and path.name != "__init__.py"
    }
    packages = {name for name in tree_packages() if name.count(".") == 1}
    assert faces | packages <= subjects, f"parts without a row: {(faces | packages) - subjects}"
    for rule in RULES:
        assert rule.subject in modules, f"{rule.subject} is not a module of the package"
        assert rule.denied, f"the row of {rule.subject} forbids nothing"
        for name in (*rule.denied, *rule.allowed):
            if name.startswith("gate"):
                assert name in modules, f"{rule.subject}: {name} is not a module of the package"


def test_a_rule_forbids_what_it_names_and_allows_its_exceptions() -> None:
    rule, torch_rule = parse_rules(
        "| part | owns | never imports |\n| --- | --- | --- |\n"
        "| `gate.store` | x | `gate` except `gate.errors`, `gate.models.model_spec`; `torch` |\n"
    )
    assert torch_rule == Rule("gate.store", ("torch",), ())
    assert torch_rule.forbids("gate.store.reference", "torch")
    assert rule.forbids("gate.store.baseline", "gate.models.backends.hf")
    assert not rule.forbids("gate.store.baseline", "gate.models.model_spec")
    assert not rule.forbids("gate.store.baseline", "gate.store.atomic")
    assert not rule.forbids("gate.store.baseline", "gate")
    assert not rule.forbids("gate.models.model_spec", "gate.session")


@pytest.mark.parametrize("rule", RULES, ids=lambda r: f"{r.subject}:{','.join(r.denied)}")
def test_every_layer_rule_of_the_architecture_doc_holds(rule: Rule) -> None:
    broken = [
        f"{imp.source}:{imp.line} imports {imp.target}"
        for imp in all_imports()
        if rule.forbids(imp.source, imp.target)
    ]
    assert not broken, f"{rule.subject} must never import {', '.join(rule.denied)}: " + "; ".join(
        broken
    )


#: The arrays of a reference pack: the store's layout, read only inside ``gate.store``.
_PACK_LAYOUT = frozenset({"tensors"})


def pack_internals(source: str) -> list[str]:
    """What ``source`` touches of the reference pack's internals: private names imported
    from ``gate.store.reference`` and its arrays (``pack.tensors``), as ``line: what``."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module == "gate.store.reference":
            found += [f"{node.lineno}: imports {a.name}" for a in node.names if a.name[0] == "_"]
        elif isinstance(node, ast.Attribute) and node.attr in _PACK_LAYOUT:
            found.append(f"{node.lineno}: reads .{node.attr}")
    return found


def test_the_pack_internals_check_sees_arrays_and_private_names() -> None:
    source = (
        "from gate.store.reference import ReferencePack, _refuse\n"
        "def f(pack): return pack.tensors['tail_logmass'], pack.output_ids(0)\n"
    )
    assert pack_internals(source) == ["1: imports _refuse", "2: reads .tensors"]
    assert pack_internals("def f(pack): return pack.mean_tail_mass(3)\n") == []


def test_tiers_read_reference_packs_only_through_the_public_reader() -> None:
    broken = [
        f"{module}:{line}"
        for module, path in all_modules().items()
        if module.startswith("gate.tiers")
        for line in pack_internals(path.read_text(encoding="utf-8"))
    ]
    assert not broken, "gate.tiers reaches into the reference pack's layout: " + "; ".join(broken)


#: The one module of the store a tier may import (its public names only).
_TIER_STORE_READER = "gate.store.reference"


def tier_store_reach(module: str, source: str, *, is_package: bool = False) -> list[str]:
    """What ``module`` (a tier) takes from ``gate.store`` beyond the reference pack's public
    reader, as ``line: what``: another store module (``gate.store.atomic``, the package
    itself), a private name of :data:`_TIER_STORE_READER` (imported, or read as an
    attribute of the module bound by ``from gate.store import reference``)."""
    found: list[str] = []
    reader_aliases: set[str] = set()
    tree = ast.parse(source)

    def outside(target: str) -> bool:
        return _covers("gate.store", target) and not _covers(_TIER_STORE_READER, target)

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if outside(alias.name):
                    found.append(f"{node.lineno}: imports {alias.name}")
                elif alias.name == _TIER_STORE_READER and alias.asname:
                    reader_aliases.add(alias.asname)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(module, is_package, node.level, node.module)
            for alias in node.names:
                if base == "gate.store" and f"{base}.{alias.name}" == _TIER_STORE_READER:
                    reader_aliases.add(alias.asname or alias.name)
                elif outside(base) or (base == _TIER_STORE_READER and alias.name.startswith("_")):
                    found.append(f"{node.lineno}: imports {alias.name} from {base}")
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and (
                (isinstance(node.value, ast.Name) and node.value.id in reader_aliases)
                or ast.unparse(node.value) == _TIER_STORE_READER
            )
        ):
            found.append(f"{node.lineno}: reads {ast.unparse(node)}")
    return sorted(found, key=lambda entry: int(entry.split(":")[0]))


def test_the_tier_store_check_catches_every_way_past_the_public_reader() -> None:
    source = (
        "from gate.store.atomic import write_atomic\n"
        "import gate.store.schema\n"
        "from gate.store import mcq_results\n"
        "from gate.store.reference import ReferencePack, _refuse\n"
        "from ..store.judge_outputs import read_outputs\n"
        "from gate.store import reference as ref\n"
        "import gate.store\n"
        "def f():\n"
        "    from gate.store.baseline import BaselineStore\n"
        "    return ref._refuse, ref.ReferencePack\n"
    )
    assert tier_store_reach("gate.tiers.x", source) == [
        "1: imports write_atomic from gate.store.atomic",
        "2: imports gate.store.schema",
        "3: imports mcq_results from gate.store",
        "4: imports _refuse from gate.store.reference",
        "5: imports read_outputs from gate.store.judge_outputs",
        "7: imports gate.store",
        "9: imports BaselineStore from gate.store.baseline",
        "10: reads ref._refuse",
    ]
    allowed = (
        "from gate.store.reference import PromptLike, ReferencePack, prompt_set_sha256\n"
        "from gate.store import reference\n"
        "import gate.store.reference\n"
        "from gate.storeroom import x\n"
        "def f(pack):\n"
        "    return reference.ReferencePack, gate.store.reference.prompt_set_sha256\n"
    )
    assert tier_store_reach("gate.tiers.x", allowed) == []
    assert tier_store_reach(
        "gate.tiers.x", "import gate.store.reference\ngate.store.reference._refuse\n"
    ) == ["2: reads gate.store.reference._refuse"]


def test_tiers_import_from_the_store_only_the_reference_packs_public_reader() -> None:
    broken = [
        f"{module}:{entry}"
        for module, path in all_modules().items()
        if _covers("gate.tiers", module)
        for entry in tier_store_reach(
            module, path.read_text(encoding="utf-8"), is_package=path.name == "__init__.py"
        )
    ]
    assert not broken, (
        f"gate.tiers takes from gate.store more than the public names of {_TIER_STORE_READER} "
        "(a baseline artifact's file is read and written by its suite): " + "; ".join(broken)
    )


# ------------------------------------------------------------------- (c) torch stays out


_NO_TORCH = """
import json, sys
from pathlib import Path
import gate.models.recipes, gate.models.model_spec, gate.store.baseline, gate.store.reference
import gate.config, gate.gating.thresholds, gate.gating.compare, gate.metrics.registry
from gate.models.recipes import Recipe
from gate.models.model_spec import ModelSpec
from gate.session.run_config import load_run_config
str(Recipe.parse("prune-wanda:0.5")), ModelSpec.parse("demo").slug
config = load_run_config(Path(sys.argv[1]))
config.resolved()
gate.gating.thresholds.load_thresholds(None)
after_validation = sorted({"torch", "transformers"} & set(sys.modules))
import gate.cli
after_cli = sorted({"torch", "transformers"} & set(sys.modules))
import gate.models.backends.loading  # the check sees a model library once one is imported
after_backend = sorted({"torch", "transformers"} & set(sys.modules))
print(json.dumps({"validation": after_validation, "cli": after_cli, "backend": after_backend}))
"""


def test_validating_recipes_specs_thresholds_and_a_run_config_never_imports_torch(
    tmp_path: Path,
) -> None:
    config = tmp_path / "gate.toml"
    config.write_text(
        (ROOT / "gate.toml").read_text(encoding="utf-8")
        + '\n[[candidates]]\nname = "wanda"\nmodel = "demo"\nrecipe = "prune-wanda:0.5"\n'
        + "\n[tiers.fidelity]\nlimit = 8\n\n[tiers.accuracy]\nperplexity = false\n"
        + "\n[tiers.capability]\nseed = 7\n\n[tiers.latency]\nruns = 3\n",
        encoding="utf-8",
    )
    done = subprocess.run(
        [sys.executable, "-c", _NO_TORCH, str(config)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert loaded["validation"] == [] and loaded["cli"] == []
    assert "torch" in loaded["backend"]  # the check does see a model library


# ----------------------------------------------------------------- (d) the package list


def test_pyproject_lists_exactly_the_packages_of_the_tree() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    setuptools = config["tool"]["setuptools"]
    listed = setuptools["packages"]
    assert len(listed) == len(set(listed)), "a package is listed twice"
    assert set(listed) == tree_packages()
    assert setuptools["package-dir"] == {"gate.suites": "suites"}


# ---------------------------------------------------------------- torch at module level

#: The sentence of docs/architecture.md naming the parts that import torch at module level.
_TORCH_SENTENCE = re.compile(r"torch is imported at module level\s+only by (.*?), and inside", re.S)


def torch_at_module_level(path: Path) -> bool:
    """Whether ``path`` imports torch when it is imported: an import statement outside every
    function and class body (inside a module-level ``if``/``try`` too), not only for type
    checkers."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    type_only = _type_only_nodes(tree)
    pending: list[ast.AST] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if id(node) not in type_only:
            if isinstance(node, ast.Import) and any(
                a.name.split(".")[0] == "torch" for a in node.names
            ):
                return True
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "torch":
                return True
        pending.extend(ast.iter_child_nodes(node))
    return False


def test_the_torch_check_sees_guarded_imports_and_skips_functions(tmp_path: Path) -> None:
    cases = {
        "import torch\n": True,
        "try:\n    from torch import nn\nexcept ImportError:\n    nn = None\n": True,
        "def f():\n    import torch\n": False,
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import torch\n": False,
        "import torchvision\n": False,
    }
    for number, (source, imports) in enumerate(cases.items()):
        path = tmp_path / f"m{number}.py"
        path.write_text(source)
        assert torch_at_module_level(path) is imports, source


def test_torch_is_imported_at_module_level_only_where_the_architecture_says() -> None:
    found = _TORCH_SENTENCE.search(" ".join(ARCHITECTURE.read_text(encoding="utf-8").split()))
    assert found, "docs/architecture.md lost its sentence on torch at module level"
    named = set(_NAME.findall(found.group(1)))
    importers = {module for module, path in all_modules().items() if torch_at_module_level(path)}
    outside = {m for m in importers if not any(m == n or m.startswith(f"{n}.") for n in named)}
    assert not outside, f"torch at module level outside the parts the doc names: {outside}"
    idle = {n for n in named if not any(m == n or m.startswith(f"{n}.") for m in importers)}
    assert not idle, f"the doc names parts that import no torch at module level: {idle}"

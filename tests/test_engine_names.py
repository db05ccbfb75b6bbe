"""No branch on an engine's name outside its own folder (issue 49).

An engine's name (``llama``, ``vllm``, any case) may appear in the code of
``gate/`` only inside ``gate/engines/<engine>/`` and in the registry's lines
(``gate/engines/registry.py``'s :data:`~gate.engines.registry.BUILT_IN`).
Elsewhere it may appear in prose only: docstrings, comments, and help, hints
and messages (a string with a space in it is read by a person). What is scanned,
by the syntax tree: every identifier (names, attributes, functions, classes,
arguments, keywords, imported modules and names) and every string constant that
is not a docstring and has no whitespace (a value a program compares or sends:
``"vllm"``, ``"llama.cpp"``, ``"vllm:cache_config_info"``).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "gate"
ENGINE_NAME = re.compile(r"llama|vllm", re.IGNORECASE)
#: The engines' own folders.
ENGINE_FOLDERS = ("engines/vllm/", "engines/llama_cpp/")
#: The registry's lines: the built-in dialects by ``module:Class``.
REGISTRY = "engines/registry.py"
#: Model names that contain an engine's letters: ``(file, text)``.
MODEL_NAMES: frozenset[tuple[str, str]] = frozenset(
    {("store/baseline.py", "llama-3.1-8b"), ("tiers/judge.py", "llama-judge")}
)


def _docstrings(tree: ast.AST) -> set[int]:
    """``id`` of every docstring node (a module's, class's or function's first string)."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and node.body
        ):
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def names_in_code(source: str) -> Iterator[tuple[int, str]]:
    """``(line, text)`` of every identifier and every whitespace-free string constant (not a
    docstring) of ``source`` that names an engine."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    for node in ast.walk(tree):
        words: list[str] = []
        if isinstance(node, ast.Name):
            words = [node.id]
        elif isinstance(node, ast.Attribute):
            words = [node.attr]
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            words = [node.name]
        elif isinstance(node, ast.arg) or (isinstance(node, ast.keyword) and node.arg is not None):
            words = [node.arg]
        elif isinstance(node, ast.alias):
            words = [node.name, node.asname or ""]
        elif isinstance(node, ast.ImportFrom):
            words = [node.module or ""]
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docs
            and not re.search(r"\s", node.value)
        ):
            words = [node.value]
        for word in words:
            if ENGINE_NAME.search(word):
                yield getattr(node, "lineno", 0), word


def engine_names_outside_their_folders() -> dict[str, list[str]]:
    """``file -> [line: text]`` of the engine names in code outside the allowed places."""
    found: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(PACKAGE).as_posix()
        if where.startswith(ENGINE_FOLDERS):
            continue
        hits = list(names_in_code(path.read_text(encoding="utf-8")))
        if where == REGISTRY:
            hits = [(line, text) for line, text in hits if not text.startswith("gate.engines.")]
        hits = [(line, text) for line, text in hits if (where, text) not in MODEL_NAMES]
        if hits:
            found[where] = [f"{line}: {text}" for line, text in hits]
    return found


def test_no_engine_name_in_code_outside_its_folder() -> None:
    assert engine_names_outside_their_folders() == {}


def test_the_scan_sees_code_and_leaves_prose() -> None:
    source = (
        '"""Served by vLLM."""\n'
        "import gate.engines.vllm.dialect\n"
        "from gate.engines.llama_cpp import install\n"
        "def f(vllm_port):\n"
        '    """llama-server\'s."""\n'
        '    if engine == "llama.cpp":  # llama\n'
        '        raise ValueError("serve with vLLM >= 0.10")\n'
        "    return obj.llama\n"
    )
    found = sorted(names_in_code(source))
    assert found == [
        (2, "gate.engines.vllm.dialect"),
        (3, "gate.engines.llama_cpp"),
        (4, "vllm_port"),
        (6, "llama.cpp"),
        (8, "llama"),
    ]

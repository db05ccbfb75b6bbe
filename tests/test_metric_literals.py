"""Metric names come from the catalog only: no ``"tier.metric"`` string literal elsewhere in gate/.

The scan parses every module of the package and looks at its string constants
(docstrings and the fixed parts of f-strings left out). A constant of the form
``<tier>.<name>`` outside :mod:`gate.metrics.catalog` is a metric name spelt a
second time; it has to be the catalog's constant instead
(``fidelity_catalog.CGA``). Name prefixes used for grouping end in ``_``
(``"accuracy.gen_"``) and are allowed.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

import gate
from gate.metrics.registry import CATALOG_MODULES, TIERS, all_metrics

PACKAGE = Path(gate.__file__).resolve().parent
CATALOG = PACKAGE / "metrics" / "catalog"
NAME = re.compile(r"^(?:" + "|".join(TIERS) + r")\.[a-z0-9_@]+$")

#: Literals left where they are, each with its reason; the test fails when one of
#: them is gone, so the list only shrinks.
PENDING: dict[str, frozenset[str]] = {}


def metric_literals(source: str) -> list[tuple[int, str]]:
    """``(line, text)`` of every string constant of ``source`` that looks like a metric
    name: not a docstring, not a fixed part of an f-string, not a prefix (ends in ``_``)."""
    tree = ast.parse(source)
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                skipped.add(id(first.value))
        if isinstance(node, ast.JoinedStr):
            skipped.update(id(part) for part in node.values)
    return sorted(
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in skipped
        and NAME.match(node.value)
        and not node.value.endswith("_")
    )


def test_the_scan_finds_a_metric_name_and_skips_docstrings_prefixes_and_fstrings() -> None:
    source = '''
"""Module docstring naming "fidelity.cga"."""
PREFIX = "accuracy.gen_"
def f(x: str) -> str:
    """fidelity.kl_mean"""
    return f"latency.load_{x}" + "latency.param_bytes"
GROUP = "fidelity."
'''
    assert metric_literals(source) == [(6, "latency.param_bytes")]


def test_no_metric_name_literal_outside_the_catalog() -> None:
    found: dict[str, set[str]] = {}
    listing: list[str] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if CATALOG in path.parents:
            continue
        rel = path.relative_to(PACKAGE).as_posix()
        for line, text in metric_literals(path.read_text(encoding="utf-8")):
            found.setdefault(rel, set()).add(text)
            if text not in PENDING.get(rel, frozenset()):
                listing.append(f"gate/{rel}:{line}: {text!r}")
    assert not listing, "metric names spelt outside gate/metrics/catalog (use its constants):\n" + (
        "\n".join(listing)
    )
    stale = {rel: sorted(names - found.get(rel, set())) for rel, names in PENDING.items()}
    assert not any(stale.values()), f"PENDING lists literals that are gone: {stale}"


@pytest.mark.parametrize("module", CATALOG_MODULES, ids=lambda m: m.TIER)
def test_every_catalog_name_constant_is_a_registered_metric_of_its_tier(module: object) -> None:
    specs = all_metrics()
    constants = {
        key: value
        for key, value in vars(module).items()
        if key.isupper() and key != "TIER" and isinstance(value, str)
    }
    assert constants, "each catalog exports the names other modules use"
    for key, value in constants.items():
        assert value in specs, f"{module.__name__}.{key} = {value!r} is not a metric"
        assert specs[value].tier == module.TIER  # type: ignore[attr-defined]
        assert key == value.split(".", 1)[1].upper()


def test_a_catalog_tier_is_the_name_of_its_module() -> None:
    for module in CATALOG_MODULES:
        assert importlib.import_module(f"gate.metrics.catalog.{module.TIER}") is module

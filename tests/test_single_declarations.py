"""Facts declared once: the exit-code questions (gate/errors.py), the default store
(gate/store/location.py), the unnamed baseline's label (gate/gating/against.py) and
the thresholds file's name (gate/gating/thresholds_file.py); and one meaning per name: a
class, type alias or public function name declared in one module (the protocol verbs
listed, each with its modules).

Each scan parses every module of the package and fails, listing the places, when
one of them spells the fact again.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import gate
from gate.ci import watched
from gate.errors import SEVERITY_ORDER, ExitCode, decided, worst_exit
from gate.gating.against import DEFAULT_AGAINST
from gate.gating.thresholds_file import THRESHOLDS_FILE
from gate.gating.verdict import Verdict
from gate.session import options
from gate.store.location import DEFAULT_STORE
from gate.workflows import multirun

PACKAGE = Path(gate.__file__).resolve().parent


@cache
def _parsed() -> tuple[tuple[str, ast.Module], ...]:
    return tuple(
        (path.relative_to(PACKAGE).as_posix(), ast.parse(path.read_text(encoding="utf-8")))
        for path in sorted(PACKAGE.rglob("*.py"))
    )


def modules() -> Iterator[tuple[str, ast.Module]]:
    """Every module of the package, parsed once per test session."""
    yield from _parsed()


def _exit_names(node: ast.expr, ints: bool) -> set[str]:
    """``{"OK", "BLOCKED"}`` for ``(ExitCode.OK, ExitCode.BLOCKED)``; with ``ints`` (the
    left side names a code or a status), ``(0, 1)`` counts the same."""
    if not isinstance(node, ast.Tuple | ast.List | ast.Set):
        return set()
    names = set()
    for e in node.elts:
        if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name):
            if e.value.id == "ExitCode":
                names.add(e.attr)
        elif ints and isinstance(e, ast.Constant) and e.value in (0, 1):
            names.add("OK" if e.value == 0 else "BLOCKED")
    return names


def _names_a_code(node: ast.expr) -> bool:
    text = ast.unparse(node).lower()
    return "code" in text or "status" in text


def test_the_decided_question_is_asked_only_in_errors() -> None:
    found = [
        f"{rel}:{node.lineno}"
        for rel, tree in modules()
        if rel != "errors.py"
        for node in ast.walk(tree)
        if isinstance(node, ast.Compare)
        and any(isinstance(op, ast.In | ast.NotIn) for op in node.ops)
        and any(
            {"OK", "BLOCKED"} <= _exit_names(c, _names_a_code(node.left)) for c in node.comparators
        )
    ]
    assert not found, "approved-or-blocked asked outside gate.errors.decided: " + ", ".join(found)


def test_exit_severity_is_declared_only_in_errors() -> None:
    found = [
        f"{rel}:{node.lineno}"
        for rel, tree in modules()
        if rel != "errors.py"
        for node in ast.walk(tree)
        if isinstance(node, ast.Tuple | ast.List)
        and len(node.elts) >= 3
        and all(
            isinstance(e, ast.Attribute)
            and isinstance(e.value, ast.Name)
            and e.value.id == "ExitCode"
            for e in node.elts
        )
    ]
    assert not found, "an order of exit codes outside gate.errors: " + ", ".join(found)


def test_decided_and_worst_exit() -> None:
    assert [c for c in ExitCode if decided(c)] == [ExitCode.OK, ExitCode.BLOCKED]
    assert set(SEVERITY_ORDER) == set(ExitCode)
    assert worst_exit([]) == ExitCode.OK
    assert worst_exit([0, 1, 0]) == ExitCode.BLOCKED
    assert worst_exit([1, 4, 5]) == ExitCode.USAGE_ERROR
    assert worst_exit([4, 2, 3]) == ExitCode.INTERRUPTED
    assert worst_exit([1, 99]) == ExitCode.INTERNAL_ERROR
    assert multirun.worst_exit is worst_exit


def _store_default(node: ast.AST) -> bool:
    """``Path("baselines")``, ``STORE = "baselines"``, ``store="baselines"``, ``default="baselines"``."""
    spelt = str(DEFAULT_STORE)

    def is_it(value: ast.AST | None) -> bool:
        return isinstance(value, ast.Constant) and value.value == spelt

    if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("Path"):
        return any(is_it(a) for a in node.args)
    if isinstance(node, ast.Assign | ast.AnnAssign) and is_it(node.value):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return any("store" in ast.unparse(t).lower() for t in targets)
    if isinstance(node, ast.keyword) and is_it(node.value):
        return node.arg in ("store", "default")
    return False


def test_the_default_store_is_declared_once() -> None:
    assert options.DEFAULT_STORE is DEFAULT_STORE and watched.DEFAULT_STORE is DEFAULT_STORE
    found = [
        f"{rel}:{node.lineno}"
        for rel, tree in modules()
        if rel != "store/location.py"
        for node in ast.walk(tree)
        if _store_default(node)
    ]
    assert not found, f"{str(DEFAULT_STORE)!r} spelt outside gate.store.location: {found}"


def test_the_unnamed_baseline_label_is_declared_once() -> None:
    """No ``against`` parameter, field or ``.get("against", ...)`` defaults to a literal."""
    found = []
    for rel, tree in modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                pairs = [(node.target.id, node.value)]
            elif isinstance(node, ast.arguments):
                named = [*node.posonlyargs, *node.args]
                pairs = list(zip([a.arg for a in named[::-1]], node.defaults[::-1], strict=False))
                pairs += [
                    (a.arg, d) for a, d in zip(node.kwonlyargs, node.kw_defaults, strict=True)
                ]
            elif isinstance(node, ast.Call) and len(node.args) == 2:
                first = node.args[0]
                key = first.value if isinstance(first, ast.Constant) else None
                pairs = [(str(key), node.args[1])]
            else:
                continue
            for name, default in pairs:
                literal = isinstance(default, ast.Constant) and default.value is not None
                if name == "against" and literal:
                    found.append(f"{rel}:{node.lineno}")
    assert not found, f"against defaults spelt outside gate.gating.against: {found}"
    against = {f.name: f.default for f in dataclasses.fields(Verdict)}["against"]
    assert against == DEFAULT_AGAINST


def _docstrings(tree: ast.Module) -> set[int]:
    """``id()`` of every docstring constant of ``tree`` (module, class, function)."""
    found = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        first = body[0] if isinstance(body, list) and body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
            found.add(id(first.value))
    return found


def test_the_thresholds_file_name_is_declared_once() -> None:
    found = []
    for rel, tree in modules():
        if rel == "gating/thresholds_file.py":
            continue
        docs = _docstrings(tree)
        found += [
            f"{rel}:{node.lineno}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant)
            and node.value == THRESHOLDS_FILE
            and id(node) not in docs
        ]
    assert not found, f"{THRESHOLDS_FILE!r} spelt outside gate.gating.thresholds_file: {found}"


_CAMEL = re.compile(r"[A-Z][A-Za-z0-9]*[a-z][A-Za-z0-9]*")


def _module_level(tree: ast.Module) -> Iterator[tuple[str, ast.stmt]]:
    """The classes, functions and CamelCase assignments (type aliases) of a module body."""
    for node in tree.body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            yield node.name, node
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name) and _CAMEL.fullmatch(target.id):
                    yield target.id, node


def _declared_where(kinds: tuple[type, ...]) -> dict[str, list[str]]:
    """Every module-level name of those node ``kinds``, and the modules declaring it."""
    declared: dict[str, list[str]] = {}
    for rel, tree in modules():
        for name, node in _module_level(tree):
            if isinstance(node, kinds) and rel not in declared.get(name, []):
                declared.setdefault(name, []).append(rel)
    return declared


def test_every_class_and_type_alias_name_of_the_package_is_declared_once() -> None:
    """One meaning per name: no two modules of ``gate/`` declare a class or type alias of the
    same name (model loading's ``LoadSettings`` is not the load tier's ``LoadTierSettings``;
    Wanda's ``ActivationPrompts`` are not ``gate calibrate``'s ``Calibration``; a bound's
    ``BoundMode`` is not a session's ``SessionMode`` nor a bitsandbytes load's ``Mode``)."""
    declared = _declared_where((ast.ClassDef, ast.Assign, ast.AnnAssign))
    twice = {name: where for name, where in declared.items() if len(where) > 1}
    assert not twice, twice


def test_no_class_name_is_declared_twice_even_inside_a_function() -> None:
    """A class made inside a function (a stopping criterion, a hook) is a class too: one
    declaration per name across the package, nested ones included."""
    where: dict[str, list[str]] = {}
    for rel, tree in modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                where.setdefault(node.name, []).append(f"{rel}:{node.lineno}")
    twice = {name: places for name, places in where.items() if len(places) > 1}
    assert not twice, twice


#: The public module-level function names declared in several modules, each with the exact
#: modules allowed: one protocol verb, implemented once per module by design. A probe module
#: (``gate/data/probes/``) has ``generate``; a tier module has ``measure`` (the candidate's
#: measurements), ``record`` (what the tier does when the baseline is recorded), ``run_tier``
#: (one timed run of the tier), ``to_measurements`` (its result as measurements) and
#: ``load_prompts`` (its prompt set, cut to its limit) -- the suites call them as
#: ``tier.measure``, ``tier.record``, ``tier.load_prompts``. A click command is named after
#: its command and shares it with no library function (``gate merge``'s ``merge`` calls
#: ``merge_results``, ``gate audit``'s group is not ``drift.audit_drift``, ``gate compare``'s
#: ``compare`` not ``gating.compare.compare_measurements``); any other name declared twice
#: is a second meaning: give it its own name.
SHARED_FUNCTIONS: dict[str, frozenset[str]] = {
    "generate": frozenset(
        f"data/probes/{probe}.py" for probe in ("arithmetic", "code", "instructions", "structured")
    ),
    "load_prompts": frozenset({"tiers/fidelity/prompts.py", "tiers/judge.py"}),
    "measure": frozenset(
        {
            "tiers/capability.py",
            "tiers/fidelity/candidate.py",
            "tiers/generation/candidate.py",
            "tiers/speculative.py",
        }
    ),
    "record": frozenset({"tiers/fidelity/recording.py", "tiers/generation/recording.py"}),
    "run_tier": frozenset({"tiers/latency.py", "tiers/load.py"}),
    "to_measurements": frozenset(
        {"tiers/generation/pairing.py", "tiers/latency.py", "tiers/load.py"}
    ),
}


def test_no_new_public_function_name_is_declared_in_two_modules() -> None:
    """``model_slug`` is the slug rule (:mod:`gate.slugs`) and nothing else; the session's
    slug with ``--model-slug`` is ``store_slug``."""
    declared = _declared_where((ast.FunctionDef, ast.AsyncFunctionDef))
    shared = {
        name: frozenset(where)
        for name, where in declared.items()
        if not name.startswith("_") and len(where) > 1
    }
    twice = {
        name: sorted(where) for name, where in shared.items() if SHARED_FUNCTIONS.get(name) != where
    }
    assert not twice, f"not the modules SHARED_FUNCTIONS allows: {twice}"
    assert declared["model_slug"] == ["slugs.py"]
    stale = sorted(set(SHARED_FUNCTIONS) - set(shared))
    assert not stale, f"declared once now: drop them from SHARED_FUNCTIONS: {stale}"


#: The layers that read measurements' details written by a tier.
DETAIL_READERS = ("report/", "gating/")


def _details_key_read(node: ast.AST) -> ast.expr | None:
    """The key of ``<x>.details[key]`` or ``<x>.details.get(key, ...)`` (also for a variable
    named ``details``), when ``node`` reads one."""
    if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
        holder, key = node.value, node.slice
    elif (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "get"
        and node.args
    ):
        holder, key = node.func.value, node.args[0]
    else:
        return None
    named = (isinstance(holder, ast.Attribute) and holder.attr == "details") or (
        isinstance(holder, ast.Name) and holder.id == "details"
    )
    return key if named else None


def test_details_keys_read_across_layers_are_named_not_spelled() -> None:
    """A key of ``Measurement.details`` that the reports or the gating read is declared once
    (:class:`gate.measurement.MeasurementDetail`, or a tier's catalog class such as
    ``GenerationDetail``) and named by writer and reader alike, so a key renamed on one side
    cannot leave the other reading nothing."""
    spelled = [
        f"{rel}:{node.lineno} {key.value!r}"
        for rel, tree in modules()
        if rel.startswith(DETAIL_READERS)
        for node in ast.walk(tree)
        if isinstance(key := _details_key_read(node), ast.Constant) and isinstance(key.value, str)
    ]
    assert not spelled, "details keys spelled as strings: " + ", ".join(spelled)


def test_the_details_key_scan_sees_a_spelled_key() -> None:
    tree = ast.parse("v.details.get('ratio_ci')\ndetails['slo']\nx.details[KEY]\nd.get('a')")
    keys = [_details_key_read(n) for n in ast.walk(tree)]
    found = [k.value for k in keys if isinstance(k, ast.Constant)]
    assert sorted(found) == ["ratio_ci", "slo"]

"""Every hint that names a ``--flag`` names one that exists.

A hint is the second argument (or ``hint=``) of a :class:`~gate.errors.GateError`
raised anywhere in the package, and every module-level ``*_HINT`` text. Each
``--flag`` in one must be an option of some ``gate`` command (any subcommand's
``--help``) or a ``--gate-*`` pytest option, unless it is another program's
option that the hint tells the user to give to that program (:data:`FOREIGN`).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import click

from gate.commands.group import cli
from gate.session.flags import PYTEST_ROWS

PACKAGE = Path(__file__).resolve().parents[1] / "gate"
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9_-]*")
#: Options of other programs that hints tell the user to pass to that program.
FOREIGN: dict[str, str] = {
    "--force-reinstall": "pip install",
    "--no-deps": "pip install",
    "--gpu-memory-utilization": "vLLM's server",
    "--max-logprobs": "vLLM's server",
    "--quantization": "the serving engine",
    "--log_samples": "lm_eval",
    "--limit": "lm_eval",
    "--output_path": "lm_eval",
    "--max-chars": "scripts/build_long_context_set.py",
    "--no-props": "llama-server",
    "--parallel": "llama-server",
    "--port": "the serving engine",
    "--speculative-config": "vLLM's server",
    "--spec-type": "llama-server",
}


def _strings(node: ast.AST) -> list[str]:
    return [
        n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)
    ]


def hint_flags(source: str, where: str) -> dict[str, list[str]]:
    """``--flag`` -> the places (``file:line``) of the hints in ``source`` that name it."""
    found: dict[str, list[str]] = {}
    for node in ast.walk(ast.parse(source)):
        hint: ast.AST | None = None
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            # GateError subclasses (and ``type(exc)(message, hint)`` re-raising one)
            if name.endswith("Error") or name in ("CalibrationFailed", "type"):
                hint = node.args[1] if len(node.args) >= 2 else None
                hint = next((k.value for k in node.keywords if k.arg == "hint"), hint)
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id.endswith("HINT") for t in node.targets
        ):
            hint = node.value
        for text in _strings(hint) if hint is not None else ():
            for flag in FLAG.findall(text):
                found.setdefault(flag, []).append(f"{where}:{node.lineno}")
    return found


def command_flags() -> set[str]:
    """Every long option of every ``gate`` command and subcommand."""
    flags: set[str] = set()

    def walk(command: click.Command) -> None:
        for param in command.params:
            flags.update(o for o in (*param.opts, *param.secondary_opts) if o.startswith("--"))
        if isinstance(command, click.Group):
            for sub in command.commands.values():
                walk(sub)

    walk(cli)
    return flags | {row.option for row in PYTEST_ROWS} | {"--gate-model", "--gate-mode"}


def package_hint_flags() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for flag, places in hint_flags(path.read_text(encoding="utf-8"), path.name).items():
            found.setdefault(flag, []).extend(places)
    return found


def test_every_hint_names_a_flag_that_exists() -> None:
    found = package_hint_flags()
    # the collection sees the hints this test exists for
    assert {"--device", "--trust-remote-code", "--allow-pickle"} <= set(found)
    known = command_flags()
    missing = {flag: places for flag, places in found.items() if flag not in known | set(FOREIGN)}
    assert missing == {}, f"hints name flags no gate command has: {missing}"
    # the allowance for other programs hides no gate option and is all still needed
    assert not set(FOREIGN) & known
    assert set(FOREIGN) <= set(found)


def test_the_check_catches_a_flag_that_does_not_exist() -> None:
    source = 'raise UsageError("no GPU", "use --devices cpu")\nX_HINT = "pass --trust-code"\n'
    found = hint_flags(source, "x.py")
    assert found == {"--devices": ["x.py:1"], "--trust-code": ["x.py:2"]}
    assert not set(found) & command_flags()

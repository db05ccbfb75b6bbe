"""Every default the docs state as "`name` ... default VALUE" is the code's default.

``name`` is a command-line option (compared with every gate command that has
it) or a settings key (compared with the field of that name in the engine
settings, the run config's ``[run]`` table and every tier's settings); the
value is compared as a number (a unit of %, s after it is part of the prose).
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import click
import pytest

from gate.commands.group import cli
from gate.engines.settings import EngineSettings, engine_setting_options
from gate.session.run_config import RunDefaults
from gate.tiers.registry import SETTINGS

ROOT = Path(__file__).resolve().parents[1]
DOCS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
_STATED = re.compile(
    r"`(--[a-z][a-z-]*|[a-z][a-z0-9_]*)`[^.;`]{0,40}?\bdefault:? (-?[0-9][0-9.e-]*[0-9])?"
    r"(-?[0-9])?"
)
#: Options of other programs the docs quote (vLLM's), not gate's.
EXTERNAL = {"--gpu-memory-utilization"}


def _stated() -> list[tuple[str, str, float]]:
    found = []
    for path in DOCS:
        text = " ".join(path.read_text(encoding="utf-8").split())
        for match in _STATED.finditer(text):
            value = match.group(2) or match.group(3)
            if value is not None:
                found.append((f"{path.name}: {match.group(0)[:60]}", match.group(1), float(value)))
    return found


STATED = _stated()


def _commands(group: click.Group = cli) -> list[click.Command]:
    out: list[click.Command] = []
    for command in group.commands.values():
        out.extend(_commands(command) if isinstance(command, click.Group) else [command])
    return out


def _option_defaults(flag: str) -> list[Any]:
    """The defaults of ``flag`` in every command, or of the engine setting it stands for."""
    given = [
        param.default
        for command in _commands()
        for param in command.params
        if flag in getattr(param, "opts", ()) and isinstance(param.default, int | float | str)
    ]
    engine = [
        field.default
        for field in dataclasses.fields(EngineSettings)
        for name, option in engine_setting_options()
        if name == field.name and option.flag == flag
    ]
    return given + engine


#: Pages named otherwise than the tier they document.
TIER_PAGES = {"serving": "load"}


def _field_defaults(key: str, doc: str) -> list[Any]:
    """The defaults of the settings field ``key``; in a tier's own page (judge.md, serving.md
    for the load tier), that tier's."""
    stem = Path(doc).stem
    tier = SETTINGS.get(TIER_PAGES.get(stem, stem))
    if tier is not None and key in {f.name for f in dataclasses.fields(tier)}:
        classes: list[type[Any]] = [tier]
    else:
        classes = [EngineSettings, RunDefaults, *SETTINGS.values()]
    return [
        f.default
        for cls in classes
        for f in dataclasses.fields(cls)
        if f.name == key and f.default is not dataclasses.MISSING
    ]


def test_the_docs_state_defaults_to_check() -> None:
    assert len(STATED) >= 8


@pytest.mark.parametrize(("where", "name", "value"), STATED, ids=[s[0] for s in STATED])
def test_a_stated_default_is_the_codes(where: str, name: str, value: float) -> None:
    if name in EXTERNAL:
        return
    doc = where.split(":")[0]
    defaults = _option_defaults(name) if name.startswith("--") else _field_defaults(name, doc)
    assert defaults, f"{where}: no gate option or setting {name} to compare with"
    for default in defaults:
        assert isinstance(default, int | float) and float(default) == pytest.approx(value), (
            f"{where}: the code's default of {name} is {default!r}"
        )

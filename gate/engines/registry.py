"""The engine dialects by name: the built-in ones, those of installed packages, the fallback.

A dialect is named by ``"module:Class"`` and imported only when first asked
for, so naming an engine loads nothing else. Two sources, in this order:

1. :data:`BUILT_IN`, gate's own engines (the registry lines);
2. the entry-point group :data:`ENTRY_POINT_GROUP` (``gate.engines``) of every
   installed distribution: a package adds an engine with one line in its
   ``pyproject.toml``, ``[project.entry-points."gate.engines"]``,
   ``myengine = "my_package.dialect:MyDialect"``; the entry point's name is
   the engine's name, and a built-in name cannot be taken.

A server no dialect recognizes is spoken to by the generic OpenAI dialect
(:class:`gate.engines.openai.OpenAIDialect`, :data:`FALLBACK`), and a
command no dialect claims is read by it too (it names no speculative options).
Each lookup makes a fresh instance: a dialect may keep what it learns of the
one server it speaks to.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from functools import cache
from importlib.metadata import entry_points

from gate.engines.dialect import EngineDialect, StartupFailure
from gate.errors import ConfigError

#: The entry-point group an installed package registers its engine dialects in.
ENTRY_POINT_GROUP = "gate.engines"
#: gate's own engines, ``module:Class`` each (the name is the class's ``name``).
BUILT_IN: tuple[str, ...] = (
    "gate.engines.vllm.dialect:VLLMDialect",
    "gate.engines.llama_cpp.dialect:LlamaServerDialect",
)
#: The dialect of any other OpenAI-compatible server.
FALLBACK = "gate.engines.openai:OpenAIDialect"


def _load(target: str) -> type[EngineDialect]:
    """The class ``module:Class`` names (ConfigError when it is not an engine dialect)."""
    module_name, _, attr = target.partition(":")
    try:
        found = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(
            f"the engine dialect {target!r} cannot be imported: {exc}",
            f"install the package that provides it, or remove its {ENTRY_POINT_GROUP!r}"
            " entry point",
        ) from exc
    if not (isinstance(found, type) and issubclass(found, EngineDialect)):
        raise ConfigError(
            f"{target!r} is not an engine dialect",
            "an engine's entry point names a subclass of gate.engines.dialect.EngineDialect",
        )
    return found


@cache
def _registered() -> dict[str, str]:
    """Every registered name -> ``module:Class``, built-in first (read once per process)."""
    found = {_load(target).name: target for target in BUILT_IN}
    built_in = set(found)
    for point in entry_points(group=ENTRY_POINT_GROUP):
        if point.name in built_in:
            raise ConfigError(
                f"the {ENTRY_POINT_GROUP!r} entry point {point.name!r} ({point.value}) takes the"
                " name of a built-in engine",
                "give the engine another name",
            )
        found.setdefault(point.name, point.value)
    return found


def engine_names() -> list[str]:
    """The registered engines' names, built-in first."""
    return list(_registered())


def dialect_class(name: str) -> type[EngineDialect]:
    """The registered dialect called ``name`` (ConfigError naming the others)."""
    registered = _registered()
    if name not in registered:
        raise ConfigError(
            f"no serving engine called {name!r}",
            f"use one of {', '.join(registered)}, or install the package of its dialect",
        )
    return _load(registered[name])


def dialects() -> list[EngineDialect]:
    """A fresh instance of every registered dialect, built-in first (the fallback not among
    them)."""
    return [dialect_class(name)() for name in _registered()]


def fallback() -> EngineDialect:
    """The generic OpenAI dialect."""
    return _load(FALLBACK)()


def dialect_for_command(argv: Sequence[str]) -> EngineDialect:
    """The dialect of the engine the command ``argv`` starts: the first registered one that
    claims it, else the fallback."""
    return next((d for d in dialects() if d.runs_command(argv)), None) or fallback()


@cache
def engine_secret_options() -> tuple[frozenset[str], frozenset[str]]:
    """Every registered engine's secret option names, and those whose value may be left out."""
    every = dialects()
    return (
        frozenset().union(*(d.secret_options for d in every)),
        frozenset().union(*(d.optional_secret_values for d in every)),
    )


def startup_failures() -> tuple[StartupFailure, ...]:
    """Every registered engine's start-up failures (a log is read before its engine is known)."""
    return tuple(f for d in dialects() for f in d.startup_failures)


def refresh() -> None:
    """Forget what was read of the installed packages (a package installed since, a test)."""
    _registered.cache_clear()
    engine_secret_options.cache_clear()


def scoring_api_owner(asked: str) -> EngineDialect | None:
    """The registered dialect whose own ``scoring_api`` ``asked`` is, else ``None``."""
    return next((d for d in dialects() if asked in d.own_scoring_apis), None)


__all__ = [
    "BUILT_IN",
    "ENTRY_POINT_GROUP",
    "FALLBACK",
    "dialect_class",
    "dialect_for_command",
    "dialects",
    "engine_names",
    "engine_secret_options",
    "fallback",
    "refresh",
    "scoring_api_owner",
    "startup_failures",
]

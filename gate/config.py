"""TOML files and typed settings tables: the bottom of every config reader.

``thresholds.toml``, the run config (``gate.toml``), every ``[tiers.<name>]``
table and the command-line settings overrides are read with these helpers:

- :func:`load_toml` parses a file; unreadable, non-UTF-8 or malformed files
  raise :class:`~gate.errors.ConfigError` naming the file and line;
- :func:`build_dataclass` turns a table into a frozen settings dataclass,
  checking every value against the field annotations;
- :func:`check_keys` refuses keys outside a known set with a "did you mean"
  (:func:`suggest`).

This module imports nothing of the package but :mod:`gate.errors`, so every
layer (gating, tiers, session, commands) may use it.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import sys
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args, get_origin

from gate.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

T = TypeVar("T")


def suggest(name: str, choices: list[str] | tuple[str, ...]) -> str:
    """A ``did you mean 'x'?`` hint, or a list of valid names when nothing is close."""
    close = difflib.get_close_matches(name, choices, n=1, cutoff=0.6)
    if close:
        return f"did you mean {close[0]!r}?"
    shown = ", ".join(sorted(choices)[:8])
    return f"known names: {shown}{', ...' if len(choices) > 8 else ''}"


_LINE = re.compile(r"at line (\d+)")


def load_toml(path: Path) -> dict[str, Any]:
    """Parse a TOML file; unreadable or malformed files raise :class:`ConfigError`."""
    return load_toml_file(path)[0]


def load_toml_file(path: Path) -> tuple[dict[str, Any], str]:
    """Parse a TOML file read once: its tables and the sha256 of its bytes (what a
    results document records of the file that was parsed)."""
    import hashlib

    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(
            f"cannot read {path}: {exc.strerror or exc}", "check the path and permissions"
        ) from None
    try:
        return tomllib.loads(raw.decode("utf-8")), hashlib.sha256(raw).hexdigest()
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text", "save the file as UTF-8") from None
    except tomllib.TOMLDecodeError as exc:
        lineno = getattr(exc, "lineno", None)
        if lineno is None:
            m = _LINE.search(str(exc))
            lineno = int(m.group(1)) if m else None
        where = f"{path}:{lineno}" if lineno is not None else str(path)
        detail = str(exc).split(" (at ")[0]
        raise ConfigError(
            f"{where}: invalid TOML: {detail}", "fix the syntax on that line"
        ) from None


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _coerce(value: Any, tp: Any, where: str) -> Any:
    """Check ``value`` against the annotation ``tp`` (and convert TOML forms)."""
    origin = get_origin(tp)
    args = get_args(tp)
    if tp is Any:
        return value
    if origin is Literal:
        if value not in args:
            choices = ", ".join(repr(a) for a in args)
            raise ConfigError(
                f"{where}: {value!r} is not one of {choices}", f"use one of {choices}"
            )
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, where)
            except ConfigError as exc:
                errors.append(exc)
        raise errors[0]
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(
                f"{where}: expected true or false, got {value!r}", "use true or false"
            )
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(
                f"{where}: expected an integer, got {value!r}", "write a whole number"
            )
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where}: expected a number, got {value!r}", "write a number")
        if not math.isfinite(value):
            raise ConfigError(f"{where}: {value} is not a finite number", "write a finite number")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(
                f"{where}: expected a string, got {value!r}", 'quote the value: "..."'
            )
        return value
    if tp is Path:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a path string, got {value!r}", "quote the path")
        return Path(value)
    if origin is tuple or origin is list:
        if not isinstance(value, list):
            raise ConfigError(f"{where}: expected a list, got {value!r}", "write [a, b, ...]")
        item_tp = args[0] if args else Any
        items = [_coerce(v, item_tp, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin in (dict, Mapping) or tp in (dict, Mapping):
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a table, got {value!r}", "write { key = value }")
        val_tp = args[1] if len(args) == 2 else Any
        return {str(k): _coerce(v, val_tp, f"{where}.{k}") for k, v in value.items()}
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a table, got {value!r}", "write { key = value }")
        return build_dataclass(tp, value, where=where)
    if isinstance(tp, type) and isinstance(value, tp):
        return value
    raise ConfigError(
        f"{where}: expected {_type_name(tp)}, got {value!r}", "see thresholds.toml for the format"
    )


def check_keys(
    mapping: Mapping[str, Any], allowed: tuple[str, ...] | list[str], where: str
) -> None:
    """Refuse keys outside ``allowed`` with a "did you mean"."""
    for key in mapping:
        if key not in allowed:
            raise ConfigError(f"{where}: unknown key {key!r}", suggest(key, list(allowed)))


def build_dataclass(cls: type[T], mapping: Mapping[str, Any], *, where: str) -> T:
    """Build the frozen settings dataclass ``cls`` from a TOML table.

    Unknown keys raise :class:`ConfigError` with a "did you mean"; values are
    checked against the field annotations (``bool``, ``int``, ``float`` (ints
    accepted, NaN/inf refused), ``str``, ``Path``, ``Literal``, optionals,
    ``tuple[X, ...]``, ``Mapping[str, X]`` and nested dataclasses); missing
    required fields are named. A ``ValueError`` from ``__post_init__`` becomes
    a :class:`ConfigError` too.
    """
    if not (dataclasses.is_dataclass(cls) and isinstance(cls, type)):
        raise TypeError(f"{cls!r} is not a dataclass")
    if not isinstance(mapping, Mapping):
        raise ConfigError(f"{where}: expected a table, got {mapping!r}", "write [section] keys")
    hints = typing.get_type_hints(cls)
    fields = [f for f in dataclasses.fields(cls) if f.init]
    names = [f.name for f in fields]
    check_keys(mapping, names, where)
    kwargs: dict[str, Any] = {}
    for f in fields:
        if f.name in mapping:
            kwargs[f.name] = _coerce(mapping[f.name], hints[f.name], f"{where}.{f.name}")
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ConfigError(f"{where}: missing key {f.name!r}", f"add {f.name} = ... to {where}")
    try:
        return cls(**kwargs)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{where}: {exc}", "see the documented defaults") from None


__all__ = ["build_dataclass", "check_keys", "load_toml", "load_toml_file", "suggest"]

"""Reading a server command's options: ``--name=value`` split, values read as JSON or ints."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any


def split_option(arg: str) -> tuple[str, str | None]:
    """``--name=value`` -> ``("--name", "value")``; ``--name`` -> ``("--name", None)``."""
    if arg.startswith("-") and "=" in arg:
        name, value = arg.split("=", 1)
        return name, value
    return arg, None


def json_value(text: str) -> Any:
    """``text`` read as JSON, else ``text`` itself."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def first_of(found: Mapping[str, Any], names: Sequence[str]) -> Any:
    """The value of the first of ``names`` in ``found`` (``None``: none there)."""
    return next((found[n] for n in names if n in found), None)


def as_int(value: Any) -> int | None:
    """``value`` as an int, else ``None``."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


__all__ = ["as_int", "first_of", "json_value", "split_option"]

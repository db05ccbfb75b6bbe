"""Structured-output probes: a JSON object with a given key and value type.

Prompt (shared with :mod:`gate.data.synthetic`): ``Reply in JSON with the key
"{key}": {question}`` where the question is a one-word fact (string answer) or a
small sum ``What is {a} + {b}?`` (integer answer, written unquoted).

JSON extraction (:func:`extract_json`), strict and exact:

1. when the reply contains a fenced block (three backticks, optional language
   tag such as ``json``), the content of the *first* block is parsed;
2. otherwise the whole reply, stripped of surrounding whitespace, is parsed;
3. parsing is :func:`json.loads` with ``NaN``/``Infinity`` refused (they are not
   JSON); prose before or after the object outside a fence makes it fail.

Checker (:class:`JsonValue`): the parsed value is an object, it has ``key``, and
the value has the JSON type asked for: ``string``, ``integer`` (a JSON number
without fraction or exponent — ``true`` is a boolean, not an integer, and
``17.0`` is a number, not an integer), ``number``, ``boolean``, ``array``,
``object`` or ``null``. The value itself is not judged: this family measures
whether the build still emits well-formed, well-typed output.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from typing import Any

from gate.data import synthetic as syn
from gate.data.probes import CheckResult, Probe, unique_draws

__all__ = ["JSON_TYPES", "JsonValue", "extract_json", "generate", "json_type"]

_FENCE = re.compile(r"```(?:[\w+.-]*[ \t]*\n)?(.*?)```", flags=re.DOTALL)

#: The JSON type names a checker may ask for.
JSON_TYPES: tuple[str, ...] = ("string", "integer", "number", "boolean", "array", "object", "null")


class _NotJson(ValueError):
    pass


def _refuse_constant(name: str) -> Any:
    raise _NotJson(f"{name} is not JSON")


def extract_json(reply: str) -> Any | None:
    """The JSON value of ``reply`` by the module rules, or ``None`` when there is none.

    (A reply that is literally ``null`` also gives ``None``; checkers that need
    an object test ``isinstance(value, dict)``.)
    """
    fenced = _FENCE.search(reply)
    text = fenced.group(1) if fenced else reply
    text = text.strip()
    if not text:
        return None
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except (ValueError, RecursionError):
        return None


def json_type(value: Any) -> str:
    """The JSON type name of a parsed value (``bool`` is checked before ``int``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


@dataclass(frozen=True)
class JsonValue:
    """A JSON object whose ``key`` holds a value of JSON type ``type``."""

    key: str
    type: str
    kind: str = "json_value"

    def check(self, reply: str) -> CheckResult:
        """Extract, then test object, key and type; ``integer`` also satisfies ``number``."""
        value = extract_json(reply)
        if not isinstance(value, dict):
            return CheckResult(False, "no JSON object in the reply")
        if self.key not in value:
            return CheckResult(False, f"key {self.key!r} missing (keys: {sorted(value)[:5]})")
        got = json_type(value[self.key])
        ok = got == self.type or (self.type == "number" and got == "integer")
        return CheckResult(ok, f"{self.key!r} is {got} (want {self.type})")


def _draw(rng: random.Random) -> Probe:
    key = rng.choice(syn.JSON_KEYS)
    if rng.random() < 0.4:
        a, b = rng.randint(0, 20), rng.randint(0, 20)
        question = syn.ARITH_EASY_PROMPT.format(a=a, op="+", b=b)
        want = "integer"
    else:
        question = rng.choice(syn.FACTS).question
        want = "string"
    prompt = syn.JSON_PROMPT.format(key=key, question=question)
    return Probe("", "structured_output", "format", prompt, JsonValue(key, want), (f"type:{want}",))


def generate(family: str, n: int, seed: int) -> list[Probe]:
    """``n`` distinct JSON probes (about 40 % integer answers, 60 % string answers)."""
    return unique_draws(family, n, seed, _draw)

"""Proof that a compression acted: what every recipe counts while the gate measures it.

A regression gate that measures a build whose compression silently did nothing
approves the uncompressed model under the compressed build's name. So every
recipe counts, during the run, what it changed, in a unit of its own
(its method, :mod:`gate.models.methods`, declares it; a recipe without one does not
load):

* weight recipes and checkpoints count **at load** the modules they changed
  (quantized, pruned, dropped layers) or the quantized layers the checkpoint
  loaded; every request then runs through them, so a tier is exercised when
  that count is above zero;
* attention recipes count **per call** the attention calls their replacement
  computed; a tier is exercised when its requests made at least one;
* KV-cache recipes count **per request** the key/value pairs evicted or
  quantized, and which requests had any: a request the method never touched
  (a prompt shorter than the budget) measures the uncompressed model.

:class:`Activity` is the running counter a loaded build keeps
(``backend.activity``); :meth:`Activity.since` turns two readings into the
:class:`Exercise` of one tier: how much the recipe acted on that tier's
requests and the exercised share ``s``:

* per-request counting: ``s = exercised / requests``;
* otherwise: ``s = 1`` when the count grew (at-load: is above zero), else 0.

``s = 0`` is NOT EXERCISED: the tier's numbers do not measure the recipe, and
the run is never approved on them (:mod:`gate.tiers.exercised`).

A stack of recipes (:mod:`gate.models.stack`) keeps one :class:`Activity` per
part in a :class:`StackActivity`; its :class:`Exercise` lists every part's own
(``parts``), and a tier is NOT EXERCISED when any part did nothing on it. A
speculative decoder acts only where the build generates
(:attr:`Footprint.generation_only`): teacher-forced scoring runs the target alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any


class Counting(str, Enum):
    """When a recipe counts what it changed."""

    #: Once, after loading: modules changed, quantized layers loaded.
    AT_LOAD = "at-load"
    #: Each time the replaced computation runs (attention calls).
    PER_CALL = "per-call"
    #: Each request, with whether the method acted on it (KV-cache methods).
    PER_REQUEST = "per-request"


@dataclass(frozen=True)
class Footprint:
    """What a recipe declares it counts: the unit and when (the recipe contract)."""

    unit: str
    counting: Counting
    #: It acts only on generation (a speculative decoder); scoring never runs it.
    generation_only: bool = False


#: An activity's reading: ``(acted, requests, exercised)`` per part, flattened.
Reading = tuple[int, ...]


@dataclass
class Activity:
    """The running count of what one loaded build's recipe changed (see the module doc)."""

    recipe: str
    footprint: Footprint
    #: Units acted on so far (set once at load for :attr:`Counting.AT_LOAD`).
    acted: int = 0
    #: Requests seen by a per-request method, and those it acted on.
    requests: int = 0
    exercised: int = 0
    #: :func:`request_key` of every request the method acted on (per-request counting).
    exercised_keys: set[int] = field(default_factory=set)

    @property
    def unit(self) -> str:
        """What :attr:`acted` counts."""
        return self.footprint.unit

    def count(self, units: int = 1) -> None:
        """Add ``units`` changed (an attention call replaced, pairs evicted ...)."""
        if units < 0:
            raise ValueError(f"cannot count {units} units")
        self.acted += int(units)

    def request(self, acted: bool, key: int | None = None) -> None:
        """Count one request (``key``: its :func:`request_key`), as exercised when acted on."""
        self.requests += 1
        self.exercised += int(acted)
        if acted and key is not None:
            self.exercised_keys.add(key)

    def reading(self) -> Reading:
        """``(acted, requests, exercised)`` now, to pass back to :meth:`since`."""
        return self.acted, self.requests, self.exercised

    def since(self, before: Reading | None) -> Exercise:
        """What the recipe did since ``before`` (``None``: since it loaded)."""
        acted0, requests0, exercised0 = before or (0, 0, 0)
        at_load = self.footprint.counting is Counting.AT_LOAD
        return Exercise(
            recipe=self.recipe,
            unit=self.unit,
            counting=self.footprint.counting.value,
            acted=self.acted if at_load else self.acted - acted0,
            requests=self.requests - requests0,
            exercised=self.exercised - exercised0,
            generation_only=self.footprint.generation_only,
        )


@dataclass
class StackActivity:
    """The activities of a stack's parts (module doc), read and stamped together.

    Its :attr:`principal` part, whose figures head the stack's :class:`Exercise`,
    is the per-request one (a KV-cache method, the only part whose share can be
    below 1) when there is one, else the first.
    """

    recipe: str
    parts: tuple[Activity, ...]

    @property
    def principal(self) -> Activity:
        """The part whose counting the stack's exercise carries (class doc)."""
        return next(
            (p for p in self.parts if p.footprint.counting is Counting.PER_REQUEST), self.parts[0]
        )

    @property
    def footprint(self) -> Footprint:
        """The principal part's footprint."""
        return self.principal.footprint

    @property
    def exercised_keys(self) -> set[int]:
        """The requests the principal part acted on."""
        return self.principal.exercised_keys

    def reading(self) -> Reading:
        """Every part's reading, flattened, to pass back to :meth:`since`."""
        return tuple(value for part in self.parts for value in part.reading())

    def since(self, before: Reading | None) -> Exercise:
        """Every part's :class:`Exercise` since ``before``, headed by the principal's."""
        parts = tuple(
            part.since(None if before is None else before[3 * i : 3 * i + 3])
            for i, part in enumerate(self.parts)
        )
        head = parts[self.parts.index(self.principal)]
        return replace(head, recipe=self.recipe, generation_only=False, parts=parts)


@dataclass(frozen=True)
class Exercise:
    """How much a recipe acted on one tier's requests (stored in its measurements' details)."""

    recipe: str
    unit: str
    counting: str
    acted: int
    requests: int = 0
    exercised: int = 0
    #: It acts only on generation (:attr:`Footprint.generation_only`).
    generation_only: bool = False
    #: A stack's parts, each with its own figures (empty: one recipe).
    parts: tuple[Exercise, ...] = ()

    @property
    def share(self) -> float:
        """Exercised share of the tier's requests (see the module doc)."""
        if self.counting == Counting.PER_REQUEST.value:
            return self.exercised / self.requests if self.requests else 0.0
        return 1.0 if self.acted > 0 else 0.0

    @property
    def none(self) -> bool:
        """NOT EXERCISED: the recipe (a stack: one of its parts) acted on none of the tier's
        requests."""
        return any(part.share == 0.0 for part in self.parts or (self,))

    def idle(self, generated: bool) -> tuple[Exercise, ...]:
        """The parts (or the recipe) that acted on none of the tier's requests; a part that
        acts only on generation counts only where the tier generated through it
        (``generated``)."""
        return tuple(
            part
            for part in self.parts or (self,)
            if part.share == 0.0 and (generated or not part.generation_only)
        )

    def describe(self) -> str:
        """``kv-snapkv:0.5 acted on 90 of 96 request(s) (94 %; 61,440 KV pairs evicted)``;
        a stack: its parts' descriptions joined with ``; ``."""
        if self.parts:
            return "; ".join(part.describe() for part in self.parts)
        amount = f"{self.acted:,} {self.unit}"
        if self.counting == Counting.PER_REQUEST.value:
            return (
                f"{self.recipe} acted on {self.exercised} of {self.requests} request(s)"
                f" ({self.share:.0%}; {amount})"
            )
        return f"{self.recipe}: {amount}"

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (a measurement's ``details`` entry)."""
        return {
            "method": self.recipe,
            "unit": self.unit,
            "counting": self.counting,
            "acted": self.acted,
            "requests": self.requests,
            "exercised": self.exercised,
            "share": self.share,
            **({"generation_only": True} if self.generation_only else {}),
            **({"parts": [part.to_dict() for part in self.parts]} if self.parts else {}),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Exercise | None:
        """Read a details entry back; ``None`` for a malformed one."""
        try:
            return cls(
                recipe=str(data["method"]),
                unit=str(data.get("unit", "")),
                counting=str(data.get("counting", Counting.PER_REQUEST.value)),
                acted=int(data.get("acted", data.get("exercised", 0))),
                requests=int(data.get("requests", 0)),
                exercised=int(data.get("exercised", 0)),
                generation_only=bool(data.get("generation_only", False)),
                parts=tuple(
                    part
                    for part in (cls.from_dict(p) for p in data.get("parts") or ())
                    if part is not None
                ),
            )
        except (KeyError, TypeError, ValueError, AttributeError):
            return None


def request_key(context: Sequence[int], continuation: Sequence[int] = ()) -> int:
    """A request's identity within a run: its token ids (what the method saw)."""
    return hash((tuple(int(t) for t in context), tuple(int(t) for t in continuation)))


__all__ = [
    "Activity",
    "Counting",
    "Exercise",
    "Footprint",
    "Reading",
    "StackActivity",
    "request_key",
]

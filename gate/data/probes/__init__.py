"""Seeded capability probes with exact checkers (docs/metrics.md "Capability probes").

A :class:`Probe` is one prompt plus a :class:`Checker` that decides, with no
model and no judgement call, whether a reply satisfies it. Probes come in
families, one gated metric each (``capability.<family>``):

* ``arithmetic_easy`` / ``arithmetic_medium`` / ``arithmetic_hard`` — multi-step
  arithmetic, checked on the last number of the reply (:mod:`.arithmetic`);
* ``instruction_following`` — verifiable constraints (counts, required and
  forbidden words, capitals, prefixes ...) (:mod:`.instructions`);
* ``structured_output`` — a JSON object with a given key and value type
  (:mod:`.structured`);
* ``code`` — a small Python function run against hidden tests in
  :mod:`gate.data.probes.sandbox` (:mod:`.code`).

Generation is pure and deterministic given ``seed``: every family draws from
``random.Random(f"{seed}:{family}")``. The demo model is trained on random
draws from the same templates (:mod:`gate.data.synthetic`) with its own
training seed; the probes use seeds from :data:`DEFAULT_SEED` (10 000) upwards
and exclude nothing else, so a probe equals a training example by chance only
(for ``a + b`` with operands in 0..99 the chance that one probe was among N
training draws is about ``1 - (1 - 1/30000)^N``; the checkers measure the
format and the arithmetic either way).

A probe id is ``<family>:<index>:<8 hex of sha256(prompt)>`` so that a baseline
and a candidate measured with the same seed pair probe by probe, and a changed
generator shows up as unpaired ids rather than as silently mismatched pairs.
"""

from __future__ import annotations

import hashlib
import importlib
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from gate.errors import ConfigError

__all__ = [
    "DEFAULT_SEED",
    "FAMILIES",
    "CheckResult",
    "Checker",
    "Probe",
    "build_probes",
    "probe_id",
]

#: First seed of the probe sets; the demo model's training seeds are far below it.
DEFAULT_SEED = 10_000

#: Family name -> module defining ``generate(n, seed) -> list[Probe]``.
_FAMILY_MODULES: dict[str, str] = {
    "arithmetic_easy": "gate.data.probes.arithmetic",
    "arithmetic_medium": "gate.data.probes.arithmetic",
    "arithmetic_hard": "gate.data.probes.arithmetic",
    "instruction_following": "gate.data.probes.instructions",
    "structured_output": "gate.data.probes.structured",
    "code": "gate.data.probes.code",
}

#: Every probe family, in report order.
FAMILIES: tuple[str, ...] = tuple(_FAMILY_MODULES)


@dataclass(frozen=True)
class CheckResult:
    """The verdict of a checker on one reply; ``reason`` says why it failed (or what passed)."""

    passed: bool
    reason: str


@runtime_checkable
class Checker(Protocol):
    """An exact, deterministic test of a reply."""

    @property
    def kind(self) -> str:
        """Constraint kind, for per-kind breakdowns (``"word_count"``, ``"last_number"``...)."""
        ...

    def check(self, reply: str) -> CheckResult:
        """Whether ``reply`` satisfies the constraint."""
        ...


@dataclass(frozen=True)
class Probe:
    """One capability probe: a prompt, its checker and the slices it belongs to."""

    id: str
    family: str
    difficulty: str
    prompt: str
    checker: Checker
    #: Breakdown slices, e.g. ``("op:*",)`` or ``("constraint:bullet_count",)``.
    tags: tuple[str, ...] = ()
    #: Generation budget for this probe; ``None`` uses the tier default.
    max_new_tokens: int | None = None


def probe_id(family: str, index: int, prompt: str) -> str:
    """Stable id: family, index and a short hash of the prompt text."""
    digest = hashlib.sha256(prompt.encode("utf-8")).hexdigest()[:8]
    return f"{family}:{index:04d}:{digest}"


def build_probes(family: str, n: int, seed: int = DEFAULT_SEED) -> list[Probe]:
    """``n`` probes of ``family`` drawn with ``seed``; the same arguments give the same list."""
    if family not in _FAMILY_MODULES:
        from gate.config import suggest

        raise ConfigError(f"unknown probe family {family!r}", suggest(family, list(FAMILIES)))
    if n < 0:
        raise ConfigError(f"probe count for {family!r} is negative ({n})", "use 0 to skip it")
    module = importlib.import_module(_FAMILY_MODULES[family])
    generate: Callable[[str, int, int], list[Probe]] = module.generate
    return generate(family, n, seed)


def unique_draws(
    family: str,
    n: int,
    seed: int,
    draw: Callable[[random.Random], Probe | None],
    *,
    attempts: int = 1000,
) -> list[Probe]:
    """Draw ``n`` probes with distinct prompts from ``random.Random(f"{seed}:{family}")``.

    ``draw(rng)`` returns a probe with a placeholder id (it is reassigned here)
    or ``None`` to skip a draw. Gives up with a :class:`ConfigError` when the
    template space is too small for ``n`` distinct prompts (``attempts``
    draws in a row without a new prompt).
    """
    rng = random.Random(f"{seed}:{family}")
    out: list[Probe] = []
    seen: set[str] = set()
    misses = 0
    while len(out) < n:
        probe = draw(rng)
        if probe is None or probe.prompt in seen:
            misses += 1
            if misses >= attempts:
                raise ConfigError(
                    f"cannot draw {n} distinct {family} probes",
                    f"ask for fewer (got {len(out)} distinct ones)",
                )
            continue
        seen.add(probe.prompt)
        misses = 0
        out.append(
            Probe(
                id=probe_id(family, len(out), probe.prompt),
                family=family,
                difficulty=probe.difficulty,
                prompt=probe.prompt,
                checker=probe.checker,
                tags=probe.tags,
                max_new_tokens=probe.max_new_tokens,
            )
        )
    return out


def families_from(names: Sequence[str] | None) -> tuple[str, ...]:
    """Validate a list of family names (``None`` means all) and keep report order."""
    if names is None:
        return FAMILIES
    from gate.config import suggest

    for name in names:
        if name not in _FAMILY_MODULES:
            raise ConfigError(f"unknown probe family {name!r}", suggest(name, list(FAMILIES)))
    return tuple(f for f in FAMILIES if f in set(names))

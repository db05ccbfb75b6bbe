"""Verdict types: what :mod:`gate.gating.compare` produces and every report consumes."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from gate.errors import ExitCode


class Severity(enum.IntEnum):
    """Severity of one finding; ordered so that ``max()`` gives the worst."""

    PASS = 0
    WARN = 1
    CRITICAL = 2

    @property
    def label(self) -> str:
        """Lower-case name used in the results JSON (``pass|warn|critical``)."""
        return self.name.lower()


@dataclass(frozen=True)
class Verdict:
    """The comparison of one metric (or one slice of it) against one baseline ref.

    ``delta = value - baseline_value``; ``relative_delta = delta / |baseline_value|``
    (``None`` when the baseline value is 0). ``ci`` is the confidence interval of
    ``delta`` from the statistical test named in ``test``; ``p_value`` is its
    one-sided p-value for "the candidate is worse". ``severity`` is the bound the
    evidence supports, never more.
    """

    metric: str
    tier: str
    severity: Severity
    value: float
    baseline_value: float | None
    delta: float | None
    relative_delta: float | None
    higher_is_better: bool
    n: int
    reason: str
    against: str = "baseline"
    slice: str | None = None
    unit: str = ""
    ci: tuple[float, float] | None = None
    p_value: float | None = None
    test: str | None = None
    threshold: dict[str, Any] = field(default_factory=dict)
    #: Slice values (``"category:code" -> value``) for the results JSON ``breakdown``.
    breakdown: dict[str, float] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        """``metric`` or ``metric[slice]``; unique within one comparison."""
        return f"{self.metric}[{self.slice}]" if self.slice else self.metric


@dataclass(frozen=True)
class GateOutcome:
    """The overall result of a run: worst severity, and the exit code it maps to."""

    severity: Severity
    exit_code: ExitCode
    verdicts: tuple[Verdict, ...]

    @property
    def word(self) -> str:
        """``pass | warn | block`` as in the results JSON."""
        return {Severity.PASS: "pass", Severity.WARN: "warn", Severity.CRITICAL: "block"}[
            self.severity
        ]

    @property
    def headline(self) -> str:
        """APPROVED / APPROVED WITH WARNINGS / BLOCKED."""
        if self.exit_code == ExitCode.BLOCKED:
            return "BLOCKED"
        return "APPROVED WITH WARNINGS" if self.severity == Severity.WARN else "APPROVED"


def decide(verdicts: list[Verdict] | tuple[Verdict, ...], *, strict: bool = False) -> GateOutcome:
    """Worst severity wins: critical -> exit 1; warn -> exit 0 (1 when ``strict``)."""
    worst = max((v.severity for v in verdicts), default=Severity.PASS)
    blocked = worst == Severity.CRITICAL or (strict and worst == Severity.WARN)
    return GateOutcome(
        severity=worst,
        exit_code=ExitCode.BLOCKED if blocked else ExitCode.OK,
        verdicts=tuple(verdicts),
    )

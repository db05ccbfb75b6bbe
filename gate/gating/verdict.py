"""Verdict types: what :mod:`gate.gating.compare` produces and every report consumes.

A :class:`Verdict` carries the bound it was judged by as a typed
:class:`VerdictThreshold` (the results JSON writes it as the ``threshold``
object), and compare's own ``details`` entries are named by
:class:`VerdictDetail`. What compare decided and what the verdict reports of it
(metric, slice, value, direction, severity, sample count, bound) is one
:class:`Assessment`, which both :class:`Verdict` and compare's
:class:`~gate.gating.decision.Decision` are.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Final, Literal

from gate.errors import ExitCode
from gate.gating.against import DEFAULT_AGAINST
from gate.gating.power import PowerStatement

#: How a bound reads a degradation: in the metric's unit, or as a fraction of ``|reference|``.
BoundMode = Literal["relative", "absolute"]
#: What a verdict's candidate was compared with (``details[VerdictDetail.REFERENCE]``).
ReferenceKind = Literal["baseline", "ideal", "in-session"]


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
class Bound:
    """Warn and critical bounds on the *degradation* ``d`` (``d > 0`` means worse).

    ``mode="absolute"``: ``d`` in the metric's unit; ``mode="relative"``: ``d``
    divided by ``|reference value|``. A bound is crossed when ``d > bound``.
    """

    warn: float
    critical: float
    mode: BoundMode = "absolute"

    def to_dict(self) -> dict[str, Any]:
        """JSON form for reports."""
        return {"warn": self.warn, "critical": self.critical, "mode": self.mode}

    def degradation(self, reference: float, value: float, *, higher_is_better: bool) -> float:
        """``d``: the change from ``reference`` to ``value`` in the worse direction.

        ``value - reference`` (negated when higher is better), divided by
        ``|reference|`` in relative mode; a worsening from a reference of 0 is
        ``inf`` there, anything else from 0 is 0.
        """
        d = (reference - value) if higher_is_better else (value - reference)
        if self.mode == "absolute":
            return d
        if reference == 0.0:
            return math.inf if d > 0 else 0.0
        return d / abs(reference)

    def severity(self, d: float) -> Severity:
        """The highest bound ``d`` is past: CRITICAL, WARN or PASS."""
        if d > self.critical:
            return Severity.CRITICAL
        if d > self.warn:
            return Severity.WARN
        return Severity.PASS


@dataclass(frozen=True)
class VerdictThreshold:
    """The threshold one verdict was judged by: its bound and the test settings.

    ``category_override``: the bound is the slice's own (``categories`` in
    ``thresholds.toml``), not the metric's. The results JSON writes it as one
    flat object, ``{"warn", "critical", "mode", "alpha", "min_samples",
    "category_override"}`` (:meth:`to_dict`; :meth:`from_dict` reads it back).
    """

    bound: Bound
    alpha: float
    min_samples: int
    category_override: bool = False

    def to_dict(self) -> dict[str, Any]:
        """The results JSON ``threshold`` object."""
        return {
            **self.bound.to_dict(),
            "alpha": self.alpha,
            "min_samples": self.min_samples,
            "category_override": self.category_override,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> VerdictThreshold | None:
        """Inverse of :meth:`to_dict`; ``None`` for the empty object of an ungated metric.

        Raises ``KeyError``/``TypeError``/``ValueError`` on a malformed object.
        """
        if not data:
            return None
        mode = data.get("mode", "absolute")
        if mode not in ("relative", "absolute"):
            raise ValueError(f"threshold mode {mode!r}")
        bound = Bound(warn=float(data["warn"]), critical=float(data["critical"]), mode=mode)
        return cls(
            bound=bound,
            alpha=float(data["alpha"]),
            min_samples=int(data["min_samples"]),
            category_override=bool(data.get("category_override", False)),
        )


class VerdictDetail:
    """Keys :mod:`gate.gating.compare` adds to ``Verdict.details`` (beside the candidate's own).

    Writers and readers both use these names; the strings are part of the
    results JSON and stay as they are.
    """

    #: What the candidate was compared with, a :data:`ReferenceKind`.
    REFERENCE: Final = "reference"
    #: Present when a crossed bound was not escalated for lack of evidence (the
    #: report's ``PASS (n.s.)``); value: the label of the bound crossed (``"warn"``).
    NOT_SIGNIFICANT: Final = "not_significant"


@dataclass(frozen=True, kw_only=True)
class Assessment:
    """What one comparison of a metric (or one slice of it) settled.

    ``severity`` is the bound the evidence supports, never more; ``n`` the
    sample count behind the comparison; ``threshold`` the bound it was judged
    by (``None`` when the metric is not gated). The fields are keyword-only and
    shared by :class:`Verdict` and :class:`~gate.gating.decision.Decision`:
    :meth:`assessed` carries them from one to the other.
    """

    metric: str
    slice: str | None = None
    value: float
    higher_is_better: bool
    severity: Severity
    n: int
    #: The bound the verdict was judged by; ``None`` when the metric is not gated.
    threshold: VerdictThreshold | None = None

    @property
    def key(self) -> str:
        """``metric`` or ``metric[slice]``; unique within one comparison."""
        return f"{self.metric}[{self.slice}]" if self.slice else self.metric

    def assessed(self) -> dict[str, Any]:
        """The :class:`Assessment` fields of this object, as keyword arguments."""
        return {f.name: getattr(self, f.name) for f in fields(Assessment)}


@dataclass(frozen=True)
class Verdict(Assessment):
    """The comparison of one metric (or one slice of it) against one baseline ref.

    ``delta = value - baseline_value``; ``relative_delta = delta / |baseline_value|``
    (``None`` when the baseline value is 0). ``ci`` is the confidence interval of
    ``delta`` from the statistical test named in ``test``; ``p_value`` is its
    one-sided p-value for "the candidate is worse". ``severity`` is the bound the
    evidence supports, never more.
    """

    tier: str
    baseline_value: float | None
    delta: float | None
    relative_delta: float | None
    reason: str
    against: str = DEFAULT_AGAINST
    unit: str = ""
    ci: tuple[float, float] | None = None
    p_value: float | None = None
    test: str | None = None
    #: Slice values (``"category:code" -> value``) for the results JSON ``breakdown``.
    breakdown: dict[str, float] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)
    #: What the test behind the verdict could detect (its MDE beside the critical bound);
    #: ``None`` for an ungated or untested metric (docs/metrics.md "Power").
    power: PowerStatement | None = None


@dataclass(frozen=True)
class Unmeasured:
    """A metric baseline ``against`` holds that the run did not measure (no verdict possible)."""

    metric: str
    against: str

    def to_dict(self) -> dict[str, str]:
        """The results JSON entry (``{"name": ..., "against": ...}``)."""
        return {"name": self.metric, "against": self.against}

    @classmethod
    def from_dict(cls, entry: Mapping[str, Any]) -> Unmeasured:
        """Inverse of :meth:`to_dict` (``KeyError``/``TypeError`` on a malformed entry)."""
        return cls(metric=str(entry["name"]), against=str(entry["against"]))


@dataclass(frozen=True)
class NotExercised:
    """A tier on whose requests the candidate's compression never acted: its numbers
    measured the uncompressed model (:mod:`gate.tiers.exercised` finds them)."""

    tier: str
    #: Why (what the recipe did not touch) and what to do, in words.
    why: str

    #: The words between the tier and the reason in :attr:`line`.
    MARK: ClassVar[str] = " NOT EXERCISED: "

    @property
    def line(self) -> str:
        """``<tier> NOT EXERCISED: <why>`` (reports; the results JSON's entry)."""
        return f"{self.tier}{self.MARK}{self.why}"

    def to_dict(self) -> dict[str, str]:
        """The results JSON ``not_exercised[]`` entry (schema 3)."""
        return {"tier": self.tier, "why": self.why}

    @classmethod
    def from_dict(cls, entry: Any) -> NotExercised:
        """Inverse of :meth:`to_dict`; a line (a results file of schema 1 or 2) is read
        with :meth:`from_line` (``KeyError``/``TypeError``/``ValueError`` when malformed)."""
        if isinstance(entry, str):
            return cls.from_line(entry)
        if not isinstance(entry, Mapping) or set(entry) != {"tier", "why"}:
            raise ValueError(f"not a not_exercised entry (tier, why): {entry!r}")
        return cls(tier=str(entry["tier"]), why=str(entry["why"]))

    @classmethod
    def from_line(cls, line: str) -> NotExercised:
        """Inverse of :attr:`line`, for the entries of results files written before schema 3
        only (``ValueError`` on a malformed one)."""
        tier, mark, why = str(line).partition(cls.MARK)
        if not mark or not tier:
            raise ValueError(f"not a NOT EXERCISED line: {line!r}")
        return cls(tier=tier, why=why)


@dataclass(frozen=True)
class VersionDrift:
    """A package (or the serving engine) whose version differs between the software that
    measured baseline ``against`` and the software that measured the candidate.

    Found by :func:`gate.gating.versions.compare_versions`; a warning, since numbers may
    move for that reason alone (``--strict`` blocks).
    """

    package: str
    baseline: str
    candidate: str
    against: str = DEFAULT_AGAINST

    @property
    def message(self) -> str:
        """``baseline fp16 measured with transformers 5.23.0, candidate with 5.24.0: ...``."""
        return (
            f"baseline {self.against} measured with {self.package} {self.baseline}, "
            f"candidate with {self.candidate}: numbers may move for that reason alone"
        )

    def to_dict(self) -> dict[str, str]:
        """The results JSON ``version_drift[]`` entry."""
        return {
            "package": self.package,
            "baseline": self.baseline,
            "candidate": self.candidate,
            "against": self.against,
        }

    @classmethod
    def from_dict(cls, entry: Mapping[str, Any]) -> VersionDrift:
        """Inverse of :meth:`to_dict` (``KeyError``/``TypeError`` on a malformed entry)."""
        return cls(
            package=str(entry["package"]),
            baseline=str(entry["baseline"]),
            candidate=str(entry["candidate"]),
            against=str(entry.get("against", DEFAULT_AGAINST)),
        )


@dataclass(frozen=True)
class GateOutcome:
    """The overall result of a run: worst severity, and the exit code it maps to."""

    severity: Severity
    exit_code: ExitCode
    verdicts: tuple[Verdict, ...]
    #: Baseline metrics of the tiers that ran which the run did not measure (each a warning).
    unmeasured: tuple[Unmeasured, ...] = ()
    #: Packages or engines measured at other versions than the baseline's (each a warning).
    version_drift: tuple[VersionDrift, ...] = ()
    #: The tiers on whose requests the compression never acted (NOT EXERCISED).
    not_exercised: tuple[NotExercised, ...] = ()

    @property
    def underpowered(self) -> tuple[PowerStatement, ...]:
        """The verdicts' power statements whose critical bound is below their MDE."""
        return underpowered(self.verdicts)

    @property
    def word(self) -> str:
        """``pass | warn | block | not_exercised`` as in the results JSON."""
        if self.exit_code == ExitCode.NO_MEASUREMENTS and self.not_exercised:
            return "not_exercised"
        return {Severity.PASS: "pass", Severity.WARN: "warn", Severity.CRITICAL: "block"}[
            self.severity
        ]

    @property
    def headline(self) -> str:
        """APPROVED / APPROVED WITH WARNINGS / BLOCKED / NOT EXERCISED."""
        if self.exit_code == ExitCode.BLOCKED:
            return "BLOCKED"
        if self.exit_code == ExitCode.NO_MEASUREMENTS and self.not_exercised:
            return "NOT EXERCISED"
        return "APPROVED WITH WARNINGS" if self.severity == Severity.WARN else "APPROVED"


def underpowered(verdicts: list[Verdict] | tuple[Verdict, ...]) -> tuple[PowerStatement, ...]:
    """The power statements of ``verdicts`` whose critical bound is below their MDE."""
    return tuple(v.power for v in verdicts if v.power is not None and v.power.underpowered)


def decide(
    verdicts: list[Verdict] | tuple[Verdict, ...],
    *,
    strict: bool = False,
    unmeasured: list[Unmeasured] | tuple[Unmeasured, ...] = (),
    version_drift: list[VersionDrift] | tuple[VersionDrift, ...] = (),
    not_exercised: list[NotExercised] | tuple[NotExercised, ...] = (),
    require_power: bool = False,
) -> GateOutcome:
    """Worst severity wins: critical -> exit 1; warn -> exit 0 (1 when ``strict``).

    A baseline metric the run did not measure (``unmeasured``) counts as a
    warning: the build is not shown to be as good there, so ``--strict`` blocks.
    So does a package measured at another version than the baseline's
    (``version_drift``, :mod:`gate.gating.versions`): the numbers may have moved
    for that reason alone.

    An underpowered verdict (its critical bound is below the smallest
    degradation its test detects, :func:`underpowered`) is a warning in words
    only: every report lists it, but it changes neither the severity nor the
    exit code, since a PASS there is not a regression, only one the test could
    not have shown. ``strict``, or ``require_power`` (``[gate]`` of
    ``thresholds.toml``), make it block (exit 1, severity at least WARN).

    A tier on whose requests the candidate's compression never acted
    (``not_exercised``, one record each) measured the uncompressed model:
    the run is never approved on it. It ends with exit 5 (nothing measured),
    unless a measured regression blocks it (exit 1).
    """
    worst = max((v.severity for v in verdicts), default=Severity.PASS)
    if unmeasured or version_drift:
        worst = max(worst, Severity.WARN)
    if (strict or require_power) and underpowered(verdicts):
        worst = max(worst, Severity.WARN)
        strict = True
    blocked = worst == Severity.CRITICAL or (strict and worst == Severity.WARN)
    if blocked:
        code = ExitCode.BLOCKED
    else:
        code = ExitCode.NO_MEASUREMENTS if not_exercised else ExitCode.OK
    return GateOutcome(
        severity=worst,
        exit_code=code,
        verdicts=tuple(verdicts),
        unmeasured=tuple(unmeasured),
        version_drift=tuple(version_drift),
        not_exercised=tuple(not_exercised),
    )

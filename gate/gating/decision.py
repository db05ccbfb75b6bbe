"""What the comparison of one metric decided, and the reason text that says it.

:mod:`gate.gating.compare` *decides*: it picks the reference, runs the test and
weighs it against the bound, and returns a :class:`Decision` (no wording).
:func:`describe` *words* a decision as the verdict's ``reason``::

    <metric>[<slice>] <value> vs <reference>: <change> within warn <bound>
    <metric>[<slice>] <value> vs <reference>: <change> past critical <bound> (<test>)

followed by what the evidence did to the point severity (:class:`Basis`).
Bounds are shown signed in the metric's worse direction (``-0.05`` for a
higher-is-better metric), relative ones as percentages.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from gate.gating.power import PowerStatement
from gate.gating.verdict import Assessment, ReferenceKind, Severity, VerdictThreshold
from gate.measurement import Measurement


class Method(enum.Enum):
    """The one-sided test of "the candidate is worse" behind a verdict."""

    MCNEMAR = "McNemar exact"
    PAIRED_BOOTSTRAP = "paired bootstrap"
    MANN_WHITNEY = "Mann-Whitney U"
    WILCOXON_PAIRS = "Wilcoxon signed-rank (pairs)"


class Pairing(enum.Enum):
    """How the candidate's items were matched with the reference's."""

    #: Every item matched by id, or the reference is the ideal (no pairing needed).
    ALIGNED = "aligned"
    #: Only the ids both sides have (``Evidence.n`` of them).
    COMMON_IDS = "common ids"
    #: No ids on a side; equal counts, matched by position.
    BY_POSITION = "by position"


@dataclass(frozen=True)
class Evidence:
    """The result of the statistical test of one comparison.

    ``ci`` is the interval of ``delta`` in the value's unit; ``n`` the items
    (or runs per side, the smaller) behind it. ``margin`` (relative, ``>= 0``)
    is how much worse than the reference the test asked the candidate to be
    (REPEATED metrics only; 0: worse at all). ``discordant`` is McNemar's
    ``(b, c)``; ``runs`` the ``(candidate, baseline)`` run counts of a REPEATED test.
    """

    method: Method
    p_worse: float
    ci: tuple[float, float]
    n: int
    margin: float = 0.0
    pairing: Pairing = Pairing.ALIGNED
    discordant: tuple[int, int] | None = None
    runs: tuple[int, int] | None = None


@dataclass(frozen=True)
class Reference:
    """What the candidate is compared with.

    ``measurement`` is ``None`` when the metric's ideal stands in for a
    baseline value; an ``"in-session"`` reference holds the baseline runs timed
    alternately with the candidate's (run ``i`` pairs with run ``i``).
    """

    value: float
    measurement: Measurement | None
    kind: ReferenceKind

    @property
    def paired_runs(self) -> bool:
        """Runs alternated with the candidate's, comparable pair by pair."""
        return self.kind == "in-session"


class Basis(enum.Enum):
    """How the severity of a decision was reached."""

    #: No baseline value and no ideal: nothing compared (PASS).
    NO_REFERENCE = "no reference"
    #: Compared, but the metric has no threshold (PASS).
    NOT_GATED = "not gated"
    #: No test was possible (``Decision.untested`` says why): the point value decides.
    POINT_VALUE = "point value"
    #: The test supports the point severity (or the point value is within warn).
    SUPPORTED = "supported"
    #: The test does not support it, but has fewer than ``min_samples``: the point value decides.
    FEW_SAMPLES = "few samples"
    #: Repeated runs show the candidate past warn, not past critical: WARN.
    WARN_ONLY = "warn only"
    #: The point value crossed a bound the test does not support: PASS.
    NOT_SIGNIFICANT = "not significant"


@dataclass(frozen=True)
class Subject:
    """What a decision is about: a metric (or one ``slice`` of it), the candidate's value
    and the metric's direction."""

    metric: str
    slice: str | None
    value: float
    higher_is_better: bool


@dataclass(frozen=True)
class Decision(Assessment):
    """Everything compare decided about one metric (or slice) against one reference.

    The :class:`~gate.gating.verdict.Assessment` fields (metric, slice, value,
    direction, severity, ``n``, threshold) are the verdict's as they are.
    ``point`` is the severity of the value alone (the highest bound its
    degradation is past); ``severity`` is what the evidence supports, the
    verdict's. ``evidence`` is the test the verdict reports (for REPEATED
    metrics possibly a test against a bound, see ``Evidence.margin``); ``n`` is
    the sample count behind the comparison.
    """

    reference: Reference | None
    point: Severity
    basis: Basis
    evidence: Evidence | None
    #: Why no test was run ("point metric", "no per-sample values" ...), when none was.
    untested: str = ""
    #: What the test could detect (:mod:`gate.gating.detectable`); ``None`` when ungated/untested.
    power: PowerStatement | None = None
    #: The whole reason, when the decision words itself (a ratio, :mod:`gate.gating.speedup`).
    text: str = ""

    @classmethod
    def passed_ungated(
        cls,
        subject: Subject,
        reference: Reference | None,
        *,
        basis: Basis,
        n: int,
        evidence: Evidence | None = None,
        untested: str = "",
        text: str = "",
    ) -> Decision:
        """A PASS with no threshold applied (``basis`` says why: no reference, no bound)."""
        return cls(
            metric=subject.metric,
            slice=subject.slice,
            value=subject.value,
            higher_is_better=subject.higher_is_better,
            reference=reference,
            threshold=None,
            point=Severity.PASS,
            severity=Severity.PASS,
            basis=basis,
            evidence=evidence,
            n=n,
            untested=untested,
            text=text,
        )

    @property
    def delta(self) -> float | None:
        """``value - reference``; ``None`` without a reference."""
        return None if self.reference is None else self.value - self.reference.value

    @property
    def relative_delta(self) -> float | None:
        """``delta / |reference|``; ``None`` without a reference or when it is 0."""
        if self.reference is None or self.reference.value == 0.0:
            return None
        return (self.value - self.reference.value) / abs(self.reference.value)


# --------------------------------------------------------------------------- wording


def fmt(x: float) -> str:
    """A value in reason texts: four significant digits."""
    return f"{x:.4g}"


def signed(x: float, relative: bool) -> str:
    """A signed change: ``+1.5%`` (relative) or ``+0.015``."""
    return f"{x * 100:+.1f}%" if relative else f"{x:+.4g}"


def describe_test(evidence: Evidence, *, higher_is_better: bool) -> str:
    """``Verdict.test``: the method, and the margin it tested for when there is one."""
    name = evidence.method.value
    if evidence.margin > 0.0:
        worse = -evidence.margin if higher_is_better else evidence.margin
        name += f" for {signed(worse, True)}"
    return name


def _reference_text(ref: Reference) -> str:
    suffix = {"baseline": "", "ideal": " (ideal)", "in-session": " (in-session baseline)"}
    return fmt(ref.value) + suffix[ref.kind]


def _test_text(decision: Decision, evidence: Evidence) -> str:
    """``<test> p=<p>, n=<n>[, b=.., c=..][, <pairing>]``."""
    name = describe_test(evidence, higher_is_better=decision.higher_is_better)
    if evidence.runs is not None:
        counts = f"n={evidence.runs[0]}/{evidence.runs[1]}"
    else:
        counts = f"n={evidence.n}"
        if evidence.discordant is not None:
            counts += f", b={evidence.discordant[0]}, c={evidence.discordant[1]}"
    text = f"{name} p={evidence.p_worse:.2g}, {counts}"
    if evidence.pairing is Pairing.COMMON_IDS:
        text += f", {evidence.n} common items"
    elif evidence.pairing is Pairing.BY_POSITION:
        text += ", paired by position"
    return text


def _against_bound(decision: Decision, ref: Reference, threshold: VerdictThreshold) -> str:
    """``<change> within warn <bound>`` or ``<change> past <level> <bound>``."""
    bound = threshold.bound
    relative = bound.mode == "relative"
    delta = decision.value - ref.value
    rel = decision.relative_delta
    shown = signed(rel, True) if relative and rel is not None else signed(delta, False)
    sign = -1.0 if decision.higher_is_better else 1.0
    if decision.point is Severity.PASS:
        return f"{shown} within warn {signed(sign * bound.warn, relative)}"
    critical = decision.point is Severity.CRITICAL
    limit = bound.critical if critical else bound.warn
    text = f"{shown} past {'critical' if critical else 'warn'} {signed(sign * limit, relative)}"
    if relative and rel is None:
        text += " (relative change undefined at reference 0)"
    return text


def _evidence_text(decision: Decision, threshold: VerdictThreshold) -> str:
    """What the test did to the point severity."""
    evidence = decision.evidence
    if decision.basis is Basis.POINT_VALUE or evidence is None:
        if decision.point is Severity.PASS:
            return ""
        return f" (judged on the point value: {decision.untested})"
    test = _test_text(decision, evidence)
    if decision.basis is Basis.FEW_SAMPLES:
        return f" ({test}; n < min_samples {threshold.min_samples}: judged on the point value)"
    if decision.basis is Basis.WARN_ONLY:
        return f" but shown only past warn ({test})"
    if decision.basis is Basis.NOT_SIGNIFICANT:
        return f" but not significant ({test} >= alpha {threshold.alpha:g})"
    return f" ({test})"


def describe(decision: Decision) -> str:
    """The verdict's ``reason``: value, reference, change against the bound, and the test."""
    if decision.text:
        return decision.text
    head = f"{decision.key} {fmt(decision.value)}"
    ref = decision.reference
    if ref is None:
        return f"{head}: no baseline value"
    head += f" vs {_reference_text(ref)}"
    threshold = decision.threshold
    if threshold is None:
        return f"{head}: {signed(decision.value - ref.value, False)}, not gated"
    return f"{head}: {_against_bound(decision, ref, threshold)}" + _evidence_text(
        decision, threshold
    )

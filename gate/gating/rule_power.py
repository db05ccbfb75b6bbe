"""What an accuracy gate can catch: a fixed-tolerance rule against gate's paired test.

docs/power.md. Two ways to gate a candidate's accuracy on a benchmark of ``n``
items against a baseline accuracy ``p0``:

**The fixed-tolerance rule** (what most CI accuracy checks do). The candidate
passes when its measured accuracy ``A = X / n`` satisfies ``A >= L`` with the
lower bound ``L = p0 - tol`` (absolute tolerance) or ``L = p0 (1 - tol)``
(relative); a measurement exactly on the bound passes. Two-sided rules also
fail ``A > U`` with ``U = p0 + tol`` or ``p0 (1 + tol)``. When the candidate's
true accuracy is ``p = p0 - drop`` and its ``n`` answers are independent,
``X ~ Binom(n, p)`` and

``P[fail] = P[X < n L] + P[X > n U] = F(⌈n L⌉ - 1; n, p) + 1 - F(⌊n U⌋; n, p)``

with ``F`` the binomial cdf (exact; the bound ``n L`` is computed in rational
arithmetic from the decimal numbers given, so ``1319 × 0.70 = 923.3`` fails at
923 correct answers or fewer and ``100 × 0.70 = 70`` passes at exactly 70).
The *detection* is this probability at the true drop; the *false alarm* is the
same at ``drop = 0`` (an unchanged build).

When the baseline accuracy is itself a measurement (``Y / m``, ``Y ~ Binom(m,
p0)``, taken independently of the candidate's run), the bounds move with
``Y``: ``P[fail] = Σ_y P[Y = y] P[fail | L(y / m), U(y / m)]``, summed exactly
over the ``m + 1`` values of ``Y``.

**Gate's paired test** (McNemar's exact one-sided test on the items whose
correctness differs, :func:`gate.gating.stats.mcnemar`). The candidate and
the baseline answer the same items; a share ``f`` of them flips (the
discordance: answers lost plus answers gained, over ``n``). A true drop ``d``
is ``(lost - gained) / n``, so lost = ``(f + d) / 2`` and gained = ``(f - d) /
2`` as rates. In the parameters of :func:`gate.gating.power.power_mcnemar`
(Connor 1987: noise ``ψ0`` half each way, plus ``d`` one way) that is ``ψ0 = f
- d``; when ``f < d`` no answer can have been gained and the discordance is
``d`` itself (``ψ0 = 0``). The detection probability is the exact sum of that
function; the items needed for a given power are its bisection
(:func:`gate.gating.power.required_n_mcnemar`).

Both tests assume independent items; neither models a baseline run-to-run
spread beyond the binomial one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from gate.gating import power as pw

#: The drops of the default table: 1 to 10 points of accuracy.
DEFAULT_DROPS: tuple[float, ...] = tuple(k / 100 for k in range(1, 11))


def exact(x: float) -> Fraction:
    """The decimal number a float was written as (``0.7`` is 7/10, not its binary value)."""
    return Fraction(repr(float(x)))


def _ceil(q: Fraction) -> int:
    return -((-q.numerator) // q.denominator)


def _floor(q: Fraction) -> int:
    return q.numerator // q.denominator


@dataclass(frozen=True)
class ToleranceRule:
    """Pass when ``lower <= X / n`` (and ``X / n <= upper`` when two-sided) (module docstring).

    ``baseline``: the expected accuracy ``p0``; ``tolerance``: absolute (accuracy
    points as a fraction) or relative (a fraction of ``p0``); ``baseline_n``:
    the items the baseline was itself measured on, ``None`` when it is a known
    number.
    """

    n: int
    baseline: float
    tolerance: float
    relative: bool = False
    two_sided: bool = False
    baseline_n: int | None = None

    def bounds(self, base: Fraction) -> tuple[Fraction, Fraction]:
        """``(L, U)`` for a baseline value ``base``, exact."""
        tol = exact(self.tolerance)
        if self.relative:
            return base * (1 - tol), base * (1 + tol)
        return base - tol, base + tol

    def fail_counts(self, base: Fraction) -> tuple[int, int | None]:
        """``(k_lo, k_hi)``: the rule fails at ``X <= k_lo`` correct answers, or
        ``X >= k_hi`` when two-sided (``None``: one-sided)."""
        lower, upper = self.bounds(base)
        k_lo = _ceil(lower * self.n) - 1  # X / n < L  <=>  X <= ceil(nL) - 1
        k_hi = _floor(upper * self.n) + 1 if self.two_sided else None  # X / n > U
        return k_lo, k_hi

    def fail_probability(self, true_accuracy: float) -> float:
        """``P[the rule fails]`` when the candidate's true accuracy is ``true_accuracy``."""
        from scipy import stats as sps

        if self.baseline_n is None:
            bases = [exact(self.baseline)]
            weights = np.ones(1)
        else:
            m = self.baseline_n
            bases = [Fraction(y, m) for y in range(m + 1)]
            weights = sps.binom.pmf(np.arange(m + 1), m, self.baseline)
        counts = [self.fail_counts(b) for b in bases]
        k_lo = np.array([c[0] for c in counts], dtype=np.int64)
        fail = sps.binom.cdf(k_lo, self.n, true_accuracy)
        if self.two_sided:
            k_hi = np.array([c[1] for c in counts], dtype=np.int64)
            fail = fail + sps.binom.sf(k_hi - 1, self.n, true_accuracy)
        return float(np.clip(np.sum(weights * fail), 0.0, 1.0))

    def detection(self, drop: float) -> float:
        """``P[fail]`` at a true accuracy ``baseline - drop``."""
        return self.fail_probability(self.baseline - drop)

    @property
    def false_alarm(self) -> float:
        """``P[fail]`` of an unchanged build (true accuracy ``baseline``)."""
        return self.fail_probability(self.baseline)

    def mde(self, power: float) -> float | None:
        """The smallest drop the rule catches with probability ``power`` (``None``: none
        below the whole baseline). The detection increases with the drop (the binomial
        cdf falls as its ``p`` rises), so bisection finds it."""
        return _smallest_drop(self.detection, power, self.baseline * (1.0 - 1e-9))


def _smallest_drop(detect: Callable[[float], float], power: float, hi: float) -> float | None:
    """The least ``d`` in ``(0, hi]`` with ``detect(d) >= power`` (``detect`` increasing),
    to 1e-6; ``None`` when even ``hi`` falls short."""
    if detect(hi) < power:
        return None
    lo = 0.0
    while hi - lo > 1e-6:
        mid = (lo + hi) / 2.0
        if detect(mid) >= power:
            hi = mid
        else:
            lo = mid
    return hi


@dataclass(frozen=True)
class PairedTest:
    """McNemar's one-sided exact test at ``alpha`` on ``n`` paired items with flip rate ``flip_rate``."""

    n: int
    flip_rate: float
    alpha: float

    def noise(self, drop: float) -> float:
        """``ψ0 = max(f - d, 0)``: the flips in both directions that the drop leaves (module docstring)."""
        return max(self.flip_rate - drop, 0.0)

    def detection(self, drop: float) -> float:
        """``P[McNemar rejects]`` at a true drop ``drop`` (0 for no drop or a rise)."""
        if drop <= 0.0:
            return pw.power_mcnemar(self.n, self.flip_rate, 0.0, alpha=self.alpha)
        return pw.power_mcnemar(self.n, self.noise(drop), min(drop, 1.0), alpha=self.alpha)

    def n_needed(self, drop: float, power: float) -> int | None:
        """Items the test needs to detect ``drop`` with ``power`` (``None``: more than
        :data:`gate.gating.power.MAX_N`, or no drop)."""
        if drop <= 0.0:
            return None
        return pw.required_n_mcnemar(drop, self.noise(drop), alpha=self.alpha, power=power)

    def mde(self, power: float) -> float | None:
        """The smallest drop detected with ``power`` at this ``n`` and flip rate."""
        return _smallest_drop(self.detection, power, 1.0)


@dataclass(frozen=True)
class PowerRow:
    """One drop: what the rule and the paired test do about it."""

    drop: float
    rule_detection: float
    paired_detection: float
    paired_n_needed: int | None


def power_table(
    rule: ToleranceRule, paired: PairedTest, drops: Sequence[float], *, power: float
) -> list[PowerRow]:
    """One :class:`PowerRow` per drop, in the given order."""
    return [
        PowerRow(
            drop=d,
            rule_detection=rule.detection(d),
            paired_detection=paired.detection(d),
            paired_n_needed=paired.n_needed(d, power),
        )
        for d in drops
    ]

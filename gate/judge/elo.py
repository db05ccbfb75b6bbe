"""Win rate, Elo delta, its confidence interval and test; round robin and transitivity.

The Elo framework for efficiency techniques (Keon et al., Meta AI; see
:mod:`gate.judge`) turns pairwise judgements into one number per build. With ``w``
wins, ``r`` losses and ``t`` ties for the candidate over ``n = w + r + t`` scored
prompts:

* **score** ``p = (w + t/2) / n`` — a tie is half a win;
* **Elo delta** ``D(p) = -400 log10(1/p - 1) = 400 log10(p / (1 - p))`` — the rating
  difference at which the Elo model expects the candidate to score ``p``
  against the baseline: 0 at ``p = 1/2``, negative when the candidate loses more
  than it wins.

**p = 0 and p = 1.** ``D`` is infinite there, which is not a number a report, a
JSON file or a threshold can hold. With ``n`` prompts the score is only known to
a resolution of ``1/n``, so the score is clamped to ``[1/(2n), 1 - 1/(2n)]`` (half
a game, the usual continuity correction) before ``D`` is taken: "lost all ``n``"
reports ``D(1/(2n)) = -400 log10(2n - 1)`` (-920 for ``n = 100``), a finite number
that grows with the evidence, and the result carries ``clamped = True`` so that a
report writes it as a bound (``<= -920``), not as an estimate. The clamp applies
to the point value and to every bootstrap resample alike.

**Confidence interval.** Each scored prompt contributes ``s_i`` in ``{0, 1/2, 1}`` and
``p = mean(s)``. The percentile bootstrap over prompts (:func:`gate.gating.stats.bootstrap_ci`,
seeded) gives an interval ``[p_lo, p_hi]`` of ``p``; ``D`` is increasing, so
``[D(p_lo), D(p_hi)]`` is the interval of the Elo delta.

**Test.** The one-sided question of the core, "is the candidate worse?", is the
sign test on the prompts that were not ties: under "not worse" a decided prompt is
a loss with probability 1/2, so ``p_worse = P[Binom(w + r, 1/2) >= r]``. This is
McNemar's exact test of :mod:`gate.gating.stats` with a loss as "only the baseline
right" and a win as "only the candidate right" (ties are concordant pairs).

**Round robin.** Several builds judged pairwise are placed on one scale by the
Bradley-Terry model ``P(i beats j) = 1 / (1 + 10^((R_j - R_i)/400))`` (the Elo
model), fitted by maximum likelihood with Zermelo's / Hunter's MM iteration
``g_i <- W_i / sum_j N_ij / (g_i + g_j)`` (``g = 10^(R/400)``, ``W_i`` the wins of
``i`` with ties as halves, ``N_ij`` the games between ``i`` and ``j``). Every pair of
builds that met gets one virtual tie (half a win each way) so that a build that
won every game still has a finite rating; with ``n`` games between two builds the
fitted difference is exactly ``400 log10((W + 1/2) / (n - W + 1/2))``. Ratings are
reported relative to an anchor build (the baseline, 0).

**Transitivity.** The Elo model is additive: ``D(base, C) = D(base, B) + D(B, C)``.
:func:`transitivity` reports the residual ``D(base, C) - (D(base, B) + D(B, C))`` and
whether it is within a tolerance, by default the root sum of squares of the three
intervals' half-widths (each half-width standing for its delta's uncertainty).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from gate.gating import stats
from gate.judge.protocol import Outcome

__all__ = [
    "ELO_SCALE",
    "EloResult",
    "Match",
    "Transitivity",
    "clamp_score",
    "elo_from_score",
    "elo_result",
    "fit_ratings",
    "score",
    "transitivity",
]

#: The Elo scale: 400 points is a factor of 10 in the odds of winning.
ELO_SCALE = 400.0


def score(wins: int, losses: int, ties: int) -> float:
    """``p = (w + t/2) / (w + r + t)``; no games is a :class:`ValueError`."""
    if min(wins, losses, ties) < 0:
        raise ValueError(f"negative counts w={wins} r={losses} t={ties}")
    n = wins + losses + ties
    if n == 0:
        raise ValueError("score: no scored pairs")
    return (wins + ties / 2.0) / n


def clamp_score(p: float, n: int) -> tuple[float, bool]:
    """``p`` clamped to ``[1/(2n), 1 - 1/(2n)]`` and whether the clamp acted."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"score {p} outside [0, 1]")
    if n < 1:
        raise ValueError("clamp_score: n must be >= 1")
    lo = 1.0 / (2.0 * n)
    if p < lo:
        return lo, True
    if p > 1.0 - lo:
        return 1.0 - lo, True
    return p, False


def elo_from_score(p: float, n: int) -> tuple[float, bool]:
    """``D(p) = -400 log10(1/p - 1)`` after :func:`clamp_score`; ``(delta, clamped)``."""
    q, clamped = clamp_score(p, n)
    return -ELO_SCALE * math.log10(1.0 / q - 1.0), clamped


@dataclass(frozen=True)
class EloResult:
    """The candidate's Elo delta against its opponent over ``n`` scored prompts.

    ``delta`` and ``ci`` in Elo points; ``clamped`` when the score was 0 or 1 (the
    delta is then a bound, see the module docstring); ``p_worse`` the one-sided sign
    test of "the candidate is worse".
    """

    wins: int
    losses: int
    ties: int
    score: float
    delta: float
    ci: tuple[float, float]
    p_worse: float
    clamped: bool

    @property
    def n(self) -> int:
        """Scored prompts."""
        return self.wins + self.losses + self.ties

    def to_dict(self) -> dict[str, Any]:
        """The JSON form the judge tier stores in its verdict's details (``-0.0`` as ``0.0``)."""
        return {
            "wins": self.wins,
            "losses": self.losses,
            "ties": self.ties,
            "score": self.score,
            "delta": self.delta + 0.0,
            "ci": [self.ci[0] + 0.0, self.ci[1] + 0.0],
            "p_worse_sign_test": self.p_worse,
            "clamped": self.clamped,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EloResult:
        """Inverse of :meth:`to_dict` (``KeyError``/``TypeError``/``ValueError`` when malformed)."""
        return cls(
            wins=int(data["wins"]),
            losses=int(data["losses"]),
            ties=int(data["ties"]),
            score=float(data["score"]),
            delta=float(data["delta"]),
            ci=(float(data["ci"][0]), float(data["ci"][1])),
            p_worse=float(data["p_worse_sign_test"]),
            clamped=bool(data["clamped"]),
        )


def _scores(outcomes: Sequence[Outcome]) -> np.ndarray:
    return np.array([o.score for o in outcomes], dtype=np.float64)


def elo_result(
    outcomes: Sequence[Outcome],
    *,
    confidence: float = 0.95,
    n_resamples: int = stats.N_RESAMPLES,
    seed: int = 0,
) -> EloResult:
    """Score, Elo delta, bootstrap CI over prompts and sign-test p-value of ``outcomes``.

    ``outcomes`` has one entry per scored prompt (excluded pairs left out).
    """
    if not outcomes:
        raise ValueError("elo_result: no scored pairs")
    s = _scores(outcomes)
    n = int(s.size)
    wins = int(np.count_nonzero(s == 1.0))
    losses = int(np.count_nonzero(s == 0.0))
    ties = n - wins - losses
    p = float(s.mean())
    delta, clamped = elo_from_score(p, n)
    p_lo, p_hi = stats.bootstrap_ci(s, confidence=confidence, n_resamples=n_resamples, seed=seed)
    lo, _ = elo_from_score(min(1.0, max(0.0, p_lo)), n)
    hi, _ = elo_from_score(min(1.0, max(0.0, p_hi)), n)
    cand = np.concatenate([np.ones(wins), np.zeros(losses), np.ones(ties)])
    base = np.concatenate([np.zeros(wins), np.ones(losses), np.ones(ties)])
    p_worse = stats.mcnemar(cand, base).p_worse
    return EloResult(wins, losses, ties, p, delta, (lo, hi), p_worse, clamped)


@dataclass(frozen=True)
class Match:
    """Results of ``first`` against ``second``: ``first`` won ``wins``, lost ``losses``."""

    first: str
    second: str
    wins: int
    losses: int
    ties: int

    @property
    def games(self) -> int:
        """Games played."""
        return self.wins + self.losses + self.ties


def fit_ratings(
    matches: Sequence[Match],
    anchor: str,
    *,
    virtual_ties: float = 1.0,
    tol: float = 1e-10,
    max_iter: int = 100_000,
) -> dict[str, float]:
    """Bradley-Terry (Elo) ratings of every build, ``anchor`` at 0 (see the module docstring).

    ``virtual_ties`` games of half a win each are added to every pair that met. The
    builds must form one connected graph of matches.
    """
    names = sorted({m.first for m in matches} | {m.second for m in matches})
    if anchor not in names:
        raise ValueError(f"anchor {anchor!r} played no match")
    index = {name: i for i, name in enumerate(names)}
    k = len(names)
    games = np.zeros((k, k))
    won = np.zeros((k, k))  # won[i, j]: points of i against j
    for m in matches:
        if m.first == m.second:
            raise ValueError(f"a build cannot play itself ({m.first})")
        i, j = index[m.first], index[m.second]
        games[i, j] += m.games
        games[j, i] += m.games
        won[i, j] += m.wins + m.ties / 2.0
        won[j, i] += m.losses + m.ties / 2.0
    met = games > 0
    games = games + virtual_ties * met
    won = won + 0.5 * virtual_ties * met
    _check_connected(met, names)
    points = won.sum(axis=1)
    gamma = np.ones(k)
    for _ in range(max_iter):
        denom = (games / (gamma[:, None] + gamma[None, :])).sum(axis=1)
        new = points / denom
        new = new / math.exp(float(np.mean(np.log(new))))
        if float(np.max(np.abs(np.log(new) - np.log(gamma)))) < tol:
            gamma = new
            break
        gamma = new
    ratings = ELO_SCALE * np.log10(gamma)
    ratings = ratings - ratings[index[anchor]]
    return {name: float(ratings[index[name]]) for name in names}


def _check_connected(met: np.ndarray, names: Sequence[str]) -> None:
    seen = {0}
    frontier = [0]
    while frontier:
        i = frontier.pop()
        for j in np.flatnonzero(met[i]):
            if int(j) not in seen:
                seen.add(int(j))
                frontier.append(int(j))
    if len(seen) != len(names):
        apart = sorted(names[i] for i in range(len(names)) if i not in seen)
        raise ValueError(f"builds {apart} played no match connected to the others")


@dataclass(frozen=True)
class Transitivity:
    """``direct = D(base, C)`` against ``via = D(base, B) + D(B, C)``.

    ``holds`` is ``None`` when a delta is clamped (a bound, not an estimate).
    """

    direct: float
    via: float
    residual: float
    tolerance: float
    holds: bool | None


def _half_width(r: EloResult) -> float:
    return (r.ci[1] - r.ci[0]) / 2.0


def transitivity(
    base_c: EloResult,
    base_b: EloResult,
    b_c: EloResult,
    tolerance: float | None = None,
) -> Transitivity:
    """Check ``D(base, C) ~ D(base, B) + D(B, C)`` within ``tolerance`` Elo points.

    Each result is the *second* build's delta against the first (``base_c`` is C
    judged against the baseline). The default tolerance is
    ``sqrt(h1^2 + h2^2 + h3^2)`` of the intervals' half-widths.
    """
    via = base_b.delta + b_c.delta
    residual = base_c.delta - via
    if tolerance is None:
        tolerance = math.sqrt(sum(_half_width(r) ** 2 for r in (base_c, base_b, b_c)))
    if tolerance < 0:
        raise ValueError("tolerance must be >= 0")
    clamped = base_c.clamped or base_b.clamped or b_c.clamped
    holds = None if clamped else abs(residual) <= tolerance
    return Transitivity(base_c.delta, via, residual, tolerance, holds)

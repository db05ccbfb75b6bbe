"""Several candidates judged by the judge tier: a round robin, an Elo table, transitivity.

After ``gate run --config`` gated several candidates with the judge tier, each
candidate's :class:`~gate.report.results.Results` hold its Elo result against
the baseline and its judged answers (``details`` of ``judge.elo_delta``, read
once into a :class:`Judged`). :func:`round_robin` then

1. judges every pair of candidates (B, C) with the same panel and protocol
   (:func:`gate.tiers.judge.compare_outputs`, C's answers against B's; the
   judge cache makes a rerun free);
2. fits Bradley-Terry (Elo) ratings to every match, baseline included, the
   baseline at 0 (:func:`gate.judge.elo.fit_ratings`);
3. checks transitivity for every pair: ``D(base, C)`` against
   ``D(base, B) + D(B, C)`` within the root sum of squares of the three CI
   half-widths (:func:`gate.judge.elo.transitivity`).

The Elo method for efficiency techniques that the judge tier follows uses this
check to tell whether the judged preferences form a consistent scale. The
judges come from the run config's ``[tiers.judge]`` / ``[[judges]]``.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich import box
from rich.table import Table

from gate.judge.elo import EloResult, Match, Transitivity, fit_ratings, transitivity
from gate.measurement import OutputSet
from gate.report.results import Results

if TYPE_CHECKING:
    from gate.session.run_config import RunConfig

__all__ = ["Judged", "RoundRobin", "judged_candidates", "round_robin", "round_robin_table"]

#: The baseline's name in the Elo table.
BASELINE = "baseline"


@dataclass(frozen=True)
class RoundRobin:
    """Ratings of the baseline and every candidate, the matches, transitivity checks."""

    ratings: Mapping[str, float]
    direct: Mapping[str, float]
    matches: tuple[Match, ...]
    checks: tuple[tuple[str, str, Transitivity], ...]
    skipped: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "ratings": dict(self.ratings),
            "elo_vs_baseline": dict(self.direct),
            "matches": [m.__dict__ for m in self.matches],
            "transitivity": [
                {
                    "b": b,
                    "c": c,
                    "direct": t.direct,
                    "via": t.via,
                    "residual": t.residual,
                    "tolerance": t.tolerance,
                    "holds": t.holds,
                }
                for b, c, t in self.checks
            ],
            "skipped": list(self.skipped),
        }


@dataclass(frozen=True)
class Judged:
    """What the judge tier measured of one candidate against the baseline."""

    elo: EloResult
    outputs: OutputSet


def _judged(results: Results) -> Judged | None:
    """The judge tier's result in ``results`` (whole ``judge.elo_delta`` with its answers)."""
    for panel in results.judge:
        if panel.elo is not None and panel.outputs:
            return Judged(panel.elo, OutputSet(0, "", panel.outputs))
    return None


def judged_candidates(runs: Mapping[str, Results | None]) -> dict[str, Judged]:
    """Candidates (by name) whose results hold a judge-tier Elo result and their answers."""
    out: dict[str, Judged] = {}
    for name, results in runs.items():
        judged = _judged(results) if results is not None else None
        if judged is not None:
            out[name] = judged
    return out


def round_robin(judged: Mapping[str, Judged], settings: Any) -> RoundRobin:
    """The round robin among ``judged`` candidates (at least two), judged per ``settings``."""
    from gate.tiers.judge import compare_outputs, open_panel

    names = list(judged)
    base = {n: judged[n].elo for n in names}
    outputs = {n: judged[n].outputs for n in names}
    # the baseline's wins against C are C's losses
    matches = [Match(BASELINE, n, base[n].losses, base[n].wins, base[n].ties) for n in names]
    judges = open_panel(settings)
    checks: list[tuple[str, str, Transitivity]] = []
    skipped: list[str] = []
    for b, c in itertools.combinations(names, 2):
        result = compare_outputs(outputs[c], outputs[b], judges, settings, baseline_validity=False)
        if result.elo is None:
            reason = result.problem.message if result.problem is not None else "no verdict"
            skipped.append(f"{b} vs {c}: {reason}")
            continue
        matches.append(Match(b, c, result.elo.losses, result.elo.wins, result.elo.ties))
        checks.append((b, c, transitivity(base[c], base[b], result.elo)))
    ratings = fit_ratings(matches, BASELINE)
    direct = {n: base[n].delta for n in names}
    return RoundRobin(ratings, direct, tuple(matches), tuple(checks), tuple(skipped))


def round_robin_table(rr: RoundRobin) -> Table:
    """The Elo table and the transitivity checks, for the console."""
    table = Table(
        title="judge tier: round robin (Bradley-Terry ratings, baseline = 0)", box=box.SIMPLE
    )
    table.add_column("build")
    table.add_column("rating", justify="right")
    table.add_column("Elo vs baseline", justify="right")
    for name, rating in sorted(rr.ratings.items(), key=lambda kv: -kv[1]):
        direct = rr.direct.get(name)
        table.add_row(name, f"{rating:+.1f}", "-" if direct is None else f"{direct:+.1f}")
    return table


def transitivity_lines(rr: RoundRobin) -> list[str]:
    """One line per checked pair (and per skipped one)."""
    lines = []
    for b, c, t in rr.checks:
        word = {True: "holds", False: "VIOLATED", None: "not checked (a clamped delta)"}[t.holds]
        lines.append(
            f"transitivity {BASELINE}->{c} {t.direct:+.1f} vs {BASELINE}->{b}->{c} {t.via:+.1f}: "
            f"residual {t.residual:+.1f}, tolerance {t.tolerance:.1f}: {word}"
        )
    lines += [f"round robin skipped {s}" for s in rr.skipped]
    return lines


def settings_from_config(config: RunConfig | None) -> Any:
    """The judge tier's settings of the (parsed) run config (defaults without one)."""
    from gate.tiers.registry import build_settings

    tables = config.tiers if config is not None else {}
    return build_settings("judge", tables.get("judge", {}))


def report_round_robin(
    runs: Mapping[str, Results | None], config: RunConfig | None, console: Any
) -> RoundRobin | None:
    """Run and print the round robin when two or more candidates were judged."""
    judged = judged_candidates(runs)
    if len(judged) < 2:
        return None
    rr = round_robin(judged, settings_from_config(config))
    console.print(round_robin_table(rr))
    for line in transitivity_lines(rr):
        console.print(f"gate: {line}", markup=False)
    return rr


def write_round_robin(path: Path, rr: RoundRobin) -> None:
    """Write the round robin as JSON (atomically); a failed write is a one-line UsageError."""
    import json

    from gate.store.atomic import write_atomic
    from gate.store.writable import writing

    with writing("the round-robin JSON", path):
        write_atomic(path, (json.dumps(rr.to_dict(), indent=2) + "\n").encode())

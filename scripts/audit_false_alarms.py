"""False alarms, MDE and slow-drift detection of ``gate audit latency`` on simulated histories.

docs/latency-audit.md "False alarms and power". Every latency metric of a real
history (``--history DIR``, default tests/latency_history/steady: seven steady
runs of ``gate run --candidate demo --against fp32 --tiers latency --history
DIR``) is simulated, so the audit tests as many metrics as a real one does (14
for the demo model) and its family-wise level is shared the same way. Each
metric's spread is measured from that history: the run-to-run variance of the
levels ``log(value)`` beyond the within-run part, ``tau^2 = max(0, S^2 - mean
v_j)``, and the within-run samples' count and log sd from the history's
summaries. ``--cv`` replaces the spread of every metric that moves in the
history by a run-to-run spread of that size and no within-run samples (a quiet
GPU runner); metrics that never move there (parameter bytes) stay constant.

Each simulated run ``j`` draws ``b_j ~ N(0, tau^2)`` and ``n`` log samples
``mu + b_j + drift_j + N(0, s^2)``; its value is ``exp`` of their mean and its
summary theirs, so the audit sees what it sees in a real history. ``--shared``
draws one ``b_j`` (in standard units) for every metric, a machine that is
slower for all timings at once (what the real runs show); without it the
metrics are drawn independently. A steady history has ``drift_j = 0``;
``--drift-per-week r`` adds ``log(1 + r)`` per run in the worse direction to
every moving metric (one run a week). Printed, per metric: the fraction of
steady histories flagged CRITICAL (and WARN or worse), the median MDE of the
latest-run test, and the audit-wide rates (any metric CRITICAL, any flagged);
for the drift the first week it is CRITICAL (median over the histories, and
the share found by the last week). ``--prefixes`` audits the real history
itself as the weekly job would have, after each of its runs from the fourth
on, and prints what each audit flagged.

    .venv/bin/python scripts/audit_false_alarms.py --runs 7 --sims 1000 [--shared]
    .venv/bin/python scripts/audit_false_alarms.py --history H --prefixes
    .venv/bin/python scripts/audit_false_alarms.py --cv 0.02 --runs 16 --drift-per-week 0.03
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np

from gate.gating import drift
from gate.gating.thresholds import load_thresholds
from gate.gating.verdict import Severity
from gate.metrics.catalog import latency as latency_catalog
from gate.metrics.registry import all_metrics
from gate.store import history

#: The recorded steady history of the demo model (seven runs) the spreads default to.
STEADY = Path(__file__).resolve().parents[1] / "tests" / "latency_history" / "steady"
#: The metrics whose rates are printed one by one (a bound in the packaged thresholds).
SHOWN = (
    "latency.ttft_p50",
    "latency.itl_p50",
    "latency.tpot_p50",
    "latency.e2e_p50",
    "latency.e2e_p95",
    latency_catalog.TOKENS_PER_S,
)
START = datetime(2026, 1, 5, 4, 17, tzinfo=timezone.utc)


@dataclass(frozen=True)
class Spread:
    """One metric's spread: run-to-run ``tau`` (log scale), within-run log sd and count."""

    level: float
    tau: float
    within_sd: float
    n: int

    @property
    def moves(self) -> bool:
        """Whether the metric varies at all (parameter bytes do not)."""
        return self.tau > 0.0 or (self.n >= 2 and self.within_sd > 0.0)


def latency_names(records: Sequence[history.HistoryRecord]) -> list[str]:
    """Every latency metric of ``records`` that the audit tests."""
    specs = all_metrics()
    return sorted(
        {n for r in records for n in r.metrics if n.startswith("latency.") and n in specs}
    )


def measured(records: Sequence[history.HistoryRecord], name: str) -> Spread | None:
    """The spread of ``name`` in a real steady history (module docstring)."""
    rows = [(r.metrics[name], r.spread.get(name)) for r in records if name in r.metrics]
    if len(rows) < 3 or any(v <= 0.0 for v, _ in rows):
        return None
    y = np.log([v for v, _ in rows])
    sums = [s for _, s in rows if s is not None]
    within_var = float(np.mean([s.level_se**2 for s in sums])) if sums else 0.0
    tau2 = max(0.0, float(np.var(y, ddof=1)) - within_var)
    sd = float(np.sqrt(np.mean([s.log_sd**2 for s in sums]))) if sums else 0.0
    n = round(float(np.mean([s.n for s in sums]))) if sums else 0
    return Spread(float(np.mean(y)), math.sqrt(tau2), sd, n)


def simulate(
    spreads: Mapping[str, Spread],
    runs: int,
    rng: np.random.Generator,
    *,
    drift_per_week: float = 0.0,
    drift_from: int = 0,
    shared: bool = False,
) -> list[history.HistoryRecord]:
    """One simulated history of ``runs`` weekly runs (module docstring); ``shared``: one
    run-to-run draw for every metric (a slower machine slows every timing alike)."""
    specs = all_metrics()
    out = []
    for j in range(runs):
        metrics: dict[str, float] = {}
        spread: dict[str, history.SampleSummary] = {}
        common = rng.standard_normal()
        for name, sp in spreads.items():
            worse = -1.0 if specs[name].higher_is_better else 1.0
            weeks = max(0, j - drift_from + 1) if drift_per_week and sp.moves else 0
            z = worse * common if shared else rng.standard_normal()
            level = sp.level + sp.tau * z + worse * weeks * math.log1p(drift_per_week)
            if sp.n >= 2 and sp.within_sd > 0.0:
                logs = level + rng.normal(0.0, sp.within_sd, sp.n)
                metrics[name] = float(np.exp(logs.mean()))
                summary = history.SampleSummary.of(np.exp(logs))
                if summary is not None:
                    spread[name] = summary
            else:
                metrics[name] = float(np.exp(level))
        out.append(
            history.HistoryRecord(
                time=START + timedelta(weeks=j),
                label=f"week {j + 1}",
                fingerprint_hash="sim",
                metrics=metrics,
                spread=spread,
            )
        )
    return out


@dataclass(frozen=True)
class Rates:
    """Per metric: steady histories flagged CRITICAL, flagged at all, and the median MDE of the
    latest-run test and of the window test."""

    critical: dict[str, float]
    flagged: dict[str, float]
    any_critical: float
    any_flagged: float
    mde: dict[str, float]
    window_mde: dict[str, float]


def false_alarms(
    spreads: Mapping[str, Spread],
    *,
    runs: int,
    sims: int,
    seed: int,
    alpha: float = 0.05,
    window: int = 4,
    permutations: int = 999,
    shared: bool = False,
) -> Rates:
    """Audit ``sims`` steady histories of ``runs`` runs; the rates of :class:`Rates`."""
    rng = np.random.default_rng(seed)
    thresholds = load_thresholds(None)
    specs = all_metrics()
    crit = dict.fromkeys(spreads, 0)
    flag = dict.fromkeys(spreads, 0)
    mdes: dict[str, list[float]] = {k: [] for k in spreads}
    window_mdes: dict[str, list[float]] = {k: [] for k in spreads}
    any_crit = any_flag = 0
    for i in range(sims):
        found = drift.audit_drift(
            simulate(spreads, runs, rng, shared=shared),
            specs,
            window=window,
            alpha=alpha,
            thresholds=thresholds,
            permutations=permutations,
            seed=i,
        )
        any_crit += any(d.severity == Severity.CRITICAL for d in found)
        any_flag += any(d.severity > Severity.PASS for d in found)
        for d in found:
            crit[d.metric] += d.severity == Severity.CRITICAL
            flag[d.metric] += d.severity > Severity.PASS
            if d.power is not None:
                mdes[d.metric].append(d.power.mde)
            if d.window_mde is not None:
                window_mdes[d.metric].append(d.window_mde)
    return Rates(
        critical={k: v / sims for k, v in crit.items()},
        flagged={k: v / sims for k, v in flag.items()},
        any_critical=any_crit / sims,
        any_flagged=any_flag / sims,
        mde={k: float(np.median(v)) if v else math.inf for k, v in mdes.items()},
        window_mde={k: float(np.median(v)) if v else math.inf for k, v in window_mdes.items()},
    )


def first_critical_week(
    spreads: Mapping[str, Spread],
    *,
    runs: int,
    sims: int,
    seed: int,
    drift_per_week: float,
    drift_from: int,
    alpha: float = 0.05,
    window: int = 4,
    permutations: int = 999,
) -> dict[str, list[int | None]]:
    """Per metric and history: the first week (1-based) whose audit is CRITICAL
    (``None``: not within ``runs`` weeks), auditing every prefix as the weekly job does."""
    rng = np.random.default_rng(seed)
    thresholds = load_thresholds(None)
    specs = all_metrics()
    out: dict[str, list[int | None]] = {k: [] for k in spreads}
    for i in range(sims):
        records = simulate(spreads, runs, rng, drift_per_week=drift_per_week, drift_from=drift_from)
        first: dict[str, int | None] = dict.fromkeys(spreads)
        for week in range(drift.CHANGE_POINT_MIN_RUNS, runs + 1):
            for d in drift.audit_drift(
                records[:week],
                specs,
                window=window,
                alpha=alpha,
                thresholds=thresholds,
                permutations=permutations,
                seed=i,
            ):
                if d.severity == Severity.CRITICAL and first[d.metric] is None:
                    first[d.metric] = week
            if all(v is not None for k, v in first.items() if spreads[k].moves):
                break
        for k, v in first.items():
            out[k].append(v)
    return out


def prefixes(records: Sequence[history.HistoryRecord], *, alpha: float, window: int) -> None:
    """Audit ``records[:k]`` for every ``k >= 4`` and print each audit's flags and MDEs."""
    thresholds = load_thresholds(None)
    specs = all_metrics()
    audits = flagged = 0
    for k in range(drift.CHANGE_POINT_MIN_RUNS, len(records) + 1):
        found = drift.audit_drift(
            records[:k], specs, window=window, alpha=alpha, thresholds=thresholds
        )
        audits += len(found)
        bad = [f"{d.metric} {d.label}" for d in found if d.severity > Severity.PASS]
        flagged += len(bad)
        mde = {d.metric: d.power.mde for d in found if d.power is not None}
        print(
            f"runs 1-{k}: {len(found)} metrics, flagged: {', '.join(bad) or 'none'};"
            f" MDE latency.itl_p50 {mde.get('latency.itl_p50', math.inf):.1%},"
            f" latency.e2e_p50 {mde.get('latency.e2e_p50', math.inf):.1%}"
        )
    print(f"{flagged} of {audits} metric audits flagged")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--history", type=Path, default=STEADY, help="a real steady history")
    parser.add_argument("--cv", type=float, help="run-to-run spread (log sd) of moving metrics")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--sims", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--window", type=int, default=4)
    parser.add_argument("--permutations", type=int, default=999)
    parser.add_argument("--drift-per-week", type=float, default=0.0)
    parser.add_argument("--drift-from", type=int, default=4, help="first drifting run (0-based)")
    parser.add_argument(
        "--shared", action="store_true", help="one run-to-run draw for all metrics (correlated)"
    )
    parser.add_argument(
        "--prefixes", action="store_true", help="audit the real history after each run"
    )
    args = parser.parse_args()
    records = [r for p in history.histories(args.history) for r in history.read(p)[0]]
    if args.prefixes:
        prefixes(records, alpha=args.alpha, window=args.window)
        return
    found = {name: measured(records, name) for name in latency_names(records)}
    spreads = {k: v for k, v in found.items() if v is not None}
    if args.cv is not None:
        spreads = {
            k: Spread(v.level, args.cv, 0.0, 0) if v.moves else v for k, v in spreads.items()
        }
    for name, sp in spreads.items():
        print(
            f"{name}: run-to-run sd {sp.tau:.3f} (log), within-run log sd {sp.within_sd:.3f}"
            f" over n = {sp.n}"
        )
    common = {"alpha": args.alpha, "window": args.window, "permutations": args.permutations}
    if not args.drift_per_week:
        rates = false_alarms(
            spreads, runs=args.runs, sims=args.sims, seed=args.seed, shared=args.shared, **common
        )
        print(f"steady histories of {args.runs} runs, {args.sims} simulations:")
        for name in (n for n in SHOWN if n in spreads):
            print(
                f"  {name}: CRITICAL {rates.critical[name]:.2%}, WARN or worse "
                f"{rates.flagged[name]:.2%}, median MDE of the next run {rates.mde[name]:.1%},"
                f" of the last {args.window} runs {rates.window_mde[name]:.1%}"
            )
        how = "one shared draw" if args.shared else "drawn independently"
        print(
            f"  audit-wide, {len(spreads)} metrics (run-to-run {how}): any CRITICAL "
            f"{rates.any_critical:.2%}, any WARN or worse {rates.any_flagged:.2%}"
        )
        return
    weeks = first_critical_week(
        spreads,
        runs=args.runs,
        sims=args.sims,
        seed=args.seed,
        drift_per_week=args.drift_per_week,
        drift_from=args.drift_from,
        **common,
    )
    print(
        f"drift of {args.drift_per_week:.1%} a week from run {args.drift_from + 1},"
        f" {args.sims} simulations of {args.runs} weeks:"
    )
    for name, firsts in ((n, weeks[n]) for n in SHOWN if n in weeks):
        hits = sorted(w for w in firsts if w is not None)
        share = len(hits) / len(firsts)
        median = hits[len(hits) // 2] if len(hits) * 2 > len(firsts) else None
        print(
            f"  {name}: CRITICAL by week {args.runs} in {share:.0%};"
            f" median first week {median if median is not None else '-'}"
        )


if __name__ == "__main__":
    main()

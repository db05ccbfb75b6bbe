"""Latency drift audit over the history of one build on one machine.

For each latency metric in a history (:mod:`gate.store.history`), in time order:

1. **Latest run.** The last run's level against the earlier runs' levels, with
   the run-to-run spread of the earlier levels and the within-run standard
   error the history kept of each run (:mod:`gate.gating.drift_level`: a
   prediction interval for a new run's level, Student's t with ``m - 1``
   degrees of freedom). A shift far outside the ordinary run-to-run wobble is
   found on the first run after it.
2. **Recent window.** The mean level of the last ``w`` runs against the runs
   before them, by the same model (``k = w``), for a shift smaller than one
   run can show but sustained over ``w`` runs.
3. **Change point.** A single mean shift located by the CUSUM statistic
   ``T_k = |S_k| / sqrt(k (n - k) / n)`` with ``S_k = sum_{i<=k} (x_i - mean x)``
   (Page 1954, "Continuous inspection schemes", Biometrika 41), whose maximum
   over ``k`` is the likelihood-ratio statistic of one shift in the mean. Its
   p-value is a permutation test: the fraction of ``B`` shuffles of the series
   whose maximum ``T`` is at least the observed one, ``(1 + #) / (1 + B)``
   (Antoch and Hušková 2001, "Permutation tests in change point analysis",
   Stat. Probab. Letters 53). Further shifts are searched in the two segments
   by binary segmentation (Vostrikova 1981) while they stay significant. It
   finds slow drifts (a few % a week) that no single run shows.

**Level: the whole audit at ``alpha``.** One audit (one history, one
fingerprint) tests ``M`` metrics (those with at least one test), metric ``j``
with ``t_j <= 3`` tests whose one-sided p-values against "steady" are
``p_ji`` (the level tests without margin, the change point's permutation
p-value). Within a metric, Bonferroni: ``P_j = min(1, t_j min_i p_ji)`` is a
valid p-value of "metric ``j`` is steady" (``Pr[P_j <= u] <= u``) whatever
the tests' dependence. Across metrics, Holm's step-down (Holm 1979, "A simple
sequentially rejective multiple test procedure", Scand. J. Statist. 6): sort
``P_(1) <= ... <= P_(M)``, let ``s`` be the first rank with
``P_(s) >= alpha / (M - s + 1)`` (``M + 1`` if none); metric ``(i)`` is
tested at the level ``a_(i) = alpha / (M - min(i, s) + 1)`` and rejected iff
``P_(i) < a_(i)``, i.e. exactly the ranks before ``s`` (:func:`holm_levels`).
Holm is the closed test of the Bonferroni tests of every intersection of the
metrics' nulls, so the probability that *any* steady metric is rejected is
at most ``alpha`` under any dependence between the metrics (a loaded machine
slows every timing at once). Each test of metric ``j`` then runs at
``a_j / t_j``; every flag (WARN or CRITICAL, below) needs a test below that
level, hence ``P_j < a_j``, a Holm rejection: a steady history fails the
audit with probability at most ``alpha``. Holm keeps the power for big
shifts: the first rejection costs ``alpha / M``, and each one frees level
for the next (a shift of every timing is rejected at ``alpha / M``,
``alpha / (M - 1)``, ...). The permutation test's smallest p-value,
``1 / (B + 1)``, must lie below the smallest level, ``alpha / (3 M)``, so the
audit raises ``B`` to at least :data:`PERMUTATION_RESOLUTION` ``* 3 M /
alpha`` (:func:`permutations_for`).

**Severity.** ``d`` is the degradation on the bound's scale (``d > 0`` worse;
relative or absolute as the metric's bound in ``thresholds.toml`` says;
metrics without one use :data:`DEFAULT_BOUND`, 10 % / 20 % relative). A level
test is CRITICAL when ``d`` is past ``critical`` *and* the test, with the
earlier level scaled by the warn bound (relative bounds; margin
``log(1 + warn)``), is significant; WARN when ``d`` is past ``warn`` and the
test without margin is significant -- the rule of the gate's own timing
verdicts (:mod:`gate.gating.compare`). The change point is judged on the
current level (after the last shift) against the first one, so a regression
that was later fixed no longer fails the audit.

**Power.** Beside each verdict stands the minimum detectable effect (MDE) of
the latest-run test at the level it is tested at, ``a_j / t_j``, and
``power`` (:func:`gate.gating.drift_level.mde_relative`): the degradation of
the next run this history would flag as CRITICAL with probability ``power``.
In an audit that flags nothing ``a_j = alpha / M``, the level a drift of this
metric alone meets. When the critical bound is below the MDE the metric is
UNDERPOWERED rather than "no drift": the history could not have shown a
critical drift the run it began. The window test's MDE, at the same level,
is reported beside it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from gate.gating import drift_level
from gate.gating import power as pw
from gate.gating.thresholds import Thresholds
from gate.gating.verdict import Bound, Severity
from gate.metrics.metric_spec import MetricSpec
from gate.store.history import HistoryRecord

DEFAULT_BOUND = Bound(warn=0.10, critical=0.20, mode="relative")
#: Runs the change-point test needs (two on each side of a shift).
CHANGE_POINT_MIN_RUNS = 4
#: The most tests one metric runs (latest run, recent window, change point).
MAX_TESTS = 3
#: The permutation test's smallest p-value, ``1 / (B + 1)``, is at most this fraction
#: of the smallest level a test of the audit can get (``alpha / (3 M)``).
PERMUTATION_RESOLUTION = 10
#: Shuffles the permutation test draws at once (memory: this many rows of the series).
_PERMUTATION_CHUNK = 4096
#: The name of the latest-run test in power statements.
LEVEL_TEST = "prediction interval (t)"


@dataclass(frozen=True)
class ChangePoint:
    """A shift between ``values[:index]`` and ``values[index:]``."""

    index: int
    statistic: float
    p_value: float
    before: float
    after: float


def _cusum(x: np.ndarray, min_size: int) -> np.ndarray:
    """``T_k`` for every split ``k = 1 .. n - 1`` of each row of ``x`` (``-inf`` where a side
    would be shorter than ``min_size``)."""
    n = x.shape[-1]
    s = np.cumsum(x - x.mean(axis=-1, keepdims=True), axis=-1)[..., :-1]
    k = np.arange(1, n)
    t = np.abs(s) / np.sqrt(k * (n - k) / n)
    valid = (k >= min_size) & (n - k >= min_size)
    return np.where(valid, t, -np.inf)


def change_point(
    values: Sequence[float], *, permutations: int = 999, seed: int = 0, min_size: int = 2
) -> ChangePoint | None:
    """The most likely single mean shift and its permutation p-value (None if too short)."""
    x = np.asarray(values, dtype=np.float64)
    if x.size < 2 * min_size or float(np.ptp(x)) == 0.0:
        return None
    t = _cusum(x, min_size)
    best = int(np.argmax(t))
    observed = float(t[best])
    rng = np.random.default_rng(seed)
    exceed, left = 0, permutations
    while left > 0:
        rows = min(left, _PERMUTATION_CHUNK)
        shuffled = rng.permuted(np.broadcast_to(x, (rows, x.size)), axis=1)
        exceed += int(np.count_nonzero(_cusum(shuffled, min_size).max(axis=1) >= observed - 1e-12))
        left -= rows
    index = best + 1
    return ChangePoint(
        index=index,
        statistic=observed,
        p_value=(1 + exceed) / (1 + permutations),
        before=float(np.median(x[:index])),
        after=float(np.median(x[index:])),
    )


def change_points(
    values: Sequence[float],
    *,
    alpha: float,
    permutations: int = 999,
    seed: int = 0,
    min_size: int = 2,
    offset: int = 0,
    first: ChangePoint | None = None,
) -> list[ChangePoint]:
    """Every significant shift by binary segmentation, in order of position (``first``: the
    single shift of the whole series, when already computed)."""
    found = first or change_point(values, permutations=permutations, seed=seed, min_size=min_size)
    if found is None or found.p_value >= alpha:
        return []
    k = found.index
    here = ChangePoint(k + offset, found.statistic, found.p_value, found.before, found.after)
    kw = {"alpha": alpha, "permutations": permutations, "seed": seed, "min_size": min_size}
    left = change_points(values[:k], offset=offset, **kw)  # type: ignore[arg-type]
    right = change_points(values[k:], offset=offset + k, **kw)  # type: ignore[arg-type]
    return [*left, here, *right]


def onset_in(levels: Sequence[float], first: int) -> int:
    """Where in ``levels[first:]`` the newer level most likely begins: the split ``k >= first``
    (at least one run after it) with the largest CUSUM statistic ``T_k``."""
    x = np.asarray(levels, dtype=np.float64)
    n = x.size
    s = np.cumsum(x - x.mean())[:-1]
    k = np.arange(1, n)
    t = np.where(k >= first, np.abs(s) / np.sqrt(k * (n - k) / n), -np.inf)
    return int(np.argmax(t)) + 1


def holm_levels(p_values: Sequence[float], alpha: float) -> list[float]:
    """Holm's step-down (module docstring): the level ``a_j`` each hypothesis is tested at,
    in the order given; hypothesis ``j`` is rejected iff ``p_values[j] < a_j``."""
    m = len(p_values)
    order = sorted(range(m), key=lambda j: p_values[j])
    levels = [alpha] * m
    stop: int | None = None
    for rank, j in enumerate(order):
        if stop is None and not p_values[j] < alpha / (m - rank):
            stop = rank
        levels[j] = alpha / (m - (rank if stop is None else stop))
    return levels


def permutations_for(alpha: float, metrics: int, permutations: int) -> int:
    """Shuffles of the change-point test in an audit of ``metrics`` metrics: ``permutations``,
    raised so that ``1 / (B + 1)`` is a :data:`PERMUTATION_RESOLUTION`-th of ``alpha / (3 M)``."""
    smallest = alpha / (MAX_TESTS * max(metrics, 1))
    return max(permutations, math.ceil(PERMUTATION_RESOLUTION / smallest) - 1)


@dataclass(frozen=True)
class _Pair:
    """The two level tests of recent runs against earlier ones: without margin (WARN, and the
    metric's p-value) and with the warn margin (CRITICAL), with the levels they compared."""

    base: drift_level.LevelTest
    crit: drift_level.LevelTest
    before: float
    after: float
    degradation: float
    margin: float


@dataclass(frozen=True)
class LevelCheck:
    """One level test of a metric: the latest run (``k = 1``) or the recent window.

    ``degradation`` is ``d`` on the bound's scale; ``p_worse`` the test without
    margin (WARN), ``p_critical`` the one with the warn margin (CRITICAL; the
    same as ``p_worse`` for absolute bounds); ``mde`` the degradation it
    detects as CRITICAL with the audit's power at ``level``, on the bound's scale.
    """

    test: drift_level.LevelTest
    before: float
    after: float
    degradation: float
    p_worse: float
    p_critical: float
    severity: Severity
    mde: float
    level: float = 0.0


@dataclass(frozen=True)
class MetricDrift:
    """The audit of one metric.

    ``onset`` is the index of the run where a flagged drift begins (``None``
    when none is flagged), ``level_before``/``level_after`` the levels the
    flagging test compared; ``power`` states the latest-run test's MDE.
    ``p_value`` is the metric's Bonferroni p-value ``P_j``, ``level`` its Holm
    level ``a_j`` among the ``family`` metrics of the audit; each of its
    ``tests`` runs at ``level / tests``.
    """

    metric: str
    n: int
    severity: Severity
    reason: str
    bound: Bound
    times: tuple[str, ...]
    values: tuple[float, ...]
    change_points: tuple[ChangePoint, ...] = ()
    latest: LevelCheck | None = None
    window: LevelCheck | None = None
    power: pw.PowerStatement | None = None
    window_mde: float | None = None
    onset: int | None = None
    level_before: float | None = None
    level_after: float | None = None
    tests: int = 0
    notes: tuple[str, ...] = field(default_factory=tuple)
    p_value: float = 1.0
    level: float = 0.0
    family: int = 0

    @property
    def underpowered(self) -> bool:
        """Nothing flagged, and a critical drift on the next run would probably pass."""
        return self.severity == Severity.PASS and self.power is not None and self.power.underpowered

    @property
    def label(self) -> str:
        """``PASS``, ``WARN``, ``CRITICAL`` or ``UNDERPOWERED``."""
        return "UNDERPOWERED" if self.underpowered else self.severity.label.upper()

    @property
    def test_level(self) -> float:
        """The level each of the metric's tests runs at, ``a_j / t_j``."""
        return self.level / max(self.tests, 1)


def _amount(x: float, bound: Bound, higher_is_better: bool) -> str:
    if math.isinf(x):
        return "none"
    sign = "-" if higher_is_better else "+"
    return f"{sign}{x * 100:.3g}%" if bound.mode == "relative" else f"{sign}{x:#.3g}"


def power_text(drift: MetricDrift, higher_is_better: bool) -> str:
    """``MDE +35% on the next run (80% power at level 0.0012, 6 earlier runs), +18% over the
    last 4; critical bound 10%``; empty when no level test ran."""
    st = drift.power
    if st is None:
        return ""
    text = (
        f"MDE {_amount(st.mde, drift.bound, higher_is_better)} on the next run "
        f"({st.power:.0%} power at level {st.alpha:.2g}, {st.n} earlier runs)"
    )
    if drift.window is not None and drift.window_mde is not None:
        w = drift.window.test.k
        text += f", {_amount(drift.window_mde, drift.bound, higher_is_better)} over the last {w}"
    crit = drift.bound.critical
    return text + (
        f"; critical bound {crit * 100:.3g}%"
        if drift.bound.mode == "relative"
        else f"; critical bound {crit:#.3g}"
    )


def _pair(
    spec: MetricSpec,
    earlier: Sequence[tuple[float, float | None]],
    recent: Sequence[tuple[float, float | None]],
    bound: Bound,
) -> _Pair | None:
    """The level tests of ``recent`` against ``earlier`` (``(value, within-run variance)`` rows)."""
    hib = spec.higher_is_better
    margin = bound.warn if bound.mode == "relative" and not (hib and bound.warn >= 1.0) else 0.0

    def runs(rows: Sequence[tuple[float, float | None]]) -> list[drift_level.Run]:
        return [drift_level.Run(math.log(v), w) for v, w in rows]

    base = drift_level.level_test(runs(earlier), runs(recent), higher_is_better=hib)
    margin_log = pw.log_shift(margin, 0.0, higher_is_better=hib)
    crit = drift_level.level_test(
        runs(earlier), runs(recent), higher_is_better=hib, margin_log=margin_log
    )
    if base is None or crit is None:
        return None
    before = math.exp(float(np.mean([math.log(v) for v, _ in earlier])))
    after = math.exp(float(np.mean([math.log(v) for v, _ in recent])))
    d = bound.degradation(before, after, higher_is_better=hib)
    return _Pair(base, crit, before, after, d, margin)


def _check(
    pair: _Pair, bound: Bound, *, higher_is_better: bool, level: float, power: float
) -> LevelCheck:
    """The severity of one level test at ``level`` and its MDE there."""
    if pair.degradation > bound.critical and pair.crit.p_value < level:
        sev = Severity.CRITICAL
    elif pair.degradation > bound.warn and pair.base.p_value < level:
        sev = Severity.WARN
    else:
        sev = Severity.PASS
    mde = drift_level.mde_relative(
        pair.crit, margin=pair.margin, higher_is_better=higher_is_better, alpha=level, power=power
    )
    if bound.mode != "relative":
        mde *= pair.before
    return LevelCheck(
        pair.crit,
        pair.before,
        pair.after,
        pair.degradation,
        pair.base.p_value,
        pair.crit.p_value,
        sev,
        mde,
        level,
    )


@dataclass(frozen=True)
class DriftEvidence:
    """What one metric's tests found, before any level is applied (module docstring):
    the level tests, the single change point of the whole series and ``t`` = ``tests``."""

    metric: MetricSpec
    bound: Bound
    window: int
    records: tuple[HistoryRecord, ...]
    values: tuple[float, ...]
    latest: _Pair | None
    recent: _Pair | None
    top: ChangePoint | None
    tests: int
    notes: tuple[str, ...]

    @property
    def p_value(self) -> float:
        """``P_j = min(1, t_j min_i p_ji)``: Bonferroni over the metric's tests (1 if none ran
        or none could move)."""
        ps = [p.base.p_value for p in (self.latest, self.recent) if p is not None]
        ps += [self.top.p_value] if self.top is not None else []
        return min(1.0, self.tests * min(ps)) if ps else 1.0


def evidence(
    metric: MetricSpec,
    records: Sequence[HistoryRecord],
    *,
    window: int,
    bound: Bound = DEFAULT_BOUND,
    permutations: int = 999,
    seed: int = 0,
) -> DriftEvidence:
    """The tests of one metric over ``records`` (time order) that run for its history."""
    rows = [(r, r.metrics[metric.name]) for r in records if metric.name in r.metrics]
    values = [v for _, v in rows]
    n = len(values)
    spread = [r.spread.get(metric.name) for r, _ in rows]
    within = [s.level_se**2 if s is not None else None for s in spread]
    level_rows = list(zip(values, within, strict=True))
    positive = all(v > 0.0 for v in values)
    m_min = drift_level.MIN_EARLIER
    run_latest = positive and n >= m_min + 1
    run_window = positive and n >= m_min + window
    run_cp = n >= CHANGE_POINT_MIN_RUNS
    notes: list[str] = []
    if not positive:
        notes.append("a value <= 0: the level tests need positive values")
    latest = _pair(metric, level_rows[:-1], level_rows[-1:], bound) if run_latest else None
    recent = (
        _pair(metric, level_rows[:-window], level_rows[-window:], bound) if run_window else None
    )
    if positive and not run_latest:
        notes.append(f"latest-run test needs {m_min + 1} runs, have {n}")
    if positive and run_latest and not run_window:
        notes.append(f"window test needs {m_min + window} runs, have {n}")
    top = change_point(values, permutations=permutations, seed=seed) if run_cp else None
    if not run_cp:
        notes.append(f"change-point test needs {CHANGE_POINT_MIN_RUNS} runs, have {n}")
    return DriftEvidence(
        metric=metric,
        bound=bound,
        window=window,
        records=tuple(r for r, _ in rows),
        values=tuple(values),
        latest=latest,
        recent=recent,
        top=top,
        tests=int(run_latest) + int(run_window) + int(run_cp),
        notes=tuple(notes),
    )


def judge_drift(
    ev: DriftEvidence,
    *,
    level: float,
    family: int = 1,
    permutations: int = 999,
    seed: int = 0,
    power: float = pw.DEFAULT_POWER,
) -> MetricDrift:
    """The verdict of one metric whose Holm level is ``level`` (``a_j``; module docstring):
    each of its tests at ``level / tests``."""
    metric, bound, window = ev.metric, ev.bound, ev.window
    values = list(ev.values)
    n = len(values)
    times = tuple(r.time.isoformat() for r in ev.records)
    each = level / max(ev.tests, 1)
    hib = metric.higher_is_better
    latest = (
        _check(ev.latest, bound, higher_is_better=hib, level=each, power=power)
        if ev.latest is not None
        else None
    )
    win = (
        _check(ev.recent, bound, higher_is_better=hib, level=each, power=power)
        if ev.recent is not None
        else None
    )
    found = (
        change_points(values, alpha=each, permutations=permutations, seed=seed, first=ev.top)
        if ev.top is not None
        else []
    )

    def label(i: int) -> str:
        return f"run {i + 1} ({ev.records[i].label or times[i]}"

    flags = [
        flag
        for flag in (
            _shift_flag(values, found, bound, hib, label),
            _latest_flag(latest, n, label),
            _window_flag(win, values, window),
        )
        if flag is not None
    ]
    worst = Severity.PASS
    onset: int | None = None
    before: float | None = None
    after: float | None = None
    for flag in flags:
        if flag.severity > worst:
            worst, onset, before, after = flag.severity, flag.onset, flag.before, flag.after
    statement = _power_statement(ev, latest, n, each, power) if latest is not None else None
    reasons = [flag.reason for flag in flags] or [_quiet_reason(latest, win, n, window, statement)]
    return MetricDrift(
        metric=metric.name,
        n=n,
        severity=worst,
        reason="; ".join(reasons),
        bound=bound,
        times=times,
        values=tuple(values),
        change_points=tuple(found),
        latest=latest,
        window=win,
        power=statement,
        window_mde=win.mde if win is not None else None,
        onset=onset,
        level_before=before,
        level_after=after,
        tests=ev.tests,
        notes=ev.notes,
        p_value=ev.p_value,
        level=level,
        family=family,
    )


@dataclass(frozen=True)
class _Flag:
    """A test that flagged a drift: its severity, why, where the drift begins (``onset``)
    and the levels before and after it."""

    severity: Severity
    reason: str
    onset: int
    before: float
    after: float


def _shift_flag(
    values: Sequence[float],
    found: Sequence[ChangePoint],
    bound: Bound,
    higher_is_better: bool,
    label: Callable[[int], str],
) -> _Flag | None:
    """The change points ``found``, judged as the current level (the median after the last
    shift) against the first one (the median before the first), so a regression that was
    later fixed no longer fails the audit; ``None`` when nothing shifted past the bound."""
    if not found:
        return None
    first = float(np.median(values[: found[0].index]))
    current = float(np.median(values[found[-1].index :]))
    d = bound.degradation(first, current, higher_is_better=higher_is_better)
    severity = bound.severity(d)
    if severity <= Severity.PASS:
        return None
    shifts = ", ".join(f"{label(cp.index)}, p={cp.p_value:.3g})" for cp in found)
    change = current / first - 1 if first else float("inf")
    reason = f"shift at {shifts}: {change:+.1%} since the first level"
    return _Flag(severity, reason, found[0].index, first, current)


def _latest_flag(latest: LevelCheck | None, n: int, label: Callable[[int], str]) -> _Flag | None:
    """The latest run's level test, when it flagged: the drift begins at that run."""
    if latest is None or latest.severity <= Severity.PASS:
        return None
    p = latest.p_critical if latest.severity == Severity.CRITICAL else latest.p_worse
    reason = (
        f"{label(n - 1)}) {latest.test.change:+.1%} against the {n - 1} runs before (p={p:.2g})"
    )
    return _Flag(latest.severity, reason, n - 1, latest.before, latest.after)


def _window_flag(win: LevelCheck | None, values: Sequence[float], window: int) -> _Flag | None:
    """The recent window's level test, when it flagged: the drift begins where the CUSUM of
    the log levels splits the window (:func:`onset_in`), its levels the geometric means
    ``exp(mean(log x))`` before and after that run."""
    if win is None or win.severity <= Severity.PASS:
        return None
    n = len(values)
    p = win.p_critical if win.severity == Severity.CRITICAL else win.p_worse
    reason = (
        f"last {window} runs {win.test.change:+.1%} against the {n - window} before (p={p:.2g})"
    )
    onset = onset_in([math.log(v) for v in values], n - window)
    before = math.exp(float(np.mean(np.log(values[:onset]))))
    after = math.exp(float(np.mean(np.log(values[onset:]))))
    return _Flag(win.severity, reason, onset, before, after)


def _power_statement(
    ev: DriftEvidence, latest: LevelCheck, n: int, each: float, power: float
) -> pw.PowerStatement:
    """The latest-run test's MDE at level ``each`` over the ``n - 1`` earlier runs."""
    return pw.PowerStatement(
        metric=ev.metric.name,
        slice=None,
        n=n - 1,
        mde=latest.mde,
        critical=ev.bound.critical,
        mode=ev.bound.mode,
        power=power,
        alpha=each,
        test=LEVEL_TEST,
        higher_is_better=ev.metric.higher_is_better,
        reference=abs(latest.before),
    )


def _quiet_reason(
    latest: LevelCheck | None,
    win: LevelCheck | None,
    n: int,
    window: int,
    statement: pw.PowerStatement | None,
) -> str:
    """Why nothing was flagged: no drift, or a history that cannot show a critical one."""
    seen = [f"run {n} {latest.test.change:+.1%}"] if latest is not None else []
    seen += [f"last {window} {win.test.change:+.1%}"] if win is not None else []
    what = f" ({', '.join(seen)})" if seen else ""
    underpowered = statement is not None and statement.underpowered
    return (
        f"nothing flagged, but the history cannot show a critical drift{what}"
        if underpowered
        else f"no drift{what}"
    )


def bound_for(name: str, thresholds: Thresholds | None) -> Bound:
    """The metric's bound from ``thresholds.toml``, else :data:`DEFAULT_BOUND`."""
    found = thresholds.for_metric(name) if thresholds is not None else None
    return found.bound if found is not None else DEFAULT_BOUND


def audit_drift(
    records: Sequence[HistoryRecord],
    specs: Mapping[str, MetricSpec],
    *,
    window: int = 4,
    alpha: float = 0.05,
    thresholds: Thresholds | None = None,
    permutations: int = 999,
    seed: int = 0,
    power: float = pw.DEFAULT_POWER,
) -> list[MetricDrift]:
    """Audit every latency metric present in ``records`` and known to ``specs``, the family-wise
    error of the whole audit at ``alpha`` (Holm over the metrics; module docstring)."""
    names = sorted(
        {n for r in records for n in r.metrics if n.startswith("latency.") and n in specs}
    )
    shuffles = permutations_for(alpha, len(names), permutations)
    found = [
        evidence(
            specs[name],
            records,
            window=window,
            bound=bound_for(name, thresholds),
            permutations=shuffles,
            seed=seed,
        )
        for name in names
    ]
    tested = [i for i, ev in enumerate(found) if ev.tests > 0]
    levels = dict(zip(tested, holm_levels([found[i].p_value for i in tested], alpha), strict=True))
    return [
        judge_drift(
            ev,
            level=levels.get(i, alpha),
            family=len(tested),
            permutations=shuffles,
            seed=seed,
            power=power,
        )
        for i, ev in enumerate(found)
    ]

"""Plots of the HTML report, drawn with matplotlib's Agg canvas and embedded as PNG data URIs.

Each function returns a :class:`Plot` or ``None`` when the run has nothing to
draw (a tier that did not run, a detail the tier did not record), so the
report shows what is present and skips the rest cleanly:

* :func:`cga_by_slice` — ``fidelity.cga`` per breakdown slice (category,
  length), candidate against the reference (docs/metrics.md "Fidelity": CGA per
  category and length tier), coloured by the slice's severity;
* :func:`kl_distribution` — the pooled per-token KL distribution of the
  candidate (mean, median, p90, p95, p99, p99.9, max; docs/metrics.md
  "Fidelity"), log scale, with the warn/critical bounds where gated;
* :func:`plot_flips_by_margin` — flip rate per baseline top-margin bucket
  (docs/metrics.md "Multiple choice": flips vs margin), with the bucket sizes;
* :func:`latency_percentiles` — TTFT / ITL / end-to-end p50/p95/p99,
  candidate against baseline;
* :func:`throughput_by_batch` — tokens/s (median over runs) per batch size of
  the sweep;
* :func:`drift_series` — the weekly audit's time series per latency metric,
  change points, the run a flagged drift begins at and the level before and
  after it marked (:mod:`gate.gating.drift`; :func:`save_drift_plot` writes the
  same panels to the file of ``gate audit latency --plot``);
* :func:`load_curves` — the load tier's p95 TTFT and ITL against the offered
  rate for both served builds, every sweep, with the SLO and each build's knee.

Figures are built on :class:`matplotlib.figure.Figure` with the Agg canvas
directly — no pyplot state, no display, no network.
"""

from __future__ import annotations

import base64
import io
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from gate.gating.verdict import Severity, Verdict
from gate.measurement import MeasurementDetail
from gate.metrics.catalog import accuracy as accuracy_catalog
from gate.metrics.catalog import fidelity as fidelity_catalog
from gate.metrics.catalog import latency as latency_catalog
from gate.metrics.catalog import load as load_catalog

SEVERITY_COLOUR = {
    Severity.PASS: "#2e7d32",
    Severity.WARN: "#ef8f00",
    Severity.CRITICAL: "#c62828",
}
BASELINE_COLOUR = "#9e9e9e"
DPI = 110
KL_STATS = ("mean", "median", "p90", "p95", "p99", "p999", "max")
KL_LABELS = {"p999": "p99.9"}
LATENCY_FAMILIES = ("ttft", "itl", "e2e")
MARGIN_RE = re.compile(r"^margin:\[(?P<lo>[0-9.]+),(?P<hi>[0-9.]+)[)\]]$")


@dataclass(frozen=True)
class Plot:
    """One embedded figure: a heading, a one-line caption and the PNG as a data URI."""

    key: str
    title: str
    caption: str
    data_uri: str


def _figure(width: float = 7.0, height: float = 3.2) -> Figure:
    fig = Figure(figsize=(width, height), dpi=DPI)
    FigureCanvasAgg(fig)
    return fig


def to_data_uri(fig: Figure) -> str:
    """``data:image/png;base64,...`` of the figure (tight layout)."""
    buffer = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buffer, format="png", dpi=DPI)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def primary(verdicts: Sequence[Verdict]) -> list[Verdict]:
    """The verdicts against the first baseline ref (plots show one comparison)."""
    if not verdicts:
        return []
    first = verdicts[0].against
    return [v for v in verdicts if v.against == first]


def _find(verdicts: Sequence[Verdict], metric: str, slice: str | None = None) -> Verdict | None:
    return next((v for v in verdicts if v.metric == metric and v.slice == slice), None)


def _finite(x: float | None) -> bool:
    return x is not None and math.isfinite(x)


def _or_zero(x: float | None) -> float:
    return float(x) if x is not None and math.isfinite(x) else 0.0


def cga_by_slice(verdicts: Sequence[Verdict]) -> Plot | None:
    """Grouped bars of CGA per slice: reference (grey) and candidate (severity colour)."""
    rows = [v for v in primary(verdicts) if v.metric == fidelity_catalog.CGA and v.slice]
    rows.sort(key=lambda v: (not v.slice.startswith("category:"), v.slice))  # type: ignore[union-attr]
    if not rows:
        return None
    fig = _figure(max(6.0, 0.9 * len(rows) + 2), 3.4)
    ax = fig.add_subplot()
    xs = list(range(len(rows)))
    width = 0.38
    refs = [_or_zero(v.baseline_value) for v in rows]
    ax.bar([x - width / 2 for x in xs], refs, width, color=BASELINE_COLOUR, label="reference")
    ax.bar(
        [x + width / 2 for x in xs],
        [v.value for v in rows],
        width,
        color=[SEVERITY_COLOUR[v.severity] for v in rows],
        label="candidate",
    )
    for x, v in zip(xs, rows, strict=True):
        ax.annotate(
            f"{v.value:.2f}", (x + width / 2, v.value), ha="center", va="bottom", fontsize=7
        )
    ax.set_xticks(xs, [str(v.slice).replace(":", "\n", 1) for v in rows], fontsize=8)
    ax.set_ylim(0, 1.08)
    ax.set_ylabel("CGA")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    overall = _find(primary(verdicts), fidelity_catalog.CGA)
    if overall is not None:
        ax.axhline(overall.value, color="black", linewidth=0.8, linestyle=":")
    return Plot(
        "cga",
        "Conditional greedy agreement per slice",
        "CGA: share of the baseline's greedy tokens the candidate also ranks first "
        "(teacher-forced); grey = reference, dotted = candidate overall.",
        to_data_uri(fig),
    )


def kl_distribution(verdicts: Sequence[Verdict]) -> Plot | None:
    """The candidate's per-token KL statistics on a log axis, with gated bounds."""
    rows = primary(verdicts)
    found = [(s, _find(rows, f"fidelity.kl_{s}")) for s in KL_STATS]
    stats = [(s, v) for s, v in found if v is not None and _finite(v.value)]
    if not stats:
        return None
    fig = _figure(7.0, 3.2)
    ax = fig.add_subplot()
    xs = list(range(len(stats)))
    values = [max(float(v.value), 1e-6) for _, v in stats]
    ax.bar(xs, values, color=[SEVERITY_COLOUR[v.severity] for _, v in stats], width=0.6)
    for x, (_, v) in zip(xs, stats, strict=True):
        ax.annotate(f"{v.value:.3g}", (x, max(v.value, 1e-6)), ha="center", va="bottom", fontsize=7)
        bound = v.threshold.bound if v.threshold is not None else None
        if bound is not None and bound.mode == "absolute":
            ax.hlines(
                [bound.warn, bound.critical],
                x - 0.4,
                x + 0.4,
                colors=[SEVERITY_COLOUR[Severity.WARN], SEVERITY_COLOUR[Severity.CRITICAL]],
                linestyles="--",
                linewidth=2,
            )
    ax.set_yscale("log")
    ax.set_xticks(xs, [KL_LABELS.get(s, s) for s, _ in stats])
    ax.set_ylabel("KL (nats / token)")
    ax.grid(axis="y", alpha=0.3)
    kl_method = MeasurementDetail.KL_METHOD
    note = next((v.details.get(kl_method) for _, v in stats if v.details.get(kl_method)), None)
    return Plot(
        "kl",
        "Per-token KL(baseline || candidate) distribution",
        "Pooled over every scored position; dashed = warn / critical bound where gated"
        + (f"; KL {note}." if note else "."),
        to_data_uri(fig),
    )


def _margin_rows(verdicts: Sequence[Verdict]) -> list[tuple[float, float, int, float]]:
    """``(lo, hi, n, rate)`` per margin bucket: from ``details['by_margin']`` or the slices."""
    flips = _find(verdicts, accuracy_catalog.FLIPS)
    table: Any = flips.details.get(MeasurementDetail.BY_MARGIN) if flips is not None else None
    if isinstance(table, list) and table:
        try:
            return [
                (float(b["lo"]), float(b["hi"]), int(b["n"]), float(b["rate"]))
                for b in table
                if int(b["n"]) > 0
            ]
        except (KeyError, TypeError, ValueError):
            pass
    rows = []
    for v in verdicts:
        match = MARGIN_RE.match(v.slice or "") if v.metric == accuracy_catalog.FLIPS else None
        if match:
            rows.append((float(match["lo"]), float(match["hi"]), v.n, float(v.value)))
    return sorted(rows)


def plot_flips_by_margin(verdicts: Sequence[Verdict]) -> Plot | None:
    """Flip rate per baseline top-margin bucket; labels carry the bucket size."""
    rows = _margin_rows(primary(verdicts))
    if not rows:
        return None
    fig = _figure(6.5, 3.2)
    ax = fig.add_subplot()
    xs = list(range(len(rows)))
    ax.bar(xs, [100 * r for *_, r in rows], color="#5c6bc0", width=0.6)
    for x, (_, _, n, rate) in zip(xs, rows, strict=True):
        ax.annotate(
            f"{100 * rate:.1f}%\nn={n}", (x, 100 * rate), ha="center", va="bottom", fontsize=7
        )
    ax.set_xticks(xs, [f"[{lo:.2f}, {hi:.2f})" for lo, hi, *_ in rows], fontsize=8)
    ax.set_xlabel("baseline top margin p(best) - p(second)")
    ax.set_ylabel("flipped answers (%)")
    top = max(100 * r for *_, r in rows)
    ax.set_ylim(0, max(5.0, top * 1.3))
    ax.grid(axis="y", alpha=0.3)
    return Plot(
        "flips",
        "Answer flips by the baseline's top margin",
        "Share of questions whose correctness changed, by how sure the baseline was; "
        "low-margin questions flip first.",
        to_data_uri(fig),
    )


def latency_percentiles(verdicts: Sequence[Verdict]) -> Plot | None:
    """TTFT / ITL / E2E percentiles, baseline against candidate, one panel per family."""
    rows = primary(verdicts)
    families = []
    for family in LATENCY_FAMILIES:
        found = [
            (q, v)
            for q in ("p50", "p95", "p99")
            if (v := _find(rows, f"latency.{family}_{q}")) is not None
        ]
        if found:
            families.append((family, found))
    if not families:
        return None
    fig = _figure(7.0, 3.2)
    for i, (family, found) in enumerate(families):
        ax = fig.add_subplot(1, len(families), i + 1)
        xs = list(range(len(found)))
        width = 0.38
        base = [1e3 * _or_zero(v.baseline_value) for _, v in found]
        ax.bar([x - width / 2 for x in xs], base, width, color=BASELINE_COLOUR, label="baseline")
        ax.bar(
            [x + width / 2 for x in xs],
            [1e3 * v.value for _, v in found],
            width,
            color=[SEVERITY_COLOUR[v.severity] for _, v in found],
            label="candidate",
        )
        ax.set_xticks(xs, [q for q, _ in found])
        ax.set_title(family.upper(), fontsize=9)
        ax.set_ylabel("ms" if i == 0 else "")
        ax.grid(axis="y", alpha=0.3)
        if i == 0:
            ax.legend(fontsize=7)
    batch = next((v.details.get(MeasurementDetail.BATCH_SIZE) for _, v in families[0][1]), None)
    return Plot(
        "latency",
        "Latency percentiles over repeated runs",
        "Milliseconds; grey = baseline, coloured = candidate by severity"
        + (f"; batch size {batch}." if batch is not None else "."),
        to_data_uri(fig),
    )


def throughput_by_batch(verdicts: Sequence[Verdict]) -> Plot | None:
    """Median tokens/s per batch size of the sweep (``latency.best_tokens_per_s`` details)."""
    best = _find(primary(verdicts), latency_catalog.BEST_TOKENS_PER_S)
    per_batch: Any = best.details.get(MeasurementDetail.PER_BATCH) if best is not None else None
    if not isinstance(per_batch, dict) or not per_batch:
        return None
    try:
        points = sorted((int(b), float(t)) for b, t in per_batch.items())
    except (TypeError, ValueError):
        return None
    fig = _figure(6.0, 3.0)
    ax = fig.add_subplot()
    ax.plot([b for b, _ in points], [t for _, t in points], marker="o", color="#1565c0")
    ax.set_xscale("log", base=2)
    ax.set_xticks([b for b, _ in points], [str(b) for b, _ in points])
    ax.set_xlabel("batch size")
    ax.set_ylabel("tokens / s (median)")
    ax.grid(alpha=0.3)
    oom = best.details.get(MeasurementDetail.OOM_BATCH) if best is not None else None
    return Plot(
        "throughput",
        "Throughput per batch size",
        "Candidate's median generated tokens per second at each batch size of the sweep"
        + (f"; out of memory at batch {oom}." if oom else "."),
        to_data_uri(fig),
    )


#: File types ``gate audit latency --plot`` writes.
DRIFT_PLOT_SUFFIXES = (".png", ".svg")


def _draw_drift(fig: Figure, series: Sequence[Any]) -> None:
    """One panel per metric (:class:`gate.gating.drift.MetricDrift`): the values per run,
    change points dashed, and where a drift is flagged the run it begins at (dotted) with
    the level before and after it (thick horizontal lines, their values in the title)."""
    for i, drift in enumerate(series):
        ax = fig.add_subplot(len(series), 1, i + 1)
        xs = list(range(1, len(drift.values) + 1))
        colour = SEVERITY_COLOUR.get(drift.severity, SEVERITY_COLOUR[Severity.PASS])
        ax.plot(xs, list(drift.values), marker="o", markersize=3, color=colour, linewidth=1)
        for cp in drift.change_points:
            ax.axvline(cp.index + 1, color=SEVERITY_COLOUR[Severity.CRITICAL], linestyle="--")
        onset = getattr(drift, "onset", None)
        before, after = getattr(drift, "level_before", None), getattr(drift, "level_after", None)
        label = drift.label if hasattr(drift, "label") else drift.severity.name
        title = f"{drift.metric} ({label})"
        if onset is not None and before is not None and after is not None:
            start = onset + 1
            ax.axvline(start - 0.5, color=colour, linestyle=":", linewidth=1.5)
            ax.hlines(before, 1, max(start - 1, 1), color=BASELINE_COLOUR, linewidth=3)
            ax.hlines(after, start, len(xs), color=colour, linewidth=3)
            title += f" - drift from run {start}: {before:.3g} -> {after:.3g}"
        ax.set_title(title, fontsize=9, loc="left")
        ax.set_xlabel("run", fontsize=8)
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=8)


def drift_series(drifts: Sequence[Any]) -> Plot | None:
    """The audit's series (:class:`gate.gating.drift.MetricDrift`), one panel per metric."""
    series = [d for d in drifts if len(getattr(d, "values", ())) > 0]
    if not series:
        return None
    fig = _figure(7.0, max(3.0, 1.9 * len(series) + 0.6))
    _draw_drift(fig, series)
    first, last = series[0].times[0], series[0].times[-1]
    return Plot(
        "drift",
        "Latency drift over time",
        f"One point per audited run, {first[:10]} to {last[:10]}; dashed = change point, "
        "dotted = the run a flagged drift begins at, thick lines = the level before and after.",
        to_data_uri(fig),
    )


def save_drift_plot(drifts: Sequence[Any], path: Path, *, title: str = "") -> None:
    """``gate audit latency --plot``: the panels of :func:`drift_series` written to ``path``
    (``.png`` or ``.svg``, :data:`DRIFT_PLOT_SUFFIXES`)."""
    series = [d for d in drifts if len(getattr(d, "values", ())) > 0]
    fig = _figure(8.0, 2.2 * max(1, len(series)) + 0.4)
    _draw_drift(fig, series)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path)


#: The load tier's plot: (key in a curve row, axis label, SLO key).
LOAD_PANELS = (
    ("ttft_p95_ms", "TTFT p95 (ms)", "ttft_p95_ms"),
    ("itl_p95_ms", "ITL p95 (ms)", "itl_p95_ms"),
)
LOAD_COLOURS = {"baseline": BASELINE_COLOUR, "candidate": "#1565c0"}


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def load_curves(verdicts: Sequence[Verdict]) -> Plot | None:
    """p95 TTFT and ITL against the offered rate, both builds, with the SLO and the knees
    (``load.goodput_ratio`` details: ``curves``, ``slo``, ``per_sweep``)."""
    good = _find(primary(verdicts), load_catalog.GOODPUT_RATIO)
    curves: Any = good.details.get(MeasurementDetail.CURVES) if good is not None else None
    slo: Any = good.details.get(MeasurementDetail.SLO) if good is not None else None
    if good is None or not isinstance(curves, dict) or not isinstance(slo, dict):
        return None
    fig = _figure(8.0, 3.4)
    per_sweep: Any = good.details.get(MeasurementDetail.PER_SWEEP, {})
    for i, (key, label, slo_key) in enumerate(LOAD_PANELS):
        ax = fig.add_subplot(1, len(LOAD_PANELS), i + 1)
        for side in ("baseline", "candidate"):
            colour = LOAD_COLOURS[side]
            by_rate: dict[float, list[float]] = {}
            for sweep in curves.get(side, []):
                rows = [(float(r["rate"]), r[key]) for r in sweep if r.get(key) is not None]
                ax.plot(
                    [x for x, _ in rows],
                    [float(y) for _, y in rows],
                    marker="o",
                    markersize=3,
                    linewidth=0.6,
                    alpha=0.45,
                    color=colour,
                )
                for x, y in rows:
                    by_rate.setdefault(x, []).append(float(y))
            if by_rate:
                xs = sorted(by_rate)
                ax.plot(
                    xs, [_median(by_rate[x]) for x in xs], color=colour, linewidth=2, label=side
                )
            knees = [row.get("knee_rate") for row in per_sweep.get(side, [])]
            found = [float(k) for k in knees if k is not None]
            if found:
                ax.axvline(_median(found), color=colour, linestyle=":", linewidth=1.5)
        ax.axhline(float(slo[slo_key]), color=SEVERITY_COLOUR[Severity.CRITICAL], linestyle="--")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        rates = sorted(
            {float(r["rate"]) for sweeps in curves.values() for sw in sweeps for r in sw}
        )
        ax.set_xticks(rates, [f"{r:g}" for r in rates])
        ax.minorticks_off()
        ax.set_xlabel("offered rate (requests/s)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        if i == 0:
            ax.legend(fontsize=7)
    ci = good.details.get(MeasurementDetail.RATIO_CI) or [None, None]
    return Plot(
        "load",
        "Latency against offered load, baseline and candidate",
        "Each thin line one GuideLLM sweep, thick the median; dashed = SLO, dotted = knee "
        f"(median over sweeps); goodput ratio {good.value:.3g}"
        + (f" [{ci[0]:.3g}, {ci[1]:.3g}]." if None not in ci else "."),
        to_data_uri(fig),
    )


def all_plots(verdicts: Sequence[Verdict], drift: Sequence[Any] = ()) -> list[Plot]:
    """Every plot the run has data for, in report order."""
    made = [
        cga_by_slice(verdicts),
        kl_distribution(verdicts),
        plot_flips_by_margin(verdicts),
        latency_percentiles(verdicts),
        throughput_by_batch(verdicts),
        load_curves(verdicts),
        drift_series(drift),
    ]
    return [p for p in made if p is not None]

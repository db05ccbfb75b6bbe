"""``gate audit latency``: the weekly drift audit over the latency history."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import click

from gate.errors import DataError, ExitCode, NothingMeasuredError, UsageError
from gate.gating import drift
from gate.gating.thresholds import Thresholds, load_thresholds
from gate.gating.verdict import Severity
from gate.metrics.registry import all_metrics
from gate.store import history
from gate.store.writable import check_writable, writing


@click.group("audit")
def audit() -> None:
    """Audits over the history of gated runs."""


@audit.command("latency")
@click.option(
    "--history",
    "history_dir",
    required=True,
    type=click.Path(path_type=Path),
    help="Directory of <fingerprint>.jsonl latency histories.",
)
@click.option("--window", default=4, show_default=True, help="Runs in the recent window.")
@click.option(
    "--alpha",
    default=0.05,
    show_default=True,
    help="Family-wise error of one history's audit: all its metrics and tests (Holm).",
)
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(path_type=Path),
    default=None,
    help="Write a plot per metric (.png or .svg; one file per fingerprint).",
)
@click.option(
    "--thresholds",
    "thresholds_path",
    type=click.Path(path_type=Path),
    default=None,
    help="thresholds.toml whose latency bounds apply (default: ./thresholds.toml, else the "
    "packaged defaults; a metric without a bound: 10 %/20 % relative).",
)
@click.option(
    "--permutations",
    default=999,
    show_default=True,
    help="Permutations per change-point test (at least; raised so the smallest p-value "
    "can pass the smallest Holm level).",
)
def latency(
    history_dir: Path,
    window: int,
    alpha: float,
    plot_path: Path | None,
    thresholds_path: Path | None,
    permutations: int,
) -> int:
    """Test the latest run and the recent window against the earlier level, and find
    change points (docs/latency-audit.md).

    The false-alarm rate of each history's audit, over all its metrics and
    tests, is at most --alpha (Holm's step-down over the metrics). Each
    metric's line states the smallest drift the history can detect on the
    next run (MDE) at the level its tests ran at; UNDERPOWERED where the
    critical bound is below it. Exit 1
    when a latency metric drifted past its critical bound, 0 otherwise
    (UNDERPOWERED included), 4 on bad input, 5 when the history is too short to
    test anything.
    """
    files = _check_audit_inputs(history_dir, window, alpha, plot_path, permutations)
    thresholds: Thresholds = load_thresholds(thresholds_path)
    click.echo(f"bounds: {thresholds.source}")
    specs = all_metrics()
    worst, tested, underpowered = Severity.PASS, False, 0
    for path in files:
        records, warnings = history.read(path)
        for line in warnings:
            click.echo(f"gate: warning: {line}", err=True)
        drifts = drift.audit_drift(
            records,
            specs,
            window=window,
            alpha=alpha,
            thresholds=thresholds,
            permutations=permutations,
        )
        family = max((d.family for d in drifts), default=0)
        click.echo(
            f"{path.stem}: {len(records)} runs; {family} metrics tested, family-wise alpha "
            f"{alpha:g} (Holm)"
        )
        for d in drifts:
            tested = tested or d.tests > 0
            worst = max(worst, d.severity)
            underpowered += d.underpowered
            mde = drift.power_text(d, specs[d.metric].higher_is_better)
            line = f"{d.reason}; {mde}" if mde else d.reason
            click.echo(f"  {d.label:12} {d.metric}: {line}")
            for note in d.notes:
                click.echo(f"               ({note})")
        if plot_path is not None and drifts:
            _plot(
                drifts,
                plot_path
                if len(files) == 1
                else plot_path.with_stem(f"{plot_path.stem}-{path.stem}"),
                path.stem,
            )
    if not tested:
        raise NothingMeasuredError(
            "the latency history is too short to audit", "at least 4 runs per metric are needed"
        )
    verdict = {Severity.PASS: "NO DRIFT", Severity.WARN: "DRIFT WARNING"}.get(worst, "DRIFT")
    if worst == Severity.PASS and underpowered:
        verdict = (
            f"UNDERPOWERED - {underpowered} metric(s) could not have shown a critical drift "
            "on the latest run; no drift found in the others"
        )
    click.echo(verdict)
    return int(ExitCode.BLOCKED if worst == Severity.CRITICAL else ExitCode.OK)


def _check_audit_inputs(
    history_dir: Path, window: int, alpha: float, plot_path: Path | None, permutations: int
) -> list[Path]:
    """The audit's settings and plot path checked (before the slow permutation tests);
    returns the history files (none: DataError, exit 4)."""
    if window < 2 or not 0.0 < alpha < 0.5 or permutations < 99:
        raise UsageError(
            "bad audit settings", "--window >= 2, 0 < --alpha < 0.5, --permutations >= 99"
        )
    from gate.report import plots  # matplotlib: only when the audit runs

    if plot_path is not None and plot_path.suffix.lower() not in plots.DRIFT_PLOT_SUFFIXES:
        raise UsageError(f"cannot write a plot to {plot_path}", "use a .png or .svg file name")
    if plot_path is not None:
        check_writable(plot_path, "--plot")
    if not history_dir.is_dir():
        raise UsageError(f"history directory {history_dir} not found", "pass --history DIR")
    files = history.histories(history_dir)
    if not files:
        raise DataError(f"no *.jsonl history in {history_dir}", "gated runs append to it")
    return files


def _plot(drifts: Sequence[drift.MetricDrift], out: Path, stem: str) -> None:
    """One history's drift plot, written to ``out``."""
    from gate.report import plots

    with writing("--plot", out):
        plots.save_drift_plot(drifts, out, title=f"latency history {stem}")
    click.echo(f"  plot: {out}")

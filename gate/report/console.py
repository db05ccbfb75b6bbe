"""The console severity report (rich): one table per tier, worst findings first.

Readable without colour (CI logs): the severity column spells out ``PASS`` /
``WARN`` / ``CRITICAL``, the findings are repeated below the tables with their
reasons (every whole-metric finding, then slice findings worst first up to
:data:`MAX_LISTED_FINDINGS` lines; the rest are counted, and every reason is
in the results JSON and the HTML report), and the last line is the verdict and
exit code::

    gate: BLOCKED (exit 1) - 1 critical, 2 warnings, 14 passed

Whole-metric rows are always shown. A breakdown slice (``category:code``,
``margin:low``, an MCQ subject) gets its own row only when it is a finding
(WARN / CRITICAL) or a near miss (``PASS (n.s.)``: a bound crossed without
evidence); the passing slices of each metric are folded into one row such as
``12 passing slices folded``, as the HTML report folds what passes. The verdict
line still counts every slice.

Deltas are ``candidate - baseline`` with the relative change in parentheses;
the bound column shows ``warn / critical`` on the degradation (``%`` when the
bound is relative), as configured in ``thresholds.toml``; the ``MDE`` column the
smallest degradation the verdict's test detects (docs/metrics.md "Power"), on
the bound's scale. Verdicts whose critical bound is below their MDE are listed
in words below the findings, whole metrics first (up to
:data:`MAX_LISTED_FINDINGS` lines)::

    underpowered (a regression of the critical size would probably pass):
      fidelity.cga: n = 12 can only detect a drop of 0.18; the critical bound is 0.10 - UNDERPOWERED
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from typing import IO

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from gate.errors import exit_label
from gate.gating.power import PowerStatement
from gate.gating.verdict import Severity, Verdict, VerdictDetail, VerdictThreshold
from gate.report.divergences import divergences, example_lines, heading
from gate.report.judge_summary import summary_lines
from gate.report.results import Results

SEVERITY_STYLE = {
    Severity.PASS: "green",
    Severity.WARN: "bold yellow",
    Severity.CRITICAL: "bold red",
}
HEADLINE_STYLE = {"APPROVED": "bold green", "APPROVED WITH WARNINGS": "bold yellow"}
#: Units not worth printing after every number.
DIMENSIONLESS = frozenset({"", "fraction", "ratio", "prob", "probability"})
#: Width used when the output is not a terminal (CI logs), so tables do not wrap at 80.
LOG_WIDTH = 160
#: Findings repeated with their reasons below the tables (whole metrics are never cut).
MAX_LISTED_FINDINGS = 12


def make_console(file: IO[str] | None = None, *, color: bool | None = None) -> Console:
    """A console for reports: colour only on a terminal (or when forced), wide in logs."""
    target = file if file is not None else sys.stdout
    is_tty = bool(getattr(target, "isatty", lambda: False)())
    return Console(
        file=target,
        width=None if is_tty else LOG_WIDTH,
        no_color=not (is_tty if color is None else color),
        force_terminal=color,
        highlight=False,
        soft_wrap=False,
    )


def fmt_number(value: float | None) -> str:
    """Compact numbers: 4 significant digits, thousands separators for large values."""
    if value is None:
        return "-"
    if abs(value) >= 10_000:
        return f"{value:,.0f}"
    return f"{value:.4g}"


def fmt_delta(verdict: Verdict) -> str:
    """``delta (relative %)``."""
    if verdict.delta is None:
        return "-"
    text = f"{verdict.delta:+.4g}"
    if verdict.relative_delta is not None:
        text += f" ({verdict.relative_delta:+.1%})"
    return text


def fmt_bound(threshold: VerdictThreshold | None) -> str:
    """``warn / critical`` of a verdict's bound (``%`` when relative); ``-`` when ungated."""
    if threshold is None:
        return "-"
    bound = threshold.bound
    if bound.mode == "relative":
        return f"{bound.warn:.1%} / {bound.critical:.1%}"
    return f"{bound.warn:.4g} / {bound.critical:.4g}"


def fmt_ci(ci: tuple[float, float] | None) -> str:
    """``[lo, hi]`` of the delta's confidence interval."""
    if ci is None:
        return "-"
    return f"[{ci[0]:+.3g}, {ci[1]:+.3g}]"


def fmt_mde(verdict: Verdict) -> str:
    """The MDE on the bound's scale (``%`` when relative); ``none`` when nothing is
    detectable, ``-`` without a power statement (ungated, untested)."""
    power = verdict.power
    if power is None:
        return "-"
    if math.isinf(power.mde):
        return "none"
    return f"{power.mde:.1%}" if power.mode == "relative" else f"{power.mde:.3g}"


def power_line(power: PowerStatement, *, several_refs: bool) -> str:
    """The statement's message, with `` (vs <ref>)`` when several refs were compared."""
    return power.message + (f" (vs {power.against})" if several_refs else "")


def listed_underpowered(
    statements: Sequence[PowerStatement], *, limit: int = MAX_LISTED_FINDINGS
) -> tuple[list[PowerStatement], int]:
    """Underpowered statements to list (whole metrics first, then slices, up to
    ``limit`` lines), and how many are left out."""
    ranked = sorted(statements, key=lambda p: (p.slice is not None, p.key, p.against))
    return ranked[:limit], max(0, len(ranked) - limit)


def with_unit(value: float | None, unit: str) -> str:
    """A formatted number with its unit, unless dimensionless (or absent)."""
    text = fmt_number(value)
    return f"{text} {unit}" if unit not in DIMENSIONLESS and value is not None else text


def number_cells(verdict: Verdict) -> list[str]:
    """The numeric columns every report shows: candidate, baseline, delta, bound, CI, n, MDE."""
    return [
        with_unit(verdict.value, verdict.unit),
        with_unit(verdict.baseline_value, verdict.unit),
        fmt_delta(verdict),
        fmt_bound(verdict.threshold),
        fmt_ci(verdict.ci),
        str(verdict.n),
        fmt_mde(verdict),
    ]


#: The headers of :func:`number_cells`.
NUMBER_HEADERS = ("candidate", "baseline", "delta", "bound w/c", "CI of delta", "n", "MDE")


def degradation(verdict: Verdict) -> float:
    """How much worse the candidate is (relative when possible); for ordering rows."""
    change = verdict.relative_delta if verdict.relative_delta is not None else verdict.delta
    if change is None:
        return 0.0
    return -change if verdict.higher_is_better else change


def order(verdicts: Sequence[Verdict]) -> list[Verdict]:
    """Worst first: severity, then degradation, then name."""
    return sorted(verdicts, key=lambda v: (-int(v.severity), -degradation(v), v.key, v.against))


def near_miss(verdict: Verdict) -> bool:
    """A pass only for lack of evidence: the point estimate crossed a bound (``PASS (n.s.)``)."""
    return verdict.severity == Severity.PASS and VerdictDetail.NOT_SIGNIFICANT in verdict.details


def severity_text(verdict: Verdict) -> Text:
    """``CRITICAL``/``WARN``/``PASS``; ``PASS (n.s.)`` when a bound was crossed without evidence."""
    if near_miss(verdict):
        return Text("PASS (n.s.)", style="yellow")
    return Text(verdict.severity.name, style=SEVERITY_STYLE[verdict.severity])


def folded(verdict: Verdict) -> bool:
    """Whether the console folds this row: a breakdown slice that passes outright."""
    return (
        verdict.slice is not None and verdict.severity == Severity.PASS and not near_miss(verdict)
    )


def tier_table(tier: str, verdicts: Sequence[Verdict], *, show_against: bool) -> Table:
    """The table of one tier."""
    table = Table(title=f"tier: {tier}", title_justify="left", box=box.SIMPLE_HEAD)
    table.add_column("metric", no_wrap=True)
    table.add_column("slice", no_wrap=True)
    if show_against:
        table.add_column("vs", no_wrap=True)
    for name in NUMBER_HEADERS:
        table.add_column(name, justify="right", no_wrap=True)
    table.add_column("severity", no_wrap=True)
    hidden: dict[tuple[str, str], int] = {}
    for verdict in order(verdicts):
        if folded(verdict):
            group = (verdict.metric, verdict.against)
            hidden[group] = hidden.get(group, 0) + 1
            continue
        row: list[str | Text] = [verdict.metric, verdict.slice or "all"]
        if show_against:
            row.append(verdict.against)
        row += [*number_cells(verdict), severity_text(verdict)]
        table.add_row(*row)
    for (metric, against), count in sorted(hidden.items()):
        fold: list[str | Text] = [
            metric,
            f"{count} passing slice{'s' if count != 1 else ''} folded",
        ]
        if show_against:
            fold.append(against)
        fold += [""] * len(NUMBER_HEADERS)
        fold.append(Text("PASS", style=SEVERITY_STYLE[Severity.PASS]))
        table.add_row(*fold, style="dim")
    return table


def summary_line(results: Results) -> str:
    """``gate: BLOCKED (exit 1) - 1 critical, 2 warnings, 14 passed``.

    A run that ended for another reason names it: ``gate: ERROR (input, exit 4) - ...``.
    """
    counts = {s: sum(1 for v in results.verdicts if v.severity == s) for s in Severity}
    warnings = counts[Severity.WARN]
    return (
        f"gate: {exit_label(results.exit_code, results.headline)} -"
        f" {counts[Severity.CRITICAL]} critical,"
        f" {warnings} warning{'s' if warnings != 1 else ''}, {counts[Severity.PASS]} passed"
        + (f", {len(results.unmeasured)} not measured" if results.unmeasured else "")
        + (f", {len(results.version_drift)} version drift" if results.version_drift else "")
        + (f", {len(results.underpowered)} underpowered" if results.underpowered else "")
        + "".join(f"; {item.line}" for item in results.not_exercised)
    )


def listed_findings(verdicts: Sequence[Verdict]) -> tuple[list[Verdict], int]:
    """The findings to repeat with reasons, and how many slice findings are left out.

    Every whole-metric finding, then slice findings worst first while fewer
    than :data:`MAX_LISTED_FINDINGS` lines are used.
    """
    findings = [v for v in order(verdicts) if v.severity != Severity.PASS]
    whole = [v for v in findings if v.slice is None]
    slices = [v for v in findings if v.slice is not None]
    room = max(0, MAX_LISTED_FINDINGS - len(whole))
    return whole + slices[:room], max(0, len(slices) - room)


def render(results: Results, console: Console | None = None, *, title: str | None = None) -> None:
    """Print the full report of ``results``: tables per tier, findings with reasons, the
    underpowered verdicts, the notes and the verdict line (the last line printed)."""
    console = console if console is not None else make_console()
    if title:
        console.print(Text(title, style="bold"))
    verdicts = list(results.verdicts)
    show_against = len({v.against for v in verdicts}) > 1
    tiers: dict[str, list[Verdict]] = {}
    for verdict in verdicts:
        tiers.setdefault(verdict.tier, []).append(verdict)
    tier_order = sorted(tiers, key=lambda t: (-max(int(v.severity) for v in tiers[t]), t))
    for tier in tier_order:
        console.print(tier_table(tier, tiers[tier], show_against=show_against))
    for panel in results.judge:
        for k, text in enumerate(summary_lines(panel)):
            console.print(Text(("" if k == 0 else "  ") + text, style="bold" if k == 0 else ""))
    for group in divergences(results):
        against = f" vs {group.against}" if show_against else ""
        console.print(Text(f"generation: the worst divergences{against}:", style="bold"))
        for example in group.examples:
            console.print(Text("  " + heading(example)))
            for said in example_lines(example):
                console.print(Text("    " + said), soft_wrap=True)
    findings, left_out = listed_findings(verdicts)
    if findings:
        console.print(Text("findings:", style="bold"))
        for verdict in findings:
            line = Text("  ")
            line.append(verdict.severity.name, style=SEVERITY_STYLE[verdict.severity])
            line.append(f" {verdict.key} vs {verdict.against}: {verdict.reason}")
            console.print(line)
        if left_out:
            more = "finding" if left_out == 1 else "findings"
            console.print(
                f"  ... {left_out} more slice {more} in the tables above"
                " (every reason is in the results JSON and the HTML report)"
            )
    weak, weak_left_out = listed_underpowered(results.underpowered)
    if weak:
        console.print(
            Text("underpowered (a regression of the critical size would probably pass):", "bold")
        )
        for power in weak:
            console.print(Text("  " + power_line(power, several_refs=show_against), "yellow"))
        if weak_left_out:
            console.print(
                f"  ... {weak_left_out} more underpowered slice(s) (every one is in the"
                " results JSON and the HTML report)"
            )
    for note in results.notes:
        console.print(Text(f"note: {note}", style="yellow"))
    style = HEADLINE_STYLE.get(results.headline, "bold red")
    console.print(Text(summary_line(results), style=style), soft_wrap=True)

"""The markdown report: the PR comment (``--markdown``) and the GitHub step summary.

Read at a glance on a pull request:

1. a headline with the verdict (``BLOCKED`` / ``APPROVED WITH WARNINGS`` /
   ``APPROVED``), what was compared with what, and the counts;
2. the findings table — every warn/critical verdict, worst first, with the
   candidate and baseline values, ``delta = candidate - baseline`` (relative
   change in parentheses), the ``warn / critical`` bound on the degradation and
   the confidence interval of the delta (docs/metrics.md "Severity and statistics");
3. the reason of each finding, in the words of :mod:`gate.gating.compare`, folded;
4. what the run could not see, one line per tier: how many of its metrics and
   slices are underpowered — the critical bound below the smallest degradation
   the test detects (docs/metrics.md "Power"; every table has an ``MDE``
   column) — and the tiers the compression never exercised; every underpowered
   verdict in words, folded;
5. every metric, tier by tier, folded in a ``<details>`` block;
6. notes (version drift among them: a package measured at another version than
   the baseline's) and the link to the run's artifacts (full HTML report, JSON, JUnit).

Numbers use the console report's formatting (:mod:`gate.report.console`), so
the comment, the log and the HTML agree digit for digit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gate.gating.against import DEFAULT_AGAINST
from gate.gating.verdict import Severity, Verdict
from gate.provenance import ModelProvenance
from gate.report.console import NUMBER_HEADERS, listed_underpowered, number_cells, order, power_line
from gate.report.divergences import Divergences, divergences, heading, short
from gate.report.judge_summary import summary_lines
from gate.report.results import Results

#: A mark before the headline, so the verdict reads at a glance in a PR thread.
HEADLINE_MARK = {"APPROVED": "✅", "APPROVED WITH WARNINGS": "⚠️"}
BLOCKED_MARK = "❌"
SEVERITY_MARK = {Severity.PASS: "pass", Severity.WARN: "⚠️ WARN", Severity.CRITICAL: "❌ CRITICAL"}
#: Findings listed in full before "... and N more".
MAX_FINDINGS = 30


def cell(text: str) -> str:
    """Escape a table cell: pipes, newlines and HTML brackets would break the table."""
    return (
        text.replace("\\", "\\\\")
        .replace("|", "\\|")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace("\r", " ")
        .replace("\n", " ")
    )


def headline(results: Results) -> str:
    """The headline word of the run (falls back on the verdict word for old files)."""
    return results.headline or {"pass": "APPROVED", "warn": "APPROVED WITH WARNINGS"}.get(
        results.verdict, "BLOCKED"
    )


def mark(results: Results) -> str:
    """The emoji mark of the headline."""
    return HEADLINE_MARK.get(headline(results), BLOCKED_MARK)


def severity_counts(verdicts: Sequence[Verdict]) -> str:
    """``2 critical, 1 warning, 14 passed``."""
    n = {s: sum(1 for v in verdicts if v.severity == s) for s in Severity}
    warnings = n[Severity.WARN]
    return (
        f"{n[Severity.CRITICAL]} critical, {warnings} warning{'s' if warnings != 1 else ''}, "
        f"{n[Severity.PASS]} passed"
    )


def candidate_text(candidate: ModelProvenance) -> str:
    """``model (recipe)`` of the candidate provenance."""
    model = candidate.display_name or "candidate"
    return f"{model} ({candidate.recipe})" if candidate.recipe else model


def baseline_text(ref: str, described: Mapping[str, Any]) -> str:
    """``ref = #0003 fp16`` of one baseline description (``Baseline.describe``)."""
    number, label = described.get("number"), described.get("label")
    if isinstance(number, int):
        name = f"#{number:04d}" + (f" {label}" if label else "")
        return ref if ref == name else f"{ref} = {name}"
    return str(label or ref)


def compared_text(results: Results) -> str:
    """``candidate vs ref1, ref2`` for the headline."""
    refs = [baseline_text(ref, d) for ref, d in results.baselines.items()]
    if not refs:
        refs = sorted({v.against for v in results.verdicts}) or [DEFAULT_AGAINST]
    return f"`{candidate_text(results.candidate)}` vs " + ", ".join(f"`{r}`" for r in refs)


def _table(verdicts: Sequence[Verdict], *, show_against: bool, severity_first: bool) -> list[str]:
    head = ["metric", "slice"] + (["vs"] if show_against else [])
    head += list(NUMBER_HEADERS)
    head = (["severity", *head]) if severity_first else [*head, "severity"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for v in verdicts:
        row = [f"`{v.metric}`", v.slice or "all"] + ([v.against] if show_against else [])
        row += number_cells(v)
        sev = f"**{SEVERITY_MARK[v.severity]}**" if v.severity else SEVERITY_MARK[v.severity]
        row = [sev, *row] if severity_first else [*row, sev]
        lines.append("| " + " | ".join(cell(c) if not c.startswith("`") else c for c in row) + " |")
    return lines


def findings_section(results: Results, *, limit: int = MAX_FINDINGS) -> list[str]:
    """The findings table and their reasons (empty list when everything passed)."""
    verdicts = results.verdicts
    findings = [v for v in order(verdicts) if v.severity != Severity.PASS]
    if not findings:
        return []
    show_against = len({v.against for v in verdicts}) > 1
    shown = findings[:limit]
    lines = ["### Findings (worst first)", ""]
    lines += _table(shown, show_against=show_against, severity_first=True)
    if len(findings) > limit:
        lines.append(f"\n… and {len(findings) - limit} more in the full report.")
    lines += ["", "<details><summary>Why</summary>", ""]
    for v in shown:
        lines.append(f"- **{v.severity.name}** `{v.key}` vs {v.against}: {cell(v.reason)}")
    lines += ["", "</details>"]
    return lines


def _counted(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' if n != 1 else ''}"


def underpowered_by_tier(results: Results) -> list[str]:
    """One line per tier with underpowered verdicts, its metrics and slices counted
    (each metric or slice once, whatever the refs): ``fidelity: 1 metric and 30 slices
    UNDERPOWERED (critical bound below the smallest detectable change)``."""
    keys: dict[str, tuple[set[str], set[str]]] = {}
    for v in results.verdicts:
        if v.power is not None and v.power.underpowered:
            metrics, slices = keys.setdefault(v.tier, (set(), set()))
            (slices if v.slice else metrics).add(v.key)
    lines = []
    for tier in sorted(keys):
        metrics, slices = keys[tier]
        parts = [_counted(len(metrics), "metric")] if metrics else []
        parts += [_counted(len(slices), "slice")] if slices else []
        lines.append(
            f"{tier}: {' and '.join(parts)} UNDERPOWERED"
            " (critical bound below the smallest detectable change)"
        )
    return lines


def unseen_section(results: Results) -> list[str]:
    """What the run could not see: one line per tier (its underpowered verdicts counted, a
    tier the compression never exercised), then every underpowered verdict in words,
    folded (empty when the run saw everything it measured)."""
    lines = [*underpowered_by_tier(results), *(item.line for item in results.not_exercised)]
    if not lines:
        return []
    out = [
        "### What the run could not see",
        "",
        *(f"- {cell(line)}" for line in lines),
    ]
    weak, _ = listed_underpowered(results.underpowered, limit=len(results.underpowered))
    if weak:
        several = len({v.against for v in results.verdicts}) > 1
        out += [
            "",
            f"<details><summary>The {len(weak)} underpowered verdicts (a regression of the"
            " critical size would probably pass)</summary>",
            "",
            *(f"- {cell(power_line(p, several_refs=several))}" for p in weak),
            "",
            "</details>",
        ]
    return out


def tiers_section(results: Results) -> list[str]:
    """Every metric, one table per tier (worst tier first), folded."""
    verdicts = results.verdicts
    if not verdicts:
        return []
    show_against = len({v.against for v in verdicts}) > 1
    tiers: dict[str, list[Verdict]] = {}
    for v in verdicts:
        tiers.setdefault(v.tier, []).append(v)
    tier_order = sorted(tiers, key=lambda t: (-max(int(v.severity) for v in tiers[t]), t))
    lines = [f"<details><summary>All {len(verdicts)} results, by tier</summary>", ""]
    for tier in tier_order:
        lines += [f"#### {tier} — {severity_counts(tiers[tier])}", ""]
        lines += _table(order(tiers[tier]), show_against=show_against, severity_first=False)
        lines.append("")
    lines.append("</details>")
    return lines


def divergence_lines(group: Divergences, *, several: bool) -> list[str]:
    """The generation tier's worst divergences, folded: the prompt, the shared start and
    the two answers side by side from where they part."""
    against = f" vs {group.against}" if several else ""
    lines = [
        f"<details><summary>Generation: the worst divergences{cell(against)}</summary>",
        "",
    ]
    for example in group.examples:
        lines += [
            f"**{cell(heading(example))}**",
            "",
            f"prompt: {cell(short(example.get('prompt'), end=True))}",
            "",
            f"shared: {cell(short(example.get('common')))}",
            "",
            "| baseline, from there | candidate, from there |",
            "| --- | --- |",
            f"| {cell(short(example.get('baseline')))} | {cell(short(example.get('candidate')))} |",
            "",
        ]
    return [*lines, "</details>", ""]


def render_markdown(
    results: Results, *, artifacts_url: str | None = None, title: str = "gate"
) -> str:
    """The full markdown report (PR comment and step summary)."""
    word = headline(results)
    lines = [
        f"## {mark(results)} {title}: {word}",
        "",
        f"{compared_text(results)} · exit {results.exit_code} · {severity_counts(results.verdicts)}"
        + (f" · {len(results.version_drift)} version drift" if results.version_drift else "")
        + (f" · {len(results.underpowered)} underpowered" if results.underpowered else ""),
        "",
    ]
    findings = findings_section(results)
    if findings:
        lines += [*findings, ""]
    elif results.verdicts:
        lines += ["Every metric is within its bounds.", ""]
    else:
        lines += ["Nothing was measured.", ""]
    unseen = unseen_section(results)
    if unseen:
        lines += [*unseen, ""]
    for panel in results.judge:
        head, *rest = summary_lines(panel)
        lines += [f"**{cell(head)}**", "", *(f"- {cell(line)}" for line in rest), ""]
    for group in divergences(results):
        lines += divergence_lines(group, several=len(results.baselines) > 1)
    tiers = tiers_section(results)
    if tiers:
        lines += [*tiers, ""]
    for note in results.notes:
        lines.append(f"> note: {cell(note)}")
    if results.notes:
        lines.append("")
    if artifacts_url:
        lines.append(f"Full HTML report, results JSON and JUnit: [run artifacts]({artifacts_url})")
        lines.append("")
    return "\n".join(lines)

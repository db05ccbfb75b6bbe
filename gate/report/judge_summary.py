"""The judge tier's panel summary in every report format, and where older files kept it.

The panel is a typed record (:class:`gate.judge.summary.JudgeSummary`) that
:class:`~gate.report.results.Results` carries (``judge`` in the results JSON):
:func:`summary_lines` words it as plain lines (console, markdown, JUnit); the
HTML report also shows the example pairs.

A run's verdicts reach :class:`~gate.report.results.Results` with the panel
still inside the details of the judge tier's measurements (the measurements
file carries it there); :func:`split_judge_summaries` takes it out once, as
typed records, and so reads results files written before schema 3, which kept
it in their metrics' details.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from gate.gating.verdict import Verdict
from gate.judge.elo import EloResult
from gate.judge.summary import SUMMARY_KEYS, JudgeSummary
from gate.metrics.catalog import judge as judge_catalog

__all__ = ["JudgeSummary", "elo_text", "split_judge_summaries", "summary_lines"]

#: Judge metrics whose details may carry the summary, most complete first.
_CARRIERS = (judge_catalog.ELO_DELTA, judge_catalog.SWAP_INCONSISTENCY, judge_catalog.DISAGREEMENT)


def split_judge_summaries(
    verdicts: Sequence[Verdict],
) -> tuple[tuple[Verdict, ...], tuple[JudgeSummary, ...]]:
    """``verdicts`` without the panel keys in their details, and one summary per baseline
    ref the judge tier ran against (from its most complete carrier; none: empty).

    A malformed summary raises ``KeyError``/``TypeError``/``ValueError``.
    """
    found: dict[str, JudgeSummary] = {}
    for name in _CARRIERS:
        for v in verdicts:
            if v.metric != name or v.slice is not None or v.against in found:
                continue
            summary = JudgeSummary.from_details(v.details, v.against)
            if summary is not None:
                found[v.against] = summary
    stripped = tuple(
        replace(v, details={k: x for k, x in v.details.items() if k not in SUMMARY_KEYS})
        if v.tier == "judge" and JudgeSummary.from_details(v.details, v.against) is not None
        else v
        for v in verdicts
    )
    return stripped, tuple(found.values())


def _pct(x: Any) -> str:
    return "n/a" if x is None else f"{float(x):.1%}"


def elo_text(elo: EloResult) -> str:
    """``-123.4 Elo [95% CI -180.2, -70.1]``; a clamped delta is written as a bound."""
    delta = elo.delta
    lo, hi = elo.ci
    if elo.clamped:
        sign = "<=" if delta < 0 else ">="
        return f"{sign} {delta:+.0f} (every scored prompt {'lost' if delta < 0 else 'won'})"
    return f"{delta:+.1f} [95% CI {lo:+.1f}, {hi:+.1f}]"


def summary_lines(summary: JudgeSummary) -> list[str]:
    """The panel in plain lines: stability, Elo, pair counts, one line per judge."""
    st = summary.stability
    word = "STABLE" if st.stable else "UNSTABLE, no verdict"
    lines = [f"judge panel vs {summary.against}: {word} ({st.reason})"]
    t = summary.tally
    if summary.elo is not None:
        e = summary.elo
        lines.append(
            f"Elo delta {elo_text(e)} over {e.n} scored prompts "
            f"(wins {e.wins}, losses {e.losses}, ties {e.ties}; "
            f"sign test p_worse {e.p_worse:.3g})"
        )
    if t:
        lines.append(
            f"pairs {t.get('pairs', 0)}: identical {t.get('identical', 0)}, "
            f"swap-inconsistent {t.get('swap_inconsistent', 0)} (excluded), "
            f"unparsed {t.get('unparsed', 0)}, judges disagree {t.get('disagreements', 0)}"
            f"/{t.get('decidable', 0)} decidable (excluded)"
        )
    by_judge = t.get("swap_inconsistency_by_judge") or {}
    for j in summary.judges:
        lines.append(
            f"judge {j.get('name')} ({j.get('family')}, {j.get('model_id')}): "
            f"{j.get('calls', 0)} calls made, {j.get('cache_hits', 0)} cache hits, "
            f"{j.get('tokens', 0)} tokens, {j.get('parse_failures', 0)} parse failures, "
            f"swap-inconsistency {_pct(by_judge.get(j.get('name')))}"
        )
    return lines

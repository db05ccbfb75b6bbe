"""The judge tier's panel summary, shared by every report format.

The judge tier (:mod:`gate.tiers.judge`) puts what its verdicts alone do not say
into the ``details`` of its measurements (keys :class:`JudgeDetail`): the judges
and their counters (calls made, cache hits, tokens, parse failures), the counts of
pairs by status, the stability gate and its reason, the tier's own Elo estimate
and a few example pairs. :func:`judge_summary` reads them back from a run's
verdicts and :func:`summary_lines` words them as plain lines (console, markdown,
JUnit); the HTML report also shows the example pairs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gate.gating.verdict import Verdict
from gate.metrics.catalog.judge import JudgeDetail

__all__ = ["JudgeSummary", "judge_summary", "summary_lines"]

#: Judge metrics whose details may carry the summary, most complete first.
_CARRIERS = ("judge.elo_delta", "judge.swap_inconsistency", "judge.disagreement")


@dataclass(frozen=True)
class JudgeSummary:
    """The judge panel of one run (against one baseline ref)."""

    against: str
    judges: list[Mapping[str, Any]]
    tally: Mapping[str, Any]
    stability: Mapping[str, Any]
    elo: Mapping[str, Any] | None
    examples: list[Mapping[str, Any]] = field(default_factory=list)
    templates: Mapping[str, Any] = field(default_factory=dict)


def judge_summary(verdicts: Sequence[Verdict]) -> list[JudgeSummary]:
    """One summary per baseline ref that the judge tier ran against (none: empty)."""
    out: dict[str, JudgeSummary] = {}
    for name in _CARRIERS:
        for v in verdicts:
            if v.metric != name or v.slice is not None or v.against in out:
                continue
            details = v.details
            if JudgeDetail.JUDGES not in details or JudgeDetail.STABILITY not in details:
                continue
            out[v.against] = JudgeSummary(
                against=v.against,
                judges=list(details.get(JudgeDetail.JUDGES) or []),
                tally=dict(details.get(JudgeDetail.TALLY) or {}),
                stability=dict(details.get(JudgeDetail.STABILITY) or {}),
                elo=details.get(JudgeDetail.ELO),
                examples=list(details.get(JudgeDetail.EXAMPLES) or []),
                templates=dict(details.get(JudgeDetail.TEMPLATES) or {}),
            )
    return list(out.values())


def _pct(x: Any) -> str:
    return "n/a" if x is None else f"{float(x):.1%}"


def elo_text(elo: Mapping[str, Any]) -> str:
    """``-123.4 Elo [95% CI -180.2, -70.1]``; a clamped delta is written as a bound."""
    delta = float(elo["delta"])
    lo, hi = (float(x) for x in elo["ci"])
    if elo.get("clamped"):
        sign = "<=" if delta < 0 else ">="
        return f"{sign} {delta:+.0f} (every scored prompt {'lost' if delta < 0 else 'won'})"
    return f"{delta:+.1f} [95% CI {lo:+.1f}, {hi:+.1f}]"


def summary_lines(summary: JudgeSummary) -> list[str]:
    """The panel in plain lines: stability, Elo, pair counts, one line per judge."""
    st = summary.stability
    word = "STABLE" if st.get("stable") else "UNSTABLE, no verdict"
    lines = [f"judge panel vs {summary.against}: {word} ({st.get('reason', '')})"]
    t = summary.tally
    if summary.elo is not None:
        e = summary.elo
        lines.append(
            f"Elo delta {elo_text(e)} over {e['wins'] + e['losses'] + e['ties']} scored prompts "
            f"(wins {e['wins']}, losses {e['losses']}, ties {e['ties']}; "
            f"sign test p_worse {float(e['p_worse_sign_test']):.3g})"
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

"""The judge panel of one run against one baseline ref, typed: :class:`JudgeSummary`.

What the judge tier's verdicts alone do not say: the judges and their counters
(calls made, cache hits, tokens, parse failures), the counts of pairs by
status, the stability gate (:class:`~gate.judge.protocol.Stability`), the
template versions, a few example pairs and, when the panel scored any pair,
the tier's own Elo estimate (:class:`~gate.judge.elo.EloResult`) with the
candidate's judged answers (a round robin among candidates judges them
pairwise).

Two forms on the way, each made and read here only:

* the measurement details the tier writes (:meth:`JudgeSummary.to_details`,
  keys :class:`~gate.metrics.catalog.judge.JudgeDetail`): the measurements
  file carries the panel to ``gate compare``, and results files written before
  schema 3 carry it in their metrics' details (:meth:`JudgeSummary.from_details`);
* the ``judge`` entries of the results JSON (:meth:`JudgeSummary.to_document`,
  :meth:`JudgeSummary.from_document`): the details' keys plus ``against``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from gate.gating.against import DEFAULT_AGAINST
from gate.judge.elo import EloResult
from gate.judge.protocol import Stability
from gate.measurement import JudgedOutput
from gate.metrics.catalog.judge import JudgeDetail

__all__ = ["SUMMARY_KEYS", "JudgeSummary"]

#: The detail keys that make up a panel summary (stripped from verdicts once it is typed).
SUMMARY_KEYS = (
    JudgeDetail.JUDGES,
    JudgeDetail.TALLY,
    JudgeDetail.STABILITY,
    JudgeDetail.TEMPLATES,
    JudgeDetail.EXAMPLES,
    JudgeDetail.ELO,
    JudgeDetail.OUTPUTS,
)


def _stability_to_dict(stable: Stability) -> dict[str, Any]:
    return {
        "stable": stable.stable,
        "rate": stable.rate,
        "bound": stable.bound,
        "reason": stable.reason,
    }


def _stability_from_dict(data: Mapping[str, Any]) -> Stability:
    rate = data.get("rate")
    return Stability(
        stable=bool(data["stable"]),
        rate=None if rate is None else float(rate),
        bound=float(data["bound"]),
        reason=str(data.get("reason", "")),
    )


@dataclass(frozen=True)
class JudgeSummary:
    """The judge panel of one run against one baseline ref (``against``)."""

    #: Per judge: name, family, model_id, calls, cache_hits, tokens, parse_failures.
    judges: tuple[Mapping[str, Any], ...]
    #: Counts over pairs: pairs, identical, wins, losses, ties, swap_inconsistent,
    #: unparsed, disagreements, decidable, swap_inconsistency_by_judge.
    tally: Mapping[str, Any]
    #: The stability gate: two or more judges disagreeing too often is no verdict.
    stability: Stability
    #: Versions of the pairwise and validity templates.
    templates: Mapping[str, Any] = field(default_factory=dict)
    #: Example pairs: prompt, both answers, every judge's verdicts in both orders.
    examples: tuple[Mapping[str, Any], ...] = ()
    #: The tier's Elo estimate over the scored pairs (``None``: no pair scored, or unstable).
    elo: EloResult | None = None
    #: The candidate's judged answers (with ``elo``; empty otherwise).
    outputs: tuple[JudgedOutput, ...] = ()
    #: The baseline ref the panel judged against (set by the comparison; the tier leaves it).
    against: str = DEFAULT_AGAINST

    def to_details(self) -> dict[str, Any]:
        """The judge tier's measurement details (keys of :class:`JudgeDetail`, no ``against``)."""
        details: dict[str, Any] = {
            JudgeDetail.JUDGES: [dict(j) for j in self.judges],
            JudgeDetail.TALLY: dict(self.tally),
            JudgeDetail.STABILITY: _stability_to_dict(self.stability),
            JudgeDetail.TEMPLATES: dict(self.templates),
            JudgeDetail.EXAMPLES: [dict(e) for e in self.examples],
        }
        if self.elo is not None:
            details[JudgeDetail.ELO] = self.elo.to_dict()
        if self.outputs:
            details[JudgeDetail.OUTPUTS] = [asdict(o) for o in self.outputs]
        return details

    @classmethod
    def from_details(cls, details: Mapping[str, Any], against: str) -> JudgeSummary | None:
        """The summary in a measurement's or verdict's details; ``None`` when they hold none
        (``KeyError``/``TypeError``/``ValueError`` when they hold a malformed one)."""
        if JudgeDetail.JUDGES not in details or JudgeDetail.STABILITY not in details:
            return None
        elo = details.get(JudgeDetail.ELO)
        return cls(
            judges=tuple(dict(j) for j in details.get(JudgeDetail.JUDGES) or []),
            tally=dict(details.get(JudgeDetail.TALLY) or {}),
            stability=_stability_from_dict(details[JudgeDetail.STABILITY]),
            templates=dict(details.get(JudgeDetail.TEMPLATES) or {}),
            examples=tuple(dict(e) for e in details.get(JudgeDetail.EXAMPLES) or []),
            elo=None if elo is None else EloResult.from_dict(elo),
            outputs=tuple(
                JudgedOutput.from_dict(o) for o in details.get(JudgeDetail.OUTPUTS) or []
            ),
            against=str(against),
        )

    def to_document(self) -> dict[str, Any]:
        """The results JSON ``judge[]`` entry: ``against`` first, then the details' keys."""
        return {"against": self.against, **self.to_details()}

    @classmethod
    def from_document(cls, entry: Any) -> JudgeSummary:
        """Inverse of :meth:`to_document` (``KeyError``/``TypeError``/``ValueError`` when
        malformed; the results reader turns them into one line)."""
        if not isinstance(entry, Mapping):
            raise TypeError("a judge entry is not an object")
        unknown = [str(k) for k in entry if k != "against" and k not in SUMMARY_KEYS]
        if unknown:
            raise ValueError(f"unknown key(s) in a judge entry: {', '.join(unknown)}")
        summary = cls.from_details(entry, str(entry["against"]))
        if summary is None:
            raise KeyError(f"{JudgeDetail.JUDGES!r} or {JudgeDetail.STABILITY!r} of a judge entry")
        return summary

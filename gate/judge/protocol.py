"""The pairwise judging protocol: parsing, both orders, validity, two judges, stability.

For every prompt the candidate's response ``c`` and the baseline's ``b`` are judged
by every judge of the panel (the methods of :mod:`gate.judge`):

0. **Identical responses.** When ``c`` and ``b`` are equal after style normalization
   the pair is a tie and no judge is asked (:func:`identical_outcome`): the two orders
   would show the judge the very same text, so no consistent win or loss is possible,
   and a tie is the only answer. Such pairs count in the score (as ties) but not in
   the disagreement rate, which measures the judges where judging is needed.

1. **Parsing.** An answer is accepted only if, after trimming whitespace, a
   surrounding pair of quotes, ``*`` or ``` ` ``` and one final ``.``, it is exactly
   one of the expected words (case-insensitive): ``A``, ``B``, ``tie`` for the
   pairwise question, ``valid``, ``corrupted`` for the validity question. The caller
   asks an unparseable question once more (:func:`parse_with_retry`); a second
   failure is counted as a parse failure and the question has no answer.
2. **Both orders.** The pair is asked as ``(A, B) = (c, b)`` and as ``(A, B) = (b, c)``.
   Each verdict is read from the candidate's side (:class:`Outcome`: win, loss,
   tie). If the two orders give the same outcome, that is the judge's outcome;
   if they differ, the judge is **swap-inconsistent** on the pair and the pair is
   excluded from the score (counted). A missing answer in either order leaves the
   pair **unparsed** (excluded, counted).
3. **Validity.** Each response is also asked the validity question. In a gate a
   corrupted candidate output is not dropped: if the judge calls the candidate's
   response corrupted and the baseline's valid, the outcome is a **loss** whatever
   the pairwise answers were (and symmetrically a win when only the baseline's
   response is corrupted, so that swapping the roles of the two builds negates the
   score). When both or neither are corrupted, or a validity answer is missing,
   step 2 decides.
4. **Panel.** A pair is scored only when every judge has an outcome and all
   outcomes agree. A pair on which judges with outcomes disagree is excluded and
   kept in the raw results. The **disagreement rate** is
   ``#disagreeing pairs / #non-identical pairs on which every judge has an outcome``.
5. **Stability gate.** With two or more judges, a disagreement rate above the
   bound (default 15 %) makes the judge tier UNSTABLE: it gives no verdict. When
   pairs needed judging but on none of them every judge had an outcome, the rate is
   undefined and the tier is UNSTABLE too (nothing was measured); when every pair
   was identical there was nothing to disagree on and the panel is stable. A
   single judge is never unstable by this rule (it has no one to disagree with).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

__all__ = [
    "DEFAULT_DISAGREEMENT_BOUND",
    "JudgeOutcome",
    "Outcome",
    "PairAnswer",
    "PairStatus",
    "PanelOutcome",
    "Stability",
    "Tally",
    "Validity",
    "identical_outcome",
    "judge_outcome",
    "outcome_from_verdict",
    "panel_outcome",
    "parse_validity",
    "parse_verdict",
    "parse_with_retry",
    "stability",
    "tally",
]

#: Default bound of the aggregate disagreement rate (above it: UNSTABLE).
DEFAULT_DISAGREEMENT_BOUND = 0.15


class PairAnswer(enum.Enum):
    """A pairwise answer: reply A is better, reply B is better, or a tie."""

    A = "A"
    B = "B"
    TIE = "tie"


class Validity(enum.Enum):
    """A validity answer."""

    VALID = "valid"
    CORRUPTED = "corrupted"


class Outcome(enum.Enum):
    """A pair's result seen from the candidate: its score is 1, 0 or 1/2."""

    WIN = "win"
    LOSS = "loss"
    TIE = "tie"

    @property
    def score(self) -> float:
        """1 for a win, 0 for a loss, 1/2 for a tie."""
        return {"win": 1.0, "loss": 0.0, "tie": 0.5}[self.value]


class PairStatus(enum.Enum):
    """Whether a pair counts, and if not, why."""

    SCORED = "scored"
    SWAP_INCONSISTENT = "swap_inconsistent"
    UNPARSED = "unparsed"
    DISAGREEMENT = "disagreement"


_WRAPPERS = re.compile(r"^([\"'`*]+)(.*?)\1$", re.DOTALL)


def _bare(text: str) -> str:
    word = text.strip()
    match = _WRAPPERS.match(word)
    if match:
        word = match.group(2).strip()
    if word.endswith("."):
        word = word[:-1].rstrip()
    return word.lower()


def parse_verdict(text: str) -> PairAnswer | None:
    """``A``, ``B`` or ``tie`` (see the module docstring for what is trimmed), else ``None``."""
    return {"a": PairAnswer.A, "b": PairAnswer.B, "tie": PairAnswer.TIE}.get(_bare(text))


def parse_validity(text: str) -> Validity | None:
    """``valid`` or ``corrupted`` (trimmed as :func:`parse_verdict`), else ``None``."""
    return {"valid": Validity.VALID, "corrupted": Validity.CORRUPTED}.get(_bare(text))


T = TypeVar("T")


def parse_with_retry(
    ask: Callable[[int], str], parse: Callable[[str], T | None]
) -> tuple[T | None, int]:
    """Ask (attempt 1), parse; if that fails ask once more (attempt 2) and parse again.

    ``ask(attempt)`` returns the judge's answer text. Returns the parsed value (``None``
    when both answers failed to parse, which the caller counts) and the attempts made.
    """
    value = parse(ask(1))
    if value is not None:
        return value, 1
    return parse(ask(2)), 2


def outcome_from_verdict(verdict: PairAnswer, candidate_is_a: bool) -> Outcome:
    """The candidate's outcome when the judge answered ``verdict``."""
    if verdict is PairAnswer.TIE:
        return Outcome.TIE
    candidate_won = (verdict is PairAnswer.A) == candidate_is_a
    return Outcome.WIN if candidate_won else Outcome.LOSS


@dataclass(frozen=True)
class JudgeOutcome:
    """One judge's result on one pair.

    ``candidate_first`` / ``candidate_second``: the outcome read from the verdict with
    the candidate as reply A / as reply B (``None``: unparsed). ``candidate_valid`` /
    ``baseline_valid``: the validity answers (``None``: not asked or unparsed).
    ``status`` and ``outcome`` follow rules 2-3 of the module docstring.
    """

    candidate_first: Outcome | None
    candidate_second: Outcome | None
    candidate_valid: Validity | None
    baseline_valid: Validity | None
    status: PairStatus
    outcome: Outcome | None
    reason: str
    identical: bool = False


def identical_outcome() -> JudgeOutcome:
    """The outcome of a pair whose responses are equal after normalization (rule 0)."""
    return JudgeOutcome(
        None,
        None,
        None,
        None,
        PairStatus.SCORED,
        Outcome.TIE,
        "identical responses: a tie without asking",
        identical=True,
    )


def judge_outcome(
    candidate_first: PairAnswer | None,
    candidate_second: PairAnswer | None,
    candidate_valid: Validity | None = None,
    baseline_valid: Validity | None = None,
) -> JudgeOutcome:
    """Combine one judge's two pairwise verdicts and two validity answers (rules 2-3).

    ``candidate_first`` is the verdict with the candidate as reply A, ``candidate_second``
    with the candidate as reply B.
    """
    first = None if candidate_first is None else outcome_from_verdict(candidate_first, True)
    second = None if candidate_second is None else outcome_from_verdict(candidate_second, False)
    cand_bad = candidate_valid is Validity.CORRUPTED and baseline_valid is Validity.VALID
    base_bad = baseline_valid is Validity.CORRUPTED and candidate_valid is Validity.VALID
    outcome: Outcome | None
    if cand_bad or base_bad:
        outcome = Outcome.LOSS if cand_bad else Outcome.WIN
        who = "candidate" if cand_bad else "baseline"
        return JudgeOutcome(
            first,
            second,
            candidate_valid,
            baseline_valid,
            PairStatus.SCORED,
            outcome,
            f"{who} response corrupted",
        )
    if first is None or second is None:
        status, outcome, reason = PairStatus.UNPARSED, None, "a pairwise answer did not parse"
    elif first is not second:
        status, outcome = PairStatus.SWAP_INCONSISTENT, None
        reason = f"{first.value} with the candidate first, {second.value} with it second"
    else:
        status, outcome, reason = PairStatus.SCORED, first, "both orders agree"
    return JudgeOutcome(first, second, candidate_valid, baseline_valid, status, outcome, reason)


@dataclass(frozen=True)
class PanelOutcome:
    """The panel's result on one pair (rule 4), with every judge's own result kept."""

    judges: tuple[JudgeOutcome, ...]
    status: PairStatus
    outcome: Outcome | None

    @property
    def identical(self) -> bool:
        """Whether the responses were identical (a tie nobody was asked about)."""
        return all(j.identical for j in self.judges)

    @property
    def decidable(self) -> bool:
        """Whether the pair counts in the disagreement rate: judged, with every outcome."""
        return not self.identical and all(j.outcome is not None for j in self.judges)


def panel_outcome(judges: Sequence[JudgeOutcome]) -> PanelOutcome:
    """Scored when every judge has the same outcome; else why not (rule 4).

    A judge without an outcome makes the pair take that judge's status
    (swap-inconsistent before unparsed); judges that all have outcomes but differ
    make it a disagreement.
    """
    if not judges:
        raise ValueError("panel_outcome: no judge")
    items = tuple(judges)
    missing = [j.status for j in items if j.outcome is None]
    if missing:
        status = (
            PairStatus.SWAP_INCONSISTENT
            if PairStatus.SWAP_INCONSISTENT in missing
            else PairStatus.UNPARSED
        )
        return PanelOutcome(items, status, None)
    outcomes = {j.outcome for j in items}
    if len(outcomes) > 1:
        return PanelOutcome(items, PairStatus.DISAGREEMENT, None)
    return PanelOutcome(items, PairStatus.SCORED, items[0].outcome)


@dataclass(frozen=True)
class Tally:
    """Counts over pairs: the score inputs and every reason a pair was excluded.

    ``identical`` pairs are among the ties; ``decidable`` pairs are the denominator of
    the disagreement rate (rule 4).
    ``swap_inconsistent_by_judge[k]`` / ``both_orders_by_judge[k]`` is judge ``k``'s
    swap-inconsistency rate (over the pairs where it parsed both orders).
    """

    wins: int
    losses: int
    ties: int
    swap_inconsistent: int
    unparsed: int
    disagreements: int
    decidable: int
    identical: int
    pairs: int
    swap_inconsistent_by_judge: tuple[int, ...]
    both_orders_by_judge: tuple[int, ...]

    @property
    def scored(self) -> int:
        """Pairs that count in the score: ``wins + losses + ties``."""
        return self.wins + self.losses + self.ties

    @property
    def disagreement_rate(self) -> float | None:
        """``disagreements / decidable`` (``None`` when no pair is decidable)."""
        return self.disagreements / self.decidable if self.decidable else None

    def swap_inconsistency_rate(self, judge: int) -> float | None:
        """Judge ``judge``'s share of swap-inconsistent pairs among those it parsed twice."""
        both = self.both_orders_by_judge[judge]
        return self.swap_inconsistent_by_judge[judge] / both if both else None


def tally(pairs: Sequence[PanelOutcome]) -> Tally:
    """Count wins, losses, ties and exclusions over ``pairs`` (all with the same panel)."""
    n_judges = len(pairs[0].judges) if pairs else 0
    if any(len(p.judges) != n_judges for p in pairs):
        raise ValueError("tally: every pair must be judged by the same panel")
    counts = dict.fromkeys(Outcome, 0)
    by_status = dict.fromkeys(PairStatus, 0)
    for p in pairs:
        by_status[p.status] += 1
        if p.outcome is not None:
            counts[p.outcome] += 1
    inconsistent = tuple(
        sum(
            1
            for p in pairs
            if p.judges[k].candidate_first is not None
            and p.judges[k].candidate_second is not None
            and p.judges[k].candidate_first is not p.judges[k].candidate_second
        )
        for k in range(n_judges)
    )
    both = tuple(
        sum(
            1
            for p in pairs
            if p.judges[k].candidate_first is not None and p.judges[k].candidate_second is not None
        )
        for k in range(n_judges)
    )
    return Tally(
        wins=counts[Outcome.WIN],
        losses=counts[Outcome.LOSS],
        ties=counts[Outcome.TIE],
        swap_inconsistent=by_status[PairStatus.SWAP_INCONSISTENT],
        unparsed=by_status[PairStatus.UNPARSED],
        disagreements=by_status[PairStatus.DISAGREEMENT],
        decidable=sum(1 for p in pairs if p.decidable),
        identical=sum(1 for p in pairs if p.identical),
        pairs=len(pairs),
        swap_inconsistent_by_judge=inconsistent,
        both_orders_by_judge=both,
    )


@dataclass(frozen=True)
class Stability:
    """The stability gate (rule 5): ``stable`` and the sentence that says why."""

    stable: bool
    rate: float | None
    bound: float
    reason: str


def stability(counts: Tally, n_judges: int, bound: float = DEFAULT_DISAGREEMENT_BOUND) -> Stability:
    """UNSTABLE when two or more judges disagree on more than ``bound`` of decidable pairs."""
    if not 0.0 <= bound <= 1.0:
        raise ValueError(f"disagreement bound {bound} outside [0, 1]")
    rate = counts.disagreement_rate
    if n_judges < 2:
        return Stability(True, rate, bound, "one judge: no disagreement to check")
    if rate is None:
        if counts.pairs and counts.identical == counts.pairs:
            return Stability(True, None, bound, "every pair identical: nothing to judge")
        return Stability(
            False, None, bound, "no pair on which every judge gave an outcome in both orders"
        )
    text = f"judges disagree on {counts.disagreements}/{counts.decidable} pairs ({rate:.1%})"
    if rate > bound:
        return Stability(False, rate, bound, f"{text}, above the {bound:.0%} bound")
    return Stability(True, rate, bound, f"{text}, within the {bound:.0%} bound")

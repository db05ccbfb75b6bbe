"""gate.judge.protocol: parsing, both orders, validity, the panel and the stability gate."""

from __future__ import annotations

import itertools

import pytest

from gate.judge.protocol import (
    Outcome,
    PairAnswer,
    PairStatus,
    Validity,
    identical_outcome,
    judge_outcome,
    outcome_from_verdict,
    panel_outcome,
    parse_validity,
    parse_verdict,
    parse_with_retry,
    stability,
    tally,
)

A, B, TIE = PairAnswer.A, PairAnswer.B, PairAnswer.TIE
V, C = Validity.VALID, Validity.CORRUPTED


@pytest.mark.parametrize(
    ("text", "verdict"),
    [
        ("A", A),
        (" b \n", B),
        ("tie", TIE),
        ("Tie.", TIE),
        ("**A**", A),
        ('"B"', B),
        ("`tie`", TIE),
        ("A.", A),
        ("", None),
        ("AB", None),
        ("A or B", None),
        ("Answer: A", None),
        ("A because it is longer", None),
        ("C", None),
        ("**A*", None),
    ],
)
def test_parse_verdict_is_strict(text: str, verdict: PairAnswer | None) -> None:
    assert parse_verdict(text) is verdict


@pytest.mark.parametrize(
    ("text", "validity"),
    [("valid", V), ("Corrupted.", C), ("invalid", None), ("valid!", None), ("", None)],
)
def test_parse_validity_is_strict(text: str, validity: Validity | None) -> None:
    assert parse_validity(text) is validity


def test_retry_once_then_give_up() -> None:
    asked: list[int] = []

    def answers(seq: list[str]):  # type: ignore[no-untyped-def]
        def ask(attempt: int) -> str:
            asked.append(attempt)
            return seq[attempt - 1]

        return ask

    assert parse_with_retry(answers(["A", "x"]), parse_verdict) == (A, 1)
    assert parse_with_retry(answers(["??", "tie"]), parse_verdict) == (TIE, 2)
    assert parse_with_retry(answers(["??", "??"]), parse_verdict) == (None, 2)
    assert asked == [1, 1, 2, 1, 2]


def test_verdicts_read_from_the_candidate_side() -> None:
    # candidate shown as A: "A" means the candidate won; shown as B: "A" means it lost
    assert outcome_from_verdict(A, candidate_is_a=True) is Outcome.WIN
    assert outcome_from_verdict(A, candidate_is_a=False) is Outcome.LOSS
    assert outcome_from_verdict(B, candidate_is_a=False) is Outcome.WIN
    assert outcome_from_verdict(TIE, candidate_is_a=False) is Outcome.TIE


def _expected(
    first: PairAnswer | None, second: PairAnswer | None
) -> tuple[PairStatus, Outcome | None]:
    """The swap rule written out as a table of the nine verdict combinations."""
    if first is None or second is None:
        return PairStatus.UNPARSED, None
    table = {
        (A, B): Outcome.WIN,  # candidate preferred in both orders
        (B, A): Outcome.LOSS,
        (TIE, TIE): Outcome.TIE,
    }
    if (first, second) in table:
        return PairStatus.SCORED, table[(first, second)]
    return PairStatus.SWAP_INCONSISTENT, None


@pytest.mark.parametrize(("first", "second"), list(itertools.product([A, B, TIE, None], repeat=2)))
def test_both_orders_rule(first: PairAnswer | None, second: PairAnswer | None) -> None:
    got = judge_outcome(first, second)
    assert (got.status, got.outcome) == _expected(first, second)


def test_position_bias_is_swap_inconsistent() -> None:
    # a judge that always answers "A" favours whoever is shown first: excluded
    got = judge_outcome(A, A)
    assert got.status is PairStatus.SWAP_INCONSISTENT and got.outcome is None


@pytest.mark.parametrize(
    ("cand", "base", "status", "outcome"),
    [
        (C, V, PairStatus.SCORED, Outcome.LOSS),  # corrupted candidate: a loss, always
        (V, C, PairStatus.SCORED, Outcome.WIN),
        (C, C, PairStatus.SCORED, Outcome.WIN),  # both corrupted: the pairwise answers decide
        (V, V, PairStatus.SCORED, Outcome.WIN),
        (None, C, PairStatus.SCORED, Outcome.WIN),  # unparsed validity: no override
    ],
)
def test_validity_override(
    cand: Validity | None, base: Validity | None, status: PairStatus, outcome: Outcome
) -> None:
    got = judge_outcome(A, B, cand, base)  # pairwise: the candidate wins in both orders
    assert (got.status, got.outcome) == (status, outcome)


def test_corrupted_candidate_loses_even_when_pairwise_is_excluded() -> None:
    for first, second in [(A, A), (None, B), (B, A)]:
        got = judge_outcome(first, second, C, V)
        assert (got.status, got.outcome) == (PairStatus.SCORED, Outcome.LOSS)


def _j(outcome: Outcome | None, status: PairStatus = PairStatus.SCORED):  # type: ignore[no-untyped-def]
    pairs = {Outcome.WIN: (A, B), Outcome.LOSS: (B, A), Outcome.TIE: (TIE, TIE)}
    if outcome is not None:
        return judge_outcome(*pairs[outcome])
    return judge_outcome(A, A) if status is PairStatus.SWAP_INCONSISTENT else judge_outcome(None, A)


def test_panel_scores_only_agreeing_judges() -> None:
    assert panel_outcome([_j(Outcome.WIN), _j(Outcome.WIN)]).outcome is Outcome.WIN
    split = panel_outcome([_j(Outcome.WIN), _j(Outcome.TIE)])
    assert split.status is PairStatus.DISAGREEMENT and split.outcome is None and split.decidable
    flip = panel_outcome([_j(Outcome.WIN), _j(None, PairStatus.SWAP_INCONSISTENT)])
    assert flip.status is PairStatus.SWAP_INCONSISTENT and not flip.decidable
    lost = panel_outcome([_j(None, PairStatus.UNPARSED), _j(Outcome.WIN)])
    assert lost.status is PairStatus.UNPARSED
    with pytest.raises(ValueError, match="no judge"):
        panel_outcome([])


def test_tally_and_stability_gate() -> None:
    win, tie, loss = _j(Outcome.WIN), _j(Outcome.TIE), _j(Outcome.LOSS)
    flip = _j(None, PairStatus.SWAP_INCONSISTENT)
    pairs = (
        [panel_outcome([win, win])] * 6
        + [panel_outcome([tie, tie])] * 2
        + [panel_outcome([loss, loss])] * 1
        + [panel_outcome([win, tie])] * 1  # disagreement
        + [panel_outcome([flip, win])] * 2  # judge 0 flips with the order
    )
    t = tally(pairs)
    assert (t.wins, t.losses, t.ties, t.scored) == (6, 1, 2, 9)
    assert (t.disagreements, t.decidable, t.swap_inconsistent, t.pairs) == (1, 10, 2, 12)
    assert t.disagreement_rate == pytest.approx(1 / 10)
    assert t.swap_inconsistency_rate(0) == pytest.approx(2 / 12)
    assert t.swap_inconsistency_rate(1) == 0.0
    assert stability(t, n_judges=2).stable  # 10 % <= 15 %
    gate = stability(t, n_judges=2, bound=0.05)
    assert not gate.stable and "1/10" in gate.reason and "above" in gate.reason
    assert stability(t, n_judges=2, bound=0.10).stable  # at the bound: not above it
    assert stability(t, n_judges=1, bound=0.0).stable
    nothing = tally([panel_outcome([flip, flip])])
    assert not stability(nothing, n_judges=2).stable
    with pytest.raises(ValueError, match=r"disagreement bound 1\.5 outside \[0, 1\]"):
        stability(t, n_judges=2, bound=1.5)


def test_identical_pairs_are_ties_outside_the_disagreement_rate() -> None:
    same = identical_outcome()
    assert (same.status, same.outcome, same.identical) == (PairStatus.SCORED, Outcome.TIE, True)
    win, tie = _j(Outcome.WIN), _j(Outcome.TIE)
    pairs = [panel_outcome([same, same])] * 8 + [panel_outcome([win, tie])] * 2
    pairs += [panel_outcome([win, win])] * 8
    t = tally(pairs)
    assert (t.ties, t.wins, t.identical, t.decidable, t.disagreements) == (8, 8, 8, 10, 2)
    assert t.disagreement_rate == pytest.approx(2 / 10)  # not 2 / 18
    assert not stability(t, n_judges=2).stable
    # the baseline against itself: every pair identical, two judges, stable
    itself = stability(tally([panel_outcome([same, same])] * 5), n_judges=2)
    assert itself.stable and itself.rate is None and "identical" in itself.reason
    # identical pairs and pairs nobody could decide: unstable
    flip = _j(None, PairStatus.SWAP_INCONSISTENT)
    mixed = tally([panel_outcome([same, same]), panel_outcome([flip, flip])])
    assert not stability(mixed, n_judges=2).stable

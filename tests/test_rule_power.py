"""``gate power``: the fixed-tolerance rule and the paired test, checked against independent sums
and seeded simulations, the acceptance figures, and bad input."""

from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from gate.cli import main
from gate.gating.rule_power import PairedTest, ToleranceRule
from tests.lmeval_support import gsm8k_pair


def binomial_fail(n: int, p: Fraction, fails: object) -> float:
    """``P[fails(X)]`` for ``X ~ Binom(n, p)``, summed in exact rational arithmetic."""
    q = 1 - p
    total = Fraction(0)
    for k in range(n + 1):
        if fails(Fraction(k, n)):  # type: ignore[operator]
            total += math.comb(n, k) * p**k * q ** (n - k)
    return float(total)


def test_vllm_gsm8k_acceptance_five_point_drop_is_caught_078_percent(tmp_path: Path) -> None:
    """The issue's case, against a direct exact sum of binomial terms: 0.0078."""
    out = tmp_path / "p.json"
    code = main(
        ["power", "--n", "1319", "--baseline", "0.78", "--tolerance", "0.08",
         "--drop", "0.05", "--json", str(out)]
    )  # fmt: skip
    assert code == 0
    doc = json.loads(out.read_text())
    expected = binomial_fail(1319, Fraction(73, 100), lambda a: a < Fraction(70, 100))
    assert doc["rule"]["detection"] == pytest.approx(expected, rel=1e-9)
    assert round(doc["rule"]["detection"], 4) == 0.0078
    assert doc["rule"]["fails_at_or_below"] == 923  # 923 / 1319 < 0.70 <= 924 / 1319
    no_change = binomial_fail(1319, Fraction(78, 100), lambda a: a < Fraction(70, 100))
    assert doc["rule"]["false_alarm"] == pytest.approx(no_change, rel=1e-6)
    paired = doc["paired"]
    assert 0.0 < paired["detection"] <= 1.0 and paired["n_needed"] >= 1
    assert paired["flip_rate_source"] == "assumed"
    assert [row["drop"] for row in doc["table"]] == pytest.approx([k / 100 for k in range(1, 11)])
    # the rule catches more as the drop grows; at 8 points about half (0.7 is the bound)
    dets = [row["rule_detection"] for row in doc["table"]]
    assert dets == sorted(dets) and dets[7] == pytest.approx(0.503, abs=0.001)


def test_a_score_on_the_bound_passes_and_one_below_fails() -> None:
    """n = 100, bound 0.70: 70 correct passes (>=), 69 fails; two-sided: 86 passes, 87 fails."""
    rule = ToleranceRule(100, 0.78, 0.08)
    assert rule.fail_counts(Fraction(78, 100)) == (69, None)
    p = 0.7
    assert rule.detection(0.08) == pytest.approx(
        binomial_fail(100, Fraction(7, 10), lambda a: a < Fraction(70, 100)), rel=1e-9
    )
    two = ToleranceRule(100, 0.78, 0.08, two_sided=True)
    assert two.fail_counts(Fraction(78, 100)) == (69, 87)
    assert two.fail_probability(p) == pytest.approx(
        binomial_fail(
            100, Fraction(7, 10), lambda a: a < Fraction(70, 100) or a > Fraction(86, 100)
        ),
        rel=1e-9,
    )


def test_relative_tolerance_against_a_direct_sum() -> None:
    rule = ToleranceRule(250, 0.6, 0.1, relative=True)  # bound 0.54
    got = rule.detection(0.1)
    assert got == pytest.approx(
        binomial_fail(250, Fraction(1, 2), lambda a: a < Fraction(54, 100)), rel=1e-9
    )


def test_noisy_baseline_matches_a_seeded_simulation() -> None:
    """Baseline measured on m items: the bound moves with it; the exact sum is checked by
    simulating both measurements (integer comparisons, no float rounding at the bound)."""
    n, m, p0, tol, drop = 400, 300, 0.7, 0.05, 0.04
    rule = ToleranceRule(n, p0, tol, baseline_n=m)
    rng = np.random.default_rng(7)
    sims = 200_000
    y = rng.binomial(m, p0, sims)
    for p, exact_value in ((p0 - drop, rule.detection(drop)), (p0, rule.false_alarm)):
        x = rng.binomial(n, p, sims)
        # x / n < y / m - 5/100  <=>  100 m x < (100 y - 5 m) n
        fails = 100 * m * x < (100 * y - 5 * m) * n
        rate = float(fails.mean())
        se = math.sqrt(exact_value * (1 - exact_value) / sims)
        assert abs(rate - exact_value) < 4 * se + 1e-4
    # a noisy baseline makes the rule fail more often both ways than an exact one
    exact_rule = ToleranceRule(n, p0, tol)
    assert rule.false_alarm > exact_rule.false_alarm


def _mcnemar_power_by_enumeration(n: int, lost: float, gained: float, alpha: float) -> float:
    """Σ over (b, c) of the trinomial probability that the one-sided exact test rejects."""
    from scipy import stats as sps

    total = 0.0
    for b in range(n + 1):
        for c in range(n + 1 - b):
            d = b + c
            if d == 0 or sps.binom.sf(b - 1, d, 0.5) >= alpha:
                continue
            total += float(sps.multinomial.pmf([b, c, n - d], n, [lost, gained, 1 - lost - gained]))
    return total


def test_paired_detection_is_mcnemar_with_lost_and_gained_from_flip_rate_and_drop() -> None:
    """(lost - gained) = d and lost + gained = f: the exact power by enumeration agrees."""
    n, f, d, alpha = 60, 0.2, 0.1, 0.05
    test = PairedTest(n, f, alpha)
    by_hand = _mcnemar_power_by_enumeration(n, (f + d) / 2, (f - d) / 2, alpha)
    assert test.detection(d) == pytest.approx(by_hand, rel=1e-6)
    # a flip rate below the drop: every changed answer is a loss
    assert PairedTest(n, 0.05, alpha).detection(d) == pytest.approx(
        _mcnemar_power_by_enumeration(n, d, 0.0, alpha), rel=1e-6
    )
    needed = test.n_needed(d, 0.8)
    assert needed is not None
    assert PairedTest(needed, f, alpha).detection(d) >= 0.8
    assert PairedTest(int(needed * 0.8), f, alpha).detection(d) < 0.8


def test_flip_rate_from_two_samples_files(tmp_path: Path) -> None:
    base, cand = gsm8k_pair(tmp_path, lost=30, gained=5)
    out = tmp_path / "p.json"
    code = main(
        [
            "power",
            "--tolerance",
            "0.08",
            "--samples",
            str(base),
            str(cand),
            "--drops",
            "0.05",
            "--json",
            str(out),
        ]
    )
    assert code == 0
    paired = json.loads(out.read_text())["paired"]
    assert paired["flip_rate"] == pytest.approx(35 / 300)
    assert paired["counted"]["lost"] == 30 and paired["counted"]["gained"] == 5
    assert paired["flip_rate_source"] == "samples"
    assert json.loads(out.read_text())["rule"]["n"] == 300


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--n", "0"], "--n 0 must be at least 1"),
        (["--baseline", "1.2"], "--baseline 1.2 is outside (0, 1)"),
        (["--baseline", "0"], "--baseline 0 is outside (0, 1)"),
        (["--tolerance", "0.9"], "is not below the baseline"),
        (["--tolerance", "1.5", "--relative"], "100 % or more"),
        (["--flip-rate", "1.5"], "--flip-rate 1.5 is outside"),
        (["--drop", "0.9"], "outside (0, 1)"),
        (["--drops", "a,b"], "not a list of numbers"),
        (["--baseline-n", "0"], "--baseline-n 0 must be at least 1"),
        (["--alpha", "0.7"], "--alpha 0.7 is outside"),
    ],
)
def test_bad_input_is_one_line_exit_4(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    base = {"--n": "1319", "--baseline": "0.78", "--tolerance": "0.08"}
    for flag in args:
        base.pop(flag, None)
    argv = ["power", *[x for kv in base.items() for x in kv], *args, "--json", str(tmp_path / "p")]
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 4, err
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "p").exists()


def test_missing_numbers_and_two_flip_sources_are_usage_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["power", "--tolerance", "0.08"]) == 4
    assert "--n and --baseline are required" in capsys.readouterr().err
    base, cand = gsm8k_pair(tmp_path, lost=3, gained=1, n=40, base_right=30)
    argv = ["power", "--tolerance", "0.08", "--flip-rate", "0.1", "--samples", str(base), str(cand)]
    assert main(argv) == 4
    assert "--flip-rate and --samples both given" in capsys.readouterr().err
    same = ["power", "--tolerance", "0.08", "--samples", str(base), str(base)]
    assert main(same) == 4
    assert "no flips in 40 documents" in capsys.readouterr().err

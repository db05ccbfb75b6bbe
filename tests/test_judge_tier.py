"""gate.tiers.judge: settings, the judged comparison, the stability gate, gating and reports.

Units with scripted judges (a real judge model runs in tests/test_judge_real.py).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from gate.errors import BaselineError, ConfigError, ExitCode, NothingMeasuredError
from gate.gating.compare import compare_measurements
from gate.gating.thresholds import load_thresholds
from gate.judge.cache import CachedJudge, JudgeCache
from gate.measurement import JudgedOutput, OutputSet
from gate.report.results import Results
from gate.store.judge_outputs import read_outputs, write_outputs
from gate.tiers import judge as tier
from gate.tiers.registry import build_settings
from tests.fakes.judges import ScriptedJudge

REPO = Path(__file__).resolve().parents[1]
_REPLY = re.compile(r"Reply A:\n(?P<a>.*?)\n\nReply B:\n(?P<b>.*?)\n\nAnswer", re.DOTALL)
_ONE = re.compile(r"Reply:\n(?P<r>.*?)\n\nAnswer", re.DOTALL)


def prefer(good: Callable[[str], float]) -> Callable[[str], str]:
    """A judge's answer function: the reply with the higher ``good`` wins; equal -> tie."""

    def answer(question: str) -> str:
        pair = _REPLY.search(question)
        if pair is None:
            one = _ONE.search(question)
            assert one is not None
            return "corrupted" if "BROKEN" in one.group("r") else "valid"
        a, b = good(pair.group("a")), good(pair.group("b"))
        return "tie" if a == b else ("A" if a > b else "B")

    return answer


def outputs(texts: Sequence[str], *, category: str = "chat") -> OutputSet:
    return OutputSet(
        64,
        "sha",
        tuple(
            JudgedOutput(f"p{i}", category, "short", f"question {i}?", 20 + 200 * (i % 2), t, 5)
            for i, t in enumerate(texts)
        ),
    )


def panel(tmp_path: Path, *answers: Callable[[str], str]) -> list[CachedJudge]:
    cache = JudgeCache(tmp_path / "cache")
    return [
        CachedJudge(ScriptedJudge(a, name=f"j{k}", model_id=f"scripted{k}@1"), cache)
        for k, a in enumerate(answers)
    ]


SETTINGS = tier.JudgeSettings()
BASE = outputs([f"a complete answer number {i}." for i in range(30)])


def elo(p: float) -> float:
    return -400.0 * math.log10(1.0 / p - 1.0)


# ----------------------------------------------------------------- settings


def test_default_settings_and_the_bundled_judge() -> None:
    s = build_settings("judge", {})
    assert isinstance(s, tier.JudgeSettings)
    assert s.max_new_tokens == 512 and s.disagreement_bound == 0.15
    assert [j.name for j in s.panel] == ["bundled"]
    assert tier.DEFAULT_JUDGE.local_path == REPO / "gate" / "assets" / "judge_model"


def test_template_without_placeholders_is_refused_up_front(tmp_path: Path) -> None:
    bad = tmp_path / "pairwise.txt"
    bad.write_text("Which reply is better? Answer A, B or tie.\n")
    with pytest.raises(ConfigError, match=r"lacks the placeholder\(s\) \{prompt\}") as info:
        build_settings("judge", {"pairwise_template": str(bad)}, source="gate.toml")
    assert info.value.exit_code == ExitCode.USAGE_ERROR


@pytest.mark.parametrize(
    ("judge", "message"),
    [
        ({"name": "x", "model": "no/such/dir"}, "model directory no/such/dir does not exist"),
        ({"name": "x y", "model": "bundled"}, "judge name 'x y'"),
        ({"name": "x", "model": "bundled", "concurrency": 0}, "concurrency must be >= 1"),
        (
            {"name": "x", "model": "m", "endpoint": "ftp://h/v1"},
            "is not an http\\(s\\) URL",
        ),
        (
            {
                "name": "x",
                "model": "m",
                "endpoint": "http://h:1/v1",
                "api_key_env": "GATE_NO_KEY_X",
            },
            "GATE_NO_KEY_X \\(the endpoint's API key\\) is not set",
        ),
        ({"name": "x", "model": "bundled", "api_key_env": "K"}, "api_key_env needs an endpoint"),
        ({"name": "x", "model": "bundled", "device": "gpu0"}, "unknown device 'gpu0'"),
        (
            {"name": "x", "model": "m", "endpoint": "http://h:1/v1", "device": "cpu"},
            "device is for an in-process judge",
        ),
    ],
)
def test_judges_are_validated_up_front(judge: dict[str, object], message: str) -> None:
    from gate.session.run_config import parse_run_config

    with pytest.raises(ConfigError, match=message):
        parse_run_config({"judges": [judge]}, source="gate.toml")


def test_an_in_process_judge_runs_on_the_runs_device_unless_its_entry_names_one() -> None:
    """``open_judge`` places a local judge on the run's device (``auto`` resolved on this
    machine), or on its own ``device``; a CUDA device this machine lacks is one line, exit 4."""
    from gate.errors import UsageError
    from gate.hw.devices import TORCH_CUDA, resolve_device

    judge = tier.open_judge(tier.DEFAULT_JUDGE, "auto")
    assert judge._device == resolve_device("auto")
    assert str(next(judge._model.parameters()).device).startswith(resolve_device("auto"))
    own = tier.open_judge(replace(tier.DEFAULT_JUDGE, device="cpu"), "cuda:0")
    assert own._device == "cpu"
    if not TORCH_CUDA.is_available():
        with pytest.raises(UsageError, match="cuda") as info:
            tier.open_judge(tier.DEFAULT_JUDGE, "cuda:0")
        assert info.value.exit_code == ExitCode.USAGE_ERROR


def test_judges_tables_land_in_the_tier_settings() -> None:
    from gate.session.run_config import parse_run_config

    config = parse_run_config(
        {
            "judges": [
                {"name": "a", "model": "bundled", "max_output_tokens": 4},
                {"name": "b", "model": "m", "endpoint": "http://127.0.0.1:9/v1", "family": "x"},
            ],
            "tiers": {"judge": {"disagreement_bound": 0.2}},
        },
        source="gate.toml",
    )
    s = build_settings("judge", config.tiers["judge"])
    assert isinstance(s, tier.JudgeSettings)
    assert [(j.name, j.endpoint) for j in s.panel] == [("a", None), ("b", "http://127.0.0.1:9/v1")]
    assert s.disagreement_bound == 0.2
    with pytest.raises(ConfigError, match="judge names must be unique"):
        build_settings("judge", {"judges": [{"name": "a", "model": "bundled"}] * 2})


def test_judge_tier_is_opt_in() -> None:
    from gate.metrics.registry import TIERS
    from gate.tiers.tier_spec import DEFAULT_TIERS

    assert "judge" in TIERS and "judge" not in DEFAULT_TIERS


# ----------------------------------------------------------------- outputs artifact


def test_outputs_round_trip_and_malformed_file(tmp_path: Path) -> None:
    path = tmp_path / "o.json"
    write_outputs(path, BASE)
    assert read_outputs(path) == BASE
    path.write_text('{"format": 1, "outputs": [{"id": 1}]}')
    with pytest.raises(BaselineError, match="cannot read the baseline's judge outputs") as info:
        read_outputs(path)
    assert info.value.exit_code == ExitCode.USAGE_ERROR


# ----------------------------------------------------------------- the comparison


def test_baseline_against_itself_asks_nothing_and_scores_zero(tmp_path: Path) -> None:
    judges = panel(tmp_path, prefer(len))
    result = tier.compare_outputs(BASE, BASE, judges, SETTINGS)
    assert result.problem is None and result.elo is not None
    elo_m = result.measurements[0]
    assert elo_m.name == "judge.elo_delta" and elo_m.value == 0.0
    assert set(elo_m.samples or ()) == {0.0}
    assert result.counts.identical == 30
    # only the validity questions are asked (one per candidate answer)
    assert judges[0].stats.calls == 30
    asked = judges[0].judge.asked  # type: ignore[attr-defined]
    assert len(asked) == 30 and all("Reply A:" not in q for q in asked)


def test_elo_against_an_independent_count(tmp_path: Path) -> None:
    # candidate: 12 answers cut short (loss), 3 longer (win), 15 the same (tie)
    texts = [
        ("a c." if i < 12 else f"a complete answer number {i}. with more" if i < 15 else t.text)
        for i, t in enumerate(BASE.outputs)
    ]
    result = tier.compare_outputs(outputs(texts), BASE, panel(tmp_path, prefer(len)), SETTINGS)
    m = result.measurements[0]
    w, r, t = 3, 12, 15
    p = (w + t / 2) / (w + r + t)
    assert m.value == pytest.approx(elo(p))
    assert sorted(m.samples or ()) == sorted([0.5] * w + [-0.5] * r + [0.0] * t)
    assert m.details["elo"]["wins"] == w and m.details["elo"]["losses"] == r
    # slices: prompts with even ids have 20 prompt tokens (XS), odd ones 220 (S)
    xs = m.breakdown["length:XS"]
    even = [s for i, s in enumerate(m.samples or ()) if i % 2 == 0]
    assert xs.samples == tuple(even)
    assert xs.value == pytest.approx(elo(0.5 + float(np.mean(even))))
    assert set(m.breakdown) == {"category:chat", "length:XS", "length:S", "gen_length:XS"}


def test_corrupted_candidate_answer_is_a_loss_and_lowers_validity(tmp_path: Path) -> None:
    texts = ["BROKEN " + t.text if i < 6 else t.text for i, t in enumerate(BASE.outputs)]
    # a judge that, pairwise, always prefers the longer reply: the corrupted one
    result = tier.compare_outputs(outputs(texts), BASE, panel(tmp_path, prefer(len)), SETTINGS)
    by_name = {m.name: m for m in result.measurements}
    assert by_name["judge.elo_delta"].details["elo"]["losses"] == 6
    assert by_name["judge.validity"].value == pytest.approx(24 / 30)
    assert by_name["judge.validity"].samples == tuple([0.0] * 6 + [1.0] * 24)


def test_swap_inconsistent_pairs_are_excluded_and_counted(tmp_path: Path) -> None:
    texts = [t.text + " x" for t in BASE.outputs]  # every pair differs

    def always_a(question: str) -> str:
        return "A" if "Reply A:" in question else "valid"

    result = tier.compare_outputs(outputs(texts), BASE, panel(tmp_path, always_a), SETTINGS)
    assert result.problem is not None  # every pair flips with the order: nothing decided
    assert result.counts.swap_inconsistent == 30
    swap = {m.name: m for m in result.measurements}["judge.swap_inconsistency"]
    assert swap.value == 1.0
    assert "judge.elo_delta" not in {m.name for m in result.measurements}


def test_two_judges_disagreeing_make_the_tier_unstable(tmp_path: Path) -> None:
    texts = ["a c." if i < 10 else t.text + " and more" for i, t in enumerate(BASE.outputs)]
    # j0 prefers longer replies; j1 shorter ones: they disagree on every judged pair
    judges = panel(tmp_path, prefer(len), prefer(lambda s: -len(s)))
    result = tier.compare_outputs(outputs(texts), BASE, judges, SETTINGS)
    assert not result.stability.stable
    assert isinstance(result.problem, tier.JudgeUnstableError)
    assert isinstance(result.problem, NothingMeasuredError)
    assert result.problem.exit_code == ExitCode.NO_MEASUREMENTS
    assert "UNSTABLE" in result.problem.format_line() and "above the 15% bound" in (
        result.problem.format_line()
    )
    names = {m.name for m in result.measurements}
    assert names == {"judge.swap_inconsistency", "judge.disagreement"}
    dis = {m.name: m for m in result.measurements}["judge.disagreement"]
    assert dis.value == 1.0 and dis.details["stability"]["stable"] is False


def test_two_agreeing_judges_are_stable(tmp_path: Path) -> None:
    texts = ["a c." if i < 10 else t.text for i, t in enumerate(BASE.outputs)]
    judges = panel(tmp_path, prefer(len), prefer(lambda s: len(s.split())))
    result = tier.compare_outputs(outputs(texts), BASE, judges, SETTINGS)
    assert result.stability.stable and result.problem is None
    by_name = {m.name: m for m in result.measurements}
    assert by_name["judge.disagreement"].value == 0.0
    assert by_name["judge.elo_delta"].details["elo"]["losses"] == 10


def test_a_second_identical_comparison_makes_no_call(tmp_path: Path) -> None:
    texts = ["a c." if i < 10 else t.text for i, t in enumerate(BASE.outputs)]
    first = panel(tmp_path, prefer(len))
    tier.compare_outputs(outputs(texts), BASE, first, SETTINGS)
    # 2 orders + 2 validity questions per judged pair, 1 validity question per tie;
    # the candidate's validity of a judged pair was already asked with the pair (a hit)
    assert (first[0].stats.calls, first[0].stats.hits) == (10 * 4 + 20, 10)
    again = panel(tmp_path, prefer(len))
    tier.compare_outputs(outputs(texts), BASE, again, SETTINGS)
    assert again[0].stats.calls == 0 and again[0].stats.hits == 70
    assert again[0].judge.asked == []  # type: ignore[attr-defined]


def test_garbage_answers_are_retried_once_then_counted(tmp_path: Path) -> None:
    texts = ["a c." if i < 10 else t.text for i, t in enumerate(BASE.outputs)]
    judges = panel(tmp_path, lambda q: "I think the first one" if "Reply A:" in q else "valid")
    result = tier.compare_outputs(outputs(texts), BASE, judges, SETTINGS)
    assert judges[0].stats.parse_failures == 20  # both orders of 10 pairs, after a retry each
    assert result.counts.unparsed == 10
    # the 20 identical pairs still count (ties): the tier has a verdict
    assert result.problem is None and result.measurements[0].value == 0.0


# ----------------------------------------------------------------- gating


THRESHOLDS = load_thresholds(REPO / "thresholds.toml")


def _elo_measurement(wins: int, losses: int, ties: int) -> tier.Measurement:
    samples = [0.5] * wins + [-0.5] * losses + [0.0] * ties
    ids = [f"p{i}" for i in range(len(samples))]
    return tier._elo_measurement(ids, samples, {}, {})


def _independent_ci(samples: Sequence[float], n_resamples: int = 4000) -> tuple[float, float]:
    rng = np.random.default_rng(123)
    s = np.asarray(samples)
    means = s[rng.integers(0, s.size, size=(n_resamples, s.size))].mean(axis=1)
    lo, hi = np.percentile(means, [2.5, 97.5])
    return elo(0.5 + lo), elo(0.5 + hi)


@pytest.mark.parametrize(
    ("wins", "losses", "ties", "severity"),
    [
        (10, 10, 80, "PASS"),
        (5, 40, 55, "CRITICAL"),
        (20, 45, 235, "WARN"),  # -29 Elo over 300 prompts: past warn, significant
        (12, 22, 66, "PASS"),  # -35 Elo over 100 prompts, 12 wins vs 22 losses: not significant
    ],
)
def test_elo_verdict_ci_matches_an_independent_bootstrap(
    wins: int, losses: int, ties: int, severity: str
) -> None:
    m = _elo_measurement(wins, losses, ties)
    p = (wins + ties / 2) / (wins + losses + ties)
    assert m.value == pytest.approx(elo(p))
    (v,) = compare_measurements([m], [], THRESHOLDS)
    assert v.severity.name == severity
    assert v.ci is not None and v.delta == pytest.approx(m.value)
    lo, hi = _independent_ci(m.samples or ())
    assert v.ci[0] == pytest.approx(lo, abs=8.0) and v.ci[1] == pytest.approx(hi, abs=8.0)
    assert v.ci[0] <= v.value <= v.ci[1]


def test_every_prompt_lost_or_won_is_finite_and_flagged() -> None:
    lost = _elo_measurement(0, 50, 0)
    assert lost.value == pytest.approx(-400 * math.log10(2 * 50 - 1))
    (v,) = compare_measurements([lost], [], THRESHOLDS)
    assert v.severity.name == "CRITICAL" and v.ci is not None
    assert all(math.isfinite(x) for x in v.ci)
    won = _elo_measurement(50, 0, 0)
    assert won.value == pytest.approx(400 * math.log10(2 * 50 - 1))
    (v,) = compare_measurements([won], [], THRESHOLDS)
    assert v.severity.name == "PASS" and v.ci is not None and all(math.isfinite(x) for x in v.ci)


def test_validity_is_paired_with_the_baseline_by_mcnemar() -> None:
    from gate.measurement import Measurement

    ids = tuple(f"p{i}" for i in range(60))
    base = Measurement("judge.validity", 1.0, (1.0,) * 60, ids)
    worse = Measurement("judge.validity", 50 / 60, (0.0,) * 10 + (1.0,) * 50, ids)
    (v,) = compare_measurements([worse], [base], THRESHOLDS)
    assert v.severity.name == "CRITICAL" and v.test is not None and "McNemar" in v.test
    (v,) = compare_measurements([base], [base], THRESHOLDS)
    assert v.severity.name == "PASS"


# ----------------------------------------------------------------- reports


def _results(tmp_path: Path, *answers: Callable[[str], str]) -> Results:
    from gate.gating.compare import compare_many
    from gate.gating.verdict import decide

    texts = ["a c." if i < 12 else t.text for i, t in enumerate(BASE.outputs)]
    result = tier.compare_outputs(outputs(texts), BASE, panel(tmp_path, *answers), SETTINGS)
    verdicts = compare_many(list(result.measurements), {"fp32": []}, THRESHOLDS)
    return Results.of_run(decide(verdicts))


def test_every_report_shows_the_judge_panel(tmp_path: Path) -> None:
    import io

    from gate.report.console import make_console, render
    from gate.report.html import render_html
    from gate.report.junit import render_junit
    from gate.report.markdown import render_markdown

    results = _results(tmp_path, prefer(len))
    buffer = io.StringIO()
    render(results, make_console(buffer, color=False))
    text = buffer.getvalue()
    assert "judge panel vs fp32: STABLE" in text
    assert "judge j0 (test, scripted0@1): 66 calls made, 12 cache hits" in text
    assert "0 parse failures" in text and "Elo delta" in text
    md = render_markdown(results)
    assert "judge panel vs fp32" in md and "66 calls made" in md
    html = render_html(results)
    assert "Judge panel" in html and "Example pairs" in html and "a c." in html
    xml = render_junit(results).decode()
    assert "66 calls made" in xml and 'name="judge.elo_delta"' in xml


def test_unstable_panel_is_reported_with_its_reason(tmp_path: Path) -> None:
    from gate.report.markdown import render_markdown

    results = _results(tmp_path, prefer(len), prefer(lambda s: -len(s)))
    md = render_markdown(results)
    assert "UNSTABLE, no verdict" in md and "above the 15% bound" in md


def test_elo_test_is_the_sign_test_on_differing_prompts() -> None:
    (v,) = compare_measurements([_elo_measurement(5, 40, 55)], [], THRESHOLDS)
    expected = sum(math.comb(45, k) for k in range(40, 46)) / 2**45
    assert v.p_value == pytest.approx(expected)
    # a slice of three prompts, all lost: past the bound, but 1/8 is no evidence
    samples = [-0.5] * 3 + [0.0] * 40
    ids = [f"p{i}" for i in range(43)]
    m = tier._elo_measurement(ids, samples, {"category:x": [0, 1, 2]}, {})
    whole, part = compare_measurements([m], [], THRESHOLDS)
    assert part.slice == "category:x" and part.value == pytest.approx(-400 * math.log10(5))
    assert part.severity.name == "PASS" and part.p_value == pytest.approx(1 / 8)
    assert part.details.get("not_significant") == "critical"
    assert whole.severity.name == "PASS"


def test_github_output_carries_the_judge_verdicts_and_panel(tmp_path: Path) -> None:
    import io

    from gate.report.github import emit

    results = _results(tmp_path, prefer(len))
    summary = tmp_path / "summary.md"
    stream = io.StringIO()
    emit(results, environ={"GITHUB_STEP_SUMMARY": str(summary)}, stream=stream)
    assert "::error" in stream.getvalue() and "judge.elo_delta" in stream.getvalue()
    text = summary.read_text()
    assert "judge panel vs fp32: STABLE" in text and "66 calls made" in text


def test_results_json_round_trips_the_panel_as_a_typed_record(tmp_path: Path) -> None:
    """The panel leaves the verdicts' details for the results' ``judge`` list, typed, and
    comes back from the file equal; a results file of schema 2 (panel in the details) reads
    the same panel."""
    import json

    from gate.judge.summary import SUMMARY_KEYS
    from gate.report.results_json import results_from_json, write_results

    results = _results(tmp_path, prefer(len))
    (panel,) = results.judge
    assert panel.against == "fp32" and panel.stability.stable
    assert panel.judges[0]["calls"] == 66 and panel.tally["pairs"] == 30
    (elo_verdict,) = [v for v in results.verdicts if v.metric == "judge.elo_delta" and not v.slice]
    assert panel.elo is not None and panel.elo.delta == pytest.approx(elo_verdict.value)
    assert [o.id for o in panel.outputs] == [o.id for o in BASE.outputs] and panel.examples
    carried = {k for v in results.verdicts for k in v.details if k in SUMMARY_KEYS}
    assert carried == {"judges"}  # judge.validity's judge model ids only
    write_results(tmp_path / "r.json", results)
    doc = json.loads((tmp_path / "r.json").read_text())
    assert [e["against"] for e in doc["judge"]] == ["fp32"]
    back = results_from_json(tmp_path / "r.json")
    assert back.judge == results.judge and back.to_document() == doc
    # schema 2 kept the panel in the details of judge.elo_delta (the whole metric)
    older = json.loads(json.dumps({k: v for k, v in doc.items() if k != "judge"}))
    older["schema_version"] = 2
    (elo_entry,) = [
        m for m in older["metrics"] if m["name"] == "judge.elo_delta" and not m["slice"]
    ]
    elo_entry["details"] = {**elo_entry["details"], **panel.to_details()}
    old = Results.from_document(older)
    assert old.judge == results.judge and old.to_document() == doc


@pytest.mark.parametrize(
    ("load", "engine", "expected"),
    [
        (None, None, "auto"),  # the one default
        ("cpu", None, "cpu"),
        ("cpu", "http://127.0.0.1:9/v1", None),  # served: the judge goes to `auto`
    ],
)
def test_the_session_says_where_its_build_runs_in_process(
    tmp_path: Path, load: str | None, engine: str | None, expected: str | None
) -> None:
    """The judge suite places a local judge at ``GateRun.in_process_device``: the session's
    one ``--device`` setting for a build in process, nothing for a served one."""
    from types import SimpleNamespace

    from gate.engines.settings import EngineSettings
    from gate.models.load_settings import LoadSettings
    from gate.session.options import SessionOptions
    from gate.session.plugin import GatePlugin
    from gate.session.request import SessionRequest

    options = SessionOptions(
        store=tmp_path,
        load=LoadSettings(device=load),
        engine=None if engine is None else EngineSettings(endpoint=engine),
    )
    plugin = GatePlugin(SimpleNamespace(), SessionRequest("record", "demo", options))  # type: ignore[arg-type]
    state = plugin._build_state()
    assert state.run.in_process_device == expected

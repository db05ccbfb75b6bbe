"""The generation tier's worst divergences in the console, markdown and HTML reports.

The measurements go through the tier's own aggregation (per-prompt values of
hand-made answers against hand-made stored answers), the real comparison with
the shipped thresholds and the results document, as a run's do.
"""

from __future__ import annotations

import io

from gate.metrics.catalog.generation import GenerationDetail
from gate.report.console import make_console, render
from gate.report.html import render_html
from gate.report.markdown import render_markdown
from gate.store.reference import PackPrompt
from gate.tiers import generation as tier
from tests.report_cases import make_case, outside_details

CAP = 24


def _answers() -> tuple[list[tier.StoredAnswer], list[list[int]]]:
    stored, answered = [], []
    for j in range(24):
        tokens = (*range(100 + j, 108 + j), 2)  # nine tokens, the last its EOS
        meta = PackPrompt(f"p{j}", "chat" if j % 2 else "code", "short", 5, len(tokens))
        stored.append(tier.StoredAnswer(j, meta, tokens, len(tokens)))
        # half the answers part at token 3 and ramble into a loop up to the cap
        answered.append(list(tokens) if j % 2 else [*tokens[:3], *([7, 8] * 12)][:CAP])
    return stored, answered


def _case() -> object:
    stored, answered = _answers()
    values = tier.paired_values(stored, answered, CAP, tier.GenerationSettings())
    measurements = tier.to_measurements(values, side="candidate", against="fp16")
    example = tier.DivergenceExample(
        prompt_id="p0",
        category="code",
        prompt="Write <b>a</b> loop | in Python",
        position=3,
        common="for i in",
        baseline="range(3): print(i)",
        candidate="in in in in in in",
        baseline_tokens=9,
        candidate_tokens=24,
    )
    measurements = [
        m
        if m.name != "generation.exact_match"
        else type(m)(
            m.name,
            m.value,
            m.samples,
            m.sample_ids,
            m.breakdown,
            {**m.details, GenerationDetail.EXAMPLES: [example.to_dict()]},
        )
        for m in measurements
    ]
    return make_case(measurements)


def test_every_report_shows_the_divergence_side_by_side() -> None:
    case = _case()
    results = case.results  # type: ignore[attr-defined]
    verdicts = {v.metric: v for v in results.verdicts if v.slice is None}
    # half the answers ramble to the cap in a loop: blocked on the loop and length findings
    assert verdicts["generation.loop_rate"].severity.name == "CRITICAL"
    assert verdicts["generation.length_ratio"].severity.name == "CRITICAL"
    markdown = render_markdown(results)
    assert "Generation: the worst divergences" in markdown
    assert "| range(3): print(i) | in in in in in in |" in markdown
    assert "p0 (code): the answers part at token 3" in markdown
    assert "&lt;b&gt;a&lt;/b&gt; loop \\| in Python" in markdown  # escaped
    assert not any("range(3)" in line for line in outside_details(markdown))  # folded
    html = render_html(results)
    assert '<h2 id="divergences">' in html
    assert "<b>Baseline, from there</b></p><pre>range(3): print(i)</pre>" in html
    assert "<b>Candidate, from there</b></p><pre>in in in in in in</pre>" in html
    assert "&lt;b&gt;a&lt;/b&gt;" in html and "<b>a</b>" not in html
    out = io.StringIO()
    render(results, make_console(out, color=False))
    text = out.getvalue()
    assert "generation: the worst divergences:" in text
    assert "candidate then: in in in in in in" in text


def test_no_divergence_no_section() -> None:
    stored, _ = _answers()
    same = [list(a.tokens) for a in stored]
    values = tier.paired_values(stored, same, CAP, tier.GenerationSettings())
    results = make_case(tier.to_measurements(values, side="candidate", against="fp16")).results
    assert "worst divergences" not in render_markdown(results)
    assert 'id="divergences"' not in render_html(results)
    assert {v.severity.name for v in results.verdicts if v.tier == "generation"} == {"PASS"}

"""The HTML report: one self-contained file (inline CSS, PNG data URIs, no script, no URL).

Read top to bottom, most important first:

The page carries a Content-Security-Policy that forbids every load but its
own data-URI images and inline style.

1. a coloured verdict banner — APPROVED (green), APPROVED WITH WARNINGS
   (amber), BLOCKED (red) — with what was compared, the exit code and counts;
2. the findings (warn/critical verdicts, worst first) with their reasons,
   then the underpowered verdicts in words (docs/metrics.md "Power");
3. the plots the run has data for (:mod:`gate.report.plots`);
4. one table per tier with every verdict: candidate, baseline,
   ``delta = candidate - baseline`` (relative change), ``warn / critical``
   bound, confidence interval of the delta, the MDE of the test and the test that decided it
   (docs/metrics.md "Severity and statistics");
5. provenance of the candidate and baselines, the environment and the
   latency tier's hardware fingerprint.

Every piece of text from the results goes through :func:`html.escape`.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gate.gating.verdict import Severity, Verdict
from gate.measurement import MeasurementDetail
from gate.metrics.catalog import load as load_catalog
from gate.report.console import (
    NUMBER_HEADERS,
    listed_underpowered,
    number_cells,
    order,
    power_line,
)
from gate.report.divergences import divergences, heading
from gate.report.judge_summary import JudgeSummary, summary_lines
from gate.report.markdown import (
    baseline_text,
    candidate_text,
    headline,
    severity_counts,
)
from gate.report.plots import Plot, all_plots
from gate.report.results import Results

#: The page may load nothing: images are data URIs, styles inline. A browser refuses
#: (and logs) anything else, so a stray external URL cannot leak the report's contents.
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"
BANNER_CLASS = {"APPROVED": "ok", "APPROVED WITH WARNINGS": "warn"}
#: Findings shown in full above the plots; the rest are folded.
TOP_FINDINGS = 6
#: Critical metrics named in the banner.
BANNER_METRICS = 5
#: Candidate provenance fields shown first, in this order (the rest follow).
CANDIDATE_FIELDS = (
    "model",
    "recipe",
    "source",
    "revision",
    "quantization",
    "dtypes",
    "device",
    "linear_classes",
    "parameter_bytes",
    "weights_sha256",
    "tokenizer_sha256",
)
#: Long or noisy provenance fields left out of the tables.
HIDDEN_FIELDS = frozenset({"weight_files", "tokenizer_files", "device_map"})

CSS = """
:root { --ok:#2e7d32; --warn:#ef8f00; --block:#c62828; --ink:#1f2328; --muted:#59636e;
        --line:#d1d9e0; --bg:#f6f8fa; }
* { box-sizing: border-box; }
body { margin:0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
       color: var(--ink); background: #fff; }
main { max-width: 1200px; margin: 0 auto; padding: 0 24px 48px; }
.banner { color:#fff; padding: 22px 24px; margin-bottom: 20px; }
.banner.ok { background: var(--ok); } .banner.warn { background: var(--warn); }
.banner.block { background: var(--block); }
.banner .word { font-size: 40px; font-weight: 800; letter-spacing: .04em; margin: 0; }
.banner .sub { font-size: 16px; margin-top: 6px; opacity: .95; }
.banner .counts { margin-top: 10px; display: flex; gap: 10px; flex-wrap: wrap; }
.chip { background: rgba(255,255,255,.18); border: 1px solid rgba(255,255,255,.5);
        border-radius: 14px; padding: 2px 12px; font-weight: 600; }
h2 { font-size: 20px; border-bottom: 1px solid var(--line); padding-bottom: 4px; margin-top: 28px; }
h3 { font-size: 16px; margin: 18px 0 6px; }
table { border-collapse: collapse; width: 100%; font-size: 13px; }
th, td { border-bottom: 1px solid var(--line); padding: 4px 8px; text-align: left;
         vertical-align: top; }
th { background: var(--bg); font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.reason { color: var(--muted); font-size: 12px; }
tr.critical td { background: #fdecea; } tr.warn td { background: #fff4e0; }
.sev { display: inline-block; min-width: 72px; text-align: center; border-radius: 10px;
       padding: 0 8px; font-weight: 700; font-size: 12px; color: #fff; }
.sev.pass { background: var(--ok); } .sev.warn { background: var(--warn); }
.sev.critical { background: var(--block); }
details { margin: 8px 0; } summary { cursor: pointer; color: var(--muted); }
code { font: 12px ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
.plots { display: grid; grid-template-columns: repeat(auto-fit, minmax(520px, 1fr)); gap: 16px; }
figure { margin: 0; border: 1px solid var(--line); border-radius: 6px; padding: 10px; }
figure img { width: 100%; height: auto; display: block; }
figcaption { font-size: 12px; color: var(--muted); margin-top: 6px; }
figcaption b { color: var(--ink); font-size: 14px; display: block; }
dl.kv { display: grid; grid-template-columns: max-content 1fr; gap: 2px 16px; margin: 0; }
dl.kv dt { color: var(--muted); } dl.kv dd { margin: 0; word-break: break-all; }
.cols { display: grid; grid-template-columns: repeat(auto-fit, minmax(340px, 1fr)); gap: 16px; }
.note { background: #fff8c5; border-left: 4px solid var(--warn); padding: 6px 10px; margin: 6px 0; }
.muted { color: var(--muted); }
pre { white-space: pre-wrap; background: var(--bg); padding: 6px; font-size: 12px; }
"""


def esc(value: Any) -> str:
    """HTML-escaped text of any value."""
    return html.escape(str(value), quote=True)


def banner(results: Results) -> str:
    """The coloured verdict banner."""
    word = headline(results)
    refs = [baseline_text(ref, d) for ref, d in results.baselines.items()] or sorted(
        {v.against for v in results.verdicts}
    )
    n = {s: sum(1 for v in results.verdicts if v.severity == s) for s in Severity}
    chips = [
        f"{n[Severity.CRITICAL]} critical",
        f"{n[Severity.WARN]} warning{'s' if n[Severity.WARN] != 1 else ''}",
        f"{n[Severity.PASS]} passed",
        f"exit {results.exit_code}",
    ]
    if results.underpowered:
        chips.insert(3, f"{len(results.underpowered)} underpowered")
    critical = list(
        dict.fromkeys(v.metric for v in order(results.verdicts) if v.severity == Severity.CRITICAL)
    )
    blocking = ""
    if critical:
        named = ", ".join(critical[:BANNER_METRICS])
        more = (
            f" and {len(critical) - BANNER_METRICS} more" if len(critical) > BANNER_METRICS else ""
        )
        blocking = f'<div class="sub">Critical: {esc(named + more)}</div>'
    return (
        f'<header class="banner {BANNER_CLASS.get(word, "block")}" id="verdict">'
        f'<p class="word">{esc(word)}</p>'
        f'<div class="sub">{esc(candidate_text(results.candidate))} vs '
        f"{esc(', '.join(refs) or 'baseline')}</div>"
        + blocking
        + '<div class="counts">'
        + "".join(f'<span class="chip">{esc(c)}</span>' for c in chips)
        + "</div></header>"
    )


def severity_pill(severity: Severity) -> str:
    """A coloured PASS / WARN / CRITICAL label."""
    return f'<span class="sev {severity.label}">{severity.name}</span>'


def verdict_table(verdicts: Sequence[Verdict], *, show_against: bool) -> str:
    """A table of verdicts (already ordered)."""
    head = ["severity", "metric", "slice"] + (["vs"] if show_against else [])
    head += [*NUMBER_HEADERS, "test"]
    rows = ["<tr>" + "".join(f"<th>{esc(h)}</th>" for h in head) + "</tr>"]
    for v in verdicts:
        cells = [
            f"<td>{severity_pill(v.severity)}</td>",
            f"<td><code>{esc(v.metric)}</code></td>",
            f"<td>{esc(v.slice or 'all')}</td>",
        ]
        if show_against:
            cells.append(f"<td>{esc(v.against)}</td>")
        cells += [f'<td class="num">{esc(x)}</td>' for x in number_cells(v)]
        test = v.test or "-"
        if v.p_value is not None:
            test += f" (p={v.p_value:.2g})"
        cells.append(f"<td>{esc(test)}</td>")
        rows.append(f'<tr class="{v.severity.label}">' + "".join(cells) + "</tr>")
    return "<table>" + "".join(rows) + "</table>"


def reasons_table(verdicts: Sequence[Verdict]) -> str:
    """Severity, metric and the comparison's reason, one row per verdict."""
    rows = ["<tr><th>severity</th><th>metric</th><th>vs</th><th>reason</th></tr>"]
    rows += [
        f'<tr class="{v.severity.label}"><td>{severity_pill(v.severity)}</td>'
        f"<td><code>{esc(v.key)}</code></td><td>{esc(v.against)}</td>"
        f'<td class="reason">{esc(v.reason)}</td></tr>'
        for v in verdicts
    ]
    return "<table>" + "".join(rows) + "</table>"


def findings(results: Results, *, top: int = TOP_FINDINGS) -> str:
    """The worst slice of the ``top`` worst metrics, then every finding with its reason (folded)."""
    bad = [v for v in order(results.verdicts) if v.severity != Severity.PASS]
    if not bad:
        text = "Every metric is within its bounds." if results.verdicts else "Nothing was measured."
        return f'<h2 id="findings">Findings</h2><p class="muted">{esc(text)}</p>'
    show_against = len({v.against for v in results.verdicts}) > 1
    worst: dict[tuple[str, str], Verdict] = {}
    for v in bad:  # the worst slice of each metric, so the top rows name distinct metrics
        worst.setdefault((v.metric, v.against), v)
    shown = list(worst.values())[:top]
    return (
        f'<h2 id="findings">Findings: {len(bad)}; the worst slice of each metric</h2>'
        + verdict_table(shown, show_against=show_against)
        + f"<details><summary>All {len(bad)} findings with the reason of each</summary>"
        + reasons_table(bad)
        + "</details>"
    )


def underpowered_section(results: Results) -> str:
    """The verdicts whose critical bound is below their MDE, in words ("" when none)."""
    weak, _ = listed_underpowered(results.underpowered, limit=len(results.underpowered))
    if not weak:
        return ""
    several = len({v.against for v in results.verdicts}) > 1
    items = "".join(f"<li>{esc(power_line(p, several_refs=several))}</li>" for p in weak)
    return (
        f'<h2 id="underpowered">Underpowered: {len(weak)}</h2>'
        '<p class="muted">The critical bound is below the smallest degradation the test'
        " detects with the stated power: a regression of the critical size would probably"
        " pass.</p>"
        f"<ul>{items}</ul>"
    )


def plots_section(plots: Sequence[Plot]) -> str:
    """The figures, two per row on a wide screen."""
    if not plots:
        return ""
    figures = "".join(
        f'<figure id="plot-{esc(p.key)}"><img alt="{esc(p.title)}" src="{p.data_uri}">'
        f"<figcaption><b>{esc(p.title)}</b>{esc(p.caption)}</figcaption></figure>"
        for p in plots
    )
    return f'<h2 id="plots">Plots</h2><div class="plots">{figures}</div>'


def html_tiers_section(results: Results) -> str:
    """One table per tier, worst tier first."""
    tiers: dict[str, list[Verdict]] = {}
    for v in results.verdicts:
        tiers.setdefault(v.tier, []).append(v)
    if not tiers:
        return ""
    show_against = len({v.against for v in results.verdicts}) > 1
    ordered = sorted(tiers, key=lambda t: (-max(int(v.severity) for v in tiers[t]), t))
    parts = ['<h2 id="tiers">Results by tier</h2>']
    for tier in ordered:
        parts.append(
            f'<h3 id="tier-{esc(tier)}">{esc(tier)} — {esc(severity_counts(tiers[tier]))}</h3>'
        )
        parts.append(verdict_table(order(tiers[tier]), show_against=show_against))
    return "".join(parts)


def _value_text(value: Any) -> str:
    if isinstance(value, Mapping):
        return ", ".join(f"{k}={_value_text(v)}" for k, v in value.items() if v is not None)
    if isinstance(value, list | tuple):
        return ", ".join(_value_text(v) for v in value)
    return str(value)


def key_values(items: Iterable[tuple[str, Any]]) -> str:
    """A definition list of the non-empty items."""
    rows = [
        f"<dt>{esc(k)}</dt><dd>{esc(_value_text(v))}</dd>"
        for k, v in items
        if v not in (None, "", [], {}) and k not in HIDDEN_FIELDS
    ]
    return '<dl class="kv">' + "".join(rows) + "</dl>" if rows else '<p class="muted">-</p>'


def _candidate_items(candidate: Mapping[str, Any]) -> list[tuple[str, Any]]:
    first = [(k, candidate[k]) for k in CANDIDATE_FIELDS if k in candidate]
    rest = [(k, v) for k, v in candidate.items() if k not in CANDIDATE_FIELDS]
    return first + rest


def fingerprint(results: Results) -> Mapping[str, Any] | None:
    """The latency tier's hardware fingerprint, when the run has one."""
    for v in results.verdicts:
        found = v.details.get(MeasurementDetail.FINGERPRINT)
        if isinstance(found, Mapping):
            return found
    return None


def provenance_section(results: Results) -> str:
    """Candidate, baselines, environment, hardware fingerprint."""
    blocks = [
        f"<div><h3>Candidate</h3>{key_values(_candidate_items(results.candidate.to_document()))}</div>"
    ]
    for ref, described in results.baselines.items():
        prov = described.get("provenance") or {}
        items = [
            ("ref", ref),
            ("baseline", baseline_text(ref, described)),
            ("created", described.get("created")),
            ("path", described.get("path")),
            *_candidate_items(prov if isinstance(prov, Mapping) else {}),
        ]
        blocks.append(f"<div><h3>Baseline {esc(ref)}</h3>{key_values(items)}</div>")
    env = results.environment
    packages = env.get("packages") if isinstance(env.get("packages"), Mapping) else {}
    env_items = [(k, v) for k, v in env.items() if k != "packages"]
    env_items += [(f"{k} version", v) for k, v in (packages or {}).items()]
    blocks.append(f"<div><h3>Environment</h3>{key_values(env_items)}</div>")
    found = fingerprint(results)
    if found is not None:
        holder = next(
            v for v in results.verdicts if v.details.get(MeasurementDetail.FINGERPRINT) is found
        )
        hashes = [
            ("fingerprint hash", holder.details.get(MeasurementDetail.FINGERPRINT_HASH)),
            ("hardware hash", holder.details.get(MeasurementDetail.HARDWARE_HASH)),
        ]
        blocks.append(
            "<div><h3>Hardware fingerprint (latency)</h3>"
            f"{key_values([*found.items(), *hashes])}</div>"
        )
    return '<h2 id="provenance">Provenance</h2><div class="cols">' + "".join(blocks) + "</div>"


def _judge_example(example: Mapping[str, Any]) -> str:
    rows = "".join(
        f"<tr><td>{esc(j.get('name'))}</td><td>{esc(j.get('candidate_first'))}</td>"
        f"<td>{esc(j.get('candidate_second'))}</td><td>{esc(j.get('candidate_valid'))}</td>"
        f'<td>{esc(j.get("baseline_valid"))}</td><td class="reason">{esc(j.get("reason"))}</td></tr>'
        for j in example.get("judges", [])
    )
    outcome = example.get("outcome") or example.get("status")
    return (
        f"<details><summary>{esc(example.get('id'))}: {esc(outcome)}</summary>"
        f"<p><b>Prompt</b></p><pre>{esc(example.get('prompt'))}</pre>"
        '<div class="cols">'
        f"<div><p><b>Candidate</b></p><pre>{esc(example.get('candidate'))}</pre></div>"
        f"<div><p><b>Baseline</b></p><pre>{esc(example.get('baseline'))}</pre></div></div>"
        "<table><tr><th>judge</th><th>candidate as A</th><th>candidate as B</th>"
        "<th>candidate valid</th><th>baseline valid</th><th>reason</th></tr>"
        f"{rows}</table></details>"
    )


def _judge_panel(panel: JudgeSummary) -> str:
    head, *rest = summary_lines(panel)
    parts = [f"<p><b>{esc(head)}</b></p><ul>"]
    parts += [f"<li>{esc(line)}</li>" for line in rest]
    parts.append("</ul>")
    if panel.examples:
        parts.append(
            "<h3>Example pairs (candidate outcome; each judge's verdict in both orders)</h3>"
        )
        parts += [_judge_example(e) for e in panel.examples]
    return "".join(parts)


def judge_section(results: Results) -> str:
    """The judge panel: stability, Elo, counters per judge, and a few example pairs."""
    panels = results.judge
    if not panels:
        return ""
    return '<h2 id="judge">Judge panel</h2>' + "".join(_judge_panel(p) for p in panels)


#: The load table's rows: (label, per-sweep key, unit).
LOAD_ROWS = (
    ("share of the SLO used (mean over rates)", "slo_load", "", load_catalog.SLO_SPEEDUP),
    ("goodput at the SLO", "goodput", "req/s", load_catalog.GOODPUT_RATIO),
    ("max sustainable rate", "max_rate", "req/s", load_catalog.MAX_RATE_RATIO),
    (
        "output tokens/s at saturation",
        "output_tokens_per_s",
        "tok/s",
        load_catalog.OUTPUT_TOKENS_PER_S_RATIO,
    ),
)


def load_section(results: Results) -> str:
    """The load tier in one table: each build's mean over its sweeps, the ratio and its CI."""
    by_metric = {v.metric: v for v in results.verdicts if v.tier == "load" and v.slice is None}
    good = by_metric.get(load_catalog.GOODPUT_RATIO)
    per: Any = good.details.get(MeasurementDetail.PER_SWEEP) if good is not None else None
    if good is None or not isinstance(per, Mapping):
        return ""
    head = "<tr><th>at the SLO</th><th>baseline</th><th>candidate</th><th>ratio [CI]</th><th>verdict</th></tr>"
    rows = [head]
    for label, key, unit, metric in LOAD_ROWS:
        sides = []
        for side in ("baseline", "candidate"):
            values = [float(r[key]) for r in per.get(side, []) if r.get(key) is not None]
            sides.append(f"{sum(values) / len(values):.3g} {unit}".strip() if values else "-")
        v = by_metric.get(metric)
        ci = v.details.get(MeasurementDetail.RATIO_CI) if v is not None else None
        ratio = f"{v.value:.3g} [{ci[0]:.3g}, {ci[1]:.3g}]" if v is not None and ci else "-"
        pill = severity_pill(v.severity) if v is not None and v.threshold is not None else "-"
        rows.append(
            f'<tr><td>{esc(label)}</td><td class="num">{esc(sides[0])}</td>'
            f'<td class="num">{esc(sides[1])}</td><td class="num">{esc(ratio)}</td>'
            f"<td>{pill}</td></tr>"
        )
    slo: Any = good.details.get(MeasurementDetail.SLO, {})
    speed = by_metric.get(load_catalog.SLO_SPEEDUP)
    min_speedup = speed.details.get(MeasurementDetail.MIN_SPEEDUP) if speed is not None else None
    repeats = good.details.get(MeasurementDetail.REPEATS)
    knees = {
        side: [r.get("knee_rate") for r in per.get(side, [])] for side in ("baseline", "candidate")
    }
    caption = (
        f"SLO: TTFT p95 <= {slo.get('ttft_p95_ms')} ms, ITL p95 <= {slo.get('itl_p95_ms')} ms;"
        f" mean over {repeats} interleaved passes per build (the first"
        " row's ratio is baseline / candidate: above 1, the candidate is faster);"
        f" knees (offered req/s per sweep): baseline {knees['baseline']},"
        f" candidate {knees['candidate']}; min_speedup {min_speedup}."
    )
    return (
        '<h2 id="load">Served load (GuideLLM)</h2><table>'
        + "".join(rows)
        + f'</table><p class="muted">{esc(caption)}</p>'
    )


def notes_section(results: Results) -> str:
    """The run's notes (tier failures, errors)."""
    if not results.notes:
        return ""
    return '<h2 id="notes">Notes</h2>' + "".join(
        f'<p class="note">{esc(n)}</p>' for n in results.notes
    )


def _divergence_example(example: Mapping[str, Any]) -> str:
    return (
        f"<details><summary>{esc(heading(example))}</summary>"
        f"<p><b>Prompt</b></p><pre>{esc(example.get('prompt'))}</pre>"
        f"<p><b>Both answers, up to token {esc(example.get('position'))}</b></p>"
        f"<pre>{esc(example.get('common'))}</pre>"
        '<div class="cols">'
        f"<div><p><b>Baseline, from there</b></p><pre>{esc(example.get('baseline'))}</pre></div>"
        f"<div><p><b>Candidate, from there</b></p><pre>{esc(example.get('candidate'))}</pre></div>"
        "</div></details>"
    )


def divergences_section(results: Results) -> str:
    """The generation tier's worst divergences: the prompt, the shared start, the two answers
    side by side from where they part."""
    found = divergences(results)
    if not found:
        return ""
    parts = ['<h2 id="divergences">Generation: the worst divergences</h2>']
    for group in found:
        if len(found) > 1:
            parts.append(f"<h3>against {esc(group.against)}</h3>")
        parts += [_divergence_example(e) for e in group.examples]
    return "".join(parts)


def render_html(results: Results, *, drift: Sequence[Any] = (), title: str = "gate report") -> str:
    """The whole report as one HTML string."""
    word = headline(results)
    body = "".join(
        [
            banner(results),
            "<main>",
            notes_section(results),
            findings(results),
            underpowered_section(results),
            plots_section(all_plots(results.verdicts, drift)),
            load_section(results),
            judge_section(results),
            divergences_section(results),
            html_tiers_section(results),
            provenance_section(results),
            "</main>",
        ]
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}: {esc(word)} — {esc(candidate_text(results.candidate))}</title>"
        f"<style>{CSS}</style></head><body>{body}</body></html>\n"
    )

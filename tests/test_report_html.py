"""HTML report: self-contained, verdict banner, plots of what is present, renders in Chromium."""

from __future__ import annotations

import datetime
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gate.gating.drift import audit_drift
from gate.metrics.registry import all_metrics
from gate.report.html import render_html
from gate.report.outputs import ReportTargets, write_reports
from gate.report.plots import all_plots
from gate.report.results import Results
from gate.store.history import HistoryRecord
from tests import report_cases

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "check_html_report.py"


@pytest.fixture(scope="module")
def blocked() -> report_cases.Case:
    return report_cases.blocked()


def _drift() -> list:
    """A latency history whose e2e median jumps 30 % at run 9, audited by gate.gating.drift."""
    rng = np.random.default_rng(3)
    start = datetime.datetime(2025, 1, 6, 4, 17, tzinfo=datetime.timezone.utc)
    records = [
        HistoryRecord(
            time=start + datetime.timedelta(weeks=i),
            label=f"week {i}",
            fingerprint_hash="abc",
            metrics={"latency.e2e_p50": (0.10 if i < 8 else 0.13) * float(rng.lognormal(0, 0.01))},
        )
        for i in range(14)
    ]
    return audit_drift(records, all_metrics(), permutations=199)


def test_blocked_report_is_self_contained_with_banner_and_plots(
    blocked: report_cases.Case, tmp_path: Path
) -> None:
    path = tmp_path / "report.html"
    write_reports(blocked.results, ReportTargets(html=path), environ={}, drift=_drift())
    page = path.read_text()
    assert '<header class="banner block" id="verdict"><p class="word">BLOCKED</p>' in page
    assert "Critical: " in page and "fidelity.cga" in page
    # no URL the browser could fetch: only data URIs, and a CSP forbidding anything else
    assert not re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", page)
    assert "default-src 'none'" in page
    for key in ("cga", "kl", "flips", "latency", "throughput", "drift"):
        assert f'id="plot-{key}"' in page, key
    assert page.count('src="data:image/png;base64,') == 6
    for tier in ("fidelity", "accuracy", "latency"):
        assert f'id="tier-{tier}"' in page
    assert "Hardware fingerprint" in page and "Test CPU @ 2.0GHz" in page


def test_plots_skip_what_is_absent(blocked: report_cases.Case) -> None:
    results = Results.from_document(blocked.doc)
    fidelity_only = [v for v in results.verdicts if v.tier == "fidelity"]
    assert [p.key for p in all_plots(fidelity_only)] == ["cga", "kl"]
    assert all_plots([]) == []
    page = render_html(
        Results.from_document(dict(blocked.doc, metrics=[], verdict="block", exit_code=5))
    )
    assert "Nothing was measured." in page and 'id="plots"' not in page


def test_approved_banner_is_green() -> None:
    page = render_html(Results.from_document(report_cases.approved().doc))
    assert '<header class="banner ok" id="verdict"><p class="word">APPROVED</p>' in page
    assert "Critical:" not in page


def test_text_is_escaped(blocked: report_cases.Case) -> None:
    doc = dict(blocked.doc, notes=["<script>alert(1)</script>"])
    page = render_html(Results.from_document(doc))
    assert "<script>" not in page and "&lt;script&gt;" in page


@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which("chromium") is None,
    reason="Debian's chromium is not installed (apt-get install -y chromium)",
)
def test_renders_in_headless_chromium(blocked: report_cases.Case, tmp_path: Path) -> None:
    html, png = tmp_path / "report.html", tmp_path / "report.png"
    write_reports(blocked.results, ReportTargets(html=html), environ={}, drift=_drift())
    run = subprocess.run(
        [sys.executable, str(SCRIPT), str(html), "--screenshot", str(png)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert png.read_bytes().startswith(b"\x89PNG") and png.stat().st_size > 50_000
    # the checker does fail on a page that reaches outside
    bad = tmp_path / "bad.html"
    bad.write_text(
        html.read_text().replace("</main>", '<img src="https://example.com/x.png"></main>')
    )
    run = subprocess.run(
        [sys.executable, str(SCRIPT), str(bad)], capture_output=True, text=True, check=False
    )
    assert run.returncode == 1 and "external reference" in run.stderr

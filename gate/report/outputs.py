"""Write every requested report of a finished run from one results document.

The plugin (``gate run``) and ``gate compare`` build the results JSON document
(:func:`gate.report.results_json.build_results`) and hand it, with the paths
the user asked for, to :func:`write_reports`. Every report is made from the
document read back through :func:`results_from_document`, so the HTML,
markdown, JUnit and GitHub outputs show exactly what the JSON says.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from gate.errors import DataError
from gate.report.results_json import Results, verdict_from_dict, write_results
from gate.store.atomic import write_atomic


@dataclass(frozen=True)
class ReportTargets:
    """Where each report goes; ``None`` skips it."""

    json: Path | None = None
    html: Path | None = None
    junit: Path | None = None
    markdown: Path | None = None

    @property
    def any(self) -> bool:
        """Whether at least one file report was asked for."""
        return any(p is not None for p in (self.json, self.html, self.junit, self.markdown))


def results_from_document(doc: Mapping[str, Any]) -> Results:
    """A results document (the dict of ``build_results``) as a :class:`Results`."""
    try:
        return Results(
            verdict=str(doc["verdict"]),
            headline=str(doc.get("headline", "")),
            exit_code=int(doc["exit_code"]),
            verdicts=[verdict_from_dict(entry) for entry in doc["metrics"]],
            baseline=dict(doc.get("baseline") or {}),
            baselines={str(k): dict(v) for k, v in (doc.get("baselines") or {}).items()},
            candidate=dict(doc.get("candidate") or {}),
            environment=dict(doc.get("environment") or {}),
            notes=[str(n) for n in doc.get("notes") or []],
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise DataError(
            f"results document is missing {exc}", "build it with build_results"
        ) from None


def write_reports(
    doc: Mapping[str, Any],
    targets: ReportTargets,
    *,
    environ: Mapping[str, str] | None = None,
    stream: IO[str] | None = None,
    drift: Sequence[Any] = (),
) -> list[Path]:
    """Write the requested reports; returns the paths written.

    Also, when ``environ`` (default ``os.environ``) has ``GITHUB_ACTIONS=true``,
    prints the ``::error``/``::warning`` annotations to ``stream`` (default
    stdout) and appends the markdown summary to ``$GITHUB_STEP_SUMMARY``
    (:mod:`gate.report.github`). ``drift`` (audit :class:`~gate.gating.drift.MetricDrift`
    series) is plotted in the HTML report when given.
    """
    env = os.environ if environ is None else environ
    results = results_from_document(doc)
    written: list[Path] = []
    if targets.json is not None:
        write_results(targets.json, doc)
        written.append(targets.json)
    if targets.markdown is not None:
        from gate.report.github import artifacts_url
        from gate.report.markdown import render_markdown

        text = render_markdown(results, artifacts_url=artifacts_url(env))
        write_atomic(targets.markdown, text.encode())
        written.append(targets.markdown)
    if targets.junit is not None:
        from gate.report.junit import render_junit

        write_atomic(targets.junit, render_junit(results))
        written.append(targets.junit)
    if targets.html is not None:
        from gate.report.html import render_html

        write_atomic(targets.html, render_html(results, drift=drift).encode())
        written.append(targets.html)
    from gate.report.github import emit, in_github_actions

    if in_github_actions(env):
        emit(results, environ=env, stream=stream if stream is not None else sys.stdout)
    return written

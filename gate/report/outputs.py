"""Write every requested report of a finished run from one results document.

The plugin (``gate run``) and ``gate compare`` build a run's
:class:`~gate.report.results.Results` (:func:`gate.report.results_json.build_results`)
and hand them, with the paths the user asked for, to :func:`write_reports`.
Every report is made from the results as their JSON document reads back
(:meth:`Results.from_document` of :meth:`Results.to_document`), so the HTML,
markdown, JUnit and GitHub outputs show exactly what the JSON says.
"""

from __future__ import annotations

import base64
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import IO, Any

from gate.config_options import setting
from gate.errors import GateError
from gate.report.results import Results
from gate.store.atomic import write_atomic
from gate.store.measurements_file import dump_json
from gate.store.writable import check_writable, writing


@dataclass(frozen=True)
class ReportTargets:
    """Where each report goes; ``None`` skips it. Each field declares its options
    (``--json``, ``--gate-json``; :mod:`gate.config_options`)."""

    json: Path | None = setting(
        flag="--json",
        kind="file",
        help="Also write the results JSON here.",
        pytest_help="write the results JSON here",
    )
    html: Path | None = setting(
        flag="--html",
        kind="file",
        help="Also write the self-contained HTML report here.",
        pytest_help="write the self-contained HTML report here",
    )
    junit: Path | None = setting(
        flag="--junit",
        kind="file",
        help="Also write a JUnit XML report here (one test case per metric).",
        pytest_help="write the JUnit XML report here",
    )
    markdown: Path | None = setting(
        flag="--markdown",
        kind="file",
        help="Also write the markdown report (PR comment) here.",
        pytest_help="write the markdown report (PR comment) here",
    )
    #: What the run measured, as the measurements file ``gate compare`` re-gates (``gate
    #: run --measurements``; written by the session, not by :func:`write_reports`).
    measurements: Path | None = setting(
        flag="--measurements",
        kind="file",
        help="Also write what the run measured here: a measurements file that `gate compare` "
        "re-gates against another baseline or thresholds file without measuring again.",
        pytest_help="run mode: write what the run measured here (a measurements file gate "
        "compare reads)",
    )

    @property
    def any(self) -> bool:
        """Whether at least one report of the results was asked for."""
        return any(p is not None for p in (self.json, self.html, self.junit, self.markdown))


def report_files(targets: ReportTargets) -> list[tuple[str, Path]]:
    """``(kind, path)`` of every report file ``targets`` asks for (``("json", out.json)``)."""
    named = ((item.name, getattr(targets, item.name)) for item in fields(targets))
    return [(kind, path) for kind, path in named if path is not None]


def check_targets(targets: ReportTargets, prefix: str = "--") -> None:
    """Every report file of ``targets`` can be written (else UsageError, exit 4).

    ``prefix`` makes the option names of messages (``--json``; the plugin's ``--gate-json``).
    """
    for name, path in report_files(targets):
        check_writable(path, prefix + name)


def write_reports(
    results: Results,
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

    A report that cannot be written does not stop the others: every one is
    tried, then the first failure is raised as one :class:`~gate.errors.UsageError`
    (exit 4) naming its path and the operating system's reason.
    """
    env = os.environ if environ is None else environ
    doc = results.to_document()
    shown = Results.from_document(doc)
    written: list[Path] = []
    failed: list[GateError] = []
    for what, path, render in _report_files(doc, shown, targets, env, drift):
        data = render()  # a rendering problem is not the path's fault: it is raised as it is
        try:
            with writing(what, path):
                write_atomic(path, data)
        except GateError as exc:
            failed.append(exc)
            continue
        written.append(path)
    from gate.report.github import emit, in_github_actions

    if in_github_actions(env):
        try:
            emit(shown, environ=env, stream=stream if stream is not None else sys.stdout)
        except GateError as exc:
            failed.append(exc)
    if failed:
        raise _first_failure(failed)
    return written


def _report_files(
    doc: Mapping[str, Any],
    results: Results,
    targets: ReportTargets,
    env: Mapping[str, str],
    drift: Sequence[Any],
) -> list[tuple[str, Path, Callable[[], bytes]]]:
    """``(what, path, render)`` of each requested report file, in the order they are written."""

    def json() -> bytes:
        return dump_json(dict(doc))

    def markdown() -> bytes:
        from gate.report.github import artifacts_url
        from gate.report.markdown import render_markdown

        return render_markdown(results, artifacts_url=artifacts_url(env)).encode()

    def junit() -> bytes:
        from gate.report.junit import render_junit

        return render_junit(results)

    def html() -> bytes:
        from gate.report.html import render_html

        return render_html(results, drift=drift).encode()

    files: list[tuple[str, Path | None, Callable[[], bytes]]] = [
        ("the results JSON", targets.json, json),
        ("the markdown report", targets.markdown, markdown),
        ("the JUnit report", targets.junit, junit),
        ("the HTML report", targets.html, html),
    ]
    files += _load_plot_file(results, targets)
    return [(what, path, render) for what, path, render in files if path is not None]


def load_plot_path(targets: ReportTargets) -> Path | None:
    """Where the load tier's plot goes as a PNG: beside the HTML report, else the JSON
    (``out/report.html`` -> ``out/report.load.png``)."""
    beside = targets.html or targets.json
    return beside.with_name(beside.stem + ".load.png") if beside is not None else None


def _load_plot_file(
    results: Results, targets: ReportTargets
) -> list[tuple[str, Path | None, Callable[[], bytes]]]:
    """The load plot's PNG, when the run has a load tier and a file report was asked for."""
    from gate.report.plots import load_curves

    path = load_plot_path(targets)
    plot = load_curves(results.verdicts) if path is not None else None
    if plot is None:
        return []
    data = base64.b64decode(plot.data_uri.split(",", 1)[1])
    return [("the load plot", path, lambda: data)]


def _first_failure(failed: Sequence[GateError]) -> GateError:
    """The first failed write, noting how many others failed too."""
    first = failed[0]
    if len(failed) == 1:
        return first
    more = f"; {len(failed) - 1} other report(s) not written either"
    return type(first)(first.message + more, first.hint)

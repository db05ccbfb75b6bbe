"""GitHub Actions output: annotations and the job's step summary.

When ``GITHUB_ACTIONS=true`` a run also

* prints one ``::error`` workflow command per critical verdict and one
  ``::warning`` per warning — at most :data:`MAX_ANNOTATIONS` of each, worst
  first (the ordering of :func:`gate.report.console.order`) — so the findings
  show on the pull request's checks page; and one ``::warning`` per package
  measured at another version than the baseline's (version drift);
* appends the markdown report (:mod:`gate.report.markdown`) to the file named
  by ``GITHUB_STEP_SUMMARY``, with a link to the run's artifacts built from
  ``GITHUB_SERVER_URL``, ``GITHUB_REPOSITORY`` and ``GITHUB_RUN_ID``.

Workflow-command escaping (GitHub's "workflow commands" documentation): in
the message, ``%``, ``\\r`` and ``\\n`` become ``%25``, ``%0D`` and ``%0A``; in a
property value ``:`` and ``,`` are escaped as well (``%3A``, ``%2C``), since
they delimit properties.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import IO

from gate.gating.verdict import Severity, Verdict, VersionDrift
from gate.report.console import fmt_bound, fmt_ci, fmt_delta, fmt_number, order
from gate.report.markdown import render_markdown
from gate.report.results import Results

#: At most this many ``::error`` and this many ``::warning`` lines per run.
MAX_ANNOTATIONS = 10


def in_github_actions(environ: Mapping[str, str]) -> bool:
    """Whether the process runs inside a GitHub Actions job."""
    return environ.get("GITHUB_ACTIONS", "").lower() == "true"


def escape_data(text: str) -> str:
    """Escape the message of a workflow command."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """Escape a property value (``title=...``) of a workflow command."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def artifacts_url(environ: Mapping[str, str]) -> str | None:
    """``$GITHUB_SERVER_URL/$GITHUB_REPOSITORY/actions/runs/$GITHUB_RUN_ID`` (``#artifacts``).

    ``None`` unless all three variables are set.
    """
    server = environ.get("GITHUB_SERVER_URL", "").rstrip("/")
    repo = environ.get("GITHUB_REPOSITORY", "")
    run_id = environ.get("GITHUB_RUN_ID", "")
    if not (server and repo and run_id):
        return None
    return f"{server}/{repo}/actions/runs/{run_id}#artifacts"


def annotation(verdict: Verdict) -> str:
    """The workflow command of one warn/critical verdict."""
    command = "error" if verdict.severity == Severity.CRITICAL else "warning"
    title = f"gate {verdict.severity.name}: {verdict.key} vs {verdict.against}"
    message = (
        f"{verdict.metric}{f' [{verdict.slice}]' if verdict.slice else ''}: "
        f"{fmt_number(verdict.value)} vs {fmt_number(verdict.baseline_value)} "
        f"(delta {fmt_delta(verdict)}, bound w/c {fmt_bound(verdict.threshold)}, "
        f"CI {fmt_ci(verdict.ci)}, n={verdict.n})\n{verdict.reason}"
    )
    return f"::{command} title={escape_property(title)}::{escape_data(message)}"


def annotation_lines(verdicts: Sequence[Verdict], *, limit: int = MAX_ANNOTATIONS) -> list[str]:
    """Errors then warnings, each worst first and capped at ``limit``."""
    ranked = order(verdicts)
    out: list[str] = []
    for severity in (Severity.CRITICAL, Severity.WARN):
        out += [annotation(v) for v in ranked if v.severity == severity][:limit]
    return out


def append_step_summary(path: str, text: str) -> None:
    """Append ``text`` to the step summary file (GitHub concatenates every append);
    a failed write is a one-line UsageError (exit 4)."""
    from gate.store.writable import writing

    with (
        writing(
            "the step summary $GITHUB_STEP_SUMMARY",
            path,
            "set GITHUB_STEP_SUMMARY to a file in a writable directory, or unset it",
        ),
        open(path, "a", encoding="utf-8") as handle,
    ):
        handle.write(text if text.endswith("\n") else text + "\n")


def drift_annotation(drift: VersionDrift) -> str:
    """The ``::warning`` of one package measured at another version than the baseline's."""
    title = f"gate WARN: {drift.package} version vs {drift.against}"
    return f"::warning title={escape_property(title)}::{escape_data(drift.message)}"


def emit(results: Results, *, environ: Mapping[str, str], stream: IO[str]) -> None:
    """Print the annotations to ``stream``; append the summary when the variable is set."""
    lines = annotation_lines(results.verdicts)
    lines += [drift_annotation(d) for d in results.version_drift][:MAX_ANNOTATIONS]
    for line in lines:
        stream.write(line + "\n")
    stream.flush()
    summary = environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        append_step_summary(summary, render_markdown(results, artifacts_url=artifacts_url(environ)))

"""Exit codes and the exceptions that carry them.

The numbers are pytest's (``pytest.ExitCode``) so that ``gate`` and the pytest
plugin agree on what a run ended with. Only :mod:`gate.cli` turns a
:class:`GateError` into the command's exit code; everything else raises, but
for the parts of a command that end alone while the rest goes on (a pytest
session, one candidate of several: docs/architecture.md "Layers").
"""

from __future__ import annotations

import enum
from collections.abc import Iterable


class ExitCode(enum.IntEnum):
    """How a gate run ended; the process exit status."""

    #: Every metric passed (warnings allowed unless ``--strict``).
    OK = 0
    #: A metric regressed past its critical bound (or a warning under ``--strict``).
    BLOCKED = 1
    #: The run was interrupted (Ctrl-C, SIGTERM).
    INTERRUPTED = 2
    #: An internal error, or a model that could not be loaded or run.
    INTERNAL_ERROR = 3
    #: Bad usage, configuration, baseline or data: the user must fix an input.
    USAGE_ERROR = 4
    #: Nothing was measured: no metric to compare.
    NO_MEASUREMENTS = 5


#: What each exit code means, as the last line of every command names it.
EXIT_MEANINGS: dict[ExitCode, str] = {
    ExitCode.OK: "APPROVED",
    ExitCode.BLOCKED: "BLOCKED",
    ExitCode.INTERRUPTED: "INTERRUPTED",
    ExitCode.INTERNAL_ERROR: "ERROR (internal or model load)",
    ExitCode.USAGE_ERROR: "ERROR (input)",
    ExitCode.NO_MEASUREMENTS: "NOTHING MEASURED",
}


def decided(code: int) -> bool:
    """Whether a run that ended with ``code`` reached a verdict: approved (0) or blocked (1),
    not interrupted, failed or empty. The one place this is asked (a report file that could
    not be written outranks a verdict, never another failure; a calibration run or a demo
    candidate that reached no verdict stops them)."""
    return code in (ExitCode.OK, ExitCode.BLOCKED)


#: Exit codes from least to most severe: an error that stopped a candidate from
#: being judged outranks a regression, and an interrupt ends the whole run.
SEVERITY_ORDER: tuple[ExitCode, ...] = (
    ExitCode.OK,
    ExitCode.BLOCKED,
    ExitCode.NO_MEASUREMENTS,
    ExitCode.USAGE_ERROR,
    ExitCode.INTERNAL_ERROR,
    ExitCode.INTERRUPTED,
)


def worst_exit(codes: Iterable[int]) -> ExitCode:
    """The most severe exit code by :data:`SEVERITY_ORDER` (``OK`` for none); a code
    that is no :class:`ExitCode` counts as internal."""
    worst = ExitCode.OK
    for raw in codes:
        try:
            code = ExitCode(raw)
        except ValueError:
            code = ExitCode.INTERNAL_ERROR
        if SEVERITY_ORDER.index(code) > SEVERITY_ORDER.index(worst):
            worst = code
    return worst


def exit_meaning(code: int) -> str:
    """The outcome ``code`` stands for (``"ERROR (input)"`` for 4); unknown codes are internal."""
    try:
        return EXIT_MEANINGS[ExitCode(code)]
    except ValueError:
        return EXIT_MEANINGS[ExitCode.INTERNAL_ERROR]


def exit_label(code: int, headline: str | None = None) -> str:
    """``headline`` (default :func:`exit_meaning`) with the code: ``"BLOCKED (exit 1)"``,
    ``"ERROR (input, exit 4)"`` (a parenthesised qualifier takes the code inside it)."""
    word = headline if headline is not None else exit_meaning(code)
    if word.endswith(")"):
        return f"{word[:-1]}, exit {code})"
    return f"{word} (exit {code})"


class GateError(Exception):
    """Base of every error the gate reports as one line.

    ``message`` names the problem; ``hint`` says how to fix it. Subclasses fix
    the exit code; :func:`gate.cli.main` is the one place that converts (for the command).
    """

    exit_code: ExitCode = ExitCode.INTERNAL_ERROR

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def format_line(self) -> str:
        """The single line printed for the user."""
        return f"{self.message} ({self.hint})" if self.hint else self.message


class UsageError(GateError):
    """Bad command-line usage or arguments."""

    exit_code = ExitCode.USAGE_ERROR


class ConfigError(GateError):
    """A bad ``thresholds.toml`` or run config: unknown key, bad bound, unknown metric."""

    exit_code = ExitCode.USAGE_ERROR


class BaselineError(GateError):
    """A missing, corrupt, newer-schema or incompatible baseline or reference pack."""

    exit_code = ExitCode.USAGE_ERROR


class DataError(GateError):
    """Bad input data: NaN measurements, empty prompt set, malformed records."""

    exit_code = ExitCode.USAGE_ERROR


class ModelLoadError(GateError):
    """A model that cannot be found, loaded or run."""

    exit_code = ExitCode.INTERNAL_ERROR


class NothingMeasuredError(GateError):
    """The run produced no measurement to compare."""

    exit_code = ExitCode.NO_MEASUREMENTS

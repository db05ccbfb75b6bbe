"""Exit codes and the exceptions that carry them.

The numbers are pytest's (``pytest.ExitCode``) so that ``gate`` and the pytest
plugin agree on what a run ended with. Only :mod:`gate.cli` turns a
:class:`GateError` into a process exit code; everything else raises.
"""

from __future__ import annotations

import enum


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


class GateError(Exception):
    """Base of every error the gate reports as one line.

    ``message`` names the problem; ``hint`` says how to fix it. Subclasses fix
    the exit code; :func:`gate.cli.main` is the one place that converts.
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

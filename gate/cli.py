"""The ``gate`` command line: the only place an exception becomes an exit code.

Each command lives in a small module under :mod:`gate.commands`; this module
assembles them into one click group and, in :func:`main`, converts
:class:`~gate.errors.GateError` (one line, no traceback), interrupts and
unexpected errors into the exit codes of :class:`~gate.errors.ExitCode`.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Sequence

import click

from gate import __version__
from gate.commands.audit import audit
from gate.commands.baseline import baseline
from gate.commands.compare import compare
from gate.commands.demo import demo
from gate.commands.import_ import import_
from gate.commands.run import run
from gate.errors import ExitCode, GateError

#: Every top-level command, in ``--help`` order.
COMMANDS: tuple[click.Command, ...] = (run, demo, compare, baseline, import_, audit)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="gate")
def cli() -> None:
    """Regression gate for compressed LLM builds.

    Measures a candidate build (quantized, pruned, ...) in tiers — accuracy,
    capability probes, fidelity to the baseline, latency/memory — compares it
    with a versioned baseline and thresholds.toml, prints a severity report and
    exits nonzero on a regression.

    \b
    Exit codes: 0 pass, 1 blocked by a regression, 2 interrupted,
    3 internal or model-load error, 4 usage/config/baseline/data error,
    5 nothing measured.
    """


for _command in COMMANDS:
    cli.add_command(_command)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns (and exits with) an :class:`ExitCode`."""
    try:
        result = cli.main(args=list(argv) if argv is not None else None, standalone_mode=False)
        code = int(result) if isinstance(result, int) else int(ExitCode.OK)
    except GateError as exc:
        click.echo(f"gate: error: {exc.format_line()}", err=True)
        code = int(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("gate: interrupted", err=True)
        code = int(ExitCode.INTERRUPTED)
    except KeyboardInterrupt:
        click.echo("gate: interrupted", err=True)
        code = int(ExitCode.INTERRUPTED)
    except click.exceptions.Exit as exc:
        code = int(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        code = int(ExitCode.USAGE_ERROR)
    except Exception as exc:
        click.echo(f"gate: internal error: {type(exc).__name__}: {exc}", err=True)
        click.echo("  (set GATE_DEBUG=1 for the traceback; please report it)", err=True)
        if _debug():
            traceback.print_exc()
        code = int(ExitCode.INTERNAL_ERROR)
    if argv is None:
        sys.exit(code)
    return code


def _debug() -> bool:
    import os

    return os.environ.get("GATE_DEBUG", "") not in ("", "0")


if __name__ == "__main__":  # pragma: no cover
    main()

"""Click options shared by several commands, declared once.

Every command that takes ``--thresholds``, ``--strict``, ``--json``, ``--store``,
``--color`` or the report files (``--html``, ``--junit``, ``--markdown``) gets
the option from here, so its name, parameter name, default and help text are
the same in every ``gate <command> --help``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
from click.core import ParameterSource

from gate.errors import UsageError
from gate.models.load_settings import LoadSettings, load_setting_options
from gate.models.spec import check_device_name
from gate.session.options import DEFAULT_STORE
from gate.tiers.spec import DEFAULT_TIERS, tiers_help

F = TypeVar("F", bound=Callable[..., Any])

#: Help of ``--tiers`` (``gate run``, ``gate baseline record``), from the tier specs.
TIERS_HELP = (
    f"Comma-separated tiers from: {tiers_help()} "
    f"(default: {','.join(DEFAULT_TIERS)}, those with a suite)."
)


def file_option(*decls: str, **attrs: Any) -> Callable[[F], F]:
    """An option naming a file (not a directory), passed to the command as a :class:`Path`."""
    return click.option(*decls, type=click.Path(dir_okay=False, path_type=Path), **attrs)


def dir_option(*decls: str, **attrs: Any) -> Callable[[F], F]:
    """An option naming a directory (not a file), passed to the command as a :class:`Path`."""
    return click.option(*decls, type=click.Path(file_okay=False, path_type=Path), **attrs)


json_option = file_option("--json", "json_out", help="Also write the results JSON here.")
thresholds_option = file_option(
    "--thresholds",
    help="thresholds.toml (default: ./thresholds.toml, else the packaged defaults).",
)
strict_option = click.option(
    "--strict",
    is_flag=True,
    help="Treat warnings (underpowered verdicts included) as failures (exit 1).",
)
store_option = dir_option(
    "--store",
    default=DEFAULT_STORE,
    envvar="GATE_STORE",
    show_default=True,
    help="Baseline store directory (env GATE_STORE).",
)
color_option = click.option(
    "--color/--no-color",
    default=None,
    help="Force colour on or off (default: colour only on a terminal).",
)


def report_options(command: F) -> F:
    """Options ``--html``, ``--junit``, ``--markdown`` (parameters ``<name>_out``)."""
    for name, text in reversed(
        (
            ("html", "Also write the self-contained HTML report here."),
            ("junit", "Also write a JUnit XML report here (one test case per metric)."),
            ("markdown", "Also write the markdown report (PR comment) here."),
        )
    ):
        command = file_option(f"--{name}", f"{name}_out", help=text)(command)
    return command


def model_trust_options(command: F) -> F:
    """Options ``--allow-pickle`` and ``--allow-incomplete-weights`` (where a model is named)."""
    command = click.option(
        "--allow-incomplete-weights",
        is_flag=True,
        help="Measure a model whose weights do not match its config (missing tensors freshly "
        "initialized; refused by default, exit 3).",
    )(command)
    return click.option(
        "--allow-pickle",
        is_flag=True,
        help="Load a pickle-only checkpoint (.bin/.pt runs code at load: trusted files only).",
    )(command)


def load_options(command: F) -> F:
    """Options ``--device``, ``--dtype``, ``--trust-remote-code`` (parameters named as the
    fields of :class:`~gate.models.load_settings.LoadSettings`, from whose declaration they
    come; read back with :func:`load_settings`)."""
    for name, option in reversed(load_setting_options()):
        if option.kind == "flag":
            command = click.option(option.flag, name, is_flag=True, default=None, help=option.help)(
                command
            )
        elif option.kind == "choice":
            command = click.option(
                option.flag, name, type=click.Choice(option.choices), help=option.help
            )(command)
        else:
            command = click.option(option.flag, name, metavar="DEVICE", help=option.help)(command)
    return command


def load_settings(
    device: str | None, dtype: str | None, trust_remote_code: bool | None
) -> LoadSettings:
    """The :class:`~gate.models.load_settings.LoadSettings` the command line gives (a bad
    ``--device`` is a one-line :class:`~gate.errors.UsageError`, exit 4)."""
    if device is not None:
        try:
            check_device_name(device)
        except ValueError:
            raise UsageError(
                f"unknown --device {device!r}", "pass --device auto, cpu, cuda or cuda:N"
            ) from None
    return LoadSettings(device=device, dtype=dtype, trust_remote_code=trust_remote_code or None)


def explicit_store(store: Path) -> Path | None:
    """``--store`` when the user gave it (flag or ``$GATE_STORE``), else ``None``."""
    source = click.get_current_context().get_parameter_source("store")
    return store if source in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT) else None

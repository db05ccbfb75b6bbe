"""Click options shared by several commands, declared once.

Every command that takes ``--thresholds``, ``--strict``, ``--json``, ``--store``,
``--color`` or the report files (``--html``, ``--junit``, ``--markdown``) gets
the option from here, so its name, parameter name, default and help text are
the same in every ``gate <command> --help``.

The options of a declared setting (:mod:`gate.config_options`: the load, engine
and report settings) are rendered by one function, :func:`click_option`; a
command takes such a group whole: :func:`collect_options` hands its callback one typed
object (``load: LoadSettings``, ``engine: EngineSettings | None``,
``reports: ReportTargets``) built once from the group's options.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
from click.core import ParameterSource

from gate.config_options import (
    OptionKind,
    SettingOption,
    option_of,
    setting_default,
    setting_options,
)
from gate.engines.settings import EngineSettings
from gate.errors import UsageError
from gate.models.load_settings import LoadSettings, load_setting_names
from gate.models.model_spec import check_device_name
from gate.report.outputs import ReportTargets
from gate.session.options import DEFAULT_STORE, SessionOptions
from gate.tiers.tier_spec import DEFAULT_TIERS, tiers_help

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


#: The click type of each kind of declared setting (``flag``, ``choice``, ``device``: below).
_CLICK_TYPES: dict[OptionKind, Any] = {
    "text": str,
    "texts": str,
    "count": click.IntRange(min=1),
    "seconds": click.FloatRange(min=0, min_open=True),
    "file": click.Path(dir_okay=False, path_type=Path),
    "dir": click.Path(file_okay=False, path_type=Path),
}


def click_option(spec: SettingOption, param: str, **extra: Any) -> Callable[[F], F]:
    """The click option of a declared setting (parameter ``param``): the one click renderer.

    A switch is given or not (``None``: not given), a choice is one of its values, a
    device name is text checked by :func:`load_settings`, a repeatable text is given once
    per value; every other kind is typed by :data:`_CLICK_TYPES`. ``extra`` are the
    click attributes a command adds to it (``metavar``, ``envvar``, ``show_default``).
    """
    attrs: dict[str, Any] = {"help": spec.help}
    if spec.kind == "flag":
        attrs.update(is_flag=True, default=None)
    elif spec.kind == "choice":
        attrs["type"] = click.Choice(spec.choices)
    elif spec.kind == "device":
        attrs["metavar"] = "DEVICE"
    else:
        attrs.update(type=_CLICK_TYPES[spec.kind], multiple=spec.kind == "texts")
    attrs.update(extra)
    return click.option(spec.flag, param, **attrs)


def session_option(name: str, help: str, **extra: Any) -> Callable[[F], F]:
    """The click option of the session setting ``name`` (a
    :class:`~gate.session.options.SessionOptions` field), worded by its command: the flag,
    the kind and the default are the declaration's (a switch's default is the field's
    ``False``), the help is the command's own (``gate run --recipe`` and ``gate baseline
    record --recipe`` say what the recipe does in each)."""
    from dataclasses import replace

    spec = option_of(SessionOptions, name)
    if spec.kind == "flag":
        extra.setdefault("default", setting_default(SessionOptions, name))
    return click_option(replace(spec, help=help), name, **extra)


def settings_options(
    cls: type, names: tuple[str, ...] | None = None, suffix: str = ""
) -> Callable[[F], F]:
    """The click options of ``cls``'s declared settings (those of ``names``, in that order;
    default: all, in field order), parameters named as the fields + ``suffix``."""
    chosen = names or tuple(name for name, _ in setting_options(cls))

    def decorate(command: F) -> F:
        for name in reversed(chosen):
            command = click_option(option_of(cls, name), name + suffix)(command)
        return command

    return decorate


def collect_options(
    param: str, names: tuple[str, ...], build: Callable[..., Any], keep: tuple[str, ...] = ()
) -> Callable[[F], F]:
    """Hand a click command's callback ``param=build(**given)`` for the options ``names``
    (and ``keep``, which ``build`` reads and the callback still takes).

    Put it right below ``@click.command``: the command keeps its options (and its
    ``--help``), and its body receives the group as one typed object built once.
    """

    def decorate(command: F) -> F:
        @functools.wraps(command)
        def collected(*args: Any, **kwargs: Any) -> Any:
            given = {name: kwargs.pop(name) for name in names}
            given.update({name: kwargs[name] for name in keep})
            return command(*args, **{param: build(**given)}, **kwargs)

        return collected  # type: ignore[return-value]

    return decorate


#: The parameters of the report options (``--json`` is ``json_out``).
REPORT_PARAMS = tuple(name + "_out" for name, _ in setting_options(ReportTargets))


def report_targets(**given: Path | None) -> ReportTargets:
    """The :class:`~gate.report.outputs.ReportTargets` of the report options given
    (parameters ``<name>_out``; those a command lacks are not given)."""
    return ReportTargets(**{name.removesuffix("_out"): path for name, path in given.items()})


def collect_reports(*names: str) -> Callable[[F], F]:
    """``reports: ReportTargets`` from the report options ``names`` (``json``, ``html``...)."""
    return collect_options("reports", tuple(name + "_out" for name in names), report_targets)


json_option = settings_options(ReportTargets, ("json",), "_out")
thresholds_option = session_option(
    "thresholds",
    help="thresholds.toml (default: ./thresholds.toml, else the packaged defaults).",
)
strict_option = session_option(
    "strict",
    help="Treat warnings (underpowered verdicts included) as failures (exit 1).",
)
store_option = session_option(
    "store",
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
    return settings_options(ReportTargets, ("html", "junit", "markdown"), "_out")(command)


#: ``--measurements`` of ``gate run`` (parameter ``measurements_out``).
measurements_option = settings_options(ReportTargets, ("measurements",), "_out")


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
    return settings_options(LoadSettings)(command)


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


#: ``load: LoadSettings`` from the load options (:func:`load_options`).
collect_load = collect_options("load", load_setting_names(), load_settings)


def engine_options(command: F) -> F:
    """The serving-engine options (docs/serving.md), one per field of
    :class:`~gate.engines.settings.EngineSettings`, keyword-named as the field."""
    return settings_options(EngineSettings)(command)


def engine_settings(**given: Any) -> EngineSettings | None:
    """The engine the command line names (``None``: none); the one reader of engine options
    (:func:`gate.engines.settings.engine_from_options`)."""
    from gate.engines.settings import engine_from_options

    return engine_from_options(given)


#: ``engine: EngineSettings | None`` from the engine options (:func:`engine_options`).
collect_engine = collect_options(
    "engine", tuple(name for name, _ in setting_options(EngineSettings)), engine_settings
)


def explicit_store(store: Path) -> Path | None:
    """``--store`` when the user gave it (flag or ``$GATE_STORE``), else ``None``."""
    source = click.get_current_context().get_parameter_source("store")
    return store if source in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT) else None

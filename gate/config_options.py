"""How a setting is given by a user, declared once per setting: :class:`SettingOption`.

A settings class (:class:`~gate.models.load_settings.LoadSettings`,
:class:`~gate.engines.settings.EngineSettings`,
:class:`~gate.session.options.SessionOptions`,
:class:`~gate.report.outputs.ReportTargets`) declares each field with
:func:`setting`, whose metadata is the field's :class:`SettingOption`. From that
one declaration come, each by one renderer,

* the click option of the commands (:func:`gate.commands.options.setting_options`);
* the ``--gate-*`` pytest option of the suites and its one reading
  (:mod:`gate.session.flags`);
* the ``gate.toml`` key (the field name: :func:`toml_keys`; the tables are read
  by :func:`gate.config.build_dataclass`).

The field's own default is the setting's one default. This module imports
nothing of the package and no third-party library: every layer may declare
settings with it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

#: How a setting's value is given: a switch, text, repeatable text (one value per
#: replica, or per ref), a text from a fixed list, a device name, a count (int >= 1),
#: seconds (float > 0), a file, a directory.
OptionKind = Literal["flag", "text", "texts", "choice", "device", "count", "seconds", "file", "dir"]
#: The kinds whose value is a path.
PATH_KINDS: frozenset[OptionKind] = frozenset({"file", "dir"})
#: Key of a field's :class:`SettingOption` in its ``dataclasses.field`` metadata.
_OPTION = "gate.config_options.option"


@dataclass(frozen=True)
class SettingOption:
    """How one setting is given: its command option, its pytest option, its help."""

    #: The command option (``--device``); the pytest option is ``--gate-`` + the rest.
    flag: str
    kind: OptionKind
    #: Help text of the command option.
    help: str
    #: Help text of the pytest option (empty: :attr:`help`).
    pytest_help: str = ""
    #: The pytest option when it is not ``--gate-`` + the command option's name.
    pytest_name: str = ""
    #: The values a ``choice`` takes.
    choices: tuple[str, ...] = ()
    #: ``(tier, key)``: the tier setting this option overrides when given.
    setting: tuple[str, str] | None = None
    #: The value a session uses when the option is not given (``None``: nothing); the
    #: field's own default stays "not given" so that a run config may fill it.
    fallback: str | None = None

    @property
    def pytest_flag(self) -> str:
        """The pytest option of the suites (``--gate-device``)."""
        return self.pytest_name or "--gate-" + self.flag.removeprefix("--")

    @property
    def pytest_text(self) -> str:
        """The help of the pytest option."""
        return self.pytest_help or self.help


@dataclass(frozen=True)
class DeclaredSetting:
    """One declared setting of a settings class: its field name and its option."""

    name: str
    spec: SettingOption

    @property
    def kind(self) -> OptionKind:
        """How its value is given."""
        return self.spec.kind

    @property
    def option(self) -> str:
        """Its pytest option (``--gate-device``)."""
        return self.spec.pytest_flag

    @property
    def setting(self) -> tuple[str, str] | None:
        """``(tier, key)``: the tier setting it overrides when given."""
        return self.spec.setting


def setting(default: Any = None, *, default_factory: Any = None, **option: Any) -> Any:
    """A settings-class field with ``default`` (its one default) whose metadata is the
    :class:`SettingOption` of ``option`` (keyword arguments of :class:`SettingOption`)."""
    metadata = {_OPTION: SettingOption(**option)}
    if default_factory is not None:
        return field(default_factory=default_factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def setting_options(cls: type) -> tuple[tuple[str, SettingOption], ...]:
    """``(field name, option)`` of every declared setting of ``cls``, in field order."""
    return tuple(
        (item.name, item.metadata[_OPTION])
        for item in dataclasses.fields(cls)
        if _OPTION in item.metadata
    )


def declared_settings(cls: type) -> tuple[DeclaredSetting, ...]:
    """Every declared setting of ``cls``, in field order."""
    return tuple(DeclaredSetting(name, option) for name, option in setting_options(cls))


def option_of(cls: type, name: str) -> SettingOption:
    """The :class:`SettingOption` of ``cls``'s field ``name`` (``KeyError``: not a setting)."""
    for field_name, option in setting_options(cls):
        if field_name == name:
            return option
    raise KeyError(f"{name!r} is not a setting of {cls.__name__}")


def setting_default(cls: type, name: str) -> Any:
    """The one default of ``cls``'s field ``name``."""
    for item in dataclasses.fields(cls):
        if item.name == name:
            if item.default_factory is not dataclasses.MISSING:
                return item.default_factory()
            return item.default
    raise KeyError(f"{name!r} is not a field of {cls.__name__}")


def toml_keys(cls: type) -> tuple[str, ...]:
    """The ``gate.toml`` keys of ``cls``'s declared settings: their field names."""
    return tuple(name for name, _ in setting_options(cls))


__all__ = [
    "PATH_KINDS",
    "DeclaredSetting",
    "OptionKind",
    "SettingOption",
    "declared_settings",
    "option_of",
    "setting",
    "setting_default",
    "setting_options",
    "toml_keys",
]

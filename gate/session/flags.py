"""The ``--gate-*`` pytest options, for people who run the tier suites with pytest directly.

``gate run`` and friends hand the session a typed
:class:`~gate.session.request.SessionRequest` and build no ``--gate-*``
strings. A plain ``pytest suites/ --gate-model demo ...`` gives the same
session through the options declared here, which come from the declarations
of the typed objects: the rows of :class:`~gate.session.options.SessionOptions`
(:data:`~gate.session.options.SESSION_FIELDS`), the report files
(:data:`REPORT_ROWS`), the load settings
(:func:`~gate.models.load_settings.load_setting_options`) and the engine settings
(:func:`~gate.engines.settings.engine_setting_options`). They are read ONCE, at
this edge, by :func:`request_from_pytest`.

This module imports neither pytest nor a model library.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from gate.config_options import PATH_KINDS, DeclaredSetting, declared_settings
from gate.engines.settings import EngineSettings, engine_from_options
from gate.models.load_settings import LoadSettings
from gate.report.outputs import ReportTargets
from gate.session.options import SESSION_FIELDS, SessionOptions
from gate.session.request import SessionRequest

#: The report rows, one per field of :class:`~gate.report.outputs.ReportTargets`.
REPORT_ROWS: tuple[DeclaredSetting, ...] = declared_settings(ReportTargets)
#: The engine rows (text as given; numbers are read by
#: :func:`gate.engines.settings.engine_from_options`).
ENGINE_ROWS: tuple[DeclaredSetting, ...] = declared_settings(EngineSettings)
#: The load rows (``--gate-device``, ``--gate-dtype``, ``--gate-trust-remote-code``).
LOAD_ROWS: tuple[DeclaredSetting, ...] = declared_settings(LoadSettings)


def dest(row: DeclaredSetting) -> str:
    """The attribute of pytest's ``config.option`` (``gate_<name>``)."""
    return f"gate_{row.name}"


def pytest_attrs(row: DeclaredSetting) -> dict[str, Any]:
    """Keyword arguments of ``parser.addoption`` for ``row``: the one pytest renderer of a
    declared setting (a switch is ``store_true``, a repeatable one appends, every other
    value is text, read by :func:`from_pytest`)."""
    attrs: dict[str, Any] = {"dest": dest(row), "help": row.spec.pytest_text}
    if row.kind == "flag":
        attrs.update(action="store_true", default=False)
    elif row.kind == "texts":
        attrs.update(action="append", default=[])
    else:
        attrs["default"] = row.spec.fallback
    if row.kind != "flag":  # GATE_BASELINE, not the dest's GATE_AGAINST
        attrs["metavar"] = row.option.lstrip("-").replace("-", "_").upper()
    return attrs


def from_pytest(row: DeclaredSetting, raw: Any) -> Any:
    """The field value of pytest's parsed ``raw`` value of ``row``."""
    if row.kind == "flag":
        return bool(raw)
    if row.kind == "texts":
        return tuple(str(item) for item in raw or ())
    if raw is None or raw == "":
        return None
    return Path(raw) if row.kind in PATH_KINDS else str(raw)


def _ordered() -> tuple[DeclaredSetting, ...]:
    """Every row in ``--help`` order: the session fields, with the report rows where
    :attr:`SessionOptions.reports` is and the engine rows where ``engine`` is."""
    by_name = {row.name: row for row in SESSION_FIELDS}
    rows: list[DeclaredSetting] = []
    for item in dataclasses.fields(SessionOptions):
        if item.name == "reports":
            rows += REPORT_ROWS
        elif item.name == "engine":
            rows += ENGINE_ROWS
        elif item.name == "load":
            rows += LOAD_ROWS
        elif item.name in by_name:
            rows.append(by_name[item.name])
    return tuple(rows)


#: Every ``--gate-*`` option besides ``--gate-model``/``--gate-mode``, in ``--help`` order.
PYTEST_ROWS: tuple[DeclaredSetting, ...] = _ordered()


def add_options(group: Any) -> None:
    """Declare the ``--gate-*`` options on ``group`` (a pytest ``OptionGroup``)."""
    for row in PYTEST_ROWS:
        group.addoption(row.option, **pytest_attrs(row))


def _load(given: dict[str, Any]) -> LoadSettings:
    """The load settings the ``--gate-*`` load options give (a switch not given: unset)."""
    from gate.config import build_dataclass

    table = {k: v for k, v in given.items() if v is not None and v is not False}
    return build_dataclass(LoadSettings, table, where="load options")


def request_from_pytest(option: Any) -> SessionRequest | None:
    """The session pytest's parsed options (``config.option``) ask for, defaults applied;
    ``None`` without ``--gate-model``. Bad engine options: :class:`ConfigError`."""
    model = getattr(option, "gate_model", None)
    if not model:
        return None

    def value(row: DeclaredSetting) -> Any:
        return from_pytest(row, getattr(option, dest(row)))

    reports = ReportTargets(**{row.name: value(row) for row in REPORT_ROWS})
    options = SessionOptions(
        **{row.name: value(row) for row in SESSION_FIELDS},
        reports=reports,
        engine=engine_from_options({row.name: value(row) for row in ENGINE_ROWS}),
        load=_load({row.name: value(row) for row in LOAD_ROWS}),
    )
    return SessionRequest(mode=option.gate_mode, model=str(model), options=options.with_defaults())


__all__ = [
    "ENGINE_ROWS",
    "LOAD_ROWS",
    "PYTEST_ROWS",
    "REPORT_ROWS",
    "add_options",
    "dest",
    "from_pytest",
    "pytest_attrs",
    "request_from_pytest",
]

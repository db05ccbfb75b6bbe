"""The ``--gate-*`` pytest options, for people who run the tier suites with pytest directly.

``gate run`` and friends hand the session a typed
:class:`~gate.session.request.SessionRequest` and build no ``--gate-*``
strings. A plain ``pytest suites/ --gate-model demo ...`` gives the same
session through the options declared here, which come from the declarations
of the typed objects: the rows of :class:`~gate.session.options.SessionOptions`
(:data:`~gate.session.options.SESSION_FIELDS`), the report files
(:data:`REPORT_ROWS`), the load settings
(:func:`~gate.models.load_settings.load_setting_options`) and the engine settings
(:func:`~gate.models.engine_settings.engine_setting_options`). They are read ONCE, at
this edge, by :func:`request_from_pytest`.

This module imports neither pytest nor a model library.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from gate.models.engine_settings import (
    OptionKind,
    engine_from_options,
    engine_setting_options,
)
from gate.models.load_settings import LoadSettings, load_setting_options
from gate.report.outputs import ReportTargets
from gate.session.options import (
    SESSION_FIELDS,
    Kind,
    OptionField,
    SessionOptions,
)
from gate.session.request import SessionRequest

#: The report rows, one per field of :class:`~gate.report.outputs.ReportTargets` (by name).
REPORT_ROWS: tuple[OptionField, ...] = (
    OptionField("json", "path", "write the results JSON here", option="--gate-json"),
    OptionField("html", "path", "write the self-contained HTML report here", option="--gate-html"),
    OptionField("junit", "path", "write the JUnit XML report here", option="--gate-junit"),
    OptionField(
        "markdown", "path", "write the markdown report (PR comment) here", option="--gate-markdown"
    ),
    OptionField(
        "measurements",
        "path",
        "run mode: write what the run measured here (a measurements file gate compare reads)",
        option="--gate-measurements",
    ),
)
#: The pytest kind of an engine setting's kind (text otherwise; a repeatable one appends).
_ROW_KINDS: dict[OptionKind, Kind] = {"file": "path", "texts": "append"}
#: The engine rows (text as given; numbers are read by
#: :func:`gate.models.engine_settings.engine_from_options`).
ENGINE_ROWS: tuple[OptionField, ...] = tuple(
    OptionField(
        name,
        _ROW_KINDS.get(option.kind, "str"),
        option.pytest_help,
        option=option.pytest_flag,
    )
    for name, option in engine_setting_options()
)
#: The load rows (``--gate-device``, ``--gate-dtype``, ``--gate-trust-remote-code``).
LOAD_ROWS: tuple[OptionField, ...] = tuple(
    OptionField(
        name,
        "flag" if option.kind == "flag" else "str",
        option.help,
        option=option.pytest_flag,
    )
    for name, option in load_setting_options()
)


def _ordered() -> tuple[OptionField, ...]:
    """Every row in ``--help`` order: the session fields, with the report rows where
    :attr:`SessionOptions.reports` is and the engine rows where ``engine`` is."""
    by_name = {row.name: row for row in SESSION_FIELDS}
    rows: list[OptionField] = []
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
PYTEST_ROWS: tuple[OptionField, ...] = _ordered()


def add_options(group: Any) -> None:
    """Declare the ``--gate-*`` options on ``group`` (a pytest ``OptionGroup``)."""
    for row in PYTEST_ROWS:
        row.add_to(group)


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

    def value(row: OptionField) -> Any:
        return row.from_pytest(getattr(option, row.dest))

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
    "request_from_pytest",
]

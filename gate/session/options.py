"""The options of one gate session, typed and declared once: :class:`SessionOptions`.

A command builds a :class:`SessionOptions` (and with the mode and model, a
:class:`SessionRequest`) and hands that one object to the pytest session
(:func:`gate.session.runner.run_request`); nothing becomes argument strings on
the way. Each scalar field is one row of the table (:data:`SESSION_FIELDS`):
its name, kind, help text, the pytest option it becomes for people who run
the suites with pytest directly (``--gate-<name>`` unless named), the
plugin's default and, for a flag that overrides a tier setting, that setting.
Three fields group others: :attr:`SessionOptions.reports` (the report files,
:class:`~gate.report.outputs.ReportTargets`), :attr:`SessionOptions.load` (device,
dtype and remote-code trust, :class:`~gate.models.load_settings.LoadSettings`)
and :attr:`SessionOptions.engine` (the serving engine,
:class:`~gate.models.engine_settings.EngineSettings`); the last two declare their
own options. From the rows come

* the ``--gate-*`` pytest options and their one typed reading
  (:mod:`gate.session.flags`);
* the plugin's defaults (:meth:`SessionOptions.with_defaults`);
* the tier settings the flags override (:meth:`SessionOptions.setting_overrides`).

A new session option is one field here (plus the click option of the command
that exposes it). Kinds: ``flag`` (``store_true``; ``False`` is left out),
``path`` and ``str`` (one value; ``None`` is left out), ``append`` (repeatable;
a tuple).

This module imports neither pytest nor a model library: the plugin module,
loaded in every pytest session, imports it at start.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from gate.models.engine_settings import EngineSettings
from gate.models.load_settings import LoadSettings
from gate.report.outputs import ReportTargets
from gate.store.location import DEFAULT_STORE

Kind = Literal["flag", "path", "str", "append"]

#: Default label of a recorded baseline.
DEFAULT_LABEL = "fp16"
#: Key of a field's :class:`OptionField` in its ``dataclasses.field`` metadata.
_ROW = "gate.session.option"
#: The value that leaves an option out, by kind.
_EMPTY: dict[Kind, Any] = {"flag": False, "path": None, "str": None, "append": ()}


@dataclass(frozen=True)
class OptionField:
    """One row of the session option table."""

    name: str
    kind: Kind
    help: str
    #: The pytest option (``--gate-<name with dashes>`` unless given).
    option: str = ""
    #: The plugin's value when the option is absent (``None``: nothing).
    default: str | None = None
    #: ``(tier, key)``: the tier setting this option overrides when given.
    setting: tuple[str, str] | None = None

    @property
    def dest(self) -> str:
        """The attribute of pytest's ``config.option`` (``gate_<name>``)."""
        return f"gate_{self.name}"

    def pytest_attrs(self) -> dict[str, Any]:
        """Keyword arguments of ``parser.addoption`` for this row."""
        attrs: dict[str, Any] = {"dest": self.dest, "help": self.help}
        if self.kind == "flag":
            attrs.update(action="store_true", default=False)
        elif self.kind == "append":
            attrs.update(action="append", default=[])
        else:
            attrs["default"] = self.default
        if self.kind != "flag":  # GATE_BASELINE, not the dest's GATE_AGAINST
            attrs["metavar"] = self.option.lstrip("-").replace("-", "_").upper()
        return attrs

    def add_to(self, group: Any) -> None:
        """Declare the pytest option on ``group`` (an ``OptionGroup``)."""
        group.addoption(self.option, **self.pytest_attrs())

    def from_pytest(self, raw: Any) -> Any:
        """The field value of pytest's parsed ``raw`` value."""
        if self.kind == "flag":
            return bool(raw)
        if self.kind == "append":
            return tuple(str(item) for item in raw or ())
        if raw is None or raw == "":
            return None
        return Path(raw) if self.kind == "path" else str(raw)

    def setting_value(self, value: Any) -> Any:
        """The tier setting ``value`` stands for (paths as text, as in a TOML table)."""
        return str(value) if isinstance(value, Path) else value


def option_row(
    kind: Kind,
    help: str,
    *,
    option: str = "",
    default: str | None = None,
    setting: tuple[str, str] | None = None,
) -> Any:
    """A :class:`SessionOptions` field that is one row of the option table (its name and
    ``--gate-`` option are filled in from the field by :data:`SESSION_FIELDS`)."""
    row = OptionField(
        name="", kind=kind, help=help, option=option, default=default, setting=setting
    )
    return field(default=_EMPTY[kind], metadata={_ROW: row})


@dataclass(frozen=True)
class SessionOptions:
    """What one gate session is asked to do besides its mode, model and tiers.

    ``None``/``False``/empty leaves an option out, so the plugin's default or
    the run config applies. :attr:`verbose` is pytest's own ``-v``.
    """

    recipe: str | None = option_row("str", "compression recipe applied at load time (e.g. bnb-nf4)")
    label: str | None = option_row("str", "label of a recorded baseline", default=DEFAULT_LABEL)
    ref: str | None = option_row("str", "record mode: also point this ref at the new baseline")
    store: Path | None = option_row("path", "baseline store directory", default=str(DEFAULT_STORE))
    against: tuple[str, ...] = option_row(
        "append",
        "baseline ref or file to compare with (repeatable; default: latest)",
        option="--gate-baseline",
    )
    thresholds: Path | None = option_row("path", "thresholds.toml (default: ./thresholds.toml)")
    strict: bool = option_row("flag", "warnings (underpowered verdicts included) block (exit 1)")
    #: The report files to write (``--gate-json``, ``--gate-html``, ...).
    reports: ReportTargets = field(default_factory=ReportTargets)
    config: Path | None = option_row("path", "run config TOML with [tiers.<name>] settings")
    candidate_name: str | None = option_row(
        "str", "the candidate's [[candidates]] name, recorded in the results JSON for gate merge"
    )
    model_slug: str | None = option_row("str", "baseline store slug (default: from the model)")
    calibration: Path | None = option_row(
        "path", "calibration texts (JSONL with 'text') for prune-wanda (default: the packaged set)"
    )
    history: Path | None = option_row(
        "path",
        "latency tier: append the run to the latency history in this DIR",
        setting=("latency", "history_dir"),
    )
    allow_hardware_mismatch: bool = option_row(
        "flag",
        "latency tier: compare with a baseline from other hardware (warning, not exit 4)",
        setting=("latency", "allow_hardware_mismatch"),
    )
    paired_latency: bool = option_row(
        "flag",
        "latency tier: time the baseline build in this session too, interleaving the two",
        setting=("latency", "paired"),
    )
    allow_pickle: bool = option_row(
        "flag", "load pickle-only checkpoints (.bin/.pt: code runs at load; trusted files only)"
    )
    allow_incomplete_weights: bool = option_row(
        "flag",
        "measure a model whose weights miss tensors of its config (freshly initialized), "
        "have unused ones or ones of another shape (refused by default, exit 3)",
    )
    #: Device, dtype and remote-code trust of an in-process model (``--device``,
    #: ``--dtype``, ``--trust-remote-code``; :class:`~gate.models.load_settings.LoadSettings`,
    #: whose fields declare their own options).
    load: LoadSettings = field(default_factory=LoadSettings)
    #: The serving engine the build is gated on (``None``: loaded in process;
    #: docs/serving.md, :mod:`gate.session.engine`).
    engine: EngineSettings | None = None
    #: ``--engine llama.cpp``: the engine that runs a ``gguf-*`` recipe's file (``None``: the
    #: file is loaded dequantized in process; docs/gguf.md "gguf-* recipes").
    runtime: str | None = option_row(
        "str",
        "run a gguf-* recipe's file in this engine (llama.cpp) instead of dequantized",
        option="--gate-engine",
    )
    verbose: bool = False

    def setting_overrides(self) -> dict[str, dict[str, Any]]:
        """Tier settings set by flags (``{"latency": {"paired": True}}``); unset flags are absent."""
        overrides: dict[str, dict[str, Any]] = {}
        for row in SESSION_FIELDS:
            value = getattr(self, row.name)
            if row.setting is None or value == _EMPTY[row.kind]:
                continue
            tier, key = row.setting
            overrides.setdefault(tier, {})[key] = row.setting_value(value)
        return overrides

    def with_defaults(self) -> SessionOptions:
        """These options with the plugin's defaults filled in (what a session will use)."""
        filled: dict[str, Any] = {}
        for row in SESSION_FIELDS:
            if row.default is not None and getattr(self, row.name) is None:
                filled[row.name] = Path(row.default) if row.kind == "path" else row.default
        return dataclasses.replace(self, **filled)


def _table() -> tuple[OptionField, ...]:
    rows = []
    for item in dataclasses.fields(SessionOptions):
        row = item.metadata.get(_ROW)
        if isinstance(row, OptionField):
            option = row.option or "--gate-" + item.name.replace("_", "-")
            rows.append(dataclasses.replace(row, name=item.name, option=option))
    return tuple(rows)


#: The scalar session options, one row each, in field order.
SESSION_FIELDS: tuple[OptionField, ...] = _table()
#: Rows by field name.
FIELDS_BY_NAME: Mapping[str, OptionField] = {row.name: row for row in SESSION_FIELDS}

__all__ = [
    "DEFAULT_LABEL",
    "DEFAULT_STORE",
    "FIELDS_BY_NAME",
    "SESSION_FIELDS",
    "OptionField",
    "SessionOptions",
    "option_row",
]

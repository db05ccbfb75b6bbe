"""The options of one gate session, declared once: :class:`SessionOptions`.

Each field of :class:`SessionOptions` is one row of the table
(:data:`SESSION_FIELDS`): its name, kind, help text, the pytest option it
becomes (``--gate-<name>`` unless named), the plugin's default and, for a flag
that overrides a tier setting, that setting. From this one table come

* the ``--gate-*`` pytest options of :mod:`gate.session.plugin`
  (:meth:`OptionField.add_to`);
* the plugin's typed reading of them (:meth:`SessionOptions.from_pytest`);
* the argument list a command hands to pytest (:meth:`SessionOptions.args`);
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
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from gate.report.outputs import ReportTargets

Kind = Literal["flag", "path", "str", "append"]

#: Default baseline store directory, relative to the working directory.
DEFAULT_STORE = Path("baselines")
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

    def args(self, value: Any) -> list[str]:
        """The pytest arguments standing for ``value`` (none for an empty value)."""
        if self.kind == "flag":
            return [self.option] if value else []
        if self.kind == "append":
            return [item for each in value for item in (self.option, str(each))]
        return [] if value is None else [self.option, str(value)]

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
    strict: bool = option_row("flag", "warnings block (exit 1)")
    json_out: Path | None = option_row("path", "write the results JSON here", option="--gate-json")
    html: Path | None = option_row("path", "write the self-contained HTML report here")
    junit: Path | None = option_row("path", "write the JUnit XML report here")
    markdown: Path | None = option_row("path", "write the markdown report (PR comment) here")
    config: Path | None = option_row("path", "run config TOML with [tiers.<name>] settings")
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
    # the serving engine the build is gated on (docs/serving.md; gate.session.engine)
    serve: str | None = option_row("str", "engine: start this server command, gate what it serves")
    endpoint: str | None = option_row("str", "engine: OpenAI base URL of a running server")
    served_model: str | None = option_row("str", "engine: served model name (default: the first)")
    api_key_env: str | None = option_row("str", "engine: environment variable with the API key")
    max_concurrency: str | None = option_row("str", "engine: requests in flight at once")
    request_timeout: str | None = option_row("str", "engine: seconds to wait for a response")
    startup_timeout: str | None = option_row("str", "engine: seconds a started server has")
    server_log: Path | None = option_row("path", "engine: the started server's log file")
    baseline_serve: str | None = option_row(
        "str", "engine of the baseline build timed beside the candidate (paired latency)"
    )
    baseline_endpoint: str | None = option_row(
        "str", "endpoint of the baseline build timed beside the candidate (paired latency)"
    )
    verbose: bool = False

    @classmethod
    def from_pytest(cls, option: Any) -> SessionOptions:
        """The options of a running session (pytest's ``config.option``), defaults applied."""
        return cls(
            **{row.name: row.from_pytest(getattr(option, row.dest)) for row in SESSION_FIELDS}
        )

    def args(self) -> list[str]:
        """The ``--gate-*`` plugin options these settings stand for, in table order."""
        return [arg for row in SESSION_FIELDS for arg in row.args(getattr(self, row.name))]

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

    def with_reports(self, targets: ReportTargets) -> SessionOptions:
        """These options writing the reports ``targets`` names (JSON, HTML, JUnit, markdown)."""
        return dataclasses.replace(
            self,
            json_out=targets.json,
            html=targets.html,
            junit=targets.junit,
            markdown=targets.markdown,
        )

    @property
    def reports(self) -> ReportTargets:
        """The report files asked for."""
        from gate.report.outputs import ReportTargets

        return ReportTargets(
            json=self.json_out, html=self.html, junit=self.junit, markdown=self.markdown
        )


def _table() -> tuple[OptionField, ...]:
    rows = []
    for item in dataclasses.fields(SessionOptions):
        row = item.metadata.get(_ROW)
        if isinstance(row, OptionField):
            option = row.option or "--gate-" + item.name.replace("_", "-")
            rows.append(dataclasses.replace(row, name=item.name, option=option))
    return tuple(rows)


#: The session option table: one row per ``--gate-*`` option, in ``--help`` order.
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

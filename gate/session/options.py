"""The options of one gate session, typed and declared once: :class:`SessionOptions`.

A command builds a :class:`SessionOptions` (and with the mode and model, a
:class:`SessionRequest`) and hands that one object to the pytest session
(:func:`gate.session.runner.run_request`); nothing becomes argument strings on
the way. Each scalar field is one declared setting (:mod:`gate.config_options`;
:data:`SESSION_FIELDS`): its name, kind, the pytest option it becomes for people
who run the suites with pytest directly (``--gate-<name>`` unless named) and its
help, the plugin's fallback and, for a flag that overrides a tier setting, that
setting. Three fields group others, each class declaring its own settings:
:attr:`SessionOptions.reports` (the report files,
:class:`~gate.report.outputs.ReportTargets`), :attr:`SessionOptions.load` (device,
dtype and remote-code trust, :class:`~gate.models.load_settings.LoadSettings`)
and :attr:`SessionOptions.engine` (the serving engine,
:class:`~gate.engines.settings.EngineSettings`). From the rows come

* the ``--gate-*`` pytest options and their one typed reading
  (:mod:`gate.session.flags`);
* the plugin's defaults (:meth:`SessionOptions.with_defaults`);
* the tier settings the flags override (:meth:`SessionOptions.setting_overrides`).

A new session option is one field here (plus the click option of the command
that exposes it). Kinds (:data:`gate.config_options.OptionKind`): ``flag``
(``store_true``; ``False`` is left out), ``text``, ``file`` and ``dir`` (one
value; ``None`` is left out), ``texts`` (repeatable; a tuple).

This module imports neither pytest nor a model library: the plugin module,
loaded in every pytest session, imports it at start.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gate.config_options import (
    PATH_KINDS,
    DeclaredSetting,
    OptionKind,
    declared_settings,
    setting_default,
)
from gate.config_options import setting as declare
from gate.engines.settings import EngineSettings
from gate.models.load_settings import LoadSettings
from gate.report.outputs import ReportTargets
from gate.store.location import DEFAULT_STORE

#: Default label of a recorded baseline.
DEFAULT_LABEL = "fp16"


def option_row(
    flag: str,
    kind: OptionKind,
    help: str,
    *,
    pytest_name: str = "",
    fallback: str | None = None,
    setting: tuple[str, str] | None = None,
) -> Any:
    """A :class:`SessionOptions` field declared as a setting (:mod:`gate.config_options`).

    ``flag`` is the command option the setting stands for, whose pytest option is
    ``--gate-`` + the rest (unless ``pytest_name``); ``help`` is that pytest option's
    help (each command words its own option's help). The field's one default is
    "not given" (``False``, ``()``, ``None`` by kind); ``fallback`` is the plugin's
    value when nothing gives it (:meth:`SessionOptions.with_defaults`).
    """
    empty: Any = False if kind == "flag" else () if kind == "texts" else None
    return declare(
        empty,
        flag=flag,
        kind=kind,
        help=help,
        pytest_name=pytest_name,
        fallback=fallback,
        setting=setting,
    )


@dataclass(frozen=True)
class SessionOptions:
    """What one gate session is asked to do besides its mode, model and tiers.

    ``None``/``False``/empty leaves an option out, so the plugin's default or
    the run config applies. :attr:`verbose` is pytest's own ``-v``.
    """

    recipe: str | None = option_row(
        "--recipe", "text", "compression recipe applied at load time (e.g. bnb-nf4)"
    )
    label: str | None = option_row(
        "--label", "text", "label of a recorded baseline", fallback=DEFAULT_LABEL
    )
    ref: str | None = option_row(
        "--ref", "text", "record mode: also point this ref at the new baseline"
    )
    store: Path | None = option_row(
        "--store", "dir", "baseline store directory", fallback=str(DEFAULT_STORE)
    )
    against: tuple[str, ...] = option_row(
        "--against",
        "texts",
        "baseline ref or file to compare with (repeatable; default: latest)",
        pytest_name="--gate-baseline",
    )
    thresholds: Path | None = option_row(
        "--thresholds", "file", "thresholds.toml (default: ./thresholds.toml)"
    )
    strict: bool = option_row(
        "--strict", "flag", "warnings (underpowered verdicts included) block (exit 1)"
    )
    #: The report files to write (``--gate-json``, ``--gate-html``, ...).
    reports: ReportTargets = field(default_factory=ReportTargets)
    config: Path | None = option_row(
        "--config", "file", "run config TOML with [tiers.<name>] settings"
    )
    candidate_name: str | None = option_row(
        "--candidate-name",
        "text",
        "the candidate's [[candidates]] name, recorded in the results JSON for gate merge",
    )
    model_slug: str | None = option_row(
        "--model-slug", "text", "baseline store slug (default: from the model)"
    )
    calibration: Path | None = option_row(
        "--calibration",
        "file",
        "calibration texts (JSONL with 'text') for prune-wanda (default: the packaged set)",
    )
    history: Path | None = option_row(
        "--history",
        "dir",
        "latency tier: append the run to the latency history in this DIR",
        setting=("latency", "history_dir"),
    )
    allow_hardware_mismatch: bool = option_row(
        "--allow-hardware-mismatch",
        "flag",
        "latency tier: compare with a baseline from other hardware (warning, not exit 4)",
        setting=("latency", "allow_hardware_mismatch"),
    )
    paired_latency: bool = option_row(
        "--paired-latency",
        "flag",
        "latency tier: time the baseline build in this session too, interleaving the two",
        setting=("latency", "paired"),
    )
    allow_pickle: bool = option_row(
        "--allow-pickle",
        "flag",
        "load pickle-only checkpoints (.bin/.pt: code runs at load; trusted files only)",
    )
    allow_incomplete_weights: bool = option_row(
        "--allow-incomplete-weights",
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
        "--engine",
        "text",
        "run a gguf-* recipe's file in this engine (llama.cpp) instead of dequantized",
    )
    verbose: bool = False

    def setting_overrides(self) -> dict[str, dict[str, Any]]:
        """Tier settings set by flags (``{"latency": {"paired": True}}``); unset flags are absent."""
        overrides: dict[str, dict[str, Any]] = {}
        for row in SESSION_FIELDS:
            value = getattr(self, row.name)
            if row.setting is None or value == setting_default(SessionOptions, row.name):
                continue
            tier, key = row.setting
            overrides.setdefault(tier, {})[key] = str(value) if isinstance(value, Path) else value
        return overrides

    def with_defaults(self) -> SessionOptions:
        """These options with the plugin's defaults filled in (what a session will use)."""
        filled: dict[str, Any] = {}
        for row in SESSION_FIELDS:
            fallback = row.spec.fallback
            if fallback is not None and getattr(self, row.name) is None:
                filled[row.name] = Path(fallback) if row.kind in PATH_KINDS else fallback
        return dataclasses.replace(self, **filled)


#: The scalar session options, one declared setting each, in field order.
SESSION_FIELDS: tuple[DeclaredSetting, ...] = declared_settings(SessionOptions)
#: Rows by field name.
FIELDS_BY_NAME: Mapping[str, DeclaredSetting] = {row.name: row for row in SESSION_FIELDS}

__all__ = [
    "DEFAULT_LABEL",
    "DEFAULT_STORE",
    "FIELDS_BY_NAME",
    "SESSION_FIELDS",
    "SessionOptions",
    "option_row",
]

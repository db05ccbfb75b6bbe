"""How an in-process model is placed and loaded, declared once: :class:`LoadSettings`.

Three settings: the device (``auto``, ``cpu``, ``cuda``, ``cuda:N``), the dtype
the weights are loaded in, and whether the model's own code may run
(``trust_remote_code``). Each field is one setting, and its
:class:`~gate.config_options.SettingOption` says how a user gives it. From that one declaration come

* the option of ``gate run``, ``gate baseline record``, ``gate calibrate`` and
  ``gate demo`` (``--device``, ``--dtype``, ``--trust-remote-code``;
  :func:`gate.commands.options.load_options`);
* the pytest option of the suites (``--gate-device``; :mod:`gate.session.flags`);
* the key of ``[run]`` and of each ``[[candidates]]`` table in ``gate.toml``
  (the field name: :class:`~gate.session.run_config.RunDefaults` and
  :class:`~gate.session.run_config.CandidateConfig` inherit these fields);
* the :class:`~gate.models.model_spec.ModelSpec` the plugin loads (:meth:`LoadSettings.spec`).

``None`` means "not given": a later layer (the candidate's table over ``[run]``,
the command line over both; :meth:`LoadSettings.over`) fills it, and what is
still unset takes :data:`DEFAULT_DEVICE` / the checkpoint's own dtype. A bad
value raises ``ValueError`` in :meth:`LoadSettings.__post_init__`, which the
table reader turns into a one-line :class:`~gate.errors.ConfigError`.

Nothing here imports torch: whether CUDA is present is asked by
:func:`gate.hw.devices.check_device`, only when a setting names CUDA.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gate.config_options import SettingOption, setting, setting_options, toml_keys
from gate.models.model_spec import DEFAULT_DEVICE, DTYPES, ModelSpec, check_device_name


@dataclass(frozen=True, kw_only=True)
class LoadSettings:
    """Device, dtype and remote-code trust of an in-process model (``None``: not given).

    ``device``: ``auto`` (the default) is the GPU when torch sees CUDA, placed
    with accelerate's sequential device map (one GPU when the model fits it,
    spread over the next GPUs when it does not), and the CPU when torch sees
    none; ``cpu``, ``cuda`` (GPU 0) and ``cuda:N`` place the whole model there,
    and a CUDA device without CUDA is refused before anything loads (exit 4).
    """

    device: str | None = setting(
        flag="--device",
        kind="device",
        help="Where an in-process model runs: auto (the GPU when CUDA is present, spread over "
        "several when it does not fit one; else the CPU), cpu, cuda or cuda:N.",
    )
    dtype: str | None = setting(
        flag="--dtype",
        kind="choice",
        help="Load the weights in this dtype (default auto: the checkpoint's own).",
        choices=DTYPES,
    )
    trust_remote_code: bool | None = setting(
        flag="--trust-remote-code",
        kind="flag",
        help="Run the model repository's own Python code when loading it (trusted models only).",
    )

    def __post_init__(self) -> None:
        if self.device is not None:
            check_device_name(self.device)
        if self.dtype is not None and self.dtype not in DTYPES:
            raise ValueError(f"unknown dtype {self.dtype!r}: choose one of {', '.join(DTYPES)}")

    def over(self, below: LoadSettings) -> LoadSettings:
        """These settings, with ``below``'s where these are not given."""
        return LoadSettings(
            **{
                name: getattr(self, name)
                if getattr(self, name) is not None
                else getattr(below, name)
                for name in load_setting_names()
            }
        )

    @property
    def effective_device(self) -> str:
        """The device asked for, :data:`DEFAULT_DEVICE` when none is."""
        return self.device or DEFAULT_DEVICE

    def spec(self, model: str, *, allow_pickle: bool = False) -> ModelSpec:
        """The :class:`~gate.models.model_spec.ModelSpec` of ``model`` loaded with these settings."""
        return ModelSpec.parse(
            model,
            device=self.effective_device,
            dtype=self.dtype or "auto",
            trust_remote_code=bool(self.trust_remote_code),
            allow_pickle=allow_pickle,
        )

    def settings(self) -> LoadSettings:
        """These three settings alone (of a ``gate.toml`` table that inherits them)."""
        return LoadSettings(**{name: getattr(self, name) for name in load_setting_names()})

    def given(self) -> dict[str, Any]:
        """The settings that were given, by field name (for a results or dry-run line)."""
        return {n: getattr(self, n) for n in load_setting_names() if getattr(self, n) is not None}


def load_setting_options() -> tuple[tuple[str, SettingOption], ...]:
    """``(field name, option)`` of every load setting, in declaration (``--help``) order."""
    return setting_options(LoadSettings)


def load_setting_names() -> tuple[str, ...]:
    """The field names of :class:`LoadSettings` (the ``gate.toml`` keys)."""
    return toml_keys(LoadSettings)


__all__ = [
    "DEFAULT_DEVICE",
    "LoadSettings",
    "load_setting_names",
    "load_setting_options",
]

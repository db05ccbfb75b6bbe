"""The serving-engine settings of a gate session, declared once: :class:`EngineSettings`.

Each field is one engine setting, typed (numbers as numbers). Its
:class:`~gate.config_options.SettingOption` says how a user gives it, and from that one
declaration come

* the ``gate run`` option (``--serve``, ``--request-timeout``; :mod:`gate.commands.run`);
* the pytest option of the suites (``--gate-serve``; :mod:`gate.session.flags`);
* the key of a ``gate.toml`` engine table (the field name; :mod:`gate.session.run_config`);
* what the session and :func:`gate.engines.opening.open_engine` read.

The rules that need no environment hold in :meth:`EngineSettings.__post_init__`
(exactly one of ``serve`` and ``endpoint``, at most one baseline engine,
positive numbers, an API-key variable name); they raise ``ValueError``, which
the table reader turns into a one-line :class:`~gate.errors.ConfigError`.
Every command that takes engine options (``gate run``, ``gate baseline
record``, ``gate calibrate``, the suites' ``--gate-*`` options) reads them
with :func:`engine_from_options`, the one place the options become settings:
whichever command reaches a rule, a broken one is the same line and exit 4.

A new engine setting is one field here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from gate.config import build_dataclass
from gate.config_options import SettingOption, option_of, setting, setting_options
from gate.engines.client import (
    DEFAULT_MAX_CONCURRENCY,
    DEFAULT_REQUEST_TIMEOUT_S,
    DEFAULT_SERVED_LOGPROBS,
    SCORING_APIS,
    EndpointSettings,
    ScoringApi,
)
from gate.engines.secrets import mask_command, mask_url
from gate.errors import ConfigError

#: Seconds a started server has to answer ``/health`` when nothing says otherwise.
DEFAULT_STARTUP_TIMEOUT_S = 900.0


@dataclass(frozen=True)
class EngineSettings:
    """The serving engine a build is gated on (docs/serving.md).

    Exactly one of ``serve`` (a server command gate starts and stops) and
    ``endpoint`` (the OpenAI base URL of a running server); either may be a
    list, one entry per replica of the same build (the requests of a tier are
    spread over them: :mod:`gate.engines.replicas`). A list of one is
    kept as its single string. ``baseline_serve``
    or ``baseline_endpoint`` names the engine of the baseline build, timed
    beside the candidate in the paired A/B latency mode (giving one turns that
    mode on).
    """

    serve: str | tuple[str, ...] | None = setting(
        None,
        flag="--serve",
        kind="texts",
        help="Start this engine command (e.g. vLLM's OpenAI server) and gate what it serves; "
        "repeat it for replicas of the same build.",
        pytest_help="engine: start this server command, gate what it serves (repeatable: replicas)",
    )
    endpoint: str | tuple[str, ...] | None = setting(
        None,
        flag="--endpoint",
        kind="texts",
        help="Gate the model behind this running OpenAI-compatible server (URL .../v1); "
        "repeat it for replicas of the same build.",
        pytest_help="engine: OpenAI base URL of a running server (repeatable: replicas)",
    )
    served_model: str | None = setting(
        None,
        flag="--served-model",
        kind="text",
        help="Served model name at the engine (default: the first it lists).",
        pytest_help="engine: served model name (default: the first)",
    )
    api_key_env: str | None = setting(
        None,
        flag="--api-key-env",
        kind="text",
        help="Environment variable holding the engine's API key (never the key).",
        pytest_help="engine: environment variable with the API key",
    )
    max_concurrency: int = setting(
        DEFAULT_MAX_CONCURRENCY,
        flag="--max-concurrency",
        kind="count",
        help="Engine requests in flight at once (default 8).",
        pytest_help="engine: requests in flight at once",
    )
    request_timeout_s: float = setting(
        DEFAULT_REQUEST_TIMEOUT_S,
        flag="--request-timeout",
        kind="seconds",
        help="Seconds per engine response.",
        pytest_help="engine: seconds to wait for a response",
    )
    served_logprobs: int = setting(
        DEFAULT_SERVED_LOGPROBS,
        flag="--served-logprobs",
        kind="count",
        help="Log-probs asked per position for the fidelity rows (default 64; the vocabulary"
        " size makes a served KL exact; the server's --max-logprobs must allow it).",
        pytest_help="engine: log-probs asked per position for the fidelity rows",
    )
    scoring_api: ScoringApi = setting(
        "auto",
        flag="--scoring-api",
        kind="text",
        help="How the engine scores teacher-forced tokens: auto (default), prompt_logprobs or"
        " echo (vLLM, SGLang), forced or positions (llama-server); docs/serving.md.",
        pytest_help="engine: how served scoring asks for log-probs (auto, prompt_logprobs, echo, forced,"
        " positions)",
    )
    startup_timeout_s: float = setting(
        DEFAULT_STARTUP_TIMEOUT_S,
        flag="--startup-timeout",
        kind="seconds",
        help="Seconds a --serve server has.",
        pytest_help="engine: seconds a started server has",
    )
    server_log: Path | None = setting(
        None,
        flag="--server-log",
        kind="file",
        help="Log file of a --serve server.",
        pytest_help="engine: the started server's log file",
    )
    baseline_serve: str | None = setting(
        None,
        flag="--baseline-serve",
        kind="text",
        help="Engine command of the baseline build (paired latency A/B).",
        pytest_help="engine of the baseline build timed beside the candidate (paired latency)",
    )
    baseline_endpoint: str | None = setting(
        None,
        flag="--baseline-endpoint",
        kind="text",
        help="Endpoint of the baseline build (paired latency A/B).",
        pytest_help="endpoint of the baseline build timed beside the candidate (paired latency)",
    )

    def __post_init__(self) -> None:
        for name in ("serve", "endpoint"):
            value = getattr(self, name)
            if isinstance(value, (tuple, list)):
                items = tuple(str(v) for v in value)
                if not items:
                    raise ValueError(f"{name} is an empty list: give at least one")
                if len(set(items)) != len(items):
                    raise ValueError(f"{name} names the same replica twice")
                object.__setattr__(self, name, items[0] if len(items) == 1 else items)
        if (self.serve is None) == (self.endpoint is None):
            raise ValueError("an engine needs exactly one of serve and endpoint")
        if self.baseline_serve is not None and self.baseline_endpoint is not None:
            raise ValueError("give at most one of baseline_serve and baseline_endpoint")
        if self.max_concurrency < 1:
            raise ValueError("max_concurrency must be >= 1")
        if self.served_logprobs < 1:
            raise ValueError("served_logprobs must be >= 1")
        if self.scoring_api not in SCORING_APIS:
            raise ValueError(
                f"scoring_api {self.scoring_api!r} is not one of {', '.join(SCORING_APIS)}"
            )
        for name in ("request_timeout_s", "startup_timeout_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")

    @property
    def serve_commands(self) -> tuple[str, ...]:
        """The server commands gate starts, one per replica (empty for endpoints)."""
        return _items(self.serve)

    @property
    def endpoints(self) -> tuple[str, ...]:
        """The running servers' URLs, one per replica (empty for started servers)."""
        return _items(self.endpoint)

    @property
    def replicas(self) -> int:
        """How many replicas of the build serve the requests (1: one server)."""
        return len(self.serve_commands) + len(self.endpoints)

    def describe(self) -> list[str]:
        """One line per replica: ``serve COMMAND`` or the endpoint URL, secrets masked."""
        return [f"serve {mask_command(c)}" for c in self.serve_commands] + [
            mask_url(u) for u in self.endpoints
        ]

    def replica(self, index: int) -> EngineSettings:
        """The settings of replica ``index`` alone (one ``serve`` or ``endpoint``)."""
        if self.serve is not None:
            return dataclasses.replace(self, serve=self.serve_commands[index])
        return dataclasses.replace(self, endpoint=self.endpoints[index])

    @property
    def paired(self) -> bool:
        """Whether a baseline engine is named (the paired A/B latency mode)."""
        return self.baseline_serve is not None or self.baseline_endpoint is not None

    def baseline(self) -> EngineSettings | None:
        """The baseline build's engine, with these settings (``None`` when not paired)."""
        if not self.paired:
            return None
        return dataclasses.replace(
            self,
            serve=self.baseline_serve,
            endpoint=self.baseline_endpoint,
            baseline_serve=None,
            baseline_endpoint=None,
        )

    def settings_for(self, url: str) -> EndpointSettings:
        """The client settings for the server at ``url`` (a view of these settings)."""
        return EndpointSettings(
            url=url,
            model=self.served_model,
            api_key_env=self.api_key_env,
            max_concurrency=self.max_concurrency,
            request_timeout=self.request_timeout_s,
            full_top_k=self.served_logprobs,
            scoring_api=self.scoring_api,
        )


def _items(value: str | tuple[str, ...] | None) -> tuple[str, ...]:
    """A one-or-many setting as a tuple (``None``: empty)."""
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(value)


def engine_setting_options() -> tuple[tuple[str, SettingOption], ...]:
    """``(field name, option)`` of every engine setting, in declaration (``--help``) order."""
    return setting_options(EngineSettings)


def _option_of(name: str) -> SettingOption:
    return option_of(EngineSettings, name)


def _number(text: str, option: SettingOption) -> int | float:
    """An engine number given as text (``--gate-max-concurrency 4``)."""
    try:
        return int(text) if option.kind == "count" else float(text)
    except ValueError:
        raise ConfigError(
            f"{option.flag} {text!r} is not a number", f"give {option.flag} as a number"
        ) from None


def engine_from_options(
    given: Mapping[str, object], *, where: str = "engine options"
) -> EngineSettings | None:
    """The engine a command's options name, by field name (``None``: none given).

    Options not given (``None``, or ``()`` for a repeatable one) are left out; a
    repeated option is a list, as in gate.toml; a path is its text; a number may come
    as text (pytest's options). Settings without ``serve`` or ``endpoint``, or with
    both, are a :class:`~gate.errors.ConfigError` naming them; every other rule is
    :meth:`EngineSettings.__post_init__`'s, read as a gate.toml table is
    (:func:`gate.config.build_dataclass`: one line, exit 4).
    """
    table: dict[str, object] = {}
    for name, value in given.items():
        if value is None or value == () or value == []:
            continue
        option = _option_of(name)
        if isinstance(value, (tuple, list)):
            table[name] = [str(item) for item in value]
        elif isinstance(value, Path):
            table[name] = str(value)
        elif isinstance(value, str) and option.kind in ("count", "seconds"):
            table[name] = _number(value, option)
        else:
            table[name] = value
    if not table:
        return None
    if "serve" not in table and "endpoint" not in table:
        flags = ", ".join(_option_of(name).flag for name in table)
        raise ConfigError(
            f"{flags} given without an engine (an engine needs exactly one of serve and endpoint)",
            "add --serve COMMAND or --endpoint URL (or an engine table in gate.toml)",
        )
    if "serve" in table and "endpoint" in table:
        raise ConfigError(
            "--serve and --endpoint both given (an engine needs exactly one of serve and endpoint)",
            "give --serve COMMAND for a server gate starts, or --endpoint URL for a running one",
        )
    return build_dataclass(EngineSettings, table, where=where)


__all__ = [
    "DEFAULT_STARTUP_TIMEOUT_S",
    "EngineSettings",
    "engine_from_options",
    "engine_setting_options",
]

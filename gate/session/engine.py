"""The serving engine of a gate session, from its options: :func:`session_engines`.

``--serve``/``--endpoint`` (``gate run``; ``--gate-serve``/``--gate-endpoint``
in pytest; an ``engine`` table in ``gate.toml``) say that the build under test
is served by an engine rather than loaded in process; ``--baseline-serve`` /
``--baseline-endpoint`` name the engine of the baseline build for the paired
A/B latency mode. :func:`session_engines` turns those options into
:class:`~gate.models.engine.EngineSpec` values, validating everything that
can be checked without starting or contacting anything (one of serve and
endpoint, the URL, the numbers, that the server program exists, that a named
API-key variable is set): ``gate run --dry-run`` and the start of every
session call it, so bad engine options are exit 4 before any model loads.

Where a started server's log goes (:func:`server_log_path`): ``--server-log``
when given, else beside the results JSON (``out/results.json`` ->
``out/results.server.log``), else a fresh temporary directory; its path is
printed with the report and recorded in the results' provenance.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from gate.errors import ConfigError
from gate.models.engine import EngineSpec
from gate.models.serve import parse_command
from gate.session.options import SessionOptions


@dataclass(frozen=True)
class SessionEngines:
    """The engines of one session (``None``: that build is loaded in process)."""

    candidate: EngineSpec | None
    baseline: EngineSpec | None


def _number(text: str | None, what: str, kind: type[int] | type[float]) -> float | None:
    if text is None:
        return None
    try:
        value = kind(text)
    except ValueError:
        raise ConfigError(f"{what} {text!r} is not a number", f"give {what} as a number") from None
    if value <= 0:
        raise ConfigError(f"{what} must be positive, got {text}", f"give {what} > 0")
    return value


def _engine(
    options: SessionOptions, *, serve: str | None, endpoint: str | None, what: str
) -> EngineSpec | None:
    if serve is None and endpoint is None:
        return None
    if serve is not None and endpoint is not None:
        raise ConfigError(
            f"{what}: both a server command and an endpoint were given",
            "give --serve COMMAND to start a server or --endpoint URL for a running one",
        )
    kwargs: dict[str, float] = {}
    concurrency = _number(options.max_concurrency, "--max-concurrency", int)
    if concurrency is not None:
        kwargs["max_concurrency"] = int(concurrency)
    for key, text, flag in (
        ("request_timeout_s", options.request_timeout, "--request-timeout"),
        ("startup_timeout_s", options.startup_timeout, "--startup-timeout"),
    ):
        value = _number(text, flag, float)
        if value is not None:
            kwargs[key] = value
    if serve is not None:
        program = parse_command(serve)[0]
        if shutil.which(program) is None:
            raise ConfigError(
                f"{what}: the server program {program!r} was not found",
                "give the full path of the engine's python (e.g. the venv of "
                "scripts/setup_engine.sh)",
            )
    spec = EngineSpec(
        endpoint=endpoint,
        serve=serve,
        model=options.served_model,
        api_key_env=options.api_key_env,
        **kwargs,  # type: ignore[arg-type]
    )
    spec.settings_for(endpoint or "http://127.0.0.1:1/v1").api_key()  # a named key must be set
    return spec


def _check_unused(options: SessionOptions) -> None:
    """Engine options without an engine are a mistake, not something to ignore."""
    given = [
        flag
        for flag, value in (
            ("--served-model", options.served_model),
            ("--api-key-env", options.api_key_env),
            ("--max-concurrency", options.max_concurrency),
            ("--request-timeout", options.request_timeout),
            ("--startup-timeout", options.startup_timeout),
            ("--server-log", options.server_log),
            ("--baseline-serve", options.baseline_serve),
            ("--baseline-endpoint", options.baseline_endpoint),
        )
        if value is not None
    ]
    if given:
        raise ConfigError(
            f"{', '.join(given)} given without an engine",
            "add --serve COMMAND or --endpoint URL (or an engine table in gate.toml)",
        )


def session_engines(options: SessionOptions) -> SessionEngines:
    """The validated engines of a session (nothing is started or contacted)."""
    candidate = _engine(
        options, serve=options.serve, endpoint=options.endpoint, what="the candidate's engine"
    )
    if candidate is None:
        _check_unused(options)
        return SessionEngines(None, None)
    if options.recipe is not None:
        raise ConfigError(
            f"recipe {options.recipe!r} given for a served build",
            "a served build is compressed by its engine (e.g. --quantization): drop the recipe",
        )
    baseline = _engine(
        options,
        serve=options.baseline_serve,
        endpoint=options.baseline_endpoint,
        what="the baseline's engine",
    )
    return SessionEngines(candidate, baseline)


def server_log_path(options: SessionOptions, *, baseline: bool = False) -> Path:
    """Where a started server writes its log (see the module docstring)."""
    suffix = ".baseline-server.log" if baseline else ".server.log"
    if options.server_log is not None:
        log = Path(options.server_log)
        return log.with_name(log.stem + ".baseline" + log.suffix) if baseline else log
    if options.json_out is not None:
        json_out = Path(options.json_out)
        return json_out.with_name(json_out.stem + suffix)
    return Path(tempfile.mkdtemp(prefix="gate-server-")) / ("gate" + suffix)


__all__ = ["SessionEngines", "server_log_path", "session_engines"]

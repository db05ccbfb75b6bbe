"""The serving engine of a gate session, from its options: :func:`session_engines`.

``--serve``/``--endpoint`` (``gate run``; ``--gate-serve``/``--gate-endpoint``
in pytest; an ``engine`` table in ``gate.toml``) say that the build under test
is served by an engine rather than loaded in process; ``--baseline-serve`` /
``--baseline-endpoint`` name the engine of the baseline build for the paired
A/B latency mode. Each arrives as one typed
:class:`~gate.engines.settings.EngineSettings` (which holds the rules
that need no environment); :func:`session_engines` splits it into the
candidate's and the baseline's engine and checks what needs the environment
without starting or contacting anything (the URL, that the server program
exists, that a named API-key variable is set, no recipe for a served build):
``gate run --dry-run`` and the start of every session call it, so bad engine
options are exit 4 before any model loads.

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

from gate.engines.secrets import mask_argv
from gate.engines.serve import parse_command
from gate.engines.settings import EngineSettings
from gate.errors import ConfigError
from gate.session.options import SessionOptions


@dataclass(frozen=True)
class SessionEngines:
    """The engines of one session (``None``: that build is loaded in process)."""

    candidate: EngineSettings | None
    baseline: EngineSettings | None


#: Options by which a server command names the model it serves (``--model``/``--model-path``
#: of the OpenAI-compatible servers, ``-m`` of a GGUF server; ``serve MODEL`` positionally).
MODEL_OPTIONS = ("--model", "--model-path", "-m")
#: How a local path starts (a hub id or a Python module after ``-m`` never does).
_LOCAL_PREFIXES = ("/", "./", "../", "~")


def named_local_models(argv: list[str]) -> list[str]:
    """The local-looking model paths a server command names (``MODEL_OPTIONS``, ``=`` form
    included, and the word after ``serve``); hub ids and module names are not among them."""
    found: list[str] = []
    for i, arg in enumerate(argv):
        name, equals, value = arg.partition("=")
        if equals and name in MODEL_OPTIONS:
            found.append(value)
        elif (arg in MODEL_OPTIONS or arg == "serve") and i + 1 < len(argv):
            found.append(argv[i + 1])
    return [path for path in found if path.startswith(_LOCAL_PREFIXES)]


def _check(engine: EngineSettings, what: str) -> EngineSettings:
    """``engine`` once what needs the environment holds (nothing is started or contacted):
    the server program exists, and so does every local model path its command names (a
    wrong path is input, exit 4, as for an in-process model)."""
    for command in engine.serve_commands:
        argv = parse_command(command)
        program = argv[0]
        if shutil.which(program) is None:
            raise ConfigError(
                f"{what}: the server program {mask_argv([program])[0]!r} was not found",
                "give the full path of the engine's python (e.g. the venv of "
                "scripts/setup_engine.sh)",
            )
        for model in named_local_models(argv):
            if not Path(model).expanduser().exists():
                raise ConfigError(
                    f"{what}: the model {model} the server command names does not exist",
                    "check the path in the server command",
                )
    for url in engine.endpoints or ("http://127.0.0.1:1/v1",):
        engine.settings_for(url).api_key()  # the URL, and a named key is set
    return engine


def check_runtime(options: SessionOptions) -> str | None:
    """The engine that runs a ``gguf-*`` recipe's file (``--engine``; ``None``: dequantized in
    process), checked without starting anything: a known engine, given a ``gguf-*`` recipe and
    no ``--serve``/``--endpoint``, and built (each one line, exit 4)."""
    runtime = options.runtime
    if runtime is None:
        return None
    from gate.models.methods.registry import get_method, runtimes

    engines = runtimes()
    if runtime not in engines:
        raise ConfigError(
            f"--engine {runtime!r} is not an engine gate runs",
            f"use --engine {' or --engine '.join(engines)}",
        )
    from gate.models.stack import parse_stack

    stack = parse_stack(options.recipe)
    if stack.composed:
        raise ConfigError(
            f"--engine {runtime} runs one gguf-* file, and recipe {stack} stacks more",
            "give the gguf-* recipe alone, or drop --engine to run the stack in process",
        )
    recipe = stack.parts[0]
    method = get_method(recipe.name)
    if method.runtime != runtime:
        what = "no recipe" if method.control else f"recipe {recipe} ({method.family.name})"
        raise ConfigError(
            f"--engine {runtime} runs a gguf-* recipe's file, and this candidate has {what}",
            "give a gguf-* recipe (e.g. --recipe gguf-q4_k_m), or serve a model file of your"
            ' own with --serve "llama-server -m FILE.gguf"',
        )
    if options.engine is not None:
        raise ConfigError(
            f"--engine {runtime} starts its own server, and --serve/--endpoint name another",
            "drop one of them",
        )
    method.check_runtime(recipe)
    return runtime


def session_engines(options: SessionOptions) -> SessionEngines:
    """The validated engines of a session (nothing is started or contacted)."""
    check_runtime(options)
    engine = options.engine
    if engine is None:
        return SessionEngines(None, None)
    candidate = _check(engine, "the candidate's engine")
    if options.recipe is not None:
        raise ConfigError(
            f"recipe {options.recipe!r} given for a served build",
            "a served build is compressed by its engine (e.g. --quantization): drop the recipe",
        )
    baseline = engine.baseline()
    if baseline is not None:
        baseline = _check(baseline, "the baseline's engine")
    return SessionEngines(candidate, baseline)


def server_log_path(options: SessionOptions, *, baseline: bool = False) -> Path:
    """Where a started server writes its log (see the module docstring)."""
    suffix = ".baseline-server.log" if baseline else ".server.log"
    server_log = options.engine.server_log if options.engine is not None else None
    if server_log is not None:
        log = Path(server_log)
        return log.with_name(log.stem + ".baseline" + log.suffix) if baseline else log
    json_out = options.reports.json
    if json_out is not None:
        return json_out.with_name(json_out.stem + suffix)
    return Path(tempfile.mkdtemp(prefix="gate-server-")) / ("gate" + suffix)


__all__ = [
    "MODEL_OPTIONS",
    "SessionEngines",
    "named_local_models",
    "server_log_path",
    "session_engines",
]

"""Whether a server command speculates, how, and the same command without speculation.

A served build's speculative decoding is set on the engine's own command line;
gate reads it there (:func:`read_speculation`) and writes the *plain* command,
the same server with every speculative option removed (:func:`plain_command`),
which the speculative tier starts beside the speculative one for the lossless
comparison and the speed-up (docs/speculative.md, "Served").

What is read, per engine:

* **vLLM** (``vllm serve`` / ``vllm.entrypoints.openai.api_server``):
  ``--speculative-config JSON`` (also ``--speculative_config``, ``-sc`` and the
  ``=JSON`` form), its dotted keys (``--speculative-config.method ngram``,
  ``-sc.num_speculative_tokens 4``) and the short options ``--spec-method``,
  ``--spec-model``, ``--spec-tokens``. The JSON's ``method`` (``ngram``,
  ``draft_model``, ``eagle``...), ``num_speculative_tokens`` and ``model`` are
  reported; the rest is kept in :attr:`ServedSpeculation.settings`.
* **llama-server** (b11434 option names, with their aliases): a draft model
  (``-md``/``--model-draft``/``--spec-draft-model FILE``, ``-hfd``/
  ``--hf-repo-draft REPO``), a speculative type (``--spec-type T``, ``none``
  speculates not), ``--spec-default``; every other ``--spec-*`` option and the
  draft-model options (``-td``, ``-ngld``, ``-devd``...) belong to it and are
  removed with it.

The plain command keeps every other token in its place, so the plain server
is the same build (weights, dtype, context, port rules) without the drafter.
Values are read from the command as given; anything recorded of it is masked
(:mod:`gate.engines.secrets`: the speculative options never carry a secret,
and the command itself is only ever recorded masked).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gate.errors import ConfigError

if TYPE_CHECKING:
    from gate.engines.settings import EngineSettings

VLLM = "vllm"
LLAMA_SERVER = "llama.cpp"

#: vLLM's options holding the speculative config as JSON.
_VLLM_JSON = ("--speculative-config", "--speculative_config", "-sc")
#: vLLM's short speculative options (value: the config key they set).
_VLLM_SHORT = {
    "--spec-method": "method",
    "--spec_method": "method",
    "--spec-model": "model",
    "--spec_model": "model",
    "--spec-tokens": "num_speculative_tokens",
    "--spec_tokens": "num_speculative_tokens",
}

#: llama-server's speculative options that take no value (b11434 ``--help``).
_LLAMA_FLAGS = frozenset(
    {
        "--spec-default",
        "--spec-draft-cpu-moe",
        "-cmoed",
        "--cpu-moe-draft",
        "--spec-draft-backend-sampling",
        "--no-spec-draft-backend-sampling",
    }
)
#: llama-server's speculative options with a value that are not ``--spec-*`` names.
_LLAMA_VALUED = frozenset(
    {
        "-md",
        "--model-draft",
        "-hfd",
        "-hfrd",
        "--hf-repo-draft",
        "-td",
        "--threads-draft",
        "-tbd",
        "--threads-batch-draft",
        "-Cd",
        "--cpu-mask-draft",
        "-Crd",
        "--cpu-range-draft",
        "--cpu-strict-draft",
        "--prio-draft",
        "--poll-draft",
        "-Cbd",
        "--cpu-mask-batch-draft",
        "--cpu-strict-batch-draft",
        "--prio-batch-draft",
        "--poll-batch-draft",
        "-otd",
        "--override-tensor-draft",
        "-ncmoed",
        "--n-cpu-moe-draft",
        "--draft-p-split",
        "--draft-p-min",
        "-devd",
        "--device-draft",
        "-ngld",
        "--gpu-layers-draft",
        "--n-gpu-layers-draft",
        "-ctkd",
        "--cache-type-k-draft",
        "-ctvd",
        "--cache-type-v-draft",
        "--draft",
        "--draft-n",
        "--draft-max",
        "--draft-min",
        "--draft-n-min",
    }
)
_LLAMA_DRAFT_MODEL = ("-md", "--model-draft", "--spec-draft-model")
_LLAMA_DRAFT_REPO = ("-hfd", "-hfrd", "--hf-repo-draft", "--spec-draft-hf")
_LLAMA_DRAFT_MAX = ("--spec-draft-n-max", "--draft", "--draft-n", "--draft-max")


@dataclass(frozen=True)
class ServedSpeculation:
    """How a server command speculates (:func:`read_speculation`)."""

    engine: str
    #: vLLM's ``method`` (``ngram``, ``draft_model``, ``eagle``...); llama-server's
    #: ``--spec-type`` (``draft-simple`` when only a draft model is given).
    method: str
    #: Tokens proposed per step, when the command says (vLLM's ``num_speculative_tokens``,
    #: llama-server's ``--spec-draft-n-max``); ``None``: the engine's default.
    draft_tokens: int | None = None
    #: The draft model, when one is named.
    draft_model: str | None = None
    #: Every speculative setting read (vLLM's config; llama-server's options), for provenance.
    settings: Mapping[str, Any] = field(default_factory=dict)
    #: The tokens of the command that set them (removed in the plain command).
    tokens: tuple[str, ...] = ()

    def facts(self) -> dict[str, Any]:
        """The JSON facts a measurement's details carry."""
        return {
            "engine": self.engine,
            "method": self.method,
            "draft_tokens": self.draft_tokens,
            "draft_model": self.draft_model,
            "settings": dict(self.settings),
            "options": list(self.tokens),
        }


def engine_of(argv: Sequence[str]) -> str:
    """``llama.cpp`` for a llama-server command, else ``vllm`` (any OpenAI server gate starts
    with vLLM's option names: vLLM, SGLang-compatible wrappers)."""
    for arg in argv:
        if os.path.basename(arg).startswith("llama-server"):
            return LLAMA_SERVER
    return VLLM


def _split(arg: str) -> tuple[str, str | None]:
    """``--name=value`` -> ``("--name", "value")``; ``--name`` -> ``("--name", None)``."""
    if arg.startswith("-") and "=" in arg:
        name, value = arg.split("=", 1)
        return name, value
    return arg, None


def _json_value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _vllm(argv: Sequence[str]) -> tuple[dict[str, Any], list[int]]:
    """vLLM's speculative config as the command states it, and the indices of its tokens."""
    config: dict[str, Any] = {}
    used: list[int] = []
    i = 0
    while i < len(argv):
        name, inline = _split(argv[i])
        dotted = next((p for p in _VLLM_JSON if name.startswith(p + ".")), None)
        if name in _VLLM_JSON or dotted is not None or name in _VLLM_SHORT:
            if inline is None and i + 1 >= len(argv):
                raise ConfigError(
                    f"the server command ends with {name} and no value",
                    "give the option its value",
                )
            value = inline if inline is not None else argv[i + 1]
            used += [i] if inline is not None else [i, i + 1]
            if name in _VLLM_JSON:
                parsed = _json_value(value)
                if parsed is None:  # --speculative-config null: no speculation
                    config.clear()
                elif not isinstance(parsed, dict):
                    raise ConfigError(
                        f"{name} {value!r} is not a JSON object",
                        'e.g. --speculative-config \'{"method": "ngram",'
                        ' "num_speculative_tokens": 4, "prompt_lookup_max": 4}\'',
                    )
                else:
                    config.update(parsed)
            elif dotted is not None:
                config[name[len(dotted) + 1 :].replace("-", "_")] = _json_value(value)
            else:
                config[_VLLM_SHORT[name]] = _json_value(value)
            i += 1 if inline is not None else 2
            continue
        i += 1
    return {k.replace("-", "_"): v for k, v in config.items()}, used


def _llama(argv: Sequence[str]) -> tuple[dict[str, Any], list[int]]:
    """llama-server's speculative options (name -> value; ``True`` for a flag), and the indices
    of their tokens."""
    found: dict[str, Any] = {}
    used: list[int] = []
    i = 1  # argv[0] is the program
    while i < len(argv):
        name, inline = _split(argv[i])
        if name in _LLAMA_FLAGS:
            found[name] = True
            used.append(i)
            i += 1
            continue
        if name.startswith("--spec-") or name in _LLAMA_VALUED:
            if inline is None and i + 1 >= len(argv):
                raise ConfigError(
                    f"the server command ends with {name} and no value",
                    "give the option its value",
                )
            found[name] = inline if inline is not None else argv[i + 1]
            used += [i] if inline is not None else [i, i + 1]
            i += 1 if inline is not None else 2
            continue
        i += 1
    return found, used


def _first(found: Mapping[str, Any], names: Sequence[str]) -> Any:
    return next((found[n] for n in names if n in found), None)


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def read_speculation(argv: Sequence[str]) -> ServedSpeculation | None:
    """How the server command ``argv`` speculates; ``None`` when it does not."""
    engine = engine_of(argv)
    if engine == LLAMA_SERVER:
        found, used = _llama(argv)
        model = _first(found, _LLAMA_DRAFT_MODEL) or _first(found, _LLAMA_DRAFT_REPO)
        kind = found.get("--spec-type")
        if kind is not None and str(kind).strip() in ("", "none"):
            kind = None
        if kind is None and model is not None:
            kind = "draft-simple"
        if kind is None and found.get("--spec-default"):
            kind = "default"
        if kind is None:
            return None
        return ServedSpeculation(
            engine=engine,
            method=str(kind),
            draft_tokens=_int(_first(found, _LLAMA_DRAFT_MAX)),
            draft_model=None if model is None else str(model),
            settings=found,
            tokens=tuple(argv[i] for i in used),
        )
    config, used = _vllm(argv)
    if not config:
        return None
    method = config.get("method")
    model = config.get("model")
    if method is None:  # vLLM infers it from the draft model's name; "draft_model" otherwise
        method = "draft_model" if model is not None else "unknown"
    return ServedSpeculation(
        engine=engine,
        method=str(method),
        draft_tokens=_int(config.get("num_speculative_tokens")),
        draft_model=None if model is None else str(model),
        settings=config,
        tokens=tuple(argv[i] for i in used),
    )


def plain_command(argv: Sequence[str]) -> list[str]:
    """``argv`` with every speculative option removed (every other token in its place)."""
    used = _llama(argv)[1] if engine_of(argv) == LLAMA_SERVER else _vllm(argv)[1]
    drop = set(used)
    return [arg for i, arg in enumerate(argv) if i not in drop]


def plain_engine(engine: EngineSettings) -> EngineSettings | None:
    """``engine`` with its one ``serve`` command made plain; ``None`` when it serves an
    endpoint, several replicas, or a command that does not speculate."""
    from dataclasses import replace
    from shlex import join

    from gate.engines.serve import parse_command

    commands = engine.serve_commands
    if len(commands) != 1 or engine.endpoints:
        return None
    argv = parse_command(commands[0])
    if read_speculation(argv) is None:
        return None
    return replace(engine, serve=join(plain_command(argv)))


def require_served_speculation(serve: Sequence[str] | None, replicas: int = 1) -> None:
    """The served build the speculative tier measures: one server gate starts, whose command
    speculates (each refusal one line, exit 4). ``serve`` is ``None`` for an ``--endpoint``."""
    from gate.engines.secrets import mask_argv

    if serve is None:
        raise ConfigError(
            "the speculative tier compares a served build with the same server without"
            " speculation, and gate cannot start that one for an --endpoint",
            "give the server's command with --serve, so gate starts it with and without its"
            " speculative options",
        )
    if replicas != 1:
        raise ConfigError(
            f"the speculative tier measures one server, and {replicas} replicas are served",
            "give one --serve command",
        )
    if read_speculation(serve) is None:
        shown = " ".join(mask_argv(serve))
        raise ConfigError(
            f"the speculative tier measures speculative decoding, and the served command does"
            f" not speculate: {shown}",
            "add the engine's speculative options (vLLM: --speculative-config"
            ' \'{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}\';'
            " llama-server: --spec-type ngram-simple or -md DRAFT.gguf), or drop the tier",
        )


__all__ = [
    "LLAMA_SERVER",
    "VLLM",
    "ServedSpeculation",
    "engine_of",
    "plain_command",
    "plain_engine",
    "read_speculation",
    "require_served_speculation",
]

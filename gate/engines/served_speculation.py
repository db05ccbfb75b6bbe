"""Whether a server command speculates, how, and the same command without speculation.

A served build's speculative decoding is set on the engine's own command line;
gate reads it there (:func:`read_speculation`) and writes the *plain* command,
the same server with every speculative option removed (:func:`plain_command`),
which the speculative tier starts beside the speculative one for the lossless
comparison and the speed-up (docs/speculative.md, "Served").

What is read is the engine's: the dialect that claims the command
(:func:`gate.engines.registry.dialect_for_command`) reads its speculative
options (:meth:`~gate.engines.dialect.EngineDialect.read_speculation`: vLLM's
``--speculative-config``, :mod:`gate.engines.vllm.dialect`; llama-server's draft
model and ``--spec-*`` options, :mod:`gate.engines.llama_cpp.dialect`) and names
the tokens that set them; a command no dialect claims speculates not, as far as
gate can tell.

The plain command keeps every other token in its place, so the plain server
is the same build (weights, dtype, context, port rules) without the drafter.
Values are read from the command as given; anything recorded of it is masked
(:mod:`gate.engines.secrets`: the speculative options never carry a secret,
and the command itself is only ever recorded masked).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from gate.engines.dialect import ServedSpeculation
from gate.errors import ConfigError

if TYPE_CHECKING:
    from gate.engines.settings import EngineSettings


def read_speculation(argv: Sequence[str]) -> ServedSpeculation | None:
    """How the server command ``argv`` speculates (its engine's dialect reads it); ``None`` when
    it does not."""
    from gate.engines.registry import dialect_for_command

    return dialect_for_command(argv).read_speculation(argv)


def plain_command(argv: Sequence[str]) -> list[str]:
    """``argv`` with every speculative option removed (every other token in its place)."""
    from gate.engines.registry import dialect_for_command

    drop = set(dialect_for_command(argv).speculative_tokens(argv))
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
        from gate.engines.registry import dialects

        hints = "; ".join(
            f"{d.server_name or d.name}: {d.speculation_hint()}"
            for d in dialects()
            if d.speculation_hint()
        )
        raise ConfigError(
            f"the speculative tier measures speculative decoding, and the served command does"
            f" not speculate: {shown}",
            f"add the engine's speculative options ({hints}), or drop the tier",
        )


__all__ = [
    "ServedSpeculation",
    "plain_command",
    "plain_engine",
    "read_speculation",
    "require_served_speculation",
]

"""A ``gguf-*`` recipe run by llama.cpp (``--engine llama.cpp``): the file made, served, gated, stopped.

:func:`open_made_engine` makes the recipe's file (:func:`gate.engines.llama_cpp.make.make_gguf`),
then goes through the serve machinery every ``--serve`` build uses
(:func:`gate.engines.opening.open_engine`: :class:`~gate.engines.serve.ManagedServer`
starts the command on a free loopback port, waits for ``/health``, keeps its
log and always stops it), with the command :func:`server_command` writes::

    <llama.cpp>/bin/llama-server -m FILE.gguf -c SLOTS*4096 --parallel SLOTS -t CORES --no-webui

:data:`SLOT_CONTEXT` tokens per slot hold the tiers' prompts with their
continuations (the fidelity tier's longest reference, the long-context tiers
up to their cut), and :data:`SLOTS` requests run at once (gate's
``max_concurrency`` for this engine is the same number, so no request waits
for a slot); ``-t`` is the machine's cores.

The backend is the engine's own (:class:`~gate.engines.http.HTTPBackend`,
which scores, generates and times through llama-server), wrapped so that its
provenance also states the recipe, the file (sha256, tensor types written),
``engine: llama.cpp`` with the build that made and runs it, and
``gguf_runtime: llama.cpp``, and so that the recipe proves it acted the way it
does in process: the tensors the file holds in the recipe's type
(:mod:`gate.engines.llama_cpp.written`).
"""

from __future__ import annotations

import contextlib
import os
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gate.engines.llama_cpp.install import ENGINE, LlamaCpp, require
from gate.engines.llama_cpp.make import MadeGGUF, make_gguf
from gate.engines.llama_cpp.written import activity
from gate.engines.settings import EngineSettings
from gate.models.model_spec import ModelSpec
from gate.models.recipes import Recipe
from gate.provenance import ModelProvenance

if TYPE_CHECKING:
    from gate.models.backends.base import Backend

#: Tokens of context per server slot.
SLOT_CONTEXT = 4096
#: Server slots: requests llama-server computes at once.
SLOTS = 4


def server_command(llama: LlamaCpp, model: Path, *, slots: int = SLOTS) -> str:
    """The llama-server command line for the made file (module doc); no ``--port``: the
    serve machinery appends a free one (and ``--host 127.0.0.1``)."""
    argv = [str(llama.server), "-m", str(model), "-c", str(SLOT_CONTEXT * slots)]
    argv += ["--parallel", str(slots), "-t", str(os.cpu_count() or 1), "--no-webui"]
    return shlex.join(argv)


def engine_for(
    llama: LlamaCpp, made: MadeGGUF, base: EngineSettings | None = None
) -> EngineSettings:
    """The engine settings that serve ``made`` (``base``'s other settings kept, when given)."""
    import dataclasses

    command = server_command(llama, made.path)
    if base is None:
        return EngineSettings(serve=command, max_concurrency=SLOTS)
    return dataclasses.replace(base, serve=command, endpoint=None)


class MadeServed:
    """The served backend of a made file: everything is the engine backend's, but the
    provenance also states the made file (module doc) and ``activity`` proves the recipe."""

    def __init__(self, inner: Backend, made: MadeGGUF) -> None:
        self.inner = inner
        self.made = made
        self.activity = activity(made.recipe, made.quant, made.written)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def provenance(self) -> ModelProvenance:
        """The engine's provenance with the made file's facts over it."""
        return self.inner.provenance().with_facts(self.made.facts(ENGINE))


@contextlib.contextmanager
def open_made_engine(
    spec: ModelSpec, recipe: Recipe, *, log_path: Path, base: EngineSettings | None = None
) -> Iterator[Backend]:
    """``recipe``'s file made from ``spec``, served by llama-server and connected (stopped on
    exit, however the block ends). ``spec`` also names the tokenizer the server is checked
    against (the baseline's)."""
    from gate.engines.opening import open_engine

    llama = require(f"--engine {ENGINE}")
    made = make_gguf(spec, recipe, llama=llama)
    engine = engine_for(llama, made, base)
    with open_engine(spec, engine, log_path=log_path, env=llama.tool_env()) as backend:
        served: Any = MadeServed(backend, made)
        yield served


__all__ = [
    "SLOTS",
    "SLOT_CONTEXT",
    "MadeServed",
    "engine_for",
    "open_made_engine",
    "server_command",
]

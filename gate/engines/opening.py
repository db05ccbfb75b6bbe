"""Point gate at a serving engine: an existing endpoint, or a server gate runs itself.

:class:`~gate.engines.settings.EngineSettings` is what a run config
(``gate.toml``) or the command line says about the engine; :func:`open_engine`
turns it, with the
:class:`~gate.models.model_spec.ModelSpec` whose tokenizer the reference pack was
recorded with, into a connected :class:`~gate.engines.http.HTTPBackend`:

* ``endpoint = "http://host:8000/v1"``: a server someone else runs; gate
  connects, checks the tokenizer and records provenance;
* ``serve = "python -m vllm.entrypoints.openai.api_server --model ... -tp 8"``:
  gate starts the command (:class:`~gate.engines.serve.ManagedServer`: own
  process group, ``/health`` wait, the log kept as ``<log_dir>/server.log``)
  and stops it when the ``with`` block ends, however it ends.

The served settings gate can read from a ``serve`` command line (quantization,
dtype, parallel sizes, context length, KV-cache dtype) go into provenance
beside what the server reports itself.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gate.engines.serve import ManagedServer
from gate.engines.settings import EngineSettings
from gate.errors import ConfigError
from gate.models.model_spec import ModelSpec

if TYPE_CHECKING:  # the backend (numpy, the tokenizer) is imported when an engine opens
    from gate.engines.http import HTTPBackend
    from gate.engines.replicas import ReplicaBackend, Warn

#: Server log file name inside ``log_dir`` (a report artifact).
SERVER_LOG = "server.log"

#: Command-line options of vLLM (and SGLang, where they agree) recorded as served settings.
_SERVED_OPTIONS: Mapping[str, tuple[str, ...]] = {
    "quantization": ("--quantization", "-q"),
    "dtype": ("--dtype",),
    "kv_cache_dtype": ("--kv-cache-dtype",),
    "tensor_parallel_size": ("--tensor-parallel-size", "-tp", "--tp-size", "--tp"),
    "pipeline_parallel_size": ("--pipeline-parallel-size", "-pp", "--pp-size"),
    "data_parallel_size": ("--data-parallel-size", "-dp", "--dp-size"),
    "max_model_len": ("--max-model-len", "--context-length"),
    "max_logprobs": ("--max-logprobs",),
    "model": ("--model", "--model-path"),
    "served_model_name": ("--served-model-name",),
}
_SERVED_FLAGS: Mapping[str, str] = {"enforce_eager": "--enforce-eager"}


def served_settings(argv: Sequence[str]) -> dict[str, Any]:
    """The served settings a server command line states (``--name value`` or ``--name=value``)."""
    out: dict[str, Any] = {}
    for key, names in _SERVED_OPTIONS.items():
        for i, arg in enumerate(argv):
            for name in names:
                if arg == name and i + 1 < len(argv):
                    out[key] = argv[i + 1]
                elif arg.startswith(name + "="):
                    out[key] = arg.split("=", 1)[1]
    for key, flag in _SERVED_FLAGS.items():
        if flag in argv:
            out[key] = True
    for key in (
        "tensor_parallel_size",
        "pipeline_parallel_size",
        "data_parallel_size",
        "max_model_len",
        "max_logprobs",
    ):
        if key in out:
            with contextlib.suppress(ValueError):
                out[key] = int(out[key])
    return out


def replica_log(path: Path, index: int) -> Path:
    """The log of replica ``index`` (from 0): ``path`` itself, then ``server-2.log``, ..."""
    return path if index == 0 else path.with_name(f"{path.stem}-{index + 1}{path.suffix}")


@contextlib.contextmanager
def open_engine(
    tokenizer_spec: ModelSpec,
    engine: EngineSettings,
    *,
    log_dir: Path | None = None,
    log_path: Path | None = None,
    env: Mapping[str, str] | None = None,
    warn: Warn | None = None,
) -> Iterator[HTTPBackend | ReplicaBackend]:
    """A connected backend for ``engine``; a server started here is stopped on exit.

    ``tokenizer_spec`` names the model whose tokenizer gate uses locally (the
    reference pack's); the server must agree with it (BaselineError, exit 4).
    A started server logs to ``log_path``, else ``<log_dir>/server.log``, and
    runs with ``env`` added to its environment (e.g. ``VLLM_CPU_KVCACHE_SPACE``).
    Only ``engine``'s own build is opened (its baseline engine is another call).

    Several replicas (``serve``/``endpoint`` lists) are opened one after another
    (replica ``i`` > 0 logs to :func:`replica_log`), checked to be one build and
    returned as one :class:`~gate.engines.replicas.ReplicaBackend`;
    ``warn`` receives its warning lines (a dropped replica).
    """
    from gate.engines.replicas import ReplicaBackend

    if log_path is None and log_dir is not None:
        log_path = Path(log_dir) / SERVER_LOG
    if engine.replicas == 1:
        with _open_one(tokenizer_spec, engine, log_path, env) as backend:
            yield backend
        return
    with contextlib.ExitStack() as stack:
        opened = [
            stack.enter_context(
                _open_one(
                    tokenizer_spec,
                    engine.replica(i),
                    replica_log(log_path, i) if log_path is not None else None,
                    env,
                    connect=False,
                )
            )
            for i in range(engine.replicas)
        ]
        replicas = ReplicaBackend(opened, warn=warn)
        replicas.connect()  # the same build on every replica, before anything is measured
        yield replicas


@contextlib.contextmanager
def _open_one(
    tokenizer_spec: ModelSpec,
    engine: EngineSettings,
    log_path: Path | None,
    env: Mapping[str, str] | None,
    *,
    connect: bool = True,
) -> Iterator[HTTPBackend]:
    """One server (``engine`` names one ``serve`` or one ``endpoint``), connected unless
    ``connect`` is false (the replicas connect together, each named in its errors)."""
    from gate.engines.http import HTTPBackend

    if engine.serve is None:
        assert isinstance(engine.endpoint, str)
        backend = HTTPBackend(engine.settings_for(engine.endpoint), tokenizer_spec)
        if connect:
            backend.connect()
        yield backend
        return
    if log_path is None:
        raise ConfigError("a started server needs a log file", "give log_dir or log_path")
    assert isinstance(engine.serve, str)
    with ManagedServer(
        engine.serve,
        log_path=log_path,
        startup_timeout=engine.startup_timeout_s,
        env=env,
    ) as server:
        backend = HTTPBackend(
            engine.settings_for(server.base_url),
            tokenizer_spec,
            liveness=server.failure,
            serve_command=server.recorded_argv,
            served_settings=served_settings(server.argv),
            server_log=server.log_path,
        )
        if connect:
            backend.connect()
        yield backend

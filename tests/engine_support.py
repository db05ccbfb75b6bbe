"""The real serving engine for tests marked ``engine``: set up once, started per need.

:func:`engine_python` runs ``scripts/setup_engine.sh`` (which installs vLLM's
CPU build into its own cached environment the first time and reuses it
afterwards) and returns that environment's python. :func:`vllm_command` is
the server command line for the packaged demo model; :func:`engine_env` keeps
the engine's compile caches in :func:`compile_cache_dir` (beside the cached
environment, one per vLLM version), its KV cache small and its model worker in
the engine-core process. :func:`llama_server_path` is :func:`engine_python`'s
counterpart for llama.cpp (``scripts/setup_engine.sh llama.cpp``;
``GATE_LLAMA_CPP_DIR`` names a build to use instead).
"""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from gate.models.model_spec import demo_model_dir

if TYPE_CHECKING:
    from gate.engines.http import HTTPBackend

REPO = Path(__file__).resolve().parents[1]
SETUP = REPO / "scripts" / "setup_engine.sh"
#: The committed demo baselines (float32 reference pack included).
DEMO_BASELINE = REPO / "gate" / "assets" / "baselines" / "demo"
#: The demo model has 1,024 positions; the server may not claim more.
MAX_MODEL_LEN = 1024
#: Tokens the engine's scheduler takes per step: prompts longer than this are
#: prefilled in several chunks (a prompt "longer than one batch").
MAX_BATCHED_TOKENS = 256
#: The demo model's vocabulary: asking for that many log-probs makes a served KL exact.
DEMO_VOCAB = 4096
#: Log-probs per position the server allows: the whole vocabulary (the fidelity tier asks
#: for 64 by default, twice the demo pack's k of 32; a test may ask for every token).
MAX_LOGPROBS = DEMO_VOCAB

_PYTHON: list[str] = []


def engine_python() -> str:
    """The engine environment's python (set up by scripts/setup_engine.sh when missing)."""
    if _PYTHON:
        return _PYTHON[0]
    done = subprocess.run(
        ["bash", str(SETUP)], capture_output=True, text=True, timeout=3600, check=False
    )
    if done.returncode != 0:
        tail = " | ".join(done.stderr.strip().splitlines()[-3:])
        pytest.fail(f"scripts/setup_engine.sh failed ({done.returncode}): {tail}", pytrace=False)
    python = done.stdout.strip().splitlines()[-1]
    _PYTHON.append(python)
    return python


_LLAMA_SERVER: list[str] = []


def llama_server_path() -> str:
    """llama-server's path: ``bash scripts/setup_engine.sh llama.cpp`` builds llama.cpp once
    (about 4-6 minutes on 2 cores), then reuses it, and prints the path last. A machine that
    cannot build it (no CMake or compiler: the script's exit 4) skips the test with the
    script's own line; any other failure fails it. ``GATE_LLAMA_CPP_DIR`` names a build
    directory to use instead (no script run)."""
    if _LLAMA_SERVER:
        return _LLAMA_SERVER[0]
    named = os.environ.get("GATE_LLAMA_CPP_DIR")  # a build made elsewhere (install.DIR_ENV)
    if named:
        _LLAMA_SERVER.append(str(Path(named).expanduser() / "bin" / "llama-server"))
        return _LLAMA_SERVER[0]
    done = subprocess.run(
        ["bash", str(SETUP), "llama.cpp"], capture_output=True, text=True, timeout=3600, check=False
    )
    tail = " | ".join(done.stderr.strip().splitlines()[-3:])
    if done.returncode == 4:
        pytest.skip(f"llama.cpp cannot be built here: {tail}")
    if done.returncode != 0:
        pytest.fail(f"setup_engine.sh llama.cpp failed ({done.returncode}): {tail}", pytrace=False)
    path = done.stdout.strip().splitlines()[-1]
    _LLAMA_SERVER.append(path)
    return path


def compile_cache_dir() -> Path:
    """The compile caches of the test servers, beside the engine's cached environment and
    kept with it, one per vLLM version (``vllm-cpu-<version>.compile``).

    The first log-prob request of a server compiles vLLM's sampler kernels with
    torch's inductor (C++ on the CPU): 20 s when the cache is empty, 3 s when it holds
    them. Every test server of every run on this machine reuses them, as the engine
    environment itself is reused (scripts/setup_engine.sh)."""
    environment = Path(engine_python()).parents[1]
    path = environment.with_name(environment.name + ".compile")
    path.mkdir(parents=True, exist_ok=True)
    return path


def engine_env(cache_dir: Path) -> dict[str, str]:
    """Environment of a test server: compile caches under ``cache_dir``, 1 GiB of KV cache,
    offline, and the model worker inside vLLM's engine-core process
    (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, which vLLM's CPU platform turns into its
    one-process executor): the API server and the engine core stay two processes, as users
    run them, without a third that imports vLLM and torch again (10 s of a start on an
    idle machine, about 25 s beside the other pytest worker)."""
    return {
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
        "TORCHINDUCTOR_CACHE_DIR": str(cache_dir / "inductor"),
        "VLLM_CACHE_ROOT": str(cache_dir / "vllm"),
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "HF_HUB_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE"),
    }


def vllm_command(python: str, *extra: str) -> str:
    """vLLM's OpenAI server on the demo model (gate adds ``--host``/``--port``)."""
    argv = [
        python,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(demo_model_dir()),
        "--served-model-name",
        "demo",
        "--enforce-eager",
        "--max-model-len",
        str(MAX_MODEL_LEN),
        "--max-num-batched-tokens",
        str(MAX_BATCHED_TOKENS),
        "--max-logprobs",
        str(MAX_LOGPROBS),
        *extra,
    ]
    return shlex.join(argv)


def api_server_pid(backend: HTTPBackend) -> int:
    """The process id of the API server that gate started for ``backend`` (its command line)."""
    import psutil

    command = list(backend.provenance().serve_command or ())
    for proc in psutil.process_iter(["pid", "cmdline"]):
        if proc.info["cmdline"] == command:
            return int(proc.info["pid"])
    raise AssertionError("the API server process was not found")


def serve_demo(extra: list[str], cache: Path, log_dir: Path, **kw: Any) -> Iterator[HTTPBackend]:
    """The demo model behind vLLM with ``extra`` server flags, warmed up; stopped on exit."""
    from gate.engines.opening import open_engine
    from gate.engines.settings import EngineSettings
    from gate.models.backends.base import ScoreRequest
    from gate.models.model_spec import ModelSpec

    engine = EngineSettings(
        serve=vllm_command(engine_python(), *extra),
        max_concurrency=8,
        startup_timeout_s=1800,
        request_timeout_s=600,
        **kw,
    )
    with open_engine(
        ModelSpec.parse("demo"), engine, log_dir=log_dir, env=engine_env(cache)
    ) as backend:
        # the first log-prob request compiles the engine's kernels: warm up once
        backend.score([ScoreRequest([1, 4], [47, 80])], top_k=2, full=True)
        yield backend


def demo_fidelity_settings() -> Any:
    """The fidelity settings the committed demo baseline was recorded with."""
    from gate.store.baseline import load_baseline_file
    from gate.tiers.registry import build_settings

    stored = load_baseline_file(DEMO_BASELINE / "0001-fp32.json")
    return build_settings("fidelity", stored.provenance.tier_settings["fidelity"])


#: Pack prompts the bfloat16 server and the in-process bfloat16 build are compared on (a
#: third of the demo pack: CGA on 32 prompts x 128 tokens, 4,096 positions).
BF16_PROMPTS = 32


def inprocess_fidelity(dtype: str, limit: int | None = None) -> dict[str, Any]:
    """Fidelity measurements (by name) of the demo model loaded in process in ``dtype`` against
    the demo pack (its first ``limit`` prompts; all when ``None``)."""
    from gate.models.backends.loading import load_backend
    from gate.models.model_spec import ModelSpec
    from gate.store.reference import load_pack
    from gate.tiers import fidelity

    settings = replace(demo_fidelity_settings(), limit=limit)
    pack = load_pack(DEMO_BASELINE / "0001-fp32.reference.safetensors")
    backend = load_backend(ModelSpec.parse("demo", dtype=dtype))
    prompts = fidelity.load_prompts(demo_fidelity_settings())  # the pack's whole prompt set
    measured = fidelity.measure(backend, pack, settings, prompts=prompts)
    return {m.name: m for m in measured}

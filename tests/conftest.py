"""Shared fixtures: small real models made on the spot, never downloaded."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

# Extension modules that cannot be imported twice in one process: imported before any
# in-process pytester run, which drops the modules a run imported when it ends.
import numpy  # noqa: F401
import pytest
import scipy.stats  # noqa: F401

# A suite started in the background of a non-interactive shell (`bash .ci/run &`)
# inherits SIGINT ignored, and so would every gate it starts: gate keeps an inherited
# SIG_IGN on purpose (nohup's choice), so the interrupt tests would see no interrupt.
# A Python handler here is reset to the default in each child at exec.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

if TYPE_CHECKING:
    from gate.engines.http import HTTPBackend
    from gate.models.backends.hf import HFBackend
    from gate.models.model_spec import ModelSpec

pytest_plugins = ["pytester"]

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Under pytest-xdist (scripts/test.sh runs two workers on the two cores) each
# worker computes with one thread: two workers of two threads each only contend.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)

#: Set by pytest-xdist in each worker's environment. A pytest session that a test
#: starts (pytester, a subprocess, ``gate run`` in process) is no xdist worker:
#: pytest-benchmark would disable itself there, as under xdist.
XDIST_VARIABLES = ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID")


@pytest.fixture(autouse=True)
def _not_an_xdist_worker_inside(monkeypatch: pytest.MonkeyPatch) -> None:
    """The environment a test sees is a user's shell's, without pytest-xdist's variables."""
    for name in XDIST_VARIABLES:
        monkeypatch.delenv(name, raising=False)


# The suite's xdist groups (scripts/test.sh: --dist loadgroup), a hook of this conftest.
from tests.xdist_groups import pytest_collection_modifyitems  # noqa: E402, F401

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)

_CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "What is 7 times 8? The answer is 56.",
    "Please reply in JSON with key name.",
    "Summarize the following text in one sentence.",
    "Write a Python function that adds two numbers.",
    "Bonjour, comment allez-vous aujourd'hui ?",
    "The capital of France is Paris. Law, medicine and business.",
] * 20


def make_tiny_llama(path: Path, *, hidden: int = 64, layers: int = 2, seed: int = 0) -> Path:
    """A randomly initialised Llama with a BPE tokenizer that splits digits, saved as safetensors."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    specials = [
        "<unk>",
        "<s>",
        "</s>",
        "<pad>",
        "<|user|>",
        "<|assistant|>",
        "<|system|>",
        "<|end|>",
    ]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=384,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(_CORPUS, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="<|end|>",
        unk_token="<unk>",
        pad_token="<pad>",
    )
    fast.chat_template = CHAT_TEMPLATE
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(fast),
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=512,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path, safe_serialization=True)
    fast.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Llama (hidden 64, 2 layers) with a chat template, on disk."""
    return make_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="session")
def tiny_backend(tiny_model_dir: Path) -> HFBackend:
    """The tiny Llama loaded once as the gate loads it (float32, CPU), for every test.

    Shared: a test may read it, or change it and restore it before returning
    (a hook, a config value); a test that damages a model loads its own copy.
    """
    from gate.models.backends.loading import load_backend
    from gate.models.model_spec import ModelSpec

    return load_backend(ModelSpec.parse(str(tiny_model_dir), dtype="float32", device="cpu"))


@pytest.fixture(scope="session")
def demo_backend() -> HFBackend:
    """The committed demo model loaded once as the gate loads it (skips when not committed).

    Shared like :func:`tiny_backend`: read it, never damage it.
    """
    from gate.models.backends.loading import load_backend
    from gate.models.model_spec import ModelSpec, demo_model_dir

    if not (demo_model_dir() / "model.safetensors").is_file():
        pytest.skip("the demo model is not committed")
    return load_backend(ModelSpec.parse("demo", device="cpu"))


# ---------------------------------------------- the model behind the fake OpenAI servers


@pytest.fixture(scope="module")
def local(tiny_model_dir: Path) -> HFBackend:
    """The tiny Llama loaded for one module (float32, CPU, one torch thread): the model the
    fake OpenAI-compatible servers of that module answer with (tests/fakes/openai_server.py)."""
    import torch

    from gate.models.backends.loading import load_backend
    from gate.models.model_spec import ModelSpec

    torch.set_num_threads(1)
    return load_backend(ModelSpec.parse(str(tiny_model_dir), dtype="float32", device="cpu"))


@pytest.fixture(scope="module")
def spec(tiny_model_dir: Path) -> ModelSpec:
    """The tiny Llama as a served backend names its tokenizer (the default dtype)."""
    from gate.models.model_spec import ModelSpec

    return ModelSpec.parse(str(tiny_model_dir))


# ------------------------------------------------------------------ the real serving engine


@pytest.fixture(scope="session")
def engine_cache() -> Path:
    """One compile cache for every vLLM server (later starts, and later runs, reuse it):
    :func:`tests.engine_support.compile_cache_dir`."""
    from tests.engine_support import compile_cache_dir

    return compile_cache_dir()


@pytest.fixture(scope="session")
def served(engine_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HTTPBackend]:
    """The demo model in float32 behind vLLM's OpenAI server, shared by the engine tests."""
    from tests.engine_support import serve_demo

    yield from serve_demo(["--dtype", "float32"], engine_cache, tmp_path_factory.mktemp("fp32"))


@pytest.fixture(scope="session")
def served_bf16(
    engine_cache: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[HTTPBackend]:
    """The demo model in bfloat16 (weights and activations) behind vLLM: the compressed
    build the engine tests gate, shared by them (one server start per session).

    Not vLLM's FP8 (``--quantization fp8_per_channel``): its CPU kernels need AMX tiles,
    and without them (this machine's virtual CPU) vLLM falls back to torch's emulated
    ``_scaled_mm``, 0.8 s for one 35 x 256 x 768 product against 0.1 ms in bfloat16:
    30-50 s a request for the demo model, 25 minutes of the suite."""
    from tests.engine_support import serve_demo

    yield from serve_demo(["--dtype", "bfloat16"], engine_cache, tmp_path_factory.mktemp("bf16"))


@pytest.fixture(scope="session")
def inprocess_bf16_fidelity() -> dict[str, Any]:
    """The demo model's fidelity in bfloat16, in process, against the committed demo pack's
    first ``BF16_PROMPTS`` prompts with the settings it was recorded with: the figure the
    served bfloat16 build is held beside."""
    from tests.engine_support import BF16_PROMPTS, inprocess_fidelity

    return inprocess_fidelity("bfloat16", limit=BF16_PROMPTS)


@pytest.fixture(scope="module")
def one_thread() -> Iterator[None]:
    """One torch thread for the module: on 2 shared cores a second thread only adds contention and stalls timings."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def smollm2_fidelity_base(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A store holding SmolLM2's fidelity baseline (ref ``base``, recorded in process with
    ``[tiers.fidelity] limit = 24, max_new_tokens = 32``), its run config, a run config
    gating the first 8 of its prompts (``config_first8``: the checks that need no more)
    and a work folder: recorded once for the llama.cpp test files, which
    tests/xdist_groups.py keeps on one worker (``SHARED_BASELINES``)."""
    from tests.cli_support import run_gate
    from tests.gguf_support import smollm2_file
    from tests.llama_cpp_support import built_llama_cpp

    smollm2_file()
    built_llama_cpp()
    root = tmp_path_factory.mktemp("smollm2-base")
    config = root / "gate.toml"
    config.write_text("[tiers.fidelity]\nlimit = 24\nmax_new_tokens = 32\n", encoding="utf-8")
    store = root / "store"
    done = run_gate(
        "baseline", "record", "--model", "smollm2", "--ref", "base", "--tiers", "fidelity",
        "--config", str(config), "--store", str(store), cwd=root,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    first8 = root / "first8.toml"
    first8.write_text("[tiers.fidelity]\nlimit = 8\nmax_new_tokens = 32\n", encoding="utf-8")
    return {"root": root, "config": config, "config_first8": first8, "store": store}

"""A GGUF file as a model: what it holds, read before transformers loads it.

transformers loads a ``.gguf`` (``from_pretrained(directory, gguf_file=name)``)
by dequantizing every tensor to float32 (or the requested dtype), so the build
the gate measures carries llama.cpp's weight quantization error but runs
transformers' kernels (docs/gguf.md). What the gate records of the file:

* ``sha256`` — of the whole file (weights, tokenizer and metadata in one);
* ``architecture`` — ``general.architecture`` (``llama``, ``qwen2`` ...);
* ``tensor_types`` — ``{ggml type name: tensor count}``, e.g.
  ``{"F32": 61, "Q4_1": 211}`` (a "Q4_K_M" file mixes several types).

The header is read in one pass by :mod:`gate.models.gguf_header` (memory-mapped,
nothing dequantized; the type names and block sizes are the ``gguf`` package's).
A file that is not GGUF, is truncated, or names an architecture transformers has
no GGUF mapping for fails here, in one line, before the weights load.
"""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from gate.cache import cache_root
from gate.errors import ModelLoadError
from gate.models.gguf_header import HeaderError, check_tensor_data, read_header
from gate.provenance import sha256_file

#: Keys of transformers' GGUF tables that are not architectures.
_NOT_ARCHITECTURES = frozenset({"general", "tokenizer"})
#: What to do about an architecture or file transformers cannot load.
DOCS_HINT = "see docs/gguf.md for the architectures and quant types transformers loads"


@dataclass(frozen=True)
class GGUFSummary:
    """What a GGUF file is: its path, digest, architecture and tensor types."""

    path: Path
    sha256: str
    architecture: str
    tensor_types: dict[str, int]


def supported_architectures() -> tuple[str, ...]:
    """The ``general.architecture`` values transformers loads: its legacy GGUF table
    (dequantized with the ``gguf`` package) and the architectures of its newer
    block-keeping loader (``GGUF_ARCHS``, dequantized by transformers itself)."""
    from transformers.integrations.gguf.gguf_conversion_mapping import GGUF_ARCHS
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    names = [a for a in GGUF_SUPPORTED_ARCHITECTURES if a not in _NOT_ARCHITECTURES]
    return tuple(dict.fromkeys([*names, *sorted(GGUF_ARCHS)]))


def _normalized(architecture: str) -> str:
    """transformers' own renaming of GGUF architecture names (``qwen2moe`` -> ``qwen2_moe``)."""
    for raw, name in (
        ("qwen2moe", "qwen2_moe"),
        ("qwen3moe", "qwen3_moe"),
        ("gpt-oss", "gpt_oss"),
        ("minimax-m2", "minimax_m2"),
        ("t5encoder", "t5"),
    ):
        if raw in architecture:
            return name
    return architecture


def read_gguf(path: Path) -> GGUFSummary:
    """The :class:`GGUFSummary` of ``path`` (:class:`ModelLoadError`, exit 3, when unreadable).

    ``tensor_types`` counts each tensor's ggml type name, sorted by name. A summary
    is kept for the process, keyed by the resolved path, size and modification
    time (a rewritten file is read again).
    """
    stat = path.stat()
    return _read_gguf(path.resolve(), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=8)
def _read_gguf(path: Path, size: int, mtime_ns: int) -> GGUFSummary:
    try:
        from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType
    except ImportError:
        raise ModelLoadError(
            f"cannot read {path.name}: the gguf package is not installed", "pip install gguf"
        ) from None
    try:
        header = read_header(path)
        check_tensor_data(header, size, {int(t): s for t, s in GGML_QUANT_SIZES.items()})
    except (HeaderError, OSError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise ModelLoadError(
            f"cannot read {path.name}: not a GGUF file, or truncated ({first})",
            "copy or download the .gguf file again",
        ) from None
    architecture = header.strings.get("general.architecture")
    counts = Counter(GGMLQuantizationType(t.ggml_type).name for t in header.tensors)
    if not architecture:
        raise ModelLoadError(
            f"{path.name} names no general.architecture", "convert the model to GGUF again"
        )
    if _normalized(architecture) not in supported_architectures():
        raise ModelLoadError(
            f"transformers cannot load GGUF architecture {architecture!r} ({path.name})",
            DOCS_HINT,
        )
    return GGUFSummary(
        path=path,
        sha256=sha256_file(path),
        architecture=architecture,
        tensor_types=dict(sorted(counts.items())),
    )


__all__ = ["DOCS_HINT", "GGUFSummary", "read_gguf", "supported_architectures"]


def dequantized_cache() -> Path:
    """Where :func:`dequantized_dir` keeps its copies by default: ``<gate's cache>/models``."""
    return cache_root() / "models"


def _loader_versions() -> str:
    """The libraries that dequantize a GGUF here (transformers and gguf), with versions."""
    from importlib.metadata import version

    return f"transformers {version('transformers')}, gguf {version('gguf')}"


def dequantized_dir(path: Path, cache: Path | None = None) -> Path:
    """A safetensors copy of the GGUF at ``path`` (dequantized, float32), made once under
    ``cache`` (:func:`dequantized_cache` when ``None``) and reused.

    What it is for: recipes that quantize while loading (bitsandbytes) cannot be
    applied to a GGUF load (transformers takes one quantization config), and a
    dequantized directory loads in about a second where the GGUF is dequantized
    again on every load. The weights are the GGUF's own, dequantized exactly as
    ``from_pretrained(..., gguf_file=)`` does; ``save_pretrained`` refuses a
    GGUF-loaded model, so the same tensors are copied into a fresh model of the
    same config (its GGUF quantization record dropped). A copy is named by the
    file's digest and the versions of the libraries that dequantized it
    (``<first 16 hex of the file's sha256>-<first 8 hex of sha256("transformers X,
    gguf Y")>``): another file, or another transformers or gguf release, makes a
    copy of its own. The directory is written beside its final name and renamed
    into place: a reader never sees half of it.
    """
    import hashlib
    import shutil
    import tempfile

    cache = dequantized_cache() if cache is None else cache
    summary = read_gguf(path)
    loaders = hashlib.sha256(_loader_versions().encode()).hexdigest()[:8]
    target = cache / f"{summary.sha256[:16]}-{loaders}"
    if (target / "config.json").is_file():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name)
    config = model.config
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    fresh = AutoModelForCausalLM.from_config(config, dtype=model.dtype)
    fresh.load_state_dict(model.state_dict())
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=cache))
    try:
        fresh.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        try:
            staging.rename(target)
        except OSError:  # another process made it first
            if not (target / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target

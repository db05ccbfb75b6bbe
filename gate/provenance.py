"""Where a measurement came from: software, hardware, code revision, file hashes.

docs/contracts.md "Results JSON": provenance includes the gate version, the git commit,
and the environment (python, torch, transformers, the quantization kernel
packages' versions, device, GPU name and driver via pynvml when present). The model's own
provenance (weights hashes, recipe, quantized linear classes) comes from the
backend's ``provenance()`` as a :class:`ModelProvenance`: one frozen record with one
field per fact, read from and written to JSON documents only at the edge
(:meth:`ModelProvenance.from_document`, :meth:`ModelProvenance.to_document`), with
the one rule for "same tokenizer" (:meth:`ModelProvenance.tokenizer_identity`).

Nothing here imports torch: package versions are read with
:mod:`importlib.metadata`, so recording provenance costs milliseconds.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import platform
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from importlib import metadata
from pathlib import Path
from typing import Any

from gate import __version__
from gate.hw.fingerprint import cpu_model
from gate.hw.nvml import open_nvml

#: Distributions whose versions are recorded (name in the environment dict -> distribution);
#: ``None`` when not installed. Those that move the numbers are compared with the
#: baseline's by :mod:`gate.gating.versions` (version drift).
PACKAGES: tuple[tuple[str, str], ...] = (
    ("torch", "torch"),
    ("transformers", "transformers"),
    ("tokenizers", "tokenizers"),
    ("accelerate", "accelerate"),
    ("bitsandbytes", "bitsandbytes"),
    ("optimum_quanto", "optimum-quanto"),
    ("compressed_tensors", "compressed-tensors"),
    ("kernels", "kernels"),
    ("numpy", "numpy"),
)


def gate_version() -> str:
    """The installed gate version."""
    return __version__


def package_version(distribution: str) -> str | None:
    """Installed version of ``distribution``, or ``None`` when it is not installed."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def git_commit(cwd: Path | None = None) -> str | None:
    """The commit of the git checkout at ``cwd`` (``-dirty`` appended), or ``None``.

    ``GITHUB_SHA`` is used when git itself is unavailable (shallow CI images).
    """
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return os.environ.get("GITHUB_SHA") or None
    return f"{head}-dirty" if dirty else head or None


def sha256_file(path: Path, *, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file's bytes, read in chunks."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def gpus(nvml_module: Any | None = None) -> list[dict[str, Any]]:
    """Name, memory and driver of each NVIDIA GPU via :mod:`gate.hw.nvml`; empty when none.

    ``nvml_module`` replaces ``pynvml`` (tests pass a fake).
    """
    nvml = open_nvml(nvml_module)
    if nvml is None:
        return []
    try:
        driver = nvml.driver_version()
        return [
            {
                "index": index,
                "name": nvml.device_name(index),
                "memory_total_bytes": nvml.total_bytes(index),
                "driver": driver,
            }
            for index in range(nvml.device_count())
        ]
    except Exception:  # a half-working NVML must not fail a run
        return []
    finally:
        with contextlib.suppress(Exception):
            nvml.close()


def environment() -> dict[str, Any]:
    """The software and hardware a run happened on (the ``environment`` of docs/contracts.md "Results JSON")."""
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "packages": {key: package_version(dist) for key, dist in PACKAGES},
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "gpus": gpus(),
        "gate_version": gate_version(),
        "git_commit": git_commit(),
    }


# ------------------------------------------------------------------ the model's provenance


def _is_str(value: Any) -> bool:
    return isinstance(value, str)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_bool(value: Any) -> bool:
    return isinstance(value, bool)


def _is_int_or_str(value: Any) -> bool:
    return _is_int(value) or isinstance(value, str)


def _is_str_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _is_mapping(value: Any) -> bool:
    return isinstance(value, Mapping) and all(isinstance(key, str) for key in value)


def _is_mapping_list(value: Any) -> bool:
    return isinstance(value, list) and all(_is_mapping(item) for item in value)


def _is_str_mapping(value: Any) -> bool:
    return _is_mapping(value) and all(isinstance(item, str) for item in value.values())


def _is_int_mapping(value: Any) -> bool:
    return _is_mapping(value) and all(_is_int(item) for item in value.values())


def _fact(accepts: Callable[[Any], bool]) -> Any:
    """A typed fact of :class:`ModelProvenance`: ``None`` (unknown) by default.

    ``accepts`` says whether a document's value has the fact's type; a value it
    refuses stays verbatim in :attr:`ModelProvenance.extra`.
    """
    return field(default=None, metadata={"accepts": accepts})


@dataclass(frozen=True)
class ModelProvenance:
    """Where a model's measurements came from: identity, build, served settings, recorder notes.

    One fact, one field (``None``: unknown). The document form (the
    ``provenance`` of a baseline, the ``model`` of a measurements file, the
    ``candidate`` of the results JSON) is read with :meth:`from_document` and
    written with :meth:`to_document`, and nowhere else: a document goes round
    unchanged, keys, key order, nulls and unknown keys (:attr:`extra`) included.
    Mappings held here are copies and never mutated.
    """

    # -- what the model is
    #: The model as given to the gate (``--model``).
    model: str | None = _fact(_is_str)
    #: Human-readable identity (source, with the recipe or the endpoint).
    name: str | None = _fact(_is_str)
    #: Hub id or local directory the model was loaded from.
    source: str | None = _fact(_is_str)
    #: The model's slug (:func:`gate.slugs.model_slug`).
    slug: str | None = _fact(_is_str)
    #: Directory whose files were hashed.
    path: str | None = _fact(_is_str)
    revision: str | None = _fact(_is_str)
    #: Canonical recipe text (``"none"``: unmodified).
    recipe: str | None = _fact(_is_str)
    # -- a served model (the HTTP backend)
    #: ``"http"`` for a served model.
    backend: str | None = _fact(_is_str)
    #: The endpoint without any credential.
    endpoint: str | None = _fact(_is_str)
    #: The environment variable the API key was read from (never the key).
    api_key_env: str | None = _fact(_is_str)
    served_model: str | None = _fact(_is_str)
    served_model_root: str | None = _fact(_is_str)
    #: The serving engine (``vllm`` ...) and the version its server reported.
    engine: str | None = _fact(_is_str)
    engine_version: str | None = _fact(_is_str)
    served_settings: Mapping[str, Any] | None = _fact(_is_mapping)
    serve_command: tuple[str, ...] | None = _fact(_is_str_list)
    server_log: str | None = _fact(_is_str)
    #: ``prompt_logprobs`` or ``echo``.
    scoring_api: str | None = _fact(_is_str)
    tokenizer_check: str | None = _fact(_is_str)
    max_concurrency: int | None = _fact(_is_int)
    # -- the network
    model_type: str | None = _fact(_is_str)
    vocab_size: int | None = _fact(_is_int)
    #: ``<model_type>-v<vocab_size>``: builds of one family can be compared.
    model_family: str | None = _fact(_is_str)
    num_layers: int | None = _fact(_is_int)
    dtype_requested: str | None = _fact(_is_str)
    dtypes: tuple[str, ...] | None = _fact(_is_str_list)
    #: The dtype the model computes in (transformers' ``model.dtype``: its first floating
    #: parameter's; quantized storage such as uint8 is not it).
    compute_dtype: str | None = _fact(_is_str)
    #: Where the model ran (``cpu``, ``cuda:0``; with a device map, its first layer's device).
    device: str | None = _fact(_is_str)
    device_map: Mapping[str, Any] | None = _fact(_is_mapping)
    #: The quantization method the weights were loaded with.
    quantization: str | None = _fact(_is_str)
    #: Combined digest of the weight and config files, and each file's digest.
    weights_sha256: str | None = _fact(_is_str)
    weight_files: Mapping[str, str] | None = _fact(_is_str_mapping)
    #: Combined digest of the tokenizer files, and each file's digest.
    tokenizer_sha256: str | None = _fact(_is_str)
    tokenizer_files: Mapping[str, str] | None = _fact(_is_str_mapping)
    #: SHA-256 of the tokenizer's vocabulary (its ``token -> id`` table, whatever file
    #: format held it): the same for a model's GGUF file and its Hugging Face files.
    tokenizer_vocab_sha256: str | None = _fact(_is_str)
    # -- a GGUF file given as the model (``gate.models.gguf``)
    #: SHA-256 of the ``.gguf`` file, its ``general.architecture``, and
    #: ``{ggml tensor type: tensor count}`` (e.g. ``{"F32": 61, "Q4_1": 211}``).
    gguf_sha256: str | None = _fact(_is_str)
    gguf_architecture: str | None = _fact(_is_str)
    gguf_tensor_types: Mapping[str, int] | None = _fact(_is_int_mapping)
    #: A ``gguf-*`` recipe's file (``gate.engines.llama_cpp``): what ran it (``llama.cpp``, or
    #: ``dequantized``: transformers in process) and the llama.cpp build that made it.
    gguf_runtime: str | None = _fact(_is_str)
    gguf_made_with: str | None = _fact(_is_str)
    #: A speculative build's drafter (``gate.models.backends.speculative``): its recipe, kind,
    #: tokens proposed per step and, for a draft model, that model's recipe and source.
    speculative: Mapping[str, Any] | None = _fact(_is_mapping)
    #: Bytes of the parameters and buffers as stored (quantized ones included).
    parameter_bytes: int | None = _fact(_is_int)
    linear_classes: tuple[str, ...] | None = _fact(_is_str_list)
    linear_class_counts: Mapping[str, int] | None = _fact(_is_int_mapping)
    #: Whether a forward delay hook is installed.
    forward_delay: bool | None = _fact(_is_bool)
    #: Tensors missing, unexpected or of another shape, when measured anyway.
    incomplete_weights: Mapping[str, Any] | None = _fact(_is_mapping)
    #: Each batch that ran out of memory and was halved (``{operation, tried, fitted,
    #: device}``; :class:`gate.models.backends.batch_fit.BatchBackoff`); ``None``: none was.
    batch_backoffs: tuple[Mapping[str, Any], ...] | None = _fact(_is_mapping_list)
    # -- a KV-cache recipe (the chunked backend)
    cache_method: str | None = _fact(_is_str)
    #: Scoring chunk size, or ``"exact"``.
    score_chunk_size: int | str | None = _fact(_is_int_or_str)
    # -- what the recording session adds to a baseline
    #: The tier settings the baseline was recorded with (``{tier: {key: value}}``).
    tier_settings: Mapping[str, Any] | None = _fact(_is_mapping)
    fidelity_pack: str | None = _fact(_is_str)
    fidelity_prompts: int | None = _fact(_is_int)
    fidelity_prompts_truncated: int | None = _fact(_is_int)
    fidelity_prompts_empty: int | None = _fact(_is_int)
    fidelity_tokens_cut: int | None = _fact(_is_int)
    judge_validity_judges: tuple[str, ...] | None = _fact(_is_str_list)
    # -- the document form
    #: Keys no field holds: unknown ones (older or newer gates, other tools) and
    #: facts whose value is not of the fact's type, verbatim.
    extra: Mapping[str, Any] = field(default_factory=dict)
    #: The document's keys in order, a fact recorded as null included. A fact
    #: not named here is written after them (in field order) when known.
    document_keys: tuple[str, ...] = ()

    @classmethod
    def facts(cls) -> tuple[str, ...]:
        """The names of the typed facts, in field order."""
        return _FACTS

    @classmethod
    def from_document(cls, document: Mapping[str, Any]) -> ModelProvenance:
        """The provenance a JSON document states (each key kept: see :attr:`extra`)."""
        typed: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        for key, value in document.items():
            accepts = _ACCEPTS.get(key)
            if accepts is None or not (value is None or accepts(value)):
                extra[key] = value
            elif isinstance(value, list):
                typed[key] = tuple(value)
            elif isinstance(value, Mapping):
                typed[key] = dict(value)
            else:
                typed[key] = value
        return cls(**typed, extra=extra, document_keys=tuple(document))

    def to_document(self) -> dict[str, Any]:
        """The JSON document (``from_document(d).to_document() == d``, order included)."""
        known = {name: getattr(self, name) for name in _FACTS}
        out: dict[str, Any] = {}
        for key in self.document_keys:
            value = known.get(key)
            if value is not None:
                out[key] = _plain(value)
            elif key in self.extra:  # unknown, or a fact's value of another type (verbatim)
                out[key] = self.extra[key]
            elif key in known:
                out[key] = None
        for name, value in known.items():
            if name not in out and value is not None:
                out[name] = _plain(value)
        for key, value in self.extra.items():
            out.setdefault(key, value)
        return out

    @property
    def display_name(self) -> str | None:
        """What names the model in reports and ``gate merge``, the one rule: the first of
        ``model``, ``name``, ``id`` (a record of another tool), ``source``, ``path``, ``slug``."""
        for value in (self.model, self.name, self.extra.get("id"), self.source, self.path):
            if value:
                return str(value)
        return self.slug or None

    def updated(self, other: ModelProvenance) -> ModelProvenance:
        """Every fact ``other`` states (a null one included) over this one's (``{**a, **b}``)."""
        return self.with_facts(other.to_document())

    def with_facts(self, facts: Mapping[str, Any]) -> ModelProvenance:
        """``facts`` (flat document entries, e.g. a tier's notes) over this provenance's."""
        return ModelProvenance.from_document({**self.to_document(), **facts})

    def tokenizer_identity(self) -> str | None:
        """The sha256 that identifies the model's vocabulary, when known: the one rule.

        ``tokenizer_sha256`` when given (measurements from other tools); else the
        digest of the vocabulary file among ``tokenizer_files``
        (``tokenizer.json``, or ``tokenizer.model`` for sentencepiece). Chat
        template files are deliberately not part of the fallback.
        """
        if self.tokenizer_sha256:
            return self.tokenizer_sha256
        files = self.tokenizer_files or {}
        for name in ("tokenizer.json", "tokenizer.model"):
            if files.get(name):
                return files[name]
        return None


def tokenizers_differ(ours: str | None, theirs: str | None) -> bool:
    """Whether two tokenizer identities (:meth:`ModelProvenance.tokenizer_identity`)
    name different tokenizers: both known and unequal (an unknown side is never compared)."""
    return bool(ours) and bool(theirs) and ours != theirs


def _plain(value: Any) -> Any:
    """A fact's value as JSON holds it (a tuple as a list, a mapping as a dict copy)."""
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, Mapping):
        return dict(value)
    return value


_ACCEPTS: dict[str, Callable[[Any], bool]] = {
    f.name: f.metadata["accepts"] for f in fields(ModelProvenance) if "accepts" in f.metadata
}
_FACTS: tuple[str, ...] = tuple(_ACCEPTS)

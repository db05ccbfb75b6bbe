"""Identity of a loaded model: file hashes, storage bytes and linear-layer classes.

Pure helpers used by :meth:`gate.models.backends.hf.HFBackend.provenance`:

* file digests — SHA-256 of every weight/config file and every tokenizer file,
  plus one combined digest per group: SHA-256 of the sorted lines
  ``"<file name>\\0<file sha256>\\n"``, so two builds with the same files have
  the same digest whatever the directory;
* parameter bytes — the bytes the model's parameters and buffers occupy as
  stored, quantized ones included: a quanto ``WeightQBytesTensor`` /
  ``WeightQBitsTensor`` counts its integer codes, scales and shifts (its inner
  tensors), a bitsandbytes ``Params4bit`` its packed bytes plus the absmax of
  its ``quant_state`` (nested state included), an ``Int8Params`` its int8
  codes plus the per-row scales ``SCB``;
* vocabulary digest — SHA-256 of the tokenizer's ``token -> id`` table
  (the ids the model embeds), serialized as the JSON list of ``[id, token]``
  pairs in id order: one value for a tokenizer whatever file held it (a GGUF
  file, ``tokenizer.json``);
* linear classes — the class name of every linear layer actually in the
  model (``Linear``, ``Linear8bitLt``, ``Linear4bit``, ``QLinear``,
  ``QuantLinear`` ...), so a silent fallback to unquantized layers shows.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

from gate.provenance import sha256_file

#: Files that define the network: weights, their index, config.
WEIGHT_PATTERNS: tuple[str, ...] = (
    "*.safetensors",
    "*.safetensors.index.json",
    "pytorch_model*.bin",
    "pytorch_model*.bin.index.json",
    "config.json",
    "generation_config.json",
)
#: Files that define the tokenizer and its chat template.
TOKENIZER_FILES: tuple[str, ...] = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "tokenizer.model",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "chat_template.jinja",
    "chat_template.json",
)


def hash_files(paths: Iterable[Path]) -> dict[str, str]:
    """``{file name: sha256}`` of the given files, sorted by name."""
    return {p.name: sha256_file(p) for p in sorted(paths, key=lambda p: p.name)}


def combined_digest(file_hashes: dict[str, str]) -> str:
    """One SHA-256 over ``name\\0sha\\n`` lines in name order (empty input hashes ``b""``)."""
    digest = hashlib.sha256()
    for name in sorted(file_hashes):
        digest.update(f"{name}\0{file_hashes[name]}\n".encode())
    return digest.hexdigest()


def weight_files(directory: Path) -> list[Path]:
    """The weight and config files of a model directory."""
    found = {p for pattern in WEIGHT_PATTERNS for p in directory.glob(pattern) if p.is_file()}
    return sorted(found)


def tokenizer_files(directory: Path) -> list[Path]:
    """The tokenizer files of a model directory."""
    return [directory / n for n in TOKENIZER_FILES if (directory / n).is_file()]


def _quant_state_tensors(state: object) -> Iterator[torch.Tensor]:
    for attr in ("absmax", "offset"):
        t = getattr(state, attr, None)
        if isinstance(t, torch.Tensor):
            yield t
    nested = getattr(state, "state2", None)
    if nested is not None:
        yield from _quant_state_tensors(nested)


def tensor_parts(t: torch.Tensor) -> Iterator[torch.Tensor]:
    """The plain tensors that store ``t`` (inner tensors of quantized subclasses, scales)."""
    if hasattr(t, "__tensor_flatten__"):
        names, _ = t.__tensor_flatten__()
        for name in names:
            inner = getattr(t, name)
            if isinstance(inner, torch.Tensor):
                yield from tensor_parts(inner)
        return
    yield t
    scb = getattr(t, "SCB", None)
    if isinstance(scb, torch.Tensor):
        yield scb
    state = getattr(t, "quant_state", None)
    if state is not None:
        yield from _quant_state_tensors(state)


def _all_stored_tensors(model: nn.Module) -> Iterator[torch.Tensor]:
    yield from model.parameters()
    yield from model.buffers()
    for module in model.modules():  # LLM.int8() may keep row scales on the module state
        state = getattr(module, "state", None)
        scb = getattr(state, "SCB", None)
        if isinstance(scb, torch.Tensor):
            yield scb


def parameter_bytes(model: nn.Module) -> int:
    """Bytes of all parameters and buffers as stored (each storage counted once)."""
    seen: set[tuple[int, int, torch.dtype]] = set()
    total = 0
    for tensor in _all_stored_tensors(model):
        for part in tensor_parts(tensor):
            nbytes = part.numel() * part.element_size()
            key = (part.data_ptr(), nbytes, part.dtype)
            if part.data_ptr() != 0 and key in seen:
                continue
            seen.add(key)
            total += nbytes
    return total


def linear_class_counts(model: nn.Module) -> dict[str, int]:
    """``{class name: count}`` of the model's linear layers (``nn.Linear`` subclasses or *Linear*)."""
    counts: Counter[str] = Counter()
    for module in model.modules():
        name = type(module).__name__
        if isinstance(module, nn.Linear) or "linear" in name.lower():
            counts[name] += 1
    return dict(sorted(counts.items()))


def vocabulary_digest(tokenizer: Any, size: int) -> str | None:
    """SHA-256 of the ``[[id, token], ...]`` JSON, in id order, of the tokens of
    ``tokenizer.get_vocab()`` whose id is below ``size`` (the model's vocabulary size:
    the tokens it has embeddings for; a loader may add a special token past them).
    None for a tokenizer without a vocabulary table."""
    get_vocab = getattr(tokenizer, "get_vocab", None)
    if get_vocab is None:
        return None
    pairs = sorted((int(i), str(t)) for t, i in get_vocab().items() if int(i) < size)
    text = json.dumps(pairs, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()

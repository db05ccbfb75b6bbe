"""Reference packs: what the baseline model produced on the fidelity prompts.

With a pack, a candidate run never loads the baseline model (docs/contracts.md
"Reference packs"): one teacher-forced pass of the candidate over
``prompt + reference output`` is the whole fidelity cost.

File format (version 2)
-----------------------
One `safetensors <https://github.com/huggingface/safetensors>`_ file. Its
tensors are flat, with offsets delimiting prompt ``j`` (``N`` prompts,
``L = sum of output lengths``, ``k`` = top-k):

============== ======================= ===================================================
tensor         dtype / shape           content
============== ======================= ===================================================
prompt_offsets int64   ``[N + 1]``     prompt ``j`` is ``prompt_ids[o[j]:o[j+1]]``
prompt_ids     ID      ``[sum P]``     chat-templated prompt token ids
output_offsets int64   ``[N + 1]``     output ``j`` is ``output_ids[o[j]:o[j+1]]``
output_ids     ID      ``[L]``         the baseline's greedy output ``y`` (new tokens only)
topk_ids       ID      ``[L, k]``      baseline top-k token ids at each output position,
                                       most likely first, ties towards lower ids
topk_logprobs  float32 ``[L, k]``      their natural-log probabilities (float16 allowed)
tail_logmass   float32 ``[L]``         ``log(1 - sum of the top-k probabilities)``, summed
                                       over the excluded tokens of the full row
============== ======================= ===================================================

``ID`` is ``uint16`` when every token id is below 65,536 (vocabularies up to 64k:
a quarter of a k = 32 pack's bytes per token are ids, and this halves them), else
``int32`` (version 1 packs always used ``int32``; both versions are read, and
token ids are ``int32`` in memory either way).

Invariant: ``output_ids == topk_ids[:, 0]``. The recorder keeps, per prompt,
the longest prefix of the generated output that the baseline's own batched
teacher-forced scorer reproduces as its argmax (a near-tie can resolve
differently between cached generation and one forward pass); so the baseline
compared with itself has CGA exactly 1 and KL exactly 0.

The safetensors metadata holds one key, ``gate_reference_pack``, a JSON header::

    {"format": "gate-reference-pack", "version": 2, "k": 32, "max_new_tokens": 128,
     "logprob_dtype": "float32", "id_dtype": "uint16",
     "tokenizer_sha256": "...", "prompt_set_sha256": "...",
     "model": {provenance of the baseline}, "payload_sha256": "...",
     "prompts": [{"id": "...", "category": "code", "length": "short",
                  "n_prompt": 41, "n_output": 128, "truncated": false}, ...]}

``payload_sha256`` hashes, for every tensor in name order, its name, dtype,
shape and little-endian bytes. Loading refuses (``BaselineError``, exit 4) an
unreadable or truncated file, another format or a newer version, a payload
whose hash differs (tampering), inconsistent offsets, or a broken invariant;
:func:`check_compatible` refuses a pack recorded with another tokenizer or on
another prompt set.
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from gate.errors import BaselineError, DataError
from gate.store.atomic import write_atomic

PACK_FORMAT = "gate-reference-pack"
PACK_VERSION = 2
METADATA_KEY = "gate_reference_pack"
LOGPROB_DTYPES: Mapping[str, type[np.floating[Any]]] = {
    "float32": np.float32,
    "float16": np.float16,
}
#: Token-id tensors: stored as :data:`ID_DTYPES`, held as ``int32`` once loaded.
_ID_TENSORS = ("prompt_ids", "output_ids", "topk_ids")
ID_DTYPES: Mapping[str, type[np.integer[Any]]] = {"uint16": np.uint16, "int32": np.int32}
_TENSORS = (
    "prompt_offsets",
    "prompt_ids",
    "output_offsets",
    "output_ids",
    "topk_ids",
    "topk_logprobs",
    "tail_logmass",
)


class PromptLike(Protocol):
    """What the pack needs of a prompt record (:class:`gate.data.prompt_set.Prompt`)."""

    @property
    def id(self) -> str: ...

    @property
    def category(self) -> str: ...

    @property
    def length(self) -> str: ...

    @property
    def text(self) -> str: ...


@dataclass(frozen=True)
class PackPrompt:
    """Header entry of one prompt."""

    id: str
    category: str
    length: str
    n_prompt: int
    n_output: int
    #: True when the generated output was cut where the baseline's scorer disagreed.
    truncated: bool = False


@dataclass(frozen=True)
class PackEntry:
    """One recorded prompt, as the recorder builds it (arrays over its ``T`` positions)."""

    meta: PackPrompt
    prompt_ids: np.ndarray
    output_ids: np.ndarray
    topk_ids: np.ndarray
    topk_logprobs: np.ndarray
    tail_logmass: np.ndarray


@dataclass(frozen=True)
class ReferencePack:
    """A loaded, verified reference pack."""

    path: Path | None
    k: int
    max_new_tokens: int
    logprob_dtype: str
    tokenizer_sha256: str | None
    prompt_set_sha256: str | None
    model: Mapping[str, Any]
    prompts: tuple[PackPrompt, ...]
    tensors: Mapping[str, np.ndarray] = field(repr=False)

    def __len__(self) -> int:
        return len(self.prompts)

    @property
    def n_output_tokens(self) -> int:
        """Total number of reference output positions ``L``."""
        return int(self.tensors["output_ids"].shape[0])

    def _slice(self, name: str, offsets: str, j: int) -> np.ndarray:
        o = self.tensors[offsets]
        return self.tensors[name][int(o[j]) : int(o[j + 1])]

    def prompt_ids(self, j: int) -> np.ndarray:
        """Prompt ``j``'s token ids."""
        return self._slice("prompt_ids", "prompt_offsets", j)

    def output_ids(self, j: int) -> np.ndarray:
        """Prompt ``j``'s reference output ``y``."""
        return self._slice("output_ids", "output_offsets", j)

    def topk(self, j: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Prompt ``j``'s ``(topk_ids [T,k], topk_logprobs [T,k] float32, tail_logmass [T])``."""
        ids = self._slice("topk_ids", "output_offsets", j)
        lps = self._slice("topk_logprobs", "output_offsets", j).astype(np.float32)
        tail = self._slice("tail_logmass", "output_offsets", j)
        return ids, lps, tail


def prompt_set_sha256(prompts: Sequence[PromptLike]) -> str:
    """sha256 of the prompts' ``(id, category, length, text)`` records, in order (canonical JSON)."""
    records = [[p.id, p.category, p.length, p.text] for p in prompts]
    blob = json.dumps(records, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return hashlib.sha256(blob).hexdigest()


def payload_sha256(tensors: Mapping[str, np.ndarray]) -> str:
    """sha256 over every tensor's name, dtype, shape and little-endian bytes, in name order."""
    digest = hashlib.sha256()
    for name in sorted(tensors):
        arr = np.ascontiguousarray(tensors[name])
        little = arr.astype(arr.dtype.newbyteorder("<"), copy=False)
        digest.update(name.encode())
        digest.update(little.dtype.str.encode())
        digest.update(json.dumps(list(arr.shape)).encode())
        digest.update(little.tobytes())
    return digest.hexdigest()


def id_dtype_for(entries: Sequence[PackEntry]) -> str:
    """``"uint16"`` when every token id of ``entries`` fits in it, else ``"int32"``."""
    arrays = [a for e in entries for a in (e.prompt_ids, e.output_ids, e.topk_ids) if a.size]
    fits = all(int(a.min()) >= 0 and int(a.max()) <= np.iinfo(np.uint16).max for a in arrays)
    return "uint16" if fits else "int32"


def build_tensors(
    entries: Sequence[PackEntry], *, k: int, logprob_dtype: str = "float32"
) -> dict[str, np.ndarray]:
    """Concatenate per-prompt arrays into the flat tensors of the format."""
    if logprob_dtype not in LOGPROB_DTYPES:
        raise DataError(
            f"unknown log-prob dtype {logprob_dtype!r}", f"use one of {', '.join(LOGPROB_DTYPES)}"
        )

    def offsets(lengths: list[int]) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]).astype(np.int64)

    def cat(parts: list[np.ndarray], dtype: Any, shape: tuple[int, ...]) -> np.ndarray:
        if not parts:
            return np.zeros((0, *shape), dtype=dtype)
        return np.ascontiguousarray(np.concatenate(parts, axis=0).astype(dtype))

    for e in entries:
        t = int(e.output_ids.shape[0])
        if (
            e.topk_ids.shape != (t, k)
            or e.topk_logprobs.shape != (t, k)
            or e.tail_logmass.shape != (t,)
        ):
            raise DataError(
                f"pack entry {e.meta.id!r} has inconsistent shapes",
                f"expected [{t}, {k}] top-k arrays and [{t}] tail masses",
            )
    ids = ID_DTYPES[id_dtype_for(entries)]
    return {
        "prompt_offsets": offsets([int(e.prompt_ids.shape[0]) for e in entries]),
        "prompt_ids": cat([e.prompt_ids for e in entries], ids, ()),
        "output_offsets": offsets([int(e.output_ids.shape[0]) for e in entries]),
        "output_ids": cat([e.output_ids for e in entries], ids, ()),
        "topk_ids": cat([e.topk_ids for e in entries], ids, (k,)),
        "topk_logprobs": cat(
            [e.topk_logprobs for e in entries], LOGPROB_DTYPES[logprob_dtype], (k,)
        ),
        "tail_logmass": cat([e.tail_logmass for e in entries], np.float32, ()),
    }


def write_pack(
    path: Path,
    entries: Sequence[PackEntry],
    *,
    k: int,
    max_new_tokens: int,
    tokenizer_sha256: str | None,
    prompt_set_sha256: str | None,
    model: Mapping[str, Any] | None = None,
    logprob_dtype: str = "float32",
) -> Path:
    """Write a pack atomically; returns ``path``. Refuses an empty pack (:class:`DataError`)."""
    from safetensors.numpy import save

    if not entries or sum(int(e.output_ids.shape[0]) for e in entries) == 0:
        raise DataError(
            "nothing to store in the reference pack: no prompt produced any output token",
            "check the prompt set and that the baseline generates text",
        )
    tensors = build_tensors(entries, k=k, logprob_dtype=logprob_dtype)
    header = {
        "format": PACK_FORMAT,
        "version": PACK_VERSION,
        "k": k,
        "max_new_tokens": max_new_tokens,
        "logprob_dtype": logprob_dtype,
        "id_dtype": str(tensors["topk_ids"].dtype),
        "tokenizer_sha256": tokenizer_sha256,
        "prompt_set_sha256": prompt_set_sha256,
        "model": dict(model or {}),
        "payload_sha256": payload_sha256(tensors),
        "prompts": [vars(e.meta) for e in entries],
    }
    data = save(tensors, metadata={METADATA_KEY: json.dumps(header, default=str)})
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, data)
    return path


def _refuse(
    path: Path, problem: str, hint: str = "re-record it with `gate baseline record`"
) -> BaselineError:
    return BaselineError(f"reference pack {path}: {problem}", hint)


def _read_header(path: Path, data: bytes) -> dict[str, Any]:
    if len(data) < 8:
        raise _refuse(path, "file is truncated (no safetensors header)")
    (size,) = struct.unpack("<Q", data[:8])
    if size > len(data) - 8:
        raise _refuse(path, "file is truncated (header runs past the end)")
    try:
        raw = json.loads(data[8 : 8 + size])
        header = json.loads(raw["__metadata__"][METADATA_KEY])
    except (ValueError, KeyError, TypeError):
        raise _refuse(path, "not a gate reference pack (no readable pack header)") from None
    if not isinstance(header, dict):
        raise _refuse(path, "pack header is not a JSON object")
    return header


def load_pack(path: Path) -> ReferencePack:
    """Read and verify a pack; any problem is a one-line :class:`BaselineError`."""
    from safetensors import SafetensorError
    from safetensors.numpy import load

    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise _refuse(path, f"cannot be read ({exc.strerror or exc})") from None
    header = _read_header(path, data)
    if header.get("format") != PACK_FORMAT:
        raise _refuse(path, f"unknown format {header.get('format')!r}")
    version = header.get("version")
    if not isinstance(version, int) or version > PACK_VERSION or version < 1:
        raise _refuse(
            path,
            f"format version {version!r} is not supported (this gate reads <= {PACK_VERSION})",
            "upgrade gate, or re-record the pack with this version",
        )
    try:
        tensors = load(data)
    except (SafetensorError, ValueError, OSError) as exc:
        raise _refuse(path, f"file is truncated or corrupt ({str(exc).splitlines()[0]})") from None
    missing = [name for name in _TENSORS if name not in tensors]
    if missing:
        raise _refuse(path, f"missing tensors {', '.join(missing)}")
    if payload_sha256(tensors) != header.get("payload_sha256"):
        raise _refuse(path, "payload hash mismatch: the file was modified or damaged")
    for name in _ID_TENSORS:
        if str(tensors[name].dtype) not in ID_DTYPES:
            raise _refuse(path, f"{name} has dtype {tensors[name].dtype}, not a token-id dtype")
        tensors[name] = tensors[name].astype(np.int32)
    try:
        k = int(header["k"])
        prompts = tuple(PackPrompt(**p) for p in header["prompts"])
        pack = ReferencePack(
            path=path,
            k=k,
            max_new_tokens=int(header["max_new_tokens"]),
            logprob_dtype=str(header["logprob_dtype"]),
            tokenizer_sha256=header.get("tokenizer_sha256"),
            prompt_set_sha256=header.get("prompt_set_sha256"),
            model=dict(header.get("model") or {}),
            prompts=prompts,
            tensors=tensors,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise _refuse(path, f"malformed pack header ({exc})") from None
    _check_structure(pack)
    return pack


def _check_structure(pack: ReferencePack) -> None:
    path = pack.path or Path("<memory>")
    t = pack.tensors
    n = len(pack.prompts)
    for offsets, flat in (("prompt_offsets", "prompt_ids"), ("output_offsets", "output_ids")):
        o = t[offsets]
        if (
            o.shape != (n + 1,)
            or int(o[0]) != 0
            or np.any(np.diff(o) < 0)
            or int(o[-1]) != t[flat].shape[0]
        ):
            raise _refuse(path, f"{offsets} do not delimit {flat}")
    length = t["output_ids"].shape[0]
    if t["topk_ids"].shape != (length, pack.k) or t["topk_logprobs"].shape != (length, pack.k):
        raise _refuse(path, "top-k tensors do not match the output length and k")
    if t["tail_logmass"].shape != (length,):
        raise _refuse(path, "tail_logmass does not match the output length")
    out_lens = np.diff(t["output_offsets"])
    prompt_lens = np.diff(t["prompt_offsets"])
    for j, p in enumerate(pack.prompts):
        if p.n_output != int(out_lens[j]) or p.n_prompt != int(prompt_lens[j]):
            raise _refuse(path, f"header lengths of prompt {p.id!r} do not match the tensors")
    if length and not np.array_equal(t["output_ids"], t["topk_ids"][:, 0]):
        raise _refuse(path, "reference outputs are not the baseline's top-1 tokens")


def check_compatible(
    pack: ReferencePack,
    *,
    tokenizer_sha256: str | None = None,
    prompt_set_sha256: str | None = None,
) -> None:
    """Refuse a pack from another tokenizer or another prompt set (:class:`BaselineError`).

    A side that is unknown (``None``) is not compared; the tier also re-encodes
    the prompts with the candidate's tokenizer (:func:`check_prompt_ids`).
    """
    path = pack.path or Path("<memory>")
    if tokenizer_sha256 and pack.tokenizer_sha256 and tokenizer_sha256 != pack.tokenizer_sha256:
        raise _refuse(
            path,
            f"recorded with another tokenizer (sha256 {pack.tokenizer_sha256[:12]}..., "
            f"candidate {tokenizer_sha256[:12]}...)",
            "a candidate must share the baseline's tokenizer; compare against the right baseline",
        )
    if prompt_set_sha256 and pack.prompt_set_sha256 and prompt_set_sha256 != pack.prompt_set_sha256:
        raise _refuse(
            path,
            "recorded on another prompt set "
            f"(sha256 {pack.prompt_set_sha256[:12]}..., now {prompt_set_sha256[:12]}...)",
            "use the baseline's prompt set, or re-record the baseline on this one",
        )


def check_prompt_ids(pack: ReferencePack, j: int, ids: Sequence[int]) -> None:
    """Refuse when the candidate's tokenizer encodes prompt ``j`` differently from the pack."""
    if not np.array_equal(pack.prompt_ids(j), np.asarray(ids, dtype=np.int32)):
        raise _refuse(
            pack.path or Path("<memory>"),
            f"prompt {pack.prompts[j].id!r} tokenizes differently with the candidate's tokenizer",
            "the pack comes from another tokenizer; a candidate must share the baseline's",
        )


def pack_bytes_per_token(pack_path: Path, n_output_tokens: int) -> float:
    """File bytes per reference output token (headers and prompts included)."""
    return Path(pack_path).stat().st_size / max(n_output_tokens, 1)

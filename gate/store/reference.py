"""Reference packs: what the baseline model produced on the fidelity prompts.

With a pack, a candidate run never loads the baseline model (docs/contracts.md
"Reference packs"): one teacher-forced pass of the candidate over
``prompt + reference output`` is the whole fidelity cost.

File format (version 3)
-----------------------
One `safetensors <https://github.com/huggingface/safetensors>`_ file. Its
tensors are flat, with offsets delimiting prompt ``j`` (``N`` prompts,
``L = sum of output lengths``, ``k`` = top-k, ``m`` = sampled tail tokens):

=============== ======================= ==================================================
tensor          dtype / shape           content
=============== ======================= ==================================================
prompt_offsets  int64   ``[N + 1]``     prompt ``j`` is ``prompt_ids[o[j]:o[j+1]]``
prompt_ids      ID      ``[sum P]``     chat-templated prompt token ids
output_offsets  int64   ``[N + 1]``     output ``j`` is ``output_ids[o[j]:o[j+1]]``
output_ids      ID      ``[L]``         the baseline's greedy output ``y`` (new tokens only)
topk_ids        ID      ``[L, k]``      baseline top-k token ids at each output position,
                                        most likely first, ties towards lower ids
topk_logprobs   LP      ``[L, k]``      their natural-log probabilities
tail_logmass    float32 ``[L]``         ``log(1 - sum of the top-k probabilities)``, summed
                                        over the excluded tokens of the full row
sample_ids      ID      ``[L, m]``      (v3) ``m`` tokens drawn i.i.d. with replacement
                                        from the baseline's tail ``p_b(v) / P`` outside the
                                        top-k (seeded; ascending ids; a token drawn twice
                                        appears twice)
sample_logprobs LP      ``[L, m]``      (v3) their baseline log-probabilities
=============== ======================= ==================================================

``ID`` is ``uint16`` when every token id is below 65,536 (vocabularies up to 64k:
this halves the ids' bytes), else ``int32``; ``LP`` is ``float32`` (default) or
``float16``. Token ids are ``int32`` and log-probs ``float32`` in memory.
Bytes per output token (:func:`payload_bytes_per_token`):
``id (1 + k + m) + lp (k + m) + 4``; at the defaults ``k = 32, m = 64``, 16-bit
ids and float32 log-probs, 582 B (full-vocabulary float16 logits: ``2 V``).

Versions 1 and 2 have no sampled tail (``m = 0``); version 1 stored ids as
``int32``. A version-3 pack recorded from a served baseline has none either: an
engine returns the log-probs of its own top tokens only, so no token can be
drawn from the rest of its distribution with a known log-prob; the header's
``no_tail_samples`` says why (:attr:`ReferencePack.no_tail_samples`). All three are read. Without samples the pack's KL is the top-k +
tail-bucket lower bound; with them it is an unbiased estimate with its standard
error (:func:`gate.metrics.fidelity.sampled_tail_kl`).

Invariant: ``output_ids == topk_ids[:, 0]``. The recorder keeps, per prompt,
the longest prefix of the generated output that the baseline's own batched
teacher-forced scorer reproduces as its argmax (a near-tie can resolve
differently between cached generation and one forward pass); so the baseline
compared with itself has CGA exactly 1 and KL exactly 0.

The safetensors metadata holds one key, ``gate_reference_pack``, a JSON header::

    {"format": "gate-reference-pack", "version": 3, "k": 32, "m": 32,
     "sample_seed": 0, "vocab_size": 4096, "max_new_tokens": 128,
     "logprob_dtype": "float32", "id_dtype": "uint16",
     "tokenizer_sha256": "...", "prompt_set_sha256": "...",
     "no_tail_samples": null,   (or why the pack has no sampled tail)
     "model": {provenance of the baseline}, "payload_sha256": "...",
     "prompts": [{"id": "...", "category": "code", "length": "short",
                  "n_prompt": 41, "n_output": 128, "truncated": false,
                  "n_generated": 128}, ...]}

``payload_sha256`` hashes, for every tensor in name order, its name, dtype,
shape and little-endian bytes. Loading refuses (``BaselineError``, exit 4) an
unreadable or truncated file, another format or a newer version, a payload
whose hash differs (tampering), inconsistent offsets, or a broken invariant;
and, since a hash can be recomputed by whoever edits a file, values that no
recorder writes: a token id outside the vocabulary, a log-probability above 0
or NaN, top-k log-probs out of order, a sampled token inside its position's
top-k or more likely than the least likely top-k token, one token drawn twice
at a position with two different log-probs, or sampled tokens whose distinct
probabilities add up to more than the tail mass. :func:`check_pack_compatible`
refuses a pack recorded with another tokenizer or on another prompt set.
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
from gate.provenance import tokenizers_differ
from gate.store.atomic import write_atomic

PACK_FORMAT = "gate-reference-pack"
PACK_VERSION = 3
#: The first version with a sampled tail (``sample_ids``, ``sample_logprobs``).
SAMPLED_TAIL_VERSION = 3
METADATA_KEY = "gate_reference_pack"
LOGPROB_DTYPES: Mapping[str, type[np.floating[Any]]] = {
    "float32": np.float32,
    "float16": np.float16,
}
#: Token-id tensors: stored as :data:`ID_DTYPES`, held as ``int32`` once loaded.
_ID_TENSORS = ("prompt_ids", "output_ids", "topk_ids", "sample_ids")
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
_SAMPLE_TENSORS = ("sample_ids", "sample_logprobs")


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
    #: Tokens generated before any cut (None in packs older than version 3).
    n_generated: int | None = None


@dataclass(frozen=True)
class PackEntry:
    """One recorded prompt, as the recorder builds it (arrays over its ``T`` positions)."""

    meta: PackPrompt
    prompt_ids: np.ndarray
    output_ids: np.ndarray
    topk_ids: np.ndarray
    topk_logprobs: np.ndarray
    tail_logmass: np.ndarray
    #: ``[T, m]`` sampled tail token ids (None: no sampled tail, ``m = 0``).
    sample_ids: np.ndarray | None = None
    #: ``[T, m]`` their baseline log-probabilities.
    sample_logprobs: np.ndarray | None = None

    def samples(self, m: int) -> tuple[np.ndarray, np.ndarray]:
        """``(sample_ids, sample_logprobs)``, ``[T, 0]`` arrays when there are none."""
        t = int(self.output_ids.shape[0])
        if self.sample_ids is None or self.sample_logprobs is None:
            return np.zeros((t, m), dtype=np.int64), np.zeros((t, m), dtype=np.float32)
        return self.sample_ids, self.sample_logprobs


@dataclass(frozen=True)
class RecordingSummary:
    """What the recorder cut or dropped, from a pack's header (for provenance and reports)."""

    #: Prompts in the pack.
    prompts: int
    #: Prompts whose generated output was cut at the baseline's first self-disagreement.
    truncated: int
    #: Prompts left with no output token at all (never scored).
    empty: int
    #: Generated tokens removed by the cuts (None when the pack predates version 3).
    tokens_cut: int | None
    #: Why a version-3 pack has no sampled tail (a served baseline), else None.
    no_tail_samples: str | None = None


@dataclass(frozen=True)
class ReferencePack:
    """A loaded, verified reference pack.

    Its arrays (``tensors``) are this module's layout: readers outside the store
    (the tiers) use the methods below, never the arrays by name.
    """

    path: Path | None
    k: int
    max_new_tokens: int
    logprob_dtype: str
    tokenizer_sha256: str | None
    prompt_set_sha256: str | None
    model: Mapping[str, Any]
    prompts: tuple[PackPrompt, ...]
    tensors: Mapping[str, np.ndarray] = field(repr=False)
    #: Format version of the file (1, 2 or 3).
    version: int = PACK_VERSION
    #: Sampled tail tokens per output position (0: no sampled tail, the KL is the bound).
    m: int = 0
    #: Seed of the tail draws (None without a sampled tail).
    sample_seed: int | None = None
    #: Vocabulary size of the baseline's rows (None in packs older than version 3).
    vocab_size: int | None = None
    #: Why the recorder stored no sampled tail although asked to (a served baseline
    #: returns only its top-k log-probs); None otherwise. The KL is then the bound.
    no_tail_samples: str | None = None

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

    def samples(self, j: int) -> tuple[np.ndarray, np.ndarray]:
        """Prompt ``j``'s ``(sample_ids [T, m], sample_logprobs [T, m] float32)``.

        ``[T, 0]`` arrays for a pack without a sampled tail.
        """
        if self.m == 0:
            t = int(self.output_ids(j).shape[0])
            return np.zeros((t, 0), dtype=np.int32), np.zeros((t, 0), dtype=np.float32)
        ids = self._slice("sample_ids", "output_offsets", j)
        lps = self._slice("sample_logprobs", "output_offsets", j).astype(np.float32)
        return ids, lps

    def mean_tail_mass(self, through: int) -> float | None:
        """Mean baseline probability mass beyond the top-k (``exp(tail_logmass)``) over
        the output positions of prompts ``0 .. through`` (inclusive); ``None`` when they
        have no output positions."""
        end = int(self.tensors["output_offsets"][through + 1])
        tail = self.tensors["tail_logmass"][:end]
        return float(np.exp(tail.astype(np.float64)).mean()) if tail.size else None

    @property
    def kl_kind(self) -> str:
        """``"estimate"`` with a sampled tail, else ``"bound"`` (versions 1 and 2, ``m = 0``)."""
        return "estimate" if self.m > 0 else "bound"

    def recording_summary(self) -> RecordingSummary:
        """How many prompts the recorder cut or left empty, and the tokens it cut."""
        known = [p.n_generated for p in self.prompts]
        cut = (
            sum(int(g) - p.n_output for g, p in zip(known, self.prompts, strict=True) if g)
            if all(g is not None for g in known)
            else None
        )
        return RecordingSummary(
            prompts=len(self.prompts),
            truncated=sum(1 for p in self.prompts if p.truncated),
            empty=sum(1 for p in self.prompts if p.n_output == 0),
            tokens_cut=cut,
            no_tail_samples=self.no_tail_samples,
        )


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
    arrays = [
        a
        for e in entries
        for a in (e.prompt_ids, e.output_ids, e.topk_ids, e.sample_ids)
        if a is not None and a.size
    ]
    fits = all(int(a.min()) >= 0 and int(a.max()) <= np.iinfo(np.uint16).max for a in arrays)
    return "uint16" if fits else "int32"


def payload_bytes_per_token(k: int, m: int, vocab_size: int, logprob_dtype: str = "float32") -> int:
    """Bytes a pack stores per output token: ``id (1 + k + m) + lp (k + m) + 4``.

    The output id, ``k`` top-k ids and log-probs, the float32 tail mass, ``m``
    sampled ids and log-probs; ids take 2 bytes when the vocabulary fits in
    ``uint16`` (``V <= 65,536``), else 4. Prompts, offsets and the header come
    on top (a few bytes per token, measured by :func:`pack_bytes_per_token`).
    """
    id_bytes = 2 if vocab_size <= np.iinfo(np.uint16).max + 1 else 4
    lp_bytes = np.dtype(LOGPROB_DTYPES[logprob_dtype]).itemsize
    return id_bytes * (1 + k + m) + lp_bytes * (k + m) + 4


def full_logits_bytes_per_token(vocab_size: int) -> int:
    """Bytes of one full-vocabulary float16 logit row (what llama.cpp's KL mode stores)."""
    return 2 * vocab_size


def build_tensors(
    entries: Sequence[PackEntry], *, k: int, m: int = 0, logprob_dtype: str = "float32"
) -> dict[str, np.ndarray]:
    """Concatenate per-prompt arrays into the flat tensors of the format (``m`` samples)."""
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
        sample_ids, sample_lps = e.samples(m)
        if sample_ids.shape != (t, m) or sample_lps.shape != (t, m):
            raise DataError(
                f"pack entry {e.meta.id!r} has inconsistent sampled-tail shapes",
                f"expected [{t}, {m}] sample arrays",
            )
    ids = ID_DTYPES[id_dtype_for(entries)]
    lp = LOGPROB_DTYPES[logprob_dtype]
    samples = [e.samples(m) for e in entries]
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
        "sample_ids": cat([ids_ for ids_, _ in samples], ids, (m,)),
        "sample_logprobs": cat([lps for _, lps in samples], lp, (m,)),
    }


@dataclass(frozen=True)
class PackLayout:
    """What a pack stores per output position, as its header declares it.

    The top ``k`` token ids and log-probs (at ``logprob_dtype``) of at most
    ``max_new_tokens`` output tokens, and ``m`` sampled tail tokens per position
    (0: none, the KL read from the pack is then the lower bound), drawn with
    ``sample_seed``; ``no_tail_samples`` (with ``m = 0``) says why there is no
    sampled tail.
    """

    k: int
    max_new_tokens: int
    logprob_dtype: str = "float32"
    m: int = 0
    sample_seed: int | None = None
    no_tail_samples: str | None = None


@dataclass(frozen=True)
class PackOrigin:
    """What a pack was recorded from, checked against a candidate when it is read back.

    The baseline's tokenizer and prompt set (their SHA-256, None where unknown),
    its model (source, recipe, family) and its ``vocab_size``, which lets loading
    refuse out-of-vocabulary ids.
    """

    tokenizer_sha256: str | None
    prompt_set_sha256: str | None
    model: Mapping[str, Any] | None = None
    vocab_size: int | None = None


def write_pack(
    path: Path, entries: Sequence[PackEntry], layout: PackLayout, origin: PackOrigin
) -> Path:
    """Write a version-3 pack atomically; returns ``path``. Refuses an empty pack (:class:`DataError`).

    ``layout`` says what each position stores (:class:`PackLayout`), ``origin`` what
    the pack was recorded from (:class:`PackOrigin`).
    """
    from safetensors.numpy import save

    if not entries or sum(int(e.output_ids.shape[0]) for e in entries) == 0:
        raise DataError(
            "nothing to store in the reference pack: no prompt produced any output token",
            "check the prompt set and that the baseline generates text",
        )
    if layout.no_tail_samples is not None and layout.m:
        raise DataError("a pack with a sampled tail cannot say it has none", "give m = 0")
    tensors = build_tensors(entries, k=layout.k, m=layout.m, logprob_dtype=layout.logprob_dtype)
    header = {
        "format": PACK_FORMAT,
        "version": PACK_VERSION,
        "k": layout.k,
        "m": layout.m,
        "sample_seed": layout.sample_seed,
        "vocab_size": origin.vocab_size,
        "max_new_tokens": layout.max_new_tokens,
        "logprob_dtype": layout.logprob_dtype,
        "id_dtype": str(tensors["topk_ids"].dtype),
        "tokenizer_sha256": origin.tokenizer_sha256,
        "prompt_set_sha256": origin.prompt_set_sha256,
        "model": dict(origin.model or {}),
        "payload_sha256": payload_sha256(tensors),
        "no_tail_samples": layout.no_tail_samples,
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
    required = _TENSORS + (_SAMPLE_TENSORS if version >= SAMPLED_TAIL_VERSION else ())
    missing = [name for name in required if name not in tensors]
    if missing:
        raise _refuse(path, f"missing tensors {', '.join(missing)}")
    if payload_sha256(tensors) != header.get("payload_sha256"):
        raise _refuse(path, "payload hash mismatch: the file was modified or damaged")
    for name in (n for n in _ID_TENSORS if n in tensors):
        if str(tensors[name].dtype) not in ID_DTYPES:
            raise _refuse(path, f"{name} has dtype {tensors[name].dtype}, not a token-id dtype")
        tensors[name] = tensors[name].astype(np.int32)
    try:
        k = int(header["k"])
        prompts = tuple(PackPrompt(**p) for p in header["prompts"])
        sampled = version >= SAMPLED_TAIL_VERSION
        vocab = header.get("vocab_size") if sampled else None
        seed = header.get("sample_seed") if sampled else None
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
            version=version,
            m=int(header["m"]) if sampled else 0,
            sample_seed=None if seed is None else int(seed),
            vocab_size=None if vocab is None else int(vocab),
            no_tail_samples=_text_or_none(header.get("no_tail_samples")) if sampled else None,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise _refuse(path, f"malformed pack header ({exc})") from None
    _check_structure(pack)
    return pack


def _text_or_none(value: Any) -> str | None:
    """A header's optional text (anything else is malformed)."""
    if value is None or isinstance(value, str):
        return value
    raise ValueError(f"expected text or null, got {value!r}")


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
    if pack.logprob_dtype not in LOGPROB_DTYPES or pack.k < 1 or pack.m < 0:
        raise _refuse(path, "malformed pack header (logprob_dtype, k or m)")
    if pack.no_tail_samples is not None and pack.m:
        raise _refuse(path, "the header says there is no sampled tail, but m > 0")
    if pack.version >= SAMPLED_TAIL_VERSION and (
        t["sample_ids"].shape != (length, pack.m) or t["sample_logprobs"].shape != (length, pack.m)
    ):
        raise _refuse(path, "sampled-tail tensors do not match the output length and m")
    out_lens = np.diff(t["output_offsets"])
    prompt_lens = np.diff(t["prompt_offsets"])
    for j, p in enumerate(pack.prompts):
        if p.n_output != int(out_lens[j]) or p.n_prompt != int(prompt_lens[j]):
            raise _refuse(path, f"header lengths of prompt {p.id!r} do not match the tensors")
    if length and not np.array_equal(t["output_ids"], t["topk_ids"][:, 0]):
        raise _refuse(path, "reference outputs are not the baseline's top-1 tokens")
    _check_values(pack, path)


#: Rows checked at a time for the sampled tail (bounds the ``[rows, m, k]`` comparison).
_CHECK_CHUNK = 2048


def _check_values(pack: ReferencePack, path: Path) -> None:
    """Refuse values no recorder writes (a consistently re-hashed edit still fails here)."""
    t = pack.tensors
    for name in (n for n in _ID_TENSORS if n in t):
        ids = t[name]
        if ids.size and (
            int(ids.min()) < 0 or (pack.vocab_size and int(ids.max()) >= pack.vocab_size)
        ):
            raise _refuse(path, f"{name} holds a token id outside the vocabulary")
    top = t["topk_logprobs"].astype(np.float32)
    if np.isnan(top).any() or (top > 0.0).any():
        raise _refuse(path, "top-k log-probabilities are NaN or above 0")
    if top.shape[1] > 1 and (np.diff(top, axis=1) > 0.0).any():
        raise _refuse(path, "top-k log-probabilities are not in descending order")
    if np.isnan(t["tail_logmass"]).any() or (t["tail_logmass"] > 0.0).any():
        raise _refuse(path, "tail masses are NaN or above 1")
    if pack.m == 0 or t["output_ids"].shape[0] == 0:
        return
    for start in range(0, t["output_ids"].shape[0], _CHECK_CHUNK):
        rows = slice(start, start + _CHECK_CHUNK)
        problem = _sample_problem(
            t["sample_ids"][rows],
            t["sample_logprobs"][rows].astype(np.float64),
            t["topk_ids"][rows],
            top[rows],
            t["tail_logmass"][rows].astype(np.float64),
        )
        if problem:
            raise _refuse(path, problem)


def _sample_problem(
    ids: np.ndarray, lps: np.ndarray, top_ids: np.ndarray, top_lps: np.ndarray, tail: np.ndarray
) -> str | None:
    """Why these sampled-tail rows cannot come from the recorder, or None."""
    if np.isnan(lps).any() or (lps > 0.0).any():
        return "sampled tail log-probabilities are NaN or above 0"
    if (np.isneginf(lps) & np.isfinite(tail)[:, None]).any():
        return "a sampled tail token has zero probability"
    if (ids[:, :, None] == top_ids[:, None, :]).any():
        return "sampled tail tokens fall inside the stored top-k"
    if (lps > top_lps[:, -1:].astype(np.float64)).any():
        return "a sampled tail token is more likely than the least likely top-k token"
    order = np.argsort(ids, axis=-1, kind="stable")
    ids_sorted = np.take_along_axis(ids, order, axis=-1)
    lps_sorted = np.take_along_axis(lps, order, axis=-1)
    again = ids_sorted[:, 1:] == ids_sorted[:, :-1]
    if (again & (lps_sorted[:, 1:] != lps_sorted[:, :-1])).any():
        return "a token drawn twice at one position carries two different log-probabilities"
    first = np.concatenate([np.ones_like(again[:, :1]), ~again], axis=-1)
    distinct_mass = np.where(first, np.exp(lps_sorted), 0.0).sum(axis=-1)
    # float16 storage rounds each log-prob by up to ~0.4 %: allow 1 % above the tail mass
    if (distinct_mass > 1.01 * np.exp(tail) + 1e-12).any():
        return "sampled tail tokens hold more probability than the tail mass"
    return None


def check_pack_compatible(
    pack: ReferencePack,
    *,
    tokenizer_sha256: str | None = None,
    prompt_set_sha256: str | None = None,
) -> None:
    """Refuse a pack from another tokenizer or another prompt set (:class:`BaselineError`).

    ``tokenizer_sha256`` is the candidate's
    :meth:`~gate.provenance.ModelProvenance.tokenizer_identity` (the pack holds the
    recorder's), compared by the rule the baseline check uses
    (:func:`~gate.provenance.tokenizers_differ`). A side that is unknown (``None``)
    is not compared; the tier also re-encodes the prompts with the candidate's
    tokenizer (:func:`check_prompt_ids`).
    """
    path = pack.path or Path("<memory>")
    theirs = pack.tokenizer_sha256
    if tokenizer_sha256 and theirs and tokenizers_differ(tokenizer_sha256, theirs):
        raise _refuse(
            path,
            f"recorded with another tokenizer (sha256 {theirs[:12]}..., "
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

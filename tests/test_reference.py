"""Reference pack format: round trip, verification, refusal of bad packs, bytes per token."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from gate.errors import BaselineError, DataError, ExitCode
from gate.metrics import fidelity as fm
from gate.store.reference import (
    METADATA_KEY,
    PackEntry,
    PackLayout,
    PackOrigin,
    PackPrompt,
    build_tensors,
    check_pack_compatible,
    check_prompt_ids,
    full_logits_bytes_per_token,
    load_pack,
    pack_bytes_per_token,
    payload_bytes_per_token,
    payload_sha256,
    write_pack,
)

K = 4
M = 6
VOCAB = 50


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    return logits - np.log(np.exp(logits).sum(-1, keepdims=True))


def _entry_from_rows(
    meta: PackPrompt, prompt_ids: np.ndarray, lp: np.ndarray, *, k: int, m: int, seed: int
) -> PackEntry:
    """A pack entry as the recorder builds it, from full log-prob rows ``lp`` [T, V]."""
    order, top = fm.topk_of_rows(lp, k)
    samples = np.sort(fm.draw_tail_samples(lp, order, m, np.random.default_rng(seed)), axis=-1)
    return PackEntry(
        meta,
        prompt_ids,
        order[:, 0],
        order,
        top.astype(np.float32),
        fm.tail_logmass(lp, order).astype(np.float32),
        samples,
        np.take_along_axis(lp, samples, -1).astype(np.float32),
    )


def _entry(pid: str, n_prompt: int, n_out: int, seed: int) -> PackEntry:
    rng = np.random.default_rng(seed)
    lp = _log_softmax(rng.normal(size=(n_out, VOCAB)))
    meta = PackPrompt(pid, "code" if seed % 2 else "math", "short", n_prompt, n_out)
    return _entry_from_rows(meta, rng.integers(0, VOCAB, n_prompt), lp, k=K, m=M, seed=seed)


def _write(path: Path, **kw: object) -> Path:
    entries = [_entry("a", 5, 7, 1), _entry("b", 3, 0, 2), _entry("c", 9, 4, 3)]
    layout: dict[str, object] = {"k": K, "max_new_tokens": 8, "m": M, "sample_seed": 0}
    origin: dict[str, object] = {
        "tokenizer_sha256": "t" * 64,
        "prompt_set_sha256": "p" * 64,
        "model": {"source": "tiny"},
        "vocab_size": VOCAB,
    }
    for key, value in kw.items():
        (origin if key in origin else layout)[key] = value
    return write_pack(path, entries, PackLayout(**layout), PackOrigin(**origin))  # type: ignore[arg-type]


def test_round_trip(tmp_path: Path) -> None:
    path = _write(tmp_path / "ref.safetensors")
    pack = load_pack(path)
    assert [p.id for p in pack.prompts] == ["a", "b", "c"]
    assert pack.k == K and pack.max_new_tokens == 8 and pack.n_output_tokens == 11
    assert pack.version == 3 and pack.m == M and pack.kl_kind == "estimate"
    assert pack.vocab_size == VOCAB and pack.sample_seed == 0
    original = _entry("c", 9, 4, 3)
    np.testing.assert_array_equal(pack.prompt_ids(2), original.prompt_ids)
    np.testing.assert_array_equal(pack.output_ids(2), original.output_ids)
    ids, lps, tail = pack.topk(2)
    np.testing.assert_array_equal(ids, original.topk_ids)
    np.testing.assert_array_equal(lps, original.topk_logprobs)
    np.testing.assert_array_equal(tail, original.tail_logmass)
    sample_ids, sample_lps = pack.samples(2)
    np.testing.assert_array_equal(sample_ids, original.sample_ids)
    np.testing.assert_array_equal(sample_lps, original.sample_logprobs)
    assert sample_ids.shape == (4, M)
    assert pack.output_ids(1).size == 0 and pack.samples(1)[0].shape == (0, M)
    assert pack.tensors["topk_ids"].dtype == np.int32  # in memory, whatever is on disk
    assert pack.tensors["tail_logmass"].dtype == np.float32


def _stored_dtypes(path: Path) -> dict[str, str]:
    from safetensors.numpy import load_file

    return {name: str(t.dtype) for name, t in load_file(str(path)).items()}


def _shifted(entries: list[PackEntry], by: int) -> list[PackEntry]:
    """The same entries with every token id moved by ``by`` (a larger vocabulary)."""
    return [
        PackEntry(e.meta, e.prompt_ids + by, e.output_ids + by, e.topk_ids + by,
                  e.topk_logprobs, e.tail_logmass, e.samples(M)[0] + by, e.samples(M)[1])
        for e in entries
    ]  # fmt: skip


def _write_entries(path: Path, entries: list[PackEntry]) -> Path:
    return write_pack(path, entries, PackLayout(k=K, m=M, max_new_tokens=8), PackOrigin(None, None))


def test_token_ids_are_stored_in_16_bits_when_they_fit(tmp_path: Path) -> None:
    small = [_entry("a", 5, 7, 1), _entry("b", 3, 2, 2)]
    compact = _write_entries(tmp_path / "small.safetensors", small)
    stored = _stored_dtypes(compact)
    assert {stored[n] for n in ("prompt_ids", "output_ids", "topk_ids", "sample_ids")} == {"uint16"}
    # a 128k vocabulary: ids above 65,535 keep 32 bits, and come back unchanged
    big = _shifted(small, 100_000)
    path = _write_entries(tmp_path / "big.safetensors", big)
    assert _stored_dtypes(path)["topk_ids"] == "int32"
    pack = load_pack(path)
    np.testing.assert_array_equal(pack.topk(0)[0], big[0].topk_ids)
    np.testing.assert_array_equal(pack.prompt_ids(1), big[1].prompt_ids)
    # 16-bit ids make the file smaller by 2 bytes per stored id
    ids = sum(
        e.prompt_ids.size + e.output_ids.size + e.topk_ids.size + e.samples(M)[0].size for e in big
    )
    saved = path.stat().st_size - compact.stat().st_size
    assert abs(saved - 2 * ids) < 64  # the JSON header differs by a few characters


def _save_by_hand(
    path: Path, entries: list[PackEntry], version: int, id_dtype: type[np.generic]
) -> Path:
    """A version 1/2 pack written without write_pack: ids cast to ``id_dtype``, no sampled tail."""
    from safetensors.numpy import save

    tensors = build_tensors(entries, k=K, m=M)
    del tensors["sample_ids"], tensors["sample_logprobs"]
    for name in ("prompt_ids", "output_ids", "topk_ids"):
        tensors[name] = tensors[name].astype(id_dtype)
    header = {
        "format": "gate-reference-pack", "version": version, "k": K, "max_new_tokens": 8,
        "logprob_dtype": "float32", "tokenizer_sha256": None, "prompt_set_sha256": None,
        "model": {}, "payload_sha256": payload_sha256(tensors),
        "prompts": [vars(e.meta) for e in entries],
    }  # fmt: skip
    path.write_bytes(save(tensors, metadata={"gate_reference_pack": json.dumps(header)}))
    return path


def test_version_1_packs_with_32_bit_ids_are_still_read(tmp_path: Path) -> None:
    entries = [_entry("a", 5, 7, 1), _entry("b", 3, 0, 2), _entry("c", 9, 4, 3)]
    pack = load_pack(_save_by_hand(tmp_path / "v1.safetensors", entries, 1, np.int32))
    np.testing.assert_array_equal(pack.topk(2)[0], entries[2].topk_ids)
    assert pack.version == 1 and pack.m == 0 and pack.kl_kind == "bound"


def test_version_2_packs_are_read_without_a_sampled_tail(tmp_path: Path) -> None:
    entries = [_entry("a", 5, 7, 1), _entry("b", 3, 0, 2), _entry("c", 9, 4, 3)]
    pack = load_pack(_save_by_hand(tmp_path / "v2.safetensors", entries, 2, np.uint16))
    assert pack.version == 2 and pack.m == 0 and pack.kl_kind == "bound"
    assert pack.vocab_size is None and pack.sample_seed is None
    ids, lps = pack.samples(0)
    assert ids.shape == (7, 0) and lps.shape == (7, 0)
    assert pack.recording_summary().tokens_cut is None  # no n_generated before v3


def test_a_version_3_pack_without_its_sampled_tail_is_refused(tmp_path: Path) -> None:
    entries = [_entry("a", 5, 7, 1)]
    path = _save_by_hand(tmp_path / "v3.safetensors", entries, 3, np.uint16)
    with pytest.raises(BaselineError, match="missing tensors sample_ids, sample_logprobs"):
        load_pack(path)


def test_a_float_id_tensor_is_refused(tmp_path: Path) -> None:
    path = _save_by_hand(tmp_path / "bad.safetensors", [_entry("a", 5, 7, 1)], 2, np.float32)
    with pytest.raises(BaselineError, match="not a token-id dtype"):
        load_pack(path)


def test_float16_storage(tmp_path: Path) -> None:
    pack = load_pack(_write(tmp_path / "ref.safetensors", logprob_dtype="float16"))
    assert pack.tensors["topk_logprobs"].dtype == np.float16
    assert pack.topk(0)[1].dtype == np.float32


def _flip_byte(path: Path, offset_from_end: int) -> None:
    data = bytearray(path.read_bytes())
    data[-offset_from_end] ^= 0x01
    path.write_bytes(bytes(data))


def test_tampered_payload_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path / "ref.safetensors")
    _flip_byte(path, 3)
    with pytest.raises(BaselineError, match="hash mismatch") as info:
        load_pack(path)
    assert info.value.exit_code == ExitCode.USAGE_ERROR


def _rehashed(path: Path, edit: Callable[[dict[str, np.ndarray]], None]) -> Path:
    """Edit a pack's tensors and recompute its payload hash: tampering the hash cannot see."""
    from safetensors.numpy import load_file, save

    tensors = {name: np.array(t) for name, t in load_file(str(path)).items()}
    edit(tensors)
    data = path.read_bytes()
    (size,) = struct.unpack("<Q", data[:8])
    header = json.loads(json.loads(data[8 : 8 + size])["__metadata__"][METADATA_KEY])
    header["payload_sha256"] = payload_sha256(tensors)
    path.write_bytes(save(tensors, metadata={METADATA_KEY: json.dumps(header)}))
    return path


def _set(
    name: str, index: tuple[int, int], value: Callable[[dict[str, np.ndarray]], float]
) -> Callable[[dict[str, np.ndarray]], None]:
    def edit(t: dict[str, np.ndarray]) -> None:
        t[name][index] = value(t)

    return edit


def _duplicate(t: dict[str, np.ndarray]) -> None:
    t["sample_ids"][0, 1] = t["sample_ids"][0, 0]
    t["sample_logprobs"][0, 1] = t["sample_logprobs"][0, 0] - 0.5


def _tiny_tail(t: dict[str, np.ndarray]) -> None:
    t["tail_logmass"][0] = np.log(1e-4)


TAMPERED = {
    "sampled token inside the top-k": (
        _set("sample_ids", (0, 0), lambda t: t["topk_ids"][0, 1]),
        "inside the stored top-k",
    ),
    "positive log-prob": (_set("sample_logprobs", (0, 0), lambda t: 0.5), "above 0"),
    "NaN log-prob": (_set("sample_logprobs", (0, 0), lambda t: np.nan), "NaN"),
    "sampled token likelier than the top-k": (
        _set("sample_logprobs", (0, 0), lambda t: t["topk_logprobs"][0, -1] + 0.1),
        "more likely than the least likely top-k token",
    ),
    "duplicate id, two log-probs": (_duplicate, "drawn twice"),
    "samples outweigh the tail": (_tiny_tail, "more probability than the tail mass"),
    "id beyond the vocabulary": (
        _set("sample_ids", (0, 0), lambda t: VOCAB + 3),
        "outside the vocabulary",
    ),
    "top-k out of order": (
        _set("topk_logprobs", (0, 1), lambda t: t["topk_logprobs"][0, 0] + 0.01),
        "descending",
    ),
}


@pytest.mark.parametrize("case", list(TAMPERED))
def test_consistently_rehashed_tampering_is_refused(tmp_path: Path, case: str) -> None:
    """Values no recorder writes are refused even when the payload hash was recomputed."""
    edit, message = TAMPERED[case]
    path = _rehashed(_write(tmp_path / "ref.safetensors"), edit)
    with pytest.raises(BaselineError, match=message) as info:
        load_pack(path)
    assert info.value.exit_code == ExitCode.USAGE_ERROR == 4
    assert "\n" not in info.value.format_line()


def test_a_token_drawn_twice_with_one_log_prob_is_valid(tmp_path: Path) -> None:
    """Draws are with replacement: a repeated token (same log-prob) is a legitimate sample."""

    def repeat(t: dict[str, np.ndarray]) -> None:
        t["sample_ids"][0, 1] = t["sample_ids"][0, 0]
        t["sample_logprobs"][0, 1] = t["sample_logprobs"][0, 0]

    pack = load_pack(_rehashed(_write(tmp_path / "ref.safetensors"), repeat))
    assert pack.samples(0)[0][0, 0] == pack.samples(0)[0][0, 1]


@pytest.mark.parametrize("keep", [0, 5, 100, -1])
def test_truncated_pack_is_refused(tmp_path: Path, keep: int) -> None:
    path = _write(tmp_path / "ref.safetensors")
    data = path.read_bytes()
    path.write_bytes(data[: keep if keep >= 0 else len(data) - 10])
    with pytest.raises(BaselineError, match=r"truncated|not a gate reference pack"):
        load_pack(path)


def test_missing_file_and_foreign_file(tmp_path: Path) -> None:
    with pytest.raises(BaselineError, match="cannot be read"):
        load_pack(tmp_path / "absent.safetensors")
    from safetensors.numpy import save_file

    save_file({"x": np.zeros(3, np.float32)}, str(tmp_path / "other.safetensors"))
    with pytest.raises(BaselineError, match="not a gate reference pack"):
        load_pack(tmp_path / "other.safetensors")


def _rewrite_header(path: Path, change: dict[str, object]) -> None:
    data = path.read_bytes()
    (size,) = struct.unpack("<Q", data[:8])
    raw = json.loads(data[8 : 8 + size])
    header = json.loads(raw["__metadata__"]["gate_reference_pack"])
    header.update(change)
    raw["__metadata__"]["gate_reference_pack"] = json.dumps(header)
    blob = json.dumps(raw).encode()
    blob += b" " * (-len(blob) % 8)
    path.write_bytes(struct.pack("<Q", len(blob)) + blob + data[8 + size :])


def test_newer_version_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path / "ref.safetensors")
    _rewrite_header(path, {"version": 99})
    with pytest.raises(BaselineError, match="version 99"):
        load_pack(path)


def test_edited_header_lengths_are_refused(tmp_path: Path) -> None:
    path = _write(tmp_path / "ref.safetensors")
    pack = load_pack(path)
    prompts = [dict(vars(p)) for p in pack.prompts]
    prompts[0]["n_output"] = 6
    _rewrite_header(path, {"prompts": prompts})
    with pytest.raises(BaselineError, match="header lengths"):
        load_pack(path)


def test_broken_invariant_is_refused(tmp_path: Path) -> None:
    entry = _entry("a", 2, 3, 1)
    bad = PackEntry(
        entry.meta,
        entry.prompt_ids,
        entry.topk_ids[:, 1],
        entry.topk_ids,
        entry.topk_logprobs,
        entry.tail_logmass,
    )
    path = write_pack(
        tmp_path / "ref.safetensors",
        [bad],
        PackLayout(k=K, max_new_tokens=3),
        PackOrigin(None, None),
    )
    with pytest.raises(BaselineError, match="top-1"):
        load_pack(path)


def test_empty_pack_is_refused(tmp_path: Path) -> None:
    with pytest.raises(DataError):
        write_pack(
            tmp_path / "ref.safetensors",
            [],
            PackLayout(k=K, max_new_tokens=3),
            PackOrigin(None, None),
        )
    with pytest.raises(DataError):
        write_pack(
            tmp_path / "ref.safetensors",
            [_entry("b", 3, 0, 2)],
            PackLayout(k=K, max_new_tokens=3),
            PackOrigin(None, None),
        )


def test_compatibility_checks(tmp_path: Path) -> None:
    pack = load_pack(_write(tmp_path / "ref.safetensors"))
    check_pack_compatible(pack, tokenizer_sha256="t" * 64, prompt_set_sha256="p" * 64)
    check_pack_compatible(pack)  # unknown sides are not compared
    with pytest.raises(BaselineError, match="another tokenizer"):
        check_pack_compatible(pack, tokenizer_sha256="x" * 64)
    with pytest.raises(BaselineError, match="another prompt set"):
        check_pack_compatible(pack, prompt_set_sha256="x" * 64)
    check_prompt_ids(pack, 0, pack.prompt_ids(0).tolist())
    with pytest.raises(BaselineError, match="tokenizes differently"):
        check_prompt_ids(pack, 0, [*pack.prompt_ids(0).tolist(), 1])


def test_payload_hash_covers_dtype_and_shape() -> None:
    a = {"x": np.arange(4, dtype=np.int32)}
    assert payload_sha256(a) != payload_sha256({"x": np.arange(4, dtype=np.int64)})
    assert payload_sha256(a) != payload_sha256({"x": np.arange(4, dtype=np.int32).reshape(2, 2)})
    assert payload_sha256(a) == payload_sha256({"x": np.arange(4, dtype=np.int32)})


def test_bytes_per_token(tmp_path: Path) -> None:
    path = _write(tmp_path / "ref.safetensors")
    per_token = pack_bytes_per_token(path, 11)
    # per output token: K + M ids (2 B) and log-probs (4 B), tail (4 B), id (2 B), + header/prompts
    assert per_token >= payload_bytes_per_token(K, M, VOCAB) == (K + M) * 6 + 6
    assert per_token == path.stat().st_size / 11


#: Per-output-token payload at the defaults k = 32, m = 64, float32 log-probs (16-bit ids
#: up to a 65,536-token vocabulary, 32-bit beyond).
FORMAT_BYTES = {4096: 582, 32_000: 582, 128_256: 776}


@pytest.mark.parametrize("vocab", sorted(FORMAT_BYTES))
def test_bytes_per_token_against_full_logits(tmp_path: Path, vocab: int) -> None:
    """A v3 pack (k = 32, m = 64) against full-vocabulary float16 logits.

    From the format: 582 B per token up to a 64k vocabulary (1/14 of 8,192 B at
    4,096; 1/110 of 64,000 B at 32k) and 776 B with 32-bit ids (1/330 of
    256,512 B at 128k). The written pack's per-position tensors hold exactly
    that many bytes, and with prompts and header it stays under 1/100 from 32k up.
    """
    k, m = 32, 64
    formula = payload_bytes_per_token(k, m, vocab)
    assert formula == FORMAT_BYTES[vocab]
    rng = np.random.default_rng(vocab)
    entries = []
    for j in range(4):  # four prompts of 32 output tokens over the full vocabulary
        lp = _log_softmax(rng.normal(0.0, 2.0, size=(32, vocab)))
        meta = PackPrompt(f"p{j}", "chat", "short", 16, 32)
        prompt = rng.integers(vocab - 1000, vocab, 16)  # high ids: 32-bit storage past 65,536
        entries.append(_entry_from_rows(meta, prompt, lp, k=k, m=m, seed=j))
    path = write_pack(
        tmp_path / "ref.safetensors",
        entries,
        PackLayout(k=k, m=m, max_new_tokens=32),
        PackOrigin(None, None, vocab_size=vocab),
    )
    pack = load_pack(path)
    per_position = ("output_ids", "topk_ids", "topk_logprobs", "tail_logmass")
    stored = sum(pack.tensors[n].nbytes for n in ("sample_ids", "sample_logprobs"))
    stored += sum(pack.tensors[n].nbytes for n in per_position)
    on_disk_ids = 2 if vocab <= 65_536 else 4
    # in memory ids are int32 (4 B): count them at their on-disk width
    id_count = sum(pack.tensors[n].size for n in ("output_ids", "topk_ids", "sample_ids"))
    stored += id_count * (on_disk_ids - 4)
    assert stored == formula * pack.n_output_tokens
    file_per_token = pack_bytes_per_token(path, pack.n_output_tokens)
    assert formula < file_per_token < formula + 32  # prompts, offsets and header
    ratio = file_per_token / full_logits_bytes_per_token(vocab)
    if vocab >= 32_000:
        assert ratio <= 1 / 100
    else:
        assert ratio > 1 / 100  # the demo model's 4,096 tokens are too few for the target

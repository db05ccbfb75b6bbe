"""Reference pack format: round trip, verification, refusal of bad packs."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

from gate.errors import BaselineError, DataError, ExitCode
from gate.store.reference import (
    PackEntry,
    PackPrompt,
    build_tensors,
    check_compatible,
    check_prompt_ids,
    load_pack,
    pack_bytes_per_token,
    payload_sha256,
    write_pack,
)

K = 4


def _entry(pid: str, n_prompt: int, n_out: int, seed: int) -> PackEntry:
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(n_out, 50))
    lp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    order = np.argsort(-lp, axis=-1, kind="stable")[:, :K]
    top = np.take_along_axis(lp, order, -1).astype(np.float32)
    tail = np.log1p(-np.exp(top.astype(np.float64)).sum(-1)).astype(np.float32)
    return PackEntry(
        PackPrompt(pid, "code" if seed % 2 else "math", "short", n_prompt, n_out),
        rng.integers(0, 50, n_prompt),
        order[:, 0],
        order,
        top,
        tail,
    )


def _write(path: Path, **kw: object) -> Path:
    entries = [_entry("a", 5, 7, 1), _entry("b", 3, 0, 2), _entry("c", 9, 4, 3)]
    args: dict[str, object] = {
        "k": K,
        "max_new_tokens": 8,
        "tokenizer_sha256": "t" * 64,
        "prompt_set_sha256": "p" * 64,
        "model": {"source": "tiny"},
    }
    args.update(kw)
    return write_pack(path, entries, **args)  # type: ignore[arg-type]


def test_round_trip(tmp_path: Path) -> None:
    path = _write(tmp_path / "ref.safetensors")
    pack = load_pack(path)
    assert [p.id for p in pack.prompts] == ["a", "b", "c"]
    assert pack.k == K and pack.max_new_tokens == 8 and pack.n_output_tokens == 11
    original = _entry("c", 9, 4, 3)
    np.testing.assert_array_equal(pack.prompt_ids(2), original.prompt_ids)
    np.testing.assert_array_equal(pack.output_ids(2), original.output_ids)
    ids, lps, tail = pack.topk(2)
    np.testing.assert_array_equal(ids, original.topk_ids)
    np.testing.assert_array_equal(lps, original.topk_logprobs)
    np.testing.assert_array_equal(tail, original.tail_logmass)
    assert pack.output_ids(1).size == 0
    assert pack.tensors["topk_ids"].dtype == np.int32  # in memory, whatever is on disk
    assert pack.tensors["tail_logmass"].dtype == np.float32


def _stored_dtypes(path: Path) -> dict[str, str]:
    from safetensors.numpy import load_file

    return {name: str(t.dtype) for name, t in load_file(str(path)).items()}


def _shifted(entries: list[PackEntry], by: int) -> list[PackEntry]:
    """The same entries with every token id moved by ``by`` (a larger vocabulary)."""
    return [
        PackEntry(e.meta, e.prompt_ids + by, e.output_ids + by, e.topk_ids + by,
                  e.topk_logprobs, e.tail_logmass)
        for e in entries
    ]  # fmt: skip


def _write_entries(path: Path, entries: list[PackEntry]) -> Path:
    return write_pack(
        path, entries, k=K, max_new_tokens=8, tokenizer_sha256=None, prompt_set_sha256=None
    )


def test_token_ids_are_stored_in_16_bits_when_they_fit(tmp_path: Path) -> None:
    small = [_entry("a", 5, 7, 1), _entry("b", 3, 2, 2)]
    compact = _write_entries(tmp_path / "small.safetensors", small)
    stored = _stored_dtypes(compact)
    assert {stored[n] for n in ("prompt_ids", "output_ids", "topk_ids")} == {"uint16"}
    # a 128k vocabulary: ids above 65,535 keep 32 bits, and come back unchanged
    big = _shifted(small, 100_000)
    path = _write_entries(tmp_path / "big.safetensors", big)
    assert _stored_dtypes(path)["topk_ids"] == "int32"
    pack = load_pack(path)
    np.testing.assert_array_equal(pack.topk(0)[0], big[0].topk_ids)
    np.testing.assert_array_equal(pack.prompt_ids(1), big[1].prompt_ids)
    # 16-bit ids make the file smaller by 2 bytes per stored id
    ids = sum(e.prompt_ids.size + e.output_ids.size + e.topk_ids.size for e in big)
    saved = path.stat().st_size - compact.stat().st_size
    assert abs(saved - 2 * ids) < 64  # the JSON header differs by a few characters


def _save_by_hand(
    path: Path, entries: list[PackEntry], version: int, id_dtype: type[np.generic]
) -> Path:
    """A pack written without write_pack: its token-id tensors cast to ``id_dtype``."""
    from safetensors.numpy import save

    tensors = build_tensors(entries, k=K)
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
        k=K,
        max_new_tokens=3,
        tokenizer_sha256=None,
        prompt_set_sha256=None,
    )
    with pytest.raises(BaselineError, match="top-1"):
        load_pack(path)


def test_empty_pack_is_refused(tmp_path: Path) -> None:
    with pytest.raises(DataError):
        write_pack(
            tmp_path / "ref.safetensors",
            [],
            k=K,
            max_new_tokens=3,
            tokenizer_sha256=None,
            prompt_set_sha256=None,
        )
    with pytest.raises(DataError):
        write_pack(
            tmp_path / "ref.safetensors",
            [_entry("b", 3, 0, 2)],
            k=K,
            max_new_tokens=3,
            tokenizer_sha256=None,
            prompt_set_sha256=None,
        )


def test_compatibility_checks(tmp_path: Path) -> None:
    pack = load_pack(_write(tmp_path / "ref.safetensors"))
    check_compatible(pack, tokenizer_sha256="t" * 64, prompt_set_sha256="p" * 64)
    check_compatible(pack)  # unknown sides are not compared
    with pytest.raises(BaselineError, match="another tokenizer"):
        check_compatible(pack, tokenizer_sha256="x" * 64)
    with pytest.raises(BaselineError, match="another prompt set"):
        check_compatible(pack, prompt_set_sha256="x" * 64)
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
    # per output token: K ids (2 B) + K log-probs (4 B) + tail (4 B) + id (2 B), plus header/prompts
    assert per_token >= K * 6 + 6
    assert per_token == path.stat().st_size / 11

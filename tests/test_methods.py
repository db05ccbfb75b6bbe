"""Compression methods as classes: the registry, the tables it replaced, out-of-tree methods."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from gate.errors import ConfigError, ExitCode
from gate.models.activity import Counting, Footprint
from gate.models.methods import registry
from gate.models.methods.base import (
    ATTENTION,
    CACHE,
    FAMILIES,
    SPECULATIVE,
    WEIGHTS,
    CompressionMethod,
)
from gate.models.recipes import example, parse_recipe, recipe_names
from gate.models.stack import parse_stack, slot

PACKAGE = Path(__file__).resolve().parents[1] / "gate"

#: The per-fact tables one method's facts used to be spread over (issue 49).
GONE = ("RECIPES", "HOOKS", "PRESSES", "PER_CALL_SCALES", "SLOT_OF_FAMILY", "RecipeDef")


def test_the_tables_a_method_was_spread_over_are_gone() -> None:
    found = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Assign):
                names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names = [node.target.id]
            elif isinstance(node, ast.ClassDef):
                names = [node.name]
            found += [f"{path.relative_to(PACKAGE)}:{n}" for n in names if n in GONE]
    assert found == []


def test_every_recipe_name_is_one_registered_method_instance() -> None:
    methods = registry.methods()
    assert recipe_names() == list(methods)
    assert all(isinstance(m, CompressionMethod) for m in methods.values())
    assert all(m.family in FAMILIES for m in methods.values())
    # every recipe parses from its example and names its own method
    for name in methods:
        assert parse_recipe(example(name)).name == name


def test_the_new_methods_are_weight_recipes_that_stack_and_select() -> None:
    for name in (
        "torchao-int8wo",
        "torchao-int8dq",
        "torchao-int4wo",
        "torchao-intx4wo",
        "torchao-float8wo",
    ):
        method = registry.get_method(name)
        assert method.family is WEIGHTS and method.repairable and method.requires is not None
    for bits in (1, 2, 3, 4, 8):
        assert registry.get_method(f"hqq-{bits}").footprint is not None
    stack = parse_stack("hqq-4+attn-fp8+kv-snapkv:0.5")
    assert [slot(p) for p in stack.parts] == ["weights", "attention", "cache"]
    assert str(parse_recipe("torchao-int8wo:keep=model.layers.0.*")) == (
        "torchao-int8wo:keep=model.layers.0.*"
    )
    with pytest.raises(ConfigError, match="stacks two weight formats"):
        parse_stack("hqq-4+quanto-int4")
    with pytest.raises(ConfigError, match="unknown recipe 'hqq-5'") as info:
        parse_recipe("hqq-5")
    assert info.value.hint is not None and info.value.hint.startswith("did you mean hqq-")


def test_a_method_s_slot_and_facts_come_from_its_family() -> None:
    assert registry.get_method("attn-fp8").family is ATTENTION
    assert registry.get_method("attn-fp8").per_call_scales
    assert not registry.get_method("attn-topk").per_call_scales
    assert registry.get_method("kv-h2o").family is CACHE
    assert registry.get_method("kv-h2o").needs_full_attention
    assert not registry.get_method("kv-quant").needs_full_attention
    assert registry.get_method("spec-ngram").family is SPECULATIVE
    assert registry.get_method("bnb-nf4").quantizes_while_loading
    assert registry.get_method("gguf-q4_k_m").runtime == "llama.cpp"
    assert not registry.get_method("drop-layers").localizable


class _EntryPoint:
    name = "extra"

    def __init__(self, loaded: object) -> None:
        self.loaded = loaded

    def load(self) -> object:
        return self.loaded


def test_an_out_of_tree_method_registers_by_entry_point(monkeypatch: pytest.MonkeyPatch) -> None:
    extra = CompressionMethod(
        "extra-int3", "an out-of-tree quantizer", WEIGHTS, Footprint("modules", Counting.AT_LOAD)
    )
    monkeypatch.setattr(registry, "entry_points", lambda group: [_EntryPoint([extra])])
    registry.methods.cache_clear()
    try:
        assert registry.get_method("extra-int3") is extra
        assert str(parse_recipe("extra-int3:only=model.layers.1.*")) == (
            "extra-int3:only=model.layers.1.*"
        )
        taken = dataclasses.replace(extra, name="quanto-int4")
        monkeypatch.setattr(registry, "entry_points", lambda group: [_EntryPoint(taken)])
        registry.methods.cache_clear()
        with pytest.raises(ConfigError, match="registered twice") as info:
            registry.methods()
        assert info.value.exit_code == ExitCode.USAGE_ERROR
    finally:
        monkeypatch.undo()
        registry.methods.cache_clear()
    assert "extra-int3" not in registry.methods()


def test_the_docs_quote_the_registry_s_catalogue() -> None:
    docs = (PACKAGE.parent / "docs" / "compression-families.md").read_text(encoding="utf-8")
    assert registry.catalogue_table() in docs


def test_commands_hide_the_kernels_transformers_imports_eagerly_and_methods_show_them() -> None:
    """After ``gate.commands`` is imported, loading transformers' model code imports neither
    hqq (its compiler-heavy import) nor torchao; the hqq method still finds and imports it."""
    import subprocess
    import sys

    script = (
        "import sys\n"
        "import gate.commands\n"
        "import transformers.modeling_utils\n"
        "from transformers.utils import import_utils\n"
        "assert sys.modules['hqq'] is None and sys.modules['torchao'] is None\n"
        "assert not import_utils.is_hqq_available() and not import_utils.is_torchao_available()\n"
        "from gate.models.methods.registry import get_method\n"
        "for name in ('hqq-4', 'torchao-int8wo'):\n"
        "    assert get_method(name).requires.installed(), name\n"
        "import hqq.core.quantize, torchao.quantization\n"
        "print('ok')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_a_speculative_method_says_what_it_drafts_with() -> None:
    from gate.models.methods.speculative import Speculation
    from gate.models.model_spec import ModelSpec

    spec = ModelSpec("org/target", revision="abc")
    plans = {}
    for text in ("spec-ngram:3", "spec-draft:quanto-int4", "spec-model:org/draft"):
        recipe = parse_recipe(text)
        method = registry.get_method(recipe.name)
        assert isinstance(method, Speculation)
        plans[recipe.name] = method.draft_plan(recipe, spec)
    assert plans["spec-ngram"].spec is None
    assert plans["spec-ngram"].config == {"prompt_lookup_num_tokens": 3}
    assert plans["spec-draft"].spec == spec and plans["spec-draft"].recipe == "quanto-int4"
    assert not plans["spec-draft"].same_tokenizer
    draft = plans["spec-model"]
    assert (draft.spec.source, draft.spec.revision, draft.recipe) == ("org/draft", None, None)
    assert draft.same_tokenizer


def test_a_drafter_of_a_recipe_that_drafts_nothing_is_refused_in_one_line() -> None:
    from gate.models.backends.speculative import open_drafter
    from gate.models.model_spec import ModelSpec

    with pytest.raises(ConfigError) as err:
        open_drafter(parse_recipe("quanto-int4"), ModelSpec("org/target"), None, lambda s, r: None)
    assert err.value.message == "recipe quanto-int4 is not a speculative decoder"
    assert err.value.hint == "use spec-ngram, spec-draft or spec-model"

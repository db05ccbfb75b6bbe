"""Recipes that stack (gate.models.stack): parsing, canonical text and the rules, each one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from gate.errors import ConfigError, ExitCode
from gate.models.recipes import Recipe
from gate.models.stack import RecipeStack, parse_stack, slot
from tests.cli_support import run_gate


def test_parts_in_order_and_canonical_text() -> None:
    stack = parse_stack(" QUANTO-INT4 + kv-snapkv:ratio=0.50 ")
    assert [p.name for p in stack.parts] == ["quanto-int4", "kv-snapkv"]
    assert str(stack) == "quanto-int4+kv-snapkv:0.5"
    assert stack.weights == Recipe("quanto-int4")
    assert stack.part("cache") == stack.parts[1]
    assert stack.part("speculative") is None
    assert parse_stack(str(stack)) == stack


def test_one_recipe_is_a_one_part_stack_with_the_same_text() -> None:
    for text in ("none", "bnb-nf4", "prune-wanda:0.25", "kv-streaming:sinks=4,window=8"):
        stack = parse_stack(text)
        assert not stack.composed
        assert str(stack) == str(Recipe.parse(text))
    assert parse_stack(None) == RecipeStack((Recipe("none"),))


def test_a_weight_recipe_with_selectors_stacks_with_a_speculative_part() -> None:
    stack = parse_stack("quanto-int4:keep=model.layers.0.*,lm_head+spec-draft:quanto-int4")
    assert str(stack.parts[0]) == "quanto-int4:keep=model.layers.0.*,lm_head"
    assert stack.parts[1].value == "quanto-int4"
    assert slot(stack.parts[1]) == "speculative"
    assert stack.on_loaded_model == ()


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("bnb-int8+bnb-nf4", "two weight formats (bnb-int8 and bnb-nf4)"),
        ("quanto-int4+gguf-q8_0", "two weight formats"),
        ("kv-snapkv:0.5+kv-h2o:0.5", "two KV-cache methods"),
        ("spec-ngram:3+spec-draft:quanto-int4", "two speculative decoders"),
        ("attn-fp8+attn-sage", "two attention methods"),
        ("kv-snapkv:0.5+quanto-int4", "not in the order a build is made"),
        ("none+bnb-nf4", "'none' cannot be stacked"),
        ("kv-snapkv:0.5+spec-ngram:3", "KV-cache method with speculative decoding"),
        ("quanto-int4++kv-snapkv:0.5", "has an empty part"),
        ("quanto-int4+bogus", "unknown recipe 'bogus'"),
    ],
)
def test_stacks_that_cannot_work_are_one_line(text: str, words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_stack(text)
    assert words in caught.value.message
    assert "\n" not in caught.value.message


def test_out_of_order_names_the_order_to_write() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_stack("kv-snapkv:0.5+attn-fp8+quanto-int4")
    assert caught.value.hint == "write quanto-int4+attn-fp8+kv-snapkv:0.5"


def test_a_test_instrument_goes_anywhere() -> None:
    assert str(parse_stack("delay:5ms+quanto-int4+kv-snapkv:0.5")) == (
        "delay:5ms+quanto-int4+kv-snapkv:0.5"
    )


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("spec-draft:kv-snapkv:0.5", "not a weight recipe"),
        ("spec-draft:gptq:w4a16", "not a weight recipe"),
        ("spec-draft", "needs an argument"),
        ("spec-ngram:0", "not a positive whole number"),
    ],
)
def test_speculative_arguments_are_checked(text: str, words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_stack(text)
    assert words in caught.value.message


def test_speculative_recipes_read_back() -> None:
    assert str(Recipe.parse("spec-draft:PRUNE-MAGNITUDE:0.50")) == "spec-draft:prune-magnitude:0.5"
    assert str(Recipe.parse("spec-draft:none")) == "spec-draft:none"
    assert str(Recipe.parse("spec-ngram:4")) == "spec-ngram:4"
    assert Recipe.parse("spec-model:some/dir").value == "some/dir"


def test_two_weight_formats_are_refused_at_dry_run(tmp_path: Path) -> None:
    done = run_gate(
        "run",
        "--candidate",
        "demo",
        "--recipe",
        "bnb-int8+bnb-nf4",
        "--against",
        "fp32",
        "--tiers",
        "fidelity",
        "--dry-run",
        cwd=tmp_path,
    )
    assert done.returncode == ExitCode.USAGE_ERROR, done.stdout + done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert "two weight formats (bnb-int8 and bnb-nf4)" in lines[0]
    assert "Traceback" not in done.stderr


def test_the_speculative_tier_needs_a_speculative_part(tmp_path: Path) -> None:
    done = run_gate(
        "run",
        "--candidate",
        "demo",
        "--recipe",
        "quanto-int4",
        "--against",
        "fp32",
        "--tiers",
        "speculative",
        "--dry-run",
        cwd=tmp_path,
    )
    assert done.returncode == ExitCode.USAGE_ERROR, done.stdout + done.stderr
    assert "add a spec-* part" in done.stderr


def test_llama_cpp_runs_one_gguf_file_not_a_stack(tmp_path: Path) -> None:
    done = run_gate(
        "run", "--candidate", "demo", "--recipe", "gguf-q8_0+kv-snapkv:0.5",
        "--engine", "llama.cpp", "--against", "fp32", "--tiers", "fidelity", "--dry-run",
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == ExitCode.USAGE_ERROR, done.stdout + done.stderr
    assert "runs one gguf-* file, and recipe gguf-q8_0+kv-snapkv:0.5 stacks more" in done.stderr


def test_localize_takes_a_stack_and_localizes_its_weight_part(tmp_path: Path) -> None:
    done = run_gate(
        "localize", "--candidate", "demo", "--recipe", "quanto-int2+kv-snapkv:0.5",
        "--against", "fp32", "--dry-run", cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == ExitCode.OK, done.stdout + done.stderr
    refused = run_gate(
        "localize", "--candidate", "demo", "--recipe", "kv-snapkv:0.5+spec-ngram:3",
        "--against", "fp32", "--dry-run", cwd=tmp_path,
    )  # fmt: skip
    assert refused.returncode == ExitCode.USAGE_ERROR


def test_a_stack_with_weights_keeps_its_other_parts_when_repaired() -> None:
    stack = parse_stack("quanto-int2+kv-snapkv:0.5")
    repaired = stack.with_weights(Recipe.parse("quanto-int2:keep=model.layers.1"))
    assert str(repaired) == "quanto-int2:keep=model.layers.1+kv-snapkv:0.5"


def test_the_latency_tier_refuses_a_speculative_build_at_dry_run(tmp_path: Path) -> None:
    done = run_gate(
        "run", "--candidate", "demo", "--recipe", "quanto-int4+spec-ngram:3",
        "--against", "fp32", "--dry-run", cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == ExitCode.USAGE_ERROR, done.stdout + done.stderr
    assert "latency tier does not time a speculative build (spec-ngram:3)" in done.stderr

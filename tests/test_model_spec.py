"""ModelSpec and Recipe: parsing, validation, slugs, did-you-mean."""

from __future__ import annotations

from pathlib import Path

import pytest

from gate.errors import BaselineError, ConfigError, ExitCode, ModelLoadError
from gate.models.methods.base import DRAFTED, TEST, CompressionMethod
from gate.models.methods.registry import methods
from gate.models.model_spec import ModelSpec, demo_model_dir
from gate.models.recipes import (
    ARG_KINDS,
    Recipe,
    example,
    format_recipe,
    parse_recipe,
    recipe_names,
)
from gate.slugs import model_slug
from gate.store.baseline import SLUG_RE


def test_parse_local_dir_and_options(tmp_path: Path) -> None:
    spec = ModelSpec.parse(str(tmp_path), dtype="float32", device="cpu")
    assert spec.local_dir == tmp_path
    assert spec.dtype == "float32" and spec.device == "cpu"
    assert not spec.trust_remote_code and not spec.allow_pickle


def test_hub_id_with_revision_and_slug() -> None:
    spec = ModelSpec.parse("Org/Some.Model@abc123")
    assert (spec.source, spec.revision) == ("Org/Some.Model", "abc123")
    assert spec.local_dir is None
    assert spec.slug == "org--some.model"


def test_demo_resolves_to_package_assets() -> None:
    spec = ModelSpec.parse("demo")
    assert spec.is_demo and spec.slug == "demo"
    assert demo_model_dir().parts[-3:] == ("gate", "assets", "demo_model")
    if (demo_model_dir() / "config.json").is_file():
        assert spec.local_dir == demo_model_dir()
    else:
        with pytest.raises(ModelLoadError):
            _ = spec.local_dir


def test_local_slug_is_directory_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = tmp_path / "My Model_v2"
    model.mkdir()
    assert ModelSpec.parse(str(model)).slug == "my-model_v2"
    monkeypatch.chdir(model)
    assert model_slug(".") == "my-model_v2"  # an existing path is resolved first


@pytest.mark.parametrize(
    ("model", "slug"),
    [
        ("Org/Name-7B", "org--name-7b"),
        ("meta-llama/Llama-3.1-8B", "meta-llama--llama-3.1-8b"),
        ("./models/my model/", "my-model"),
        ("~/no/such/Model", "model"),
        ("_Org/x", "org--x"),
        ("demo", "demo"),
        ("a" * 150, "a" * 100),
    ],
)
def test_model_slug_is_a_valid_store_directory_name(model: str, slug: str) -> None:
    assert model_slug(model) == slug
    assert SLUG_RE.match(slug)  # the store accepts every slug the rule makes


def test_a_model_name_with_no_slug_is_a_baseline_error() -> None:
    with pytest.raises(BaselineError, match="cannot derive a baseline slug") as info:
        model_slug("???")
    assert "--model-slug" in info.value.format_line()
    assert info.value.exit_code == ExitCode.USAGE_ERROR


@pytest.mark.parametrize(
    "opts",
    [{"dtype": "int8"}, {"device": "gpu"}, {"device": "cuda:x"}, {"colour": "red"}],
)
def test_bad_spec_options_are_config_errors(opts: dict[str, str]) -> None:
    with pytest.raises(ConfigError) as info:
        ModelSpec.parse("demo", **opts)
    assert info.value.exit_code == ExitCode.USAGE_ERROR
    assert "\n" not in info.value.format_line()


def test_missing_local_dir_is_input(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        _ = ModelSpec.parse(str(tmp_path / "nope")).local_dir
    assert info.value.exit_code == ExitCode.USAGE_ERROR
    assert "does not exist" in info.value.message


@pytest.mark.parametrize(
    ("text", "name", "value", "canonical"),
    [
        (None, "none", None, "none"),
        ("none", "none", None, "none"),
        ("BNB-NF4", "bnb-nf4", None, "bnb-nf4"),
        ("prune-magnitude:0.5", "prune-magnitude", 0.5, "prune-magnitude:0.5"),
        ("prune-wanda: 0.25", "prune-wanda", 0.25, "prune-wanda:0.25"),
        ("drop-layers:2", "drop-layers", 2, "drop-layers:2"),
        ("delay:20ms", "delay", 20.0, "delay:20ms"),
        ("delay:0.5s", "delay", 500.0, "delay:500ms"),
        ("delay:7", "delay", 7.0, "delay:7ms"),
    ],
)
def test_recipe_parsing(text: str | None, name: str, value: float | None, canonical: str) -> None:
    recipe = parse_recipe(text)
    assert recipe == Recipe(name, value)
    assert str(recipe) == format_recipe(recipe) == canonical
    assert parse_recipe(canonical) == recipe  # the canonical form round-trips
    assert Recipe.parse(canonical) == recipe


def test_a_hand_built_recipe_is_validated_through_its_text() -> None:
    assert parse_recipe(Recipe("delay", 500)) == Recipe("delay", 500.0)
    assert str(Recipe("drop-layers", 3)) == "drop-layers:3"
    with pytest.raises(ConfigError, match="outside"):
        parse_recipe(Recipe("prune-wanda", 2.0))


def test_every_argument_kind_round_trips_its_example() -> None:
    checked = set()
    for definition in methods().values():
        kind = ARG_KINDS[definition.arg]  # every catalogued kind has a parser
        if kind.name == "none":
            continue
        text = example(definition.name).partition(":")[2]  # a choice's first word, else the kind's
        value = kind.parse(definition.name, text)
        assert kind.parse(definition.name, kind.format(value)) == value
        checked.add(kind.name)
    # every kind but "none" was round-tripped through at least one recipe
    assert checked == {kind.name for kind in ARG_KINDS.values()} - {"none"}
    assert len(checked) >= 5


def test_every_registered_name_parses() -> None:
    examples = {
        "prune-magnitude": ":0.5",
        "prune-wanda": ":0.5",
        "drop-layers": ":1",
        "delay": ":1ms",
    }
    names = recipe_names()
    assert {"none", *examples} <= set(names)  # the hand examples name registered recipes
    for name in names:
        assert (
            parse_recipe(name + examples[name] if name in examples else example(name)).name == name
        )


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("bnb-nf5", "did you mean bnb-nf4"),
        ("quanto-int3", "did you mean quanto-int"),
        ("prune-magnitud:0.5", "did you mean prune-magnitude"),
        ("prune-magnitude:1.0", "outside (0, 1)"),
        ("prune-magnitude:0", "outside (0, 1)"),
        ("prune-wanda:-0.2", "outside (0, 1)"),
        ("prune-wanda:half", "not a number"),
        ("prune-magnitude", "needs an argument"),
        ("drop-layers:0", "positive whole number"),
        ("drop-layers:1.5", "positive whole number"),
        ("delay:fast", "not a duration"),
        ("bnb-int8:4", "takes no argument"),
    ],
)
def test_bad_recipes_are_one_line_config_errors(text: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_recipe(text)
    line = info.value.format_line()
    assert fragment in line
    assert "\n" not in line
    assert info.value.exit_code == ExitCode.USAGE_ERROR


def test_a_new_argument_kind_plugs_into_the_parser_unchanged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Structured arguments (``sinks=4,window=256``) need one kind and one catalogue entry."""
    from gate.models import recipes

    def parse_keyed(name: str, text: str) -> recipes.RecipeValue:
        pairs = [item.partition("=") for item in text.split(",")]
        if not all(sep and key and value.isdigit() for key, sep, value in pairs):
            raise ConfigError(f"{name}: {text!r} is not key=number pairs", "e.g. sinks=4")
        return tuple((key.strip(), int(value)) for key, _, value in pairs)

    def format_keyed(value: recipes.RecipeValue) -> str:
        assert isinstance(value, tuple)
        return ",".join(f"{key}={number}" for key, number in value)

    monkeypatch.setitem(
        recipes.ARG_KINDS, "keyed", recipes.ArgKind("keyed", "sinks=4", parse_keyed, format_keyed)
    )
    window = CompressionMethod("kv-window", "test only", TEST, DRAFTED, arg="keyed")
    monkeypatch.setitem(methods(), "kv-window", window)  # type: ignore[index]
    recipe = parse_recipe("KV-Window: sinks=4,window=256")
    assert recipe == Recipe("kv-window", (("sinks", 4), ("window", 256)))
    assert str(recipe) == "kv-window:sinks=4,window=256"
    assert parse_recipe(str(recipe)) == recipe
    with pytest.raises(ConfigError, match="not key=number pairs"):
        parse_recipe("kv-window:sinks")
    with pytest.raises(ConfigError, match="needs an argument") as info:
        parse_recipe("kv-window")
    assert "kv-window:sinks=4" in info.value.format_line()

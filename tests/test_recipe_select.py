"""Layer-selective recipes: keep=/only= module globs, layers= indices (docs/recipes.md)."""

from __future__ import annotations

import pytest
import torch

from gate.errors import ConfigError, ExitCode
from gate.models.recipes import Recipe, module_matches, parse_recipe


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("quanto-int2:only=model.layers.2.*", "quanto-int2:only=model.layers.2.*"),
        (
            "bnb-nf4:keep=model.layers.0.*,model.layers.29.*",
            "bnb-nf4:keep=model.layers.0.*,model.layers.29.*",
        ),
        (
            "prune-wanda:0.5,only=model.layers.*,keep=model.layers.0",
            "prune-wanda:0.5,keep=model.layers.0,only=model.layers.*",
        ),
        ("kv-snapkv:0.5,layers=0-3,7", "kv-snapkv:0.5,layers=0-3,7"),
        (
            "kv-streaming:sinks=4,window=256,layers=3,1,2",
            "kv-streaming:sinks=4,window=256,layers=1-3",
        ),
        ("attn-topk:0.1,layers=0", "attn-topk:0.1,layers=0"),
        ("quanto-int4", "quanto-int4"),
    ],
)
def test_selectors_parse_and_round_trip(text: str, canonical: str) -> None:
    recipe = parse_recipe(text)
    assert str(recipe) == canonical
    assert parse_recipe(str(recipe)) == recipe


def test_parsed_fields() -> None:
    recipe = parse_recipe("bnb-nf4:keep=model.layers.0.*,model.layers.29.*")
    assert recipe.keep == ("model.layers.0.*", "model.layers.29.*")
    assert recipe.only == () and recipe.selective
    assert parse_recipe("kv-snapkv:ratio=0.5,window=16,layers=0-2,5").layers == (0, 1, 2, 5)
    assert parse_recipe("prune-magnitude:0.3,keep=lm_head").value == 0.3
    assert not parse_recipe("bnb-nf4").selective


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("quanto-int2:keep=", "empty value"),
        ("quanto-int2:keep=model layers", "character ' '"),
        ("quanto-int2:keep=model.[layers", "unbalanced"),
        ("quanto-int2:layers=0", "takes no layers="),
        ("kv-snapkv:0.5,keep=model.*", "takes no keep="),
        ("kv-quant:int2,layers=0", "takes no layers="),
        ("drop-layers:2,keep=model.layers.0", "takes no keep="),
        ("none:only=model.layers.0", "takes no only="),
        ("kv-snapkv:0.5,layers=3-1", "runs backwards"),
        ("kv-snapkv:0.5,layers=a", "not an index"),
        ("kv-snapkv:layers=0,window=16,0.5", "follows the layer selection"),
        ("quanto-int2:keep=a,keep=b", "given twice"),
    ],
)
def test_malformed_selection_is_refused_at_parse_time(text: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says) as caught:
        parse_recipe(text)
    assert caught.value.exit_code == ExitCode.USAGE_ERROR
    assert "\n" not in caught.value.message


def test_a_glob_names_a_module_or_any_module_that_contains_it() -> None:
    assert module_matches("model.layers.0", "model.layers.0.mlp.up_proj")
    assert module_matches("model.layers.0.*", "model.layers.0.mlp.up_proj")
    assert not module_matches("model.layers.1", "model.layers.10.mlp.up_proj")
    assert module_matches("*.q_proj", "model.layers.3.self_attn.q_proj")
    recipe = Recipe("quanto-int2", only=("model.layers.*",), keep=("*.down_proj",))
    assert recipe.selects("model.layers.1.mlp.up_proj")
    assert not recipe.selects("model.layers.1.mlp.down_proj")
    assert not recipe.selects("lm_head")


# ------------------------------------------------------------------ on the demo model


@pytest.fixture(scope="module")
def baseline_state() -> dict[str, torch.Tensor]:
    from gate.models.backends.loading import load_backend
    from gate.models.model_spec import ModelSpec

    return {
        k: v.clone() for k, v in load_backend(ModelSpec.parse("demo")).model.state_dict().items()
    }


def _load(recipe: str):  # type: ignore[no-untyped-def]
    from gate.models.backends.loading import load_backend
    from gate.models.model_spec import ModelSpec

    return load_backend(ModelSpec.parse("demo"), recipe)


@pytest.mark.slow  # the first quanto import
def test_only_quantizes_exactly_the_matching_modules_and_counts_them() -> None:
    backend = _load("quanto-int2:only=model.layers.2.*")
    quantized = sorted(n for n, m in backend.model.named_modules() if type(m).__name__ == "QLinear")
    linears = sorted(
        n
        for n, m in backend.model.named_modules()
        if isinstance(m, torch.nn.Linear) and n.startswith("model.layers.2.")
    )
    assert quantized == linears and len(quantized) == 7
    assert backend.activity is not None and backend.activity.acted == 7


def test_keep_leaves_the_kept_layers_bitwise_equal_to_the_baseline(
    baseline_state: dict[str, torch.Tensor],
) -> None:
    backend = _load("prune-magnitude:0.5,keep=model.layers.0,model.layers.3")
    state = backend.model.state_dict()
    kept = [k for k in state if k.startswith(("model.layers.0.", "model.layers.3."))]
    pruned = [k for k in state if k.startswith(("model.layers.1.", "model.layers.2."))]
    assert kept and all(torch.equal(state[k], baseline_state[k]) for k in kept)
    assert any(not torch.equal(state[k], baseline_state[k]) for k in pruned)
    assert backend.activity is not None and backend.activity.acted == 14  # 2 layers x 7 linears


def test_quanto_keep_leaves_the_layer_in_full_precision(
    baseline_state: dict[str, torch.Tensor],
) -> None:
    backend = _load("quanto-int4:keep=model.layers.1")
    classes = {n: type(m).__name__ for n, m in backend.model.named_modules()}
    assert classes["model.layers.1.mlp.up_proj"] == "Linear"
    assert classes["model.layers.2.mlp.up_proj"] == "QLinear"
    weight = backend.model.get_submodule("model.layers.1.mlp.up_proj").weight
    assert torch.equal(weight, baseline_state["model.layers.1.mlp.up_proj.weight"])
    assert backend.activity is not None and backend.activity.acted == 21


def test_a_glob_that_matches_nothing_is_refused_when_applied() -> None:
    with pytest.raises(ConfigError, match=r"only=model\.layers\.9\.\* matches none of the 28"):
        _load("quanto-int2:only=model.layers.9.*")


def test_a_layer_index_the_model_lacks_is_refused_when_applied() -> None:
    with pytest.raises(ConfigError, match="layers=7 matches no layer"):
        _load("attn-topk:0.5,layers=7")


@pytest.mark.slow
def test_no_match_exits_4_through_the_cli(capsys: pytest.CaptureFixture[str]) -> None:
    from gate.cli import main

    code = main(
        [
            "localize",
            "--candidate",
            "demo",
            "--recipe",
            "quanto-int2:only=model.layers.9.*",
            "--against",
            "fp32",
            "--no-gate",
        ]
    )
    captured = capsys.readouterr()
    assert code == 4, captured.err
    assert "matches none of the 28 modules" in captured.err
    assert "Traceback" not in captured.err + captured.out


@pytest.mark.slow
def test_an_attention_recipe_acts_and_counts_on_its_layers_only() -> None:
    ids = torch.tensor([[1, 17, 40, 99, 5, 61, 7, 300, 12, 8, 9, 33]])
    base = _load("none").model
    every = _load("attn-topk:0.25")
    one = _load("attn-topk:0.25,layers=1")
    with torch.no_grad():
        hb = base(input_ids=ids, output_hidden_states=True).hidden_states
        h1 = one.model(input_ids=ids, output_hidden_states=True).hidden_states
        every.model(input_ids=ids)
    assert every.activity is not None and one.activity is not None
    assert every.activity.acted == 4 and one.activity.acted == 1  # one call per layer
    torch.testing.assert_close(h1[1], hb[1])  # layer 0 left alone: exact attention
    assert not torch.allclose(h1[2], hb[2])  # layer 1 sparse


def test_run_localize_runs_only_on_a_blocked_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """``gate run --localize``: the command's wiring (unit: both sessions replaced)."""
    import gate.commands.localize as localize_module
    import gate.workflows.multirun as multirun
    from gate.cli import main
    from gate.localize.request import LocalizeOutputs, LocalizeRequest

    calls: list[LocalizeRequest] = []
    monkeypatch.setattr(
        localize_module, "run_localize", lambda request, run_config=None: calls.append(request) or 0
    )
    args = ["run", "--candidate", "demo", "--recipe", "quanto-int2", "--against", "fp32"]
    for code, expected in ((ExitCode.OK, 0), (ExitCode.BLOCKED, 1)):
        monkeypatch.setattr(multirun, "execute_plan", lambda plan, checked, console, c=code: c)
        assert main([*args, "--tiers", "fidelity", "--localize"]) == int(code)
        assert len(calls) == expected
    assert calls[0].candidate == "demo" and calls[0].recipe == "quanto-int2"
    assert calls[0].against == "fp32" and calls[0].gate_repair and not calls[0].dry_run
    assert calls[0].outputs == LocalizeOutputs()  # no --json: no localize JSON


def test_a_kv_press_evicts_on_its_layers_only_and_counts_them() -> None:
    from gate.models.backends.loading import cache_method_of as cache_method
    from gate.models.compress.kvcache import acted_pairs, cache_argument

    model = _load("none").model
    ids = torch.arange(3, 3 + 80).unsqueeze(0)
    held = {}
    for text in ("kv-snapkv:ratio=0.5,window=8", "kv-snapkv:ratio=0.5,window=8,layers=1-2"):
        method = cache_method(parse_recipe(text))
        method.check(model)
        cache = method.new_cache(model)
        with torch.no_grad(), method.active(model):
            model(input_ids=ids, use_cache=True, **cache_argument(model, cache))
        held[text] = ([layer.held() for layer in cache.layers], acted_pairs(cache))
    every, some = held.values()
    assert all(h < 80 for h in every[0])
    assert some[0][0] == 80 and some[0][3] == 80  # layers 0 and 3 keep their whole cache
    assert some[0][1:3] == every[0][1:3]
    assert some[1] == every[1] // 2  # the evicted pairs of two layers of four

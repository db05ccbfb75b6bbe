"""gate localize: the maths (against independent computations) and the demo model's cases."""

from __future__ import annotations

import io
import math
import shutil
from typing import Any

import numpy as np
import pytest

from gate.gating.power import power_paired_mean, required_n_paired_mean
from gate.localize import attribution as at
from gate.localize.result import Gated, LayerScore, Localization, Repair
from gate.localize.suggest import repaired_recipe, snippets
from gate.models.recipes import parse_recipe

# ------------------------------------------------------------------------- pure maths


def test_share_is_the_fraction_of_the_loss_brought_back() -> None:
    assert at.share(0.2, 0.05) == pytest.approx(0.75)
    assert at.share(0.2, 0.3) == pytest.approx(-0.5)
    assert at.share(0.0, 0.0) is None


def test_combined_score_averages_the_clipped_shares_of_the_signals_that_have_one() -> None:
    assert at.combined_score({"cga": 0.5, "top5": None, "kl": 1.0}) == pytest.approx(0.75)
    assert at.combined_score({"cga": 3.0, "top5": -4.0, "kl": 0.5}) == pytest.approx(0.5 / 3)
    assert at.combined_score({"cga": None}) == 0.0


def test_rank_orders_by_score_then_divergence_jump() -> None:
    assert at.rank({0: 0.1, 1: 0.9, 2: 0.1}, {0: 0.0, 1: 0.0, 2: 0.5}) == [1, 2, 0]


def test_subset_size_is_the_power_maths_sample_size() -> None:
    rng = np.random.default_rng(0)
    losses = rng.gamma(2.0, 0.05, size=400)
    n = at.subset_size(losses, 0.25, alpha=0.05)
    expected = required_n_paired_mean(
        0.25 * losses.mean(), losses.std(ddof=1), alpha=0.05, power=0.8
    )
    assert expected is not None and n == max(at.MIN_SUBSET, expected)
    resolvable = at.resolvable_share(losses, n, alpha=0.05)
    head = losses[:n]
    achieved = power_paired_mean(n, head.std(ddof=1), resolvable * head.mean(), alpha=0.05)
    assert achieved == pytest.approx(0.8, abs=1e-3)
    assert at.subset_size(losses[:5], 0.25, alpha=0.05) == 5  # fewer than MIN_SUBSET: all


def test_relative_errors_and_jumps() -> None:
    errors = at.relative_errors(np.array([0.0, 1.0, 4.0]), np.array([1.0, 4.0, 0.0]))
    assert errors.tolist() == [0.0, 0.5, 0.0]
    assert at.divergence_jumps([0.0, 0.2, 0.5]) == pytest.approx([0.0, 0.2, 0.3])


def test_blocks_and_refinement() -> None:
    assert at.block_size(4, 12) == 1
    assert at.block_size(30, 12) == 6
    assert at.blocks(7, 3) == [(0, 1, 2), (3, 4, 5), (6,)]
    assert at.blocks_to_refine([0.1, 0.8, 0.5, 0.3]) == [1, 2]
    assert at.byte_cost(300, 100, 1000) == pytest.approx(20.0)


def test_repaired_recipe_and_snippets() -> None:
    recipe = repaired_recipe("bnb-nf4:keep=lm_head", ["model.layers.0", "model.layers.29"])
    assert str(recipe) == "bnb-nf4:keep=lm_head,model.layers.0,model.layers.29"
    assert parse_recipe(str(recipe)) == recipe
    text = snippets(["model.layers.29"], [29])
    # each toolkit's syntax is its method class's, in catalogue order; ModelOpt's last
    assert list(text) == ["bitsandbytes", "quanto", "llm-compressor", "llama.cpp", "modelopt"]
    assert '"model.layers.29"' in text["bitsandbytes"]
    assert '"model.layers.29.*"' in text["quanto"]
    assert "re:model[.]layers[.]29[.].*" in text["llm-compressor"]
    assert r'--tensor-type "blk\.29\.=f16"' in text["llama.cpp"]
    assert '"*model.layers.29.*"' in text["modelopt"]


def test_document_and_headline() -> None:
    layer = LayerScore(2, "model.layers.2", 0.1, 0.1, {"cga": 1.0, "top5": None, "kl": 0.9}, 0.95)
    repair = Repair(
        kept=(2,),
        names=("model.layers.2",),
        byte_cost_pct=3.14,
        recipe="quanto-int2:keep=model.layers.2",
        snippets={},
        predicted={"cga": 0.01, "top5": 0.0, "kl": 0.001},
        met_bounds=True,
        gated=Gated("APPROVED", 0, 0.962, 0.01),
    )
    result = Localization(
        {"model": "demo"},
        "demo#0001",
        {"cga": 0.1},
        (layer,),
        8,
        96,
        0.3,
        0.25,
        4,
        100,
        1.5,
        repair,
    )
    doc = result.to_document()
    assert doc["layers"][0]["rank"] == 1 and doc["layers"][0]["index"] == 2
    assert doc["recipe"] == "quanto-int2:keep=model.layers.2"
    assert doc["cost"] == {"forwards": 100, "swaps": 4, "wall_s": 1.5, "cpu_s": 0.0}
    assert repair.headline() == "keep model.layers.2 (+3.1 % bytes): CGA 0.962, APPROVED"


# ------------------------------------------------------------------- the demo model

LIMIT = 12


@pytest.fixture(scope="module")
def demo() -> dict[str, Any]:
    from gate.models.backends.loading import load_backend
    from gate.models.model_spec import ModelSpec
    from gate.store.baseline import BaselineStore
    from gate.store.reference import load_pack
    from gate.workflows.plan import packaged_store

    baseline = BaselineStore(packaged_store()).resolve("fp32", "demo")
    return {
        "pack": load_pack(baseline.artifact_path("reference")),
        "base": load_backend(ModelSpec.parse("demo")).model,
        "load": lambda recipe: load_backend(ModelSpec.parse("demo"), recipe).model,
    }


def _teacher_forced(model: Any, pack: Any, n: int) -> list[Any]:
    """Log-softmax rows over each prompt's reference outputs, computed directly."""
    import torch

    from gate.localize.probe import pack_inputs

    rows = []
    with torch.no_grad():
        for item in pack_inputs(pack, n):
            logits = model(input_ids=torch.tensor([item.ids])).logits[0]
            rows.append(
                (item, torch.log_softmax(logits[item.start : item.start + len(item.targets)], -1))
            )
    return rows


def _kl_and_cga(base: Any, cand: Any, pack: Any, n: int) -> tuple[float, float]:
    """Mean per-prompt KL(base || cand) and CGA, independently of gate's metric code."""
    kls, cgas = [], []
    for (item, lb), (_, lc) in zip(
        _teacher_forced(base, pack, n), _teacher_forced(cand, pack, n), strict=True
    ):
        kls.append(float((lb.exp() * (lb - lc)).sum(-1).mean()))
        cgas.append(float((lc.argmax(-1).numpy() == item.targets).mean()))
    return float(np.mean(kls)), float(np.mean(cgas))


def _localize(demo: dict[str, Any], recipe: str) -> Any:
    from gate.localize.locate import LocalizeSettings, localize

    return localize(
        demo["base"],
        demo["load"](recipe),
        demo["pack"],
        bounds={"cga": {None: 0.10}, "top5": {None: 0.04}, "kl": {None: 0.10}},
        recipe=parse_recipe(recipe),
        candidate={"model": "demo", "recipe": recipe},
        baseline="demo#0001 (fp32)",
        settings=LocalizeSettings(limit=LIMIT),
    )


@pytest.mark.slow
def test_one_damaged_layer_is_ranked_first(demo: dict[str, Any]) -> None:
    result = _localize(demo, "quanto-int2:only=model.layers.2.*")
    first, *others = result.layers
    assert first.index == 2 and first.name == "model.layers.2"
    assert first.score > 0.9
    assert all(abs(layer.score) < 0.05 for layer in others)
    by_index = {layer.index: layer for layer in result.layers}
    assert by_index[0].divergence == 0.0 and by_index[1].divergence == 0.0
    assert by_index[2].divergence > 0.0
    assert result.forwards == 2 * LIMIT + 4 * min(result.subset, LIMIT)
    assert result.repair is not None and result.repair.kept == (2,)


@pytest.mark.slow
def test_divergence_matches_hidden_states_computed_directly(demo: dict[str, Any]) -> None:
    import torch

    from gate import progress
    from gate.localize.probe import LayerProbe, pack_inputs

    cand = demo["load"]("quanto-int2")
    inputs = pack_inputs(demo["pack"], 3)
    shown = io.StringIO()
    with (
        progress.to_stream(shown, style="plain", heartbeat=False),
        progress.task("divergence", total=3, counted_below=True),
    ):
        errors, losses = LayerProbe(demo["base"], cand, inputs).divergence()
    assert shown.getvalue().splitlines()[-1].startswith("gate: divergence: done 3/3 in ")
    expected = np.zeros(4)
    with torch.no_grad():
        for item in inputs:
            ids = torch.tensor([item.ids])
            hb = demo["base"](input_ids=ids, output_hidden_states=True).hidden_states[1:]
            hc = cand(input_ids=ids, output_hidden_states=True).hidden_states[1:]
            expected += [
                float(torch.linalg.norm(c - b) / torch.linalg.norm(b))
                for b, c in zip(hb, hc, strict=True)
            ]
    np.testing.assert_allclose(errors, expected / 3, rtol=1e-5)
    kl, cga = _kl_and_cga(demo["base"], cand, demo["pack"], 3)
    assert losses.mean("kl") == pytest.approx(kl, rel=1e-4, abs=1e-6)
    assert 1.0 - losses.mean("cga") == pytest.approx(cga)


@pytest.mark.slow
def test_a_swapped_block_equals_the_recipe_with_that_layer_kept(demo: dict[str, Any]) -> None:
    from gate.localize.probe import LayerProbe, pack_inputs

    probe = LayerProbe(demo["base"], demo["load"]("quanto-int2"), pack_inputs(demo["pack"], 4))
    swapped = probe.swapped_losses([0], 4)
    kl, cga = _kl_and_cga(
        demo["base"], demo["load"]("quanto-int2:keep=model.layers.0"), demo["pack"], 4
    )
    assert swapped.mean("kl") == pytest.approx(kl, rel=1e-4, abs=1e-6)
    assert 1.0 - swapped.mean("cga") == pytest.approx(cga)


@pytest.mark.slow
def test_the_suggested_recipe_parses_and_beats_the_full_recipe(demo: dict[str, Any]) -> None:
    result = _localize(demo, "quanto-int2")
    repair = result.repair
    assert repair is not None and repair.recipe is not None
    suggested = parse_recipe(repair.recipe)
    assert suggested.name == "quanto-int2" and suggested.keep
    assert 0 < len(repair.kept) < 4 and repair.byte_cost_pct > 0
    _, cga_full = _kl_and_cga(demo["base"], demo["load"]("quanto-int2"), demo["pack"], LIMIT)
    _, cga_repaired = _kl_and_cga(demo["base"], demo["load"](repair.recipe), demo["pack"], LIMIT)
    assert cga_repaired > cga_full
    assert not math.isnan(result.resolvable_share)


def test_passes_checks_the_whole_set_and_every_slice() -> None:
    losses = at.Losses(np.array([0.0, 0.2]), np.zeros(2), np.zeros(2))
    slices = [("category:chat",), ("category:math",)]
    assert at.slice_means(losses.cga, slices) == {
        None: 0.1,
        "category:chat": 0.0,
        "category:math": 0.2,
    }
    assert at.passes(losses, slices, {"cga": {None: 0.25}})
    assert not at.passes(losses, slices, {"cga": {None: 0.15}})  # the math slice is past it
    assert at.passes(losses, slices, {"cga": {None: 0.15, "category:math": 0.3}})
    assert not at.passes(losses, slices, {"cga": {None: 0.25, "category:math": 0.15}})


class _OneLayerProbe:
    """A stand-in for :class:`~gate.localize.probe.LayerProbe` of a 16-layer model (blocks of 4)
    whose layer 5 carries the whole loss; it records every swap it runs."""

    n_layers = 16

    def __init__(self) -> None:
        self.swapped: list[tuple[int, ...]] = []

    def swapped_losses(self, layers: list[int], n: int) -> at.Losses:
        self.swapped.append(tuple(layers))
        loss = np.full(n, 0.0 if 5 in layers else 0.2)
        return at.Losses(loss, loss, loss)


def test_each_localize_pass_counts_its_swaps_into_its_progress_step() -> None:
    from gate import progress
    from gate.localize.locate import LocalizeSettings, _attribute, _repair, _Swaps

    probe = _OneLayerProbe()
    swaps = _Swaps(probe, 8)  # type: ignore[arg-type]
    cand = at.Losses(np.full(8, 0.2), np.full(8, 0.2), np.full(8, 0.2))
    shown = io.StringIO()
    with progress.to_stream(shown, style="plain", heartbeat=False):
        per_layer, by_block = _attribute(probe, swaps, cand, LocalizeSettings())  # type: ignore[arg-type]
        order = at.rank({i: at.combined_score(s) for i, s in per_layer.items()}, {})
        kept, _, met = _repair(swaps, order, [()] * 8, {"kl": {None: 0.1}}, cand)
    assert order[0] == 5 and kept == [5] and met
    assert set(by_block) == set(range(16)) - {4, 5, 6, 7}  # block 1 refined layer by layer
    # 4 blocks, then the 4 layers of the best block; the repair's one swap was measured before
    blocks = [(0, 1, 2, 3), (4, 5, 6, 7), (8, 9, 10, 11), (12, 13, 14, 15)]
    assert probe.swapped == [*blocks, (4,), (5,), (6,), (7,)]
    lines = shown.getvalue().splitlines()
    for phase, total, done in (
        ("swap-back of 4 blocks of 4 layers (8 prompts each)", 4, 4),
        ("swap-back of the 4 layers of the best blocks (8 prompts each)", 4, 4),
        ("repair, the top layers kept one at a time (at most 15)", 15, 1),
    ):
        assert f"gate: localize: {phase}: 0/{total}" in lines
        assert any(
            line.startswith(f"gate: localize: {phase}: done {done}/{total} in ") for line in lines
        )


@pytest.mark.slow
def test_a_checkpoint_with_one_damaged_layer_is_traced_to_it(
    demo: dict[str, Any], tmp_path: Any
) -> None:
    """A checkpoint candidate (a model directory, no recipe): the baseline's block swapped in."""
    import torch

    from gate.localize.locate import LocalizeSettings, localize
    from gate.models.backends.loading import load_backend
    from gate.models.model_spec import ModelSpec

    damaged = load_backend(ModelSpec.parse("demo")).model
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for weight in damaged.model.layers[1].mlp.parameters():
            weight.add_(0.5 * weight.std() * torch.randn(weight.shape, generator=generator))
    damaged.save_pretrained(tmp_path / "damaged")
    source = ModelSpec.parse("demo").local_dir
    assert source is not None
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(source / name, tmp_path / "damaged" / name)
    cand = load_backend(ModelSpec.parse(str(tmp_path / "damaged"))).model
    result = localize(
        demo["base"],
        cand,
        demo["pack"],
        bounds={"cga": {None: 0.0}},  # no flipped token: only the damaged layer's return does it
        recipe=None,
        candidate={"model": str(tmp_path / "damaged")},
        baseline="demo#0001 (fp32)",
        settings=LocalizeSettings(limit=LIMIT),
    )
    assert result.layers[0].index == 1 and result.layers[0].score > 0.9
    assert result.repair is not None and result.repair.recipe is None
    assert result.repair.kept == (1,) and result.repair.met_bounds
    assert '"model.layers.1"' in result.repair.snippets["bitsandbytes"]


# ------------------------------------------------------------------ the command's inputs


@pytest.mark.parametrize(
    ("recipe", "says"),
    [
        ("kv-snapkv:0.5", "is not one"),
        ("drop-layers:1", "is not one"),
        ("none", "is the baseline build itself"),
    ],
)
def test_localize_refuses_what_it_cannot_localize(
    recipe: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from gate.cli import main

    code = main(
        ["localize", "--candidate", "demo", "--recipe", recipe, "--against", "fp32", "--dry-run"]
    )
    err = capsys.readouterr().err
    assert code == 4 and says in err and "Traceback" not in err


def test_localize_dry_run_loads_no_model() -> None:
    import subprocess
    import sys

    script = (
        "import sys; from gate.cli import main\n"
        "code = main(['localize', '--candidate', 'demo', '--recipe', 'quanto-int2',"
        " '--against', 'fp32', '--dry-run'])\n"
        "print(code, 'torch' in sys.modules, 'transformers' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert "demo#0001 (fp32)" in done.stdout
    assert done.stdout.strip().splitlines()[-1] == "0 False False"


# ------------------------------------------------------------------ the request


def test_the_command_builds_one_request_from_its_options(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    import gate.commands.localize as command
    from gate.cli import main
    from gate.localize.request import LocalizeOutputs, LocalizeRequest
    from gate.models.load_settings import LoadSettings

    seen: list[LocalizeRequest] = []
    monkeypatch.setattr(command, "run_localize", lambda request: seen.append(request) or 0)
    html, png = tmp_path / "a.html", tmp_path / "a.png"
    args = ["localize", "--candidate", "demo", "--recipe", "quanto-int2", "--against", "fp32"]
    extra = ["--html", str(html), "--png", str(png), "--resolve", "0.5", "--prompts", "8"]
    load = ["--device", "cpu", "--dtype", "float32", "--trust-remote-code"]
    assert main([*args, *extra, *load, "--no-gate", "--model-slug", "demo", "--dry-run"]) == 0
    (request,) = seen
    assert request == LocalizeRequest(
        candidate="demo",
        recipe="quanto-int2",
        against="fp32",
        model_slug="demo",
        outputs=LocalizeOutputs(html=html, png=png),
        resolve=0.5,
        limit=8,
        gate_repair=False,
        dry_run=True,
        load=LoadSettings(device="cpu", dtype="float32", trust_remote_code=True),
    )


def test_the_load_settings_reach_the_plan_and_a_missing_gpu_is_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--device``/``--dtype`` are the plan's (printed by the dry run); a CUDA device this
    machine lacks is refused before anything loads (exit 4, one line)."""
    from gate.cli import main
    from gate.hw.devices import TORCH_CUDA

    args = ["localize", "--candidate", "demo", "--recipe", "quanto-int2", "--against", "fp32"]
    assert main([*args, "--device", "cpu", "--dtype", "bfloat16", "--dry-run"]) == 0
    assert "device cpu, dtype bfloat16" in capsys.readouterr().out
    if TORCH_CUDA.is_available():
        pytest.skip("this machine has CUDA: --device cuda is not refused here")
    code = main([*args, "--device", "cuda:0", "--dry-run"])
    err = capsys.readouterr().err
    assert code == 4 and "cuda" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("options", "says"),
    [
        (["--json", "{d}/same", "--html", "{d}/same"], "--json and --html both name"),
        (["--png", "{d}/file.txt/x.png"], "--png {d}/file.txt/x.png"),
        (["--html", "{d}/file.txt/x.html"], "--html {d}/file.txt/x.html"),
    ],
)
def test_unwritable_outputs_are_one_line_naming_their_option(
    options: list[str], says: str, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from gate.cli import main

    (tmp_path / "file.txt").write_text("x")
    before = sorted(p.name for p in tmp_path.iterdir())
    argv = ["localize", "--candidate", "demo", "--recipe", "quanto-int2", "--dry-run"]
    code = main([*argv, *(o.format(d=tmp_path) for o in options)])
    err = capsys.readouterr().err
    assert code == 4 and says.format(d=tmp_path) in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written


def test_a_request_refuses_a_share_or_prompt_count_it_cannot_use() -> None:
    from gate.errors import UsageError
    from gate.localize.request import LocalizeRequest

    with pytest.raises(UsageError, match="not a share"):
        LocalizeRequest(candidate="demo", resolve=0.0)
    with pytest.raises(UsageError, match="too few"):
        LocalizeRequest(candidate="demo", limit=1)
    assert LocalizeRequest(candidate="demo").gate_repair  # the repaired build is gated


def test_the_repaired_build_is_planned_like_the_localized_one(tmp_path: Any) -> None:
    """The repair's gate run takes the request's store slug and the same run config as the
    localized build (a custom ``--model-slug`` or a gate.toml's fidelity settings once fell
    back to the defaults for the repair)."""
    import gate.commands.localize as command
    from gate.localize.request import LocalizeRequest

    config = tmp_path / "gate.toml"
    config.write_text("[tiers.fidelity]\nlimit = 5\n")
    request = LocalizeRequest(candidate="demo", against="fp32", model_slug="team-demo")
    localized = command._fidelity_plan(request, "quanto-int2", config)
    repaired = command._fidelity_plan(request, "quanto-int2:only=model.layers.0.*", config)
    for plan in (localized, repaired):
        (candidate,) = plan.candidates
        assert candidate.model_slug == "team-demo"
        assert plan.run_config is not None and plan.run_config.tiers["fidelity"]["limit"] == 5
    assert repaired.candidates[0].recipe == "quanto-int2:only=model.layers.0.*"

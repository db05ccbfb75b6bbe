"""The nine compression families as candidates: recipe text, prechecks, the loaded path.

Recipe text is validated without torch (the catalogue); a recipe that cannot
run stops ``gate run`` in one line before any model loads (exit 4, or 3 for a
missing checkpoint or package) and writes nothing; a loaded cache recipe
scores, generates and times generation through its compressed cache, and its
measurements say whether the method touched what they scored.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from gate.errors import ConfigError, ExitCode, ModelLoadError
from gate.measurement import Measurement, MeasurementDetail
from gate.models import checkpoints, precheck
from gate.models.backends.base import ScoreRequest
from gate.models.backends.chunked import (
    CacheBackend,
    generate_through_cache,
    kv_bytes_per_token,
    score_through_cache,
)
from gate.models.backends.hf import HFBackend
from gate.models.backends.loading import cache_method_of as cache_method
from gate.models.backends.loading import load_backend, load_candidate
from gate.models.compress.kvcache import (
    CacheMethod,
    ObservedAttention,
    SnapKV,
    StreamingLLM,
)
from gate.models.methods import base as methods_base
from gate.models.methods.base import keyed
from gate.models.methods.checkpoint import checkpoint_dir, checkpoint_method
from gate.models.methods.registry import get_method
from gate.models.model_spec import ModelSpec
from gate.models.recipes import parse_recipe
from gate.store.reference import load_pack
from gate.tiers import exercised, fidelity
from tests.cli_support import GateRun, run_gate

PACK = Path(__file__).parents[1] / "gate/assets/baselines/demo/0001-fp32.reference.safetensors"


# ---------------------------------------------------------------- recipe text (no torch)


@pytest.mark.parametrize(
    ("text", "canonical", "kind"),
    [
        ("gptq:W4A16", "gptq:w4a16", "checkpoint"),
        ("awq:w4a16", "awq:w4a16", "checkpoint"),
        ("sparsegpt:0.50", "sparsegpt:0.5", "checkpoint"),
        ("attn-fp8", "attn-fp8", "attention"),
        ("attn-sage", "attn-sage", "attention"),
        ("attn-topk:0.10", "attn-topk:0.1", "attention"),
        ("kv-snapkv:0.5", "kv-snapkv:0.5", "cache"),
        ("kv-snapkv:ratio=0.5", "kv-snapkv:0.5", "cache"),
        ("kv-snapkv:ratio=0.5,window=16", "kv-snapkv:ratio=0.5,window=16", "cache"),
        ("kv-h2o:0.25", "kv-h2o:0.25", "cache"),
        ("kv-streaming:window=256", "kv-streaming:sinks=4,window=256", "cache"),
        ("kv-streaming:sinks=0,window=8", "kv-streaming:sinks=0,window=8", "cache"),
        ("kv-quant:INT2", "kv-quant:int2", "cache"),
    ],
)
def test_every_family_parses_to_a_canonical_text_that_parses_back(
    text: str, canonical: str, kind: str
) -> None:
    recipe = parse_recipe(text)
    assert str(recipe) == canonical
    assert parse_recipe(canonical) == recipe
    assert get_method(recipe.name).family.name == kind


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("kv-snapkv:1.5", "outside (0, 1)"),
        ("kv-h2o:0", "outside (0, 1)"),
        ("kv-h2o:ratio=0.5,window=3", "unknown key 'window'"),
        ("kv-snapkv:window=16", "no ratio"),
        ("kv-snapkv:ratio=0.5,window=0", "window=0"),
        ("kv-streaming:sinks=4", "no window"),
        ("kv-streaming:sinks=a,window=8", "sinks=a"),
        ("kv-quant:int8", "'int8' is not one of int4, int2"),
        ("kv-tova:0.5", "unknown recipe 'kv-tova'"),
        ("gptq", "needs an argument"),
        ("gptq:w8a8", "not one of w4a16"),
        ("attn-fp8:2", "takes no argument"),
        ("attn-topk:1.5", "outside (0, 1)"),
    ],
)
def test_bad_recipe_text_is_one_config_error_line(text: str, names: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_recipe(text)
    assert names in caught.value.format_line()
    assert "\n" not in caught.value.format_line()


def test_cache_methods_are_built_from_the_parsed_values() -> None:
    assert keyed(parse_recipe("kv-snapkv:ratio=0.25,window=8")) == {"ratio": 0.25, "window": 8}
    assert cache_method(parse_recipe("kv-snapkv:ratio=0.25,window=8,kernel=3")) == CacheMethod(
        SnapKV(0.25, window=8, kernel=3)
    )
    assert cache_method(parse_recipe("kv-h2o:0.75")) == CacheMethod(ObservedAttention(0.75))
    assert cache_method(parse_recipe("kv-streaming:sinks=2,window=9")) == CacheMethod(
        StreamingLLM(sinks=2, window=9)
    )
    assert cache_method(parse_recipe("kv-quant:int2")) == CacheMethod(bits=2)
    assert checkpoint_method(parse_recipe("sparsegpt:0.5")) == "sparsegpt-0.5"


# ---------------------------------------------------------------- prechecks (no model loads)


def test_a_missing_demo_checkpoint_names_the_command_that_makes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GATE_TOOL_CACHE", str(tmp_path))
    monkeypatch.setattr(checkpoints, "PACKAGED", tmp_path / "none")
    with pytest.raises(ModelLoadError) as caught:
        precheck.check_recipe_runs("demo", "gptq:w4a16")
    line = caught.value.format_line()
    assert "gptq-w4a16 checkpoint is not packaged or cached" in line
    assert "scripts/make_compressed_checkpoints.py gptq-w4a16" in line
    assert caught.value.exit_code == ExitCode.INTERNAL_ERROR  # 3: the model cannot be loaded


def test_the_packaged_gptq_checkpoint_is_found() -> None:
    path = checkpoint_dir(ModelSpec.parse("demo"), parse_recipe("gptq:w4a16"))
    assert path == checkpoints.PACKAGED / "gptq-w4a16"


def test_a_checkpoint_recipe_on_another_model_says_to_pass_the_checkpoint(tmp_path: Path) -> None:
    model = tmp_path / "m"
    model.mkdir()
    with pytest.raises(ConfigError) as caught:
        precheck.check_recipe_runs(str(model), "awq:w4a16")
    assert "pass it as the model (with recipe none)" in caught.value.format_line()
    with pytest.raises(ConfigError) as caught:
        precheck.check_recipe_runs("demo", "sparsegpt:0.3")
    assert "choose one of gptq-w4a16, awq-w4a16, sparsegpt-0.5" in caught.value.format_line()


def test_kv_quant_without_optimum_quanto_is_a_missing_package(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = methods_base.importlib.util.find_spec

    def find_spec(name: str, *args: Any) -> Any:
        return None if name.startswith("optimum") else real(name, *args)

    monkeypatch.setattr(methods_base.importlib.util, "find_spec", find_spec)
    with pytest.raises(ModelLoadError) as caught:
        precheck.check_recipe_runs("demo", "kv-quant:int4")
    assert "(pip install optimum-quanto)" in caught.value.format_line()


def test_a_press_on_sliding_window_layers_is_refused(tmp_path: Path) -> None:
    model = tmp_path / "mistral"
    model.mkdir()
    config = {"model_type": "mistral", "sliding_window": 4096, "num_hidden_layers": 2}
    (model / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match="sliding_attention layers, and a KV press"):
        precheck.check_recipe_runs(str(model), "kv-snapkv:0.5")
    config = {"model_type": "gemma3", "layer_types": ["sliding_attention", "full_attention"]}
    (model / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match="gemma3 has sliding_attention"):
        precheck.check_recipe_runs(str(model), "kv-streaming:sinks=4,window=8")
    precheck.check_recipe_runs(str(model), "kv-quant:int4")  # quantization reads no queries


def _gate(cwd: Path, *args: str, **env: str) -> GateRun:
    return run_gate(*args, cwd=cwd, env=env, unset=())


@pytest.mark.slow
@pytest.mark.parametrize(
    ("recipe", "code", "names"),
    [
        ("kv-snapkv:1.5", ExitCode.USAGE_ERROR, "ratio 1.5 is outside (0, 1)"),
        ("kv-tova:0.5", ExitCode.USAGE_ERROR, "unknown recipe 'kv-tova'"),
        ("sparsegpt:0.3", ExitCode.USAGE_ERROR, "choose one of gptq-w4a16, awq-w4a16"),
    ],
)
def test_gate_run_stops_in_one_line_before_any_model_loads(
    tmp_path: Path, recipe: str, code: int, names: str
) -> None:
    out = tmp_path / "results.json"
    done = _gate(
        tmp_path,
        "run",
        "--candidate",
        "demo",
        "--recipe",
        recipe,
        "--against",
        "fp32",
        "--tiers",
        "fidelity",
        "--json",
        str(out),
        GATE_TOOL_CACHE=str(tmp_path / "empty-cache"),
    )
    assert done.returncode == code, done.stderr
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert len(lines) == 1 and names in lines[0], lines
    assert "loading demo" not in done.stdout + done.stderr
    assert not out.exists()


# ---------------------------------------------------------------- the loaded path (demo model)


@pytest.fixture(scope="module")
def base() -> HFBackend:
    return load_backend(ModelSpec.parse("demo"))


@pytest.fixture(scope="module")
def pack() -> Any:
    return load_pack(PACK)


@pytest.mark.slow
def test_load_candidate_wraps_cache_recipes_and_per_call_attention() -> None:
    spec = ModelSpec.parse("demo")
    h2o = load_candidate(spec, "kv-h2o:0.5")
    assert isinstance(h2o, CacheBackend)
    assert h2o.method == CacheMethod(ObservedAttention(0.5))
    assert h2o.provenance().cache_method == "kv-h2o:0.5"
    fp8 = load_candidate(spec, "attn-fp8")
    assert isinstance(fp8, CacheBackend) and fp8.identity and fp8.chunk_size == 1
    assert fp8.model.config._attn_implementation.startswith("gate_attn_fp8")
    topk = load_candidate(spec, "attn-topk:0.1")
    assert isinstance(topk, HFBackend)  # position-consistent: one batched pass is exact
    gptq = load_candidate(spec, "gptq:w4a16")
    assert isinstance(gptq, HFBackend)
    assert gptq.quant_method == "compressed-tensors"
    assert gptq.provenance().path == str(checkpoints.PACKAGED / "gptq-w4a16")
    assert gptq.provenance().weights_sha256 != load_backend(spec).provenance().weights_sha256


@pytest.mark.slow
def test_cache_backend_scores_and_generates_through_the_cache(base: HFBackend, pack: Any) -> None:
    method = CacheMethod(SnapKV(0.5, window=16))
    backend = CacheBackend(base, method, label="kv-snapkv:ratio=0.5,window=16")
    requests = [
        ScoreRequest(pack.prompt_ids(j).tolist(), pack.output_ids(j).tolist()[:12]) for j in (0, 9)
    ]
    got = backend.score(requests, top_k=4)
    want = score_through_cache(base.model, method, requests, top_k=4)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g.target_logprobs, w.target_logprobs)
    one_pass = base.score(requests, top_k=4)
    assert any(
        not np.allclose(g.target_logprobs, o.target_logprobs, atol=1e-4)
        for g, o in zip(got, one_pass, strict=True)
    ), "the press must change the scores of these prompts"
    assert backend.activity is not None
    assert (backend.activity.requests, backend.activity.exercised) == (2, 2)
    assert backend.activity.acted > 0  # KV pairs evicted
    prompt = requests[0].context
    assert backend.generate([prompt], max_new_tokens=8) == [
        generate_through_cache(base.model, method, prompt, max_new_tokens=8, eos_ids=base.eos_ids)
    ]


class _Clock:
    def __init__(self) -> None:
        self.marks: list[float] = []

    def start(self) -> None:
        self.marks = []

    def mark(self) -> None:
        self.marks.append(float(len(self.marks) + 1))

    def elapsed(self) -> list[float]:
        return list(self.marks)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("recipe", "held"),
    [
        # SnapKV keeps int(40 * 0.5) = 20 prompt pairs; then 5 of the 6 new tokens are written
        ("kv-snapkv:ratio=0.5,window=8", 20 + 5),
        # a rolling window of 4 sinks + 8 recent pairs holds 12 after every step
        ("kv-streaming:sinks=4,window=8", 12),
    ],
)
def test_timed_generation_runs_through_the_cache_and_counts_its_bytes(
    base: HFBackend, recipe: str, held: int
) -> None:
    backend = CacheBackend(base, cache_method(parse_recipe(recipe)), label=recipe)
    prompt = base.encode_text("the cat sat on the mat " * 12)[:40]
    timed = backend.generate_timed(prompt, batch_size=2, new_tokens=6, clock=_Clock())
    assert timed.new_tokens == 6 and len(timed.step_times) == 6
    config = base.model.config
    per_pair = 2 * config.num_hidden_layers * config.num_key_value_heads * config.head_dim * 4
    assert kv_bytes_per_token(config, torch.float32) == per_pair
    assert timed.details["kv_cache_bytes"] == 2 * held * per_pair  # two sequences
    assert timed.details["kv_tokens"] == 40 + 5
    assert timed.details["kv_bytes_per_token"] == pytest.approx(held * per_pair / 45)
    assert backend.last_kv_cache is not None
    assert backend.last_kv_cache["kv_bytes_per_token"] < per_pair


def test_latency_tier_reports_kv_bytes_per_token() -> None:
    from gate.hw.fingerprint import collect_fingerprint
    from gate.metrics.latency import RunLatency
    from gate.tiers import latency

    run = RunLatency(batch_size=1, new_tokens=4, ttft=0.1, itls=(0.1,) * 3, tpot=0.1, e2e=0.4)
    result = latency.LatencyResult(
        runs=(run, run),
        sweep=latency.SweepResult(tokens_per_s={1: (10.0, 10.0)}, oom_batch=None),
        memory=(),
        parameter_bytes=None,
        fingerprint=collect_fingerprint("cpu"),
        settings=latency.LatencySettings(),
        kv_cache={"kv_bytes_per_token": 1234.5, "kv_cache_bytes": 99},
    )
    got = {m.name: m for m in latency.to_measurements(result)}
    assert got["latency.kv_bytes_per_token"].value == 1234.5
    assert got["latency.kv_bytes_per_token"].details["kv_cache_bytes"] == 99


@pytest.mark.slow
def test_fidelity_says_when_the_cache_method_never_acted(base: HFBackend, pack: Any) -> None:
    settings = fidelity.FidelitySettings(limit=4)
    roomy = CacheBackend(
        base, CacheMethod(StreamingLLM(sinks=4, window=512)), label="kv-streaming:big"
    )
    untouched = {m.name: m for m in fidelity.measure(roomy, pack, settings)}
    entry = untouched["fidelity.cga"].details[MeasurementDetail.COMPRESSION_EXERCISED]
    assert (entry["method"], entry["requests"], entry["exercised"], entry["acted"]) == (
        "kv-streaming:big",
        4,
        0,
        0,
    )
    assert untouched["fidelity.cga"].value == 1.0
    assert list(exercised.not_exercised(list(untouched.values()))) == ["fidelity"]
    notes = exercised.notes(list(untouched.values()))
    assert len(notes) == 1 and "fidelity NOT EXERCISED: kv-streaming:big acted on none" in notes[0]
    tight = CacheBackend(base, CacheMethod(StreamingLLM(sinks=4, window=8)), label="tight")
    touched = {m.name: m for m in fidelity.measure(tight, pack, settings)}
    entry = touched["fidelity.cga"].details[MeasurementDetail.COMPRESSION_EXERCISED]
    assert entry["exercised"] == 4 and entry["acted"] > 0
    assert touched["fidelity.cga"].value < 1.0  # a regression the gate must see
    assert exercised.notes(list(touched.values())) == []
    assert exercised.not_exercised(list(touched.values())) == {}


@pytest.mark.slow
def test_fidelity_chunk_size_setting_reaches_the_scorer(base: HFBackend, pack: Any) -> None:
    backend = CacheBackend(base, CacheMethod(bits=4), label="kv-quant:int4")
    seen: list[int | None] = []
    original = backend.score

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(backend.chunk_size)
        return original(*args, **kwargs)

    backend.score = spy  # type: ignore[method-assign]
    fidelity.measure(backend, pack, fidelity.FidelitySettings(limit=2, cache_chunk_size=8))
    assert seen and set(seen) == {8}
    assert backend.chunk_size is None  # restored after the tier
    with pytest.raises(ValueError, match="cache_chunk_size"):
        fidelity.FidelitySettings(cache_chunk_size=0)


def test_notes_group_untouched_metrics_by_tier() -> None:
    entry = {"method": "m", "unit": "KV pairs evicted", "counting": "per-request", "acted": 0}
    entry |= {"requests": 3, "exercised": 0}
    key = MeasurementDetail.COMPRESSION_EXERCISED
    partly = {**entry, "requests": 4, "exercised": 1, "acted": 12}
    measured = [
        Measurement("fidelity.cga", 1.0, details={key: entry}),
        Measurement("fidelity.kl_mean", 0.0, details={key: entry}),
        Measurement("accuracy.perplexity", 9.0, details={key: partly}),
        Measurement("accuracy.acc", 0.5),
    ]
    assert exercised.notes(measured) == [
        "fidelity NOT EXERCISED: m acted on none of the 3 request(s);"
        " give longer prompts or a smaller budget",
        "accuracy: m acted on 1 of 4 request(s) (25%; 12 KV pairs evicted);"
        " its metrics include the requests it never touched",
    ]
    assert list(exercised.not_exercised(measured)) == ["fidelity"]


# ---------------------------------------------------------------- the paper panel


def test_the_paper_panel_has_one_candidate_per_method(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gate.workflows import paper_panel

    recipes = paper_panel.panel_recipes()
    assert recipes[0] == "none"
    families = {get_method(parse_recipe(r).name).family.name for r in recipes[1:]}
    assert families == {"checkpoint", "weights", "attention", "cache"}
    names = {parse_recipe(r).name for r in recipes[1:]}
    # the CGA paper's nine methods
    assert {"gptq", "awq", "sparsegpt", "prune-wanda"} <= names
    assert {"attn-fp8", "attn-sage", "attn-topk", "kv-snapkv", "kv-h2o"} <= names
    assert {"kv-streaming", "kv-quant"} <= names
    assert paper_panel.family_of("prune-wanda:0.5") == "pruning"
    assert paper_panel.family_of("awq:w4a16") == "weights INT4"
    monkeypatch.setenv("GATE_TOOL_CACHE", str(tmp_path))  # an empty cache: all are packaged
    for recipe in recipes:
        precheck.check_recipe_runs("demo", recipe)  # every panel recipe can run


def test_the_paper_table_has_the_papers_columns() -> None:
    from rich.console import Console

    from gate.workflows import paper_panel
    from gate.workflows.demo import CandidateResult

    result = CandidateResult(
        "kv-h2o:0.5",
        1,
        "block",
        {
            "fidelity.cga": 0.93,
            "fidelity.kl_mean": 0.0215,
            "accuracy.perplexity": 104.9,
            "accuracy.mcq_acc": 0.4,
            "accuracy.flips": 0.1,
        },
        breakdowns={"fidelity.cga": {"category:code": 0.91, "length:long": 0.88}},
    )
    row = paper_panel.row(result)
    assert row["family"] == "KV eviction"
    assert row["cga_by_category"] == {"code": 0.91}
    assert row["cga_by_length"] == {"long": 0.88}
    console = Console(width=250, record=True)
    console.print(paper_panel.paper_table([result]))
    console.print(paper_panel.category_table([result]))
    text = console.export_text()
    for column in ("method", "family", "CGA long", "mean KL", "ppl", "MCQ acc", "code", "0.910"):
        assert column in text
    assert "0.930" in text and "104.90" in text and "0.400" in text and "BLOCK" in text


# ---------------------------------------------------------------- strength through the gate

#: Reference-pack prompts the strength sweep scores (the demo pack has 96).
SWEEP_LIMIT = 48


@pytest.mark.slow
@pytest.mark.parametrize(
    "sweep",
    [
        (
            "kv-snapkv:ratio=0.25,window=16",
            "kv-snapkv:ratio=0.5,window=16",
            "kv-snapkv:ratio=0.75,window=16",
        ),
        ("kv-h2o:0.25", "kv-h2o:0.5", "kv-h2o:0.75"),
        ("kv-quant:int4", "kv-quant:int2"),
    ],
)
def test_stronger_cache_compression_gives_lower_cga(
    base: HFBackend, pack: Any, sweep: tuple[str, ...]
) -> None:
    """Keep ratios 0.75 / 0.5 / 0.25 and int4 / int2: CGA falls with strength, KL grows."""
    settings = fidelity.FidelitySettings(limit=SWEEP_LIMIT)
    cga, kl = [], []
    for recipe in sweep:
        backend = CacheBackend(base, cache_method(parse_recipe(recipe)), label=recipe)
        got = {m.name: m.value for m in fidelity.measure(backend, pack, settings)}
        cga.append(got["fidelity.cga"])
        kl.append(got["fidelity.kl_mean"])
    assert all(a > b for a, b in itertools.pairwise(cga)), cga
    assert all(a < b for a, b in itertools.pairwise(kl)), kl
    assert cga[-1] < 0.97


@pytest.mark.slow
@pytest.mark.parametrize("recipe", ["kv-h2o:0.75", "kv-snapkv:ratio=0.75,window=16"])
def test_the_gate_blocks_the_strongest_eviction(tmp_path: Path, recipe: str) -> None:
    config = tmp_path / "gate.toml"
    config.write_text("[tiers.fidelity]\nlimit = 96\nmax_new_tokens = 64\nbatch_size = 16\n")
    out = tmp_path / "results.json"
    done = _gate(
        tmp_path,
        "run",
        "--candidate",
        "demo",
        "--recipe",
        recipe,
        "--against",
        "fp32",
        "--tiers",
        "fidelity",
        "--config",
        str(config),
        "--json",
        str(out),
    )
    assert done.returncode == ExitCode.BLOCKED, done.stdout[-3000:] + done.stderr[-2000:]
    results = json.loads(out.read_text())
    critical = [
        v for v in results["metrics"] if v["severity"] == "critical" and v["name"] == "fidelity.cga"
    ]
    assert critical, "the block must come from CGA"
    assert results["candidate"]["cache_method"] == recipe


def test_a_run_config_takes_every_family(tmp_path: Path) -> None:
    entries = [
        ("gptq", "gptq:w4a16"),
        ("awq", "awq:w4a16"),
        ("wanda", "prune-wanda:0.5"),
        ("fp8", "attn-fp8"),
        ("topk", "attn-topk:0.1"),
        ("snap", "kv-snapkv:ratio=0.5,window=16"),
        ("h2o", "kv-h2o:0.5"),
        ("stream", "kv-streaming:sinks=4,window=32"),
        ("kvq", "kv-quant:int2"),
    ]
    body = '[run]\nagainst = ["fp32"]\ntiers = ["fidelity"]\n'
    for name, recipe in entries:
        body += f'\n[[candidates]]\nname = "{name}"\nmodel = "demo"\nrecipe = "{recipe}"\n'
    (tmp_path / "gate.toml").write_text(body)
    done = _gate(tmp_path, "run", "--config", "gate.toml", "--dry-run")
    assert done.returncode == ExitCode.OK, done.stdout + done.stderr
    for name, recipe in entries:
        assert f"candidate {name}: model demo, recipe {recipe}" in done.stdout


# ---------------------------------------------------------------- exercised_only


def test_exercised_only_restricts_per_item_means_and_leaves_percentiles() -> None:
    from gate.measurement import from_samples

    key = MeasurementDetail.COMPRESSION_EXERCISED
    stamp = {"method": "m", "unit": "KV pairs evicted", "counting": "per-request", "acted": 9}
    stamp |= {"requests": 4, "exercised": 2, "exercised_ids": ["b", "d"]}
    cga = from_samples(
        "fidelity.cga",
        [1.0, 0.5, 1.0, 0.7],
        ["a", "b", "c", "d"],
        groups={"category:math": [0, 1], "category:chat": [2]},
        details={key: stamp},
    )
    narrowed = exercised.restrict(cga)
    assert narrowed is not None
    assert narrowed.value == pytest.approx((0.5 + 0.7) / 2)
    assert narrowed.sample_ids == ("b", "d")
    assert set(narrowed.breakdown) == {"category:math"}  # chat held only unexercised "c"
    assert narrowed.breakdown["category:math"].value == 0.5
    p99 = Measurement("fidelity.kl_p99", 3.0, (1.0, 2.0), ("b", "d"), details={key: stamp})
    assert exercised.restrict(p99) is None  # not a mean of its items
    out, notes = exercised.gate_on_exercised([cga, p99, Measurement("accuracy.acc", 0.5)])
    assert [m.value for m in out] == [narrowed.value, 3.0, 0.5]
    assert notes == [
        "fidelity: exercised_only: fidelity.cga gated on the exercised items only;"
        " fidelity.kl_p99 are not per-item means, gated on all items"
    ]


@pytest.mark.slow
def test_a_partly_exercised_fidelity_tier_lists_its_exercised_prompts(
    base: HFBackend, pack: Any
) -> None:
    limit = 8
    # the first 8 prompts + outputs hold 80 .. 260 tokens: a window of 120 leaves the three
    # shortest untouched and evicts 100+ pairs from the others
    window = 120
    backend = CacheBackend(
        base, CacheMethod(StreamingLLM(sinks=4, window=window)), label="kv-streaming:half"
    )
    got = {
        m.name: m for m in fidelity.measure(backend, pack, fidelity.FidelitySettings(limit=limit))
    }
    cga = got["fidelity.cga"]
    entry = cga.details[MeasurementDetail.COMPRESSION_EXERCISED]
    assert 0 < entry["exercised"] < entry["requests"] == limit
    ids = entry["exercised_ids"]
    assert len(ids) == entry["exercised"]
    narrowed = exercised.restrict(cga)
    assert narrowed is not None and narrowed.sample_ids is not None
    assert set(narrowed.sample_ids) == set(ids)
    # independent: the mean of the per-prompt CGA of the exercised prompts
    assert cga.samples is not None and cga.sample_ids is not None
    by_id = dict(zip(cga.sample_ids, cga.samples, strict=True))
    assert narrowed.value == pytest.approx(float(np.mean([by_id[i] for i in ids])))
    untouched = [by_id[i] for i in by_id if i not in set(ids)]
    assert untouched and all(v == 1.0 for v in untouched)  # never compressed: exact
    assert narrowed.value < cga.value  # the regression is concentrated where the method acted
    notes = exercised.notes(list(got.values()))
    assert len(notes) == 1 and f"acted on {len(ids)} of {limit} request(s)" in notes[0]


@pytest.mark.slow
@pytest.mark.parametrize("recipe", ["gptq:w4a16", "awq:w4a16", "sparsegpt:0.5"])
def test_a_checkpoint_reports_its_compressed_layers_and_a_dense_model_none(
    base: HFBackend, recipe: str
) -> None:
    from gate.models.compress.counting import quantized_checkpoint_layers

    backend = load_candidate(ModelSpec.parse("demo"), recipe)
    assert backend.activity is not None
    got = backend.activity.since(None)
    # 4 decoder layers x (q, k, v, o, gate, up, down); the head stays dense
    assert (got.acted, got.unit, got.none) == (28, "compressed layers loaded", False)
    assert quantized_checkpoint_layers(base.model) == 0  # the dense demo model: nothing

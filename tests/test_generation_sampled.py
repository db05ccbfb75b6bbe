"""Sampled answers in the generation tier: the coupled sampler and the tier end to end.

The sampler's draws are checked against the distribution they must follow
(softmax at ``T`` over the nucleus, computed here with numpy: a chi-square
test over 20,000 keys), the coupling (the same distribution draws the same
tokens, a nearby one nearly always), and the demo model's sampled answers
against a plain decoding loop written here (no KV cache, no batching, numpy
for the draw). Through the CLI: a baseline recorded with a seed stores its
sampled answers; the control matches them exactly and is approved, two
dropped layers are blocked; another seed, a baseline without sampled answers
and settings without a seed are each refused in one line (exit 4).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy import stats

from gate.errors import ExitCode, UsageError
from gate.models.backends.hf import HFBackend
from gate.models.backends.sampling import Sampling, coupled_choice, gumbel_noise
from gate.store.reference import load_pack
from gate.tiers import generation as tier
from tests.cli_support import GateRun, run_gate
from tests.test_generation_tier import PACK


def _nucleus(logits: np.ndarray, temperature: float, top_p: float) -> np.ndarray:
    """The nucleus distribution by hand: sort, keep while the mass before is below p."""
    z = logits.astype(np.float64) / temperature
    p = np.exp(z - z.max())
    p /= p.sum()
    order = np.argsort(-p, kind="stable")
    kept = np.zeros_like(p, dtype=bool)
    mass = 0.0
    for v in order:
        if mass >= top_p:
            break
        kept[v] = True
        mass += p[v]
    q = np.where(kept, p, 0.0)
    return q / q.sum()


def _draws(logits: torch.Tensor, sampling: Sampling, keys: Sequence[int]) -> np.ndarray:
    noise = torch.stack([gumbel_noise(sampling.seed, k, 0, logits.shape[-1]) for k in keys])
    return coupled_choice(logits.expand(len(keys), -1), noise, sampling).numpy()


@pytest.mark.parametrize(("temperature", "top_p"), [(1.0, 1.0), (0.7, 0.9)])
def test_the_draws_follow_the_nucleus_distribution(temperature: float, top_p: float) -> None:
    logits = torch.tensor([2.0, 1.5, 0.3, -1.0, 0.9, -3.0, 0.0])
    sampling = Sampling(seed=3, temperature=temperature, top_p=top_p)
    n = 20_000
    drawn = _draws(logits, sampling, range(n))
    q = _nucleus(logits.numpy(), temperature, top_p)
    counts = np.bincount(drawn, minlength=len(q))
    assert counts[q == 0].sum() == 0  # nothing outside the nucleus
    if top_p < 1:
        assert (q == 0).sum() >= 2  # the nucleus left tokens out
    support = q > 0
    _, p_value = stats.chisquare(counts[support], n * q[support])
    assert p_value > 1e-3, (counts, n * q)


def test_the_same_distribution_draws_the_same_tokens_and_a_nearby_one_nearly() -> None:
    rng = np.random.default_rng(0)
    logits = torch.tensor(rng.normal(0, 2, size=200))
    sampling = Sampling(seed=9, temperature=0.8)
    keys = range(2_000)
    base = _draws(logits, sampling, keys)
    assert (base == _draws(logits.clone(), sampling, keys)).all()
    nearby = _draws(logits + torch.tensor(rng.normal(0, 1e-3, size=200)), sampling, keys)
    far = _draws(logits + torch.tensor(rng.normal(0, 1.0, size=200)), sampling, keys)
    assert (base == nearby).mean() >= 0.99
    assert (base == far).mean() < 0.9  # a moved distribution draws otherwise
    other_seed = _draws(logits, Sampling(seed=10, temperature=0.8), keys)
    assert (base == other_seed).mean() < 0.9


def _loop(
    backend: HFBackend, prompt: list[int], key: int, cap: int, sampling: Sampling
) -> list[int]:
    """One prompt sampled step by step: the whole sequence through the model each step."""
    ids = list(prompt)
    out: list[int] = []
    for step in range(cap):
        with torch.no_grad():
            logits = backend.model(input_ids=torch.tensor([ids])).logits[0, -1].double().numpy()
        q = _nucleus(logits, sampling.temperature, sampling.top_p)
        with np.errstate(divide="ignore"):
            score = np.log(q) + gumbel_noise(sampling.seed, key, step, len(q)).numpy()
        token = int(np.argmax(score))
        out.append(token)
        ids.append(token)
        if token in backend.eos_ids:
            break
    return out


def test_sampled_answers_equal_a_plain_loop_and_do_not_depend_on_the_batch(
    demo_backend: HFBackend,
) -> None:
    pack = load_pack(PACK)
    picked = [0, 13, 40, 77]
    prompts = [pack.prompt_ids(j).tolist() for j in picked]
    sampling = Sampling(seed=5, temperature=0.9, top_p=0.95)
    batched = demo_backend.generate_sampled(
        prompts, picked, max_new_tokens=20, sampling=sampling, batch_size=4
    )
    singles = [
        demo_backend.generate_sampled([p], [k], max_new_tokens=20, sampling=sampling, batch_size=1)[
            0
        ]
        for p, k in zip(prompts, picked, strict=True)
    ]
    assert batched == singles
    assert batched == [
        _loop(demo_backend, p, k, 20, sampling) for p, k in zip(prompts, picked, strict=True)
    ]
    greedy = demo_backend.generate(prompts, max_new_tokens=20, batch_size=4)
    assert batched != greedy  # sampling at 0.9 leaves the greedy path somewhere


def test_a_compressed_cache_draws_the_same_coupled_samples_through_its_own_path() -> None:
    """kv-snapkv's sampled answers run through its compressed cache, keyed like every
    build's: the same keys draw the same answers, the press evicts pairs on every request,
    and the answers differ from its greedy ones."""
    from gate.models.backends.loading import load_candidate
    from gate.models.model_spec import ModelSpec

    pack = load_pack(PACK)
    sampling = Sampling(seed=2, temperature=0.9)
    build = load_candidate(ModelSpec.parse("demo", device="cpu"), "kv-snapkv:0.5")
    picked = [3, 50, 90]
    prompts = [pack.prompt_ids(j).tolist() for j in picked]
    first = build.generate_sampled(prompts, picked, max_new_tokens=16, sampling=sampling)
    before = build.method_activity.reading()
    again = build.generate_sampled(prompts, picked, max_new_tokens=16, sampling=sampling)
    assert first == again
    exercise = build.method_activity.since(before)
    assert exercise.requests == 3 and exercise.exercised == 3 and exercise.acted > 0
    assert first != build.generate(prompts, max_new_tokens=16)


def test_a_build_that_draws_its_own_random_numbers_is_refused() -> None:
    class Greedy:
        def generate(self, prompts: object, **kw: object) -> list[list[int]]:
            raise AssertionError("not reached")

    pack = load_pack(PACK)
    answers = tier.stored_answers(pack, 2)
    with pytest.raises(UsageError, match="drawn in process") as info:
        tier.answer(Greedy(), pack, answers, 2, Sampling(seed=1))  # type: ignore[arg-type]
    assert info.value.exit_code == ExitCode.USAGE_ERROR


SMALL = """
[tiers.fidelity]
limit = 24
max_new_tokens = 32
batch_size = 8

[tiers.generation]
seed = {seed}
temperature = 0.8
"""


def _config(tmp_path: Path, seed: int) -> Path:
    path = tmp_path / f"seed{seed}.toml"
    path.write_text(SMALL.format(seed=seed))
    return path


def _run(tmp_path: Path, config: Path, *extra: str) -> tuple[int, dict, str]:
    out = tmp_path / "out.json"
    out.unlink(missing_ok=True)
    done = run_gate(
        "run",
        "--candidate",
        "demo",
        "--tiers",
        "generation",
        "--store",
        str(tmp_path / "store"),
        "--config",
        str(config),
        "--json",
        str(out),
        *extra,
        cwd=tmp_path,
    )
    body = json.loads(out.read_text()) if out.exists() else {}
    return done.returncode, body, done.stdout + done.stderr


@pytest.mark.slow
def test_sampled_baseline_control_and_damaged_build_through_the_cli(tmp_path: Path) -> None:
    config = _config(tmp_path, 11)
    recorded = run_gate(
        "baseline",
        "record",
        "--model",
        "demo",
        "--tiers",
        "fidelity,generation",
        "--store",
        str(tmp_path / "store"),
        "--ref",
        "s11",
        "--label",
        "fp32-sampled",
        "--config",
        str(config),
        cwd=tmp_path,
    )
    assert recorded.returncode == ExitCode.OK, recorded.stdout[-3000:] + recorded.stderr[-3000:]
    stored = list((tmp_path / "store").rglob("*generation-sampled*"))
    assert len(stored) == 1
    sampled = json.loads(stored[0].read_text())
    assert sampled["sampling"] == {"seed": 11, "temperature": 0.8, "top_p": 1.0}
    assert len(sampled["answers"]) == 24

    code, body, err = _run(tmp_path, config)
    assert code == ExitCode.OK, err[-3000:]
    exact = _by_name(body)["generation.exact_match"]
    assert exact["value"] == 1.0 and exact["details"]["sampling"]["seed"] == 11
    assert {m["severity"] for m in _by_name(body).values()} == {"pass"}

    code, body, err = _run(tmp_path, config, "--recipe", "drop-layers:2")
    assert code == ExitCode.BLOCKED, err[-3000:]
    critical = [
        name
        for name, m in _by_name(body).items()
        if name.startswith("generation.") and m["severity"] == "critical"
    ]
    assert critical, _by_name(body)

    code, _, err = _run(tmp_path, _config(tmp_path, 12))
    assert code == ExitCode.USAGE_ERROR
    assert "sampled with seed 11" in err and "Traceback" not in err


def _gate_run(config: Path, cwd: Path, *extra: str, tiers: str = "generation") -> GateRun:
    """``gate run --candidate demo`` of ``tiers`` against the committed baseline."""
    return run_gate(
        "run", "--candidate", "demo", "--tiers", tiers, "--config", str(config), *extra, cwd=cwd
    )


def test_a_seed_against_a_baseline_without_sampled_answers_is_one_line(tmp_path: Path) -> None:
    """The committed demo baseline holds greedy answers only."""
    config = tmp_path / "seed.toml"
    config.write_text("[tiers.generation]\nseed = 3\n")
    done = _gate_run(config, tmp_path)
    assert done.returncode == ExitCode.USAGE_ERROR, done.stderr[-2000:]
    assert "the baseline holds none" in done.stderr and "Traceback" not in done.stderr
    assert "loading" not in done.stderr  # refused before the model loads
    dry = _gate_run(config, tmp_path, "--dry-run")
    assert dry.returncode == ExitCode.USAGE_ERROR
    assert "the baseline holds none" in dry.stderr
    endpoint = ("--endpoint", "http://127.0.0.1:9/v1", "--dry-run")
    served = _gate_run(config, tmp_path, *endpoint, tiers="fidelity,generation")
    assert served.returncode == ExitCode.USAGE_ERROR
    assert "a served engine draws its own" in served.stderr
    assert len(served.stderr.strip().splitlines()) == 1
    speculative = _gate_run(config, tmp_path, "--recipe", "spec-ngram:3", "--dry-run")
    assert speculative.returncode == ExitCode.USAGE_ERROR
    assert "verifies its drafts greedily" in speculative.stderr
    no_seed = tmp_path / "no_seed.toml"
    no_seed.write_text("[tiers.generation]\ntemperature = 0.7\n")
    done = _gate_run(no_seed, tmp_path, "--dry-run")
    assert done.returncode == ExitCode.USAGE_ERROR
    assert "set seed too" in done.stderr


def _by_name(body: dict) -> dict[str, dict]:
    """The whole-set metrics of a results file, by name."""
    return {m["name"]: m for m in body["metrics"] if m["slice"] is None}

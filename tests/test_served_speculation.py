"""Served speculative decoding: the command read and made plain, the engine's counters read.

The counters come from real answers saved in tests/speculative/: vLLM 0.32 (CPU
build) ``/metrics`` before and after four greedy requests of 32 tokens on the
demo model served with ``--speculative-config '{"method": "ngram",
"num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}'``,
and llama-server b11434's ``/completion`` answer on SmolLM2 q8_0 with
``--spec-type ngram-simple --spec-ngram-simple-size-n 2 --spec-ngram-simple-size-m 4``.
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from gate.engines.llama_cpp.counters import llama_counters
from gate.engines.llama_cpp.install import ENGINE as LLAMA_SERVER
from gate.engines.served_speculation import (
    plain_command,
    plain_engine,
    read_speculation,
    require_served_speculation,
)
from gate.engines.settings import EngineSettings
from gate.engines.vllm.counters import exports_counters, vllm_counters
from gate.engines.vllm.dialect import ENGINE as VLLM
from gate.errors import ConfigError
from gate.metrics.catalog import speculative as catalog
from gate.metrics.served_speculation import (
    EngineDrafts,
    counted_acceptance_length,
    counted_acceptance_rate,
    counted_position_rates,
    delta,
    engine_acceptance_length,
)
from gate.metrics.speculative import PlainReference
from gate.session.runner import check_tiers_fit
from gate.tiers.served_speculation import measure_served
from gate.tiers.speculative import SpeculativeSettings

HERE = Path(__file__).resolve().parent / "speculative"
NGRAM = '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}'
VLLM_BASE = [
    "python",
    "-m",
    "vllm.entrypoints.openai.api_server",
    "--model",
    "m",
    "--dtype",
    "float32",
]
LLAMA_BASE = ["/opt/llama/bin/llama-server", "-m", "model.gguf", "-c", "1024"]


# -- reading and stripping commands --------------------------------------------------------


@pytest.mark.parametrize(
    "options",
    [
        ["--speculative-config", NGRAM],
        ["--speculative_config", NGRAM],
        [f"--speculative-config={NGRAM}"],
        ["-sc", NGRAM],
        [
            "--speculative-config.method",
            "ngram",
            "--speculative-config.num_speculative_tokens",
            "4",
            "--speculative-config.prompt_lookup_max",
            "4",
        ],
        ["--spec-method", "ngram", "--spec-tokens", "4", "-sc.prompt_lookup_max=4"],
    ],
)
def test_vllm_speculation_read_and_removed(options: list[str]) -> None:
    argv = [*VLLM_BASE[:3], *options, *VLLM_BASE[3:]]
    found = read_speculation(argv)
    assert found is not None
    assert (found.engine, found.method, found.draft_tokens) == (VLLM, "ngram", 4)
    assert found.settings["prompt_lookup_max"] == 4
    assert plain_command(argv) == VLLM_BASE
    assert read_speculation(plain_command(argv)) is None


def test_vllm_draft_model_and_no_speculation() -> None:
    argv = [
        *VLLM_BASE,
        "--speculative-config",
        '{"model": "org/draft", "num_speculative_tokens": 3}',
    ]
    found = read_speculation(argv)
    assert found is not None and found.method == "draft_model"
    assert found.draft_model == "org/draft" and found.draft_tokens == 3
    assert read_speculation(VLLM_BASE) is None
    assert read_speculation([*VLLM_BASE, "--speculative-config", "null"]) is None
    with pytest.raises(ConfigError, match="not a JSON object"):
        read_speculation([*VLLM_BASE, "--speculative-config", "[1, 2]"])
    with pytest.raises(ConfigError, match="no value"):
        read_speculation([*VLLM_BASE, "--speculative-config"])


@pytest.mark.parametrize(
    ("options", "method", "tokens", "model"),
    [
        (
            ["-md", "draft.gguf", "--spec-draft-n-max", "8", "-ngld", "99", "--spec-draft-cpu-moe"],
            "draft-simple",
            8,
            "draft.gguf",
        ),
        (
            ["--model-draft=draft.gguf", "--spec-type", "draft-simple"],
            "draft-simple",
            None,
            "draft.gguf",
        ),
        (
            [
                "--spec-type",
                "ngram-simple",
                "--spec-ngram-simple-size-n",
                "2",
                "--spec-ngram-simple-size-m",
                "4",
            ],
            "ngram-simple",
            None,
            None,
        ),
        (["--spec-default"], "default", None, None),
    ],
)
def test_llama_server_speculation_read_and_removed(
    options: list[str], method: str, tokens: int | None, model: str | None
) -> None:
    argv = [*LLAMA_BASE[:3], *options, *LLAMA_BASE[3:]]
    found = read_speculation(argv)
    assert found is not None
    assert (found.engine, found.method, found.draft_tokens, found.draft_model) == (
        LLAMA_SERVER,
        method,
        tokens,
        model,
    )
    assert plain_command(argv) == LLAMA_BASE
    assert read_speculation(LLAMA_BASE) is None
    assert read_speculation([*LLAMA_BASE, "--spec-type", "none"]) is None


def test_a_key_stays_in_the_plain_command_and_out_of_every_record() -> None:
    key = "sk-not-a-real-key-4711"
    argv = [*VLLM_BASE, "--api-key", key, "--speculative-config", NGRAM]
    assert plain_command(argv) == [*VLLM_BASE, "--api-key", key]  # the server still needs it
    found = read_speculation(argv)
    assert found is not None and key not in json.dumps(found.facts())
    with pytest.raises(ConfigError) as refused:
        require_served_speculation([*VLLM_BASE, "--api-key", key])
    assert key not in str(refused.value) and "***" in str(refused.value)


def test_plain_engine_and_the_refusals() -> None:
    serve = shlex.join([sys.executable, *VLLM_BASE[1:], "--speculative-config", NGRAM])
    plain = plain_engine(EngineSettings(serve=serve))
    assert plain is not None and plain.serve == shlex.join([sys.executable, *VLLM_BASE[1:]])
    assert plain_engine(EngineSettings(serve=shlex.join([sys.executable, *VLLM_BASE[1:]]))) is None
    assert plain_engine(EngineSettings(endpoint="http://127.0.0.1:8000/v1")) is None
    check_tiers_fit(("speculative",), None, EngineSettings(serve=serve))
    with pytest.raises(ConfigError, match="cannot start that one for an --endpoint"):
        check_tiers_fit(("speculative",), None, EngineSettings(endpoint="http://h:1/v1"))
    with pytest.raises(ConfigError, match="does not speculate"):
        check_tiers_fit(("speculative",), None, EngineSettings(serve=f"{sys.executable} -m x"))
    with pytest.raises(ConfigError, match="2 replicas"):
        check_tiers_fit(("speculative",), None, EngineSettings(serve=(serve, serve + " --port 9")))


def test_dry_run_refuses_a_served_build_that_does_not_speculate(tmp_path: Path) -> None:
    from tests.cli_support import run_gate

    command = shlex.join([sys.executable, "-m", "vllm.entrypoints.openai.api_server"])
    done = run_gate(
        "run",
        "--candidate",
        "demo",
        "--serve",
        command,
        "--tiers",
        "speculative",
        "--dry-run",
        cwd=tmp_path,
    )
    assert done.returncode == 4, done.stderr
    assert "does not speculate" in done.stderr
    done = run_gate(
        "run",
        "--candidate",
        "demo",
        "--endpoint",
        "http://127.0.0.1:9/v1",
        "--tiers",
        "speculative",
        "--dry-run",
        cwd=tmp_path,
    )
    assert done.returncode == 4, done.stderr
    assert "--endpoint" in done.stderr


# -- the engine's counters ---------------------------------------------------------------


def test_vllm_counters_from_a_real_metrics_endpoint() -> None:
    before = (HERE / "vllm-metrics-m0.txt").read_text(encoding="utf-8")
    after = (HERE / "vllm-metrics-m1.txt").read_text(encoding="utf-8")
    assert exports_counters(before) and not exports_counters("vllm:num_requests_running 0.0")
    assert vllm_counters(before) == EngineDrafts(0, 0, drafts=0, accepted_per_position=(0,) * 4)
    counts = delta(vllm_counters(before), vllm_counters(after), tokens=128)
    assert counts == EngineDrafts(32, 17, drafts=8, accepted_per_position=(7, 4, 4, 2), tokens=128)
    assert counted_acceptance_length(counts) == pytest.approx(128 / 111)
    assert engine_acceptance_length(counts) == pytest.approx(1 + 17 / 8)
    assert counted_acceptance_rate(counts) == pytest.approx(17 / 32)
    assert counted_position_rates([counts]) == pytest.approx([7 / 8, 4 / 8, 4 / 8, 2 / 8])


def test_llama_server_counters_from_a_real_answer() -> None:
    answer = json.loads((HERE / "llama-server-answer.json").read_text(encoding="utf-8"))
    counts = llama_counters(answer["timings"])
    assert counts == EngineDrafts(23, 17, tokens=32)
    assert counted_acceptance_length(counts) == pytest.approx(32 / 15)
    assert engine_acceptance_length(counts) is None  # llama-server reports no step count
    assert counted_position_rates([counts]) == []
    assert llama_counters({"predicted_n": 5}) == EngineDrafts(0, 0, tokens=5)


def test_in_process_definition_agrees_with_the_counts() -> None:
    """``T / (T - A)`` is the in-process ``(1/n) sum (a_i + 1)`` when every pass is a step."""
    from gate.metrics.speculative import SpeculativeTrace, VerificationStep
    from gate.metrics.speculative import acceptance_length as in_process

    steps = (
        VerificationStep(0, 0),
        VerificationStep(4, 3),
        VerificationStep(0, 0),
        VerificationStep(4, 4),
        VerificationStep(4, 0),
    )
    tokens = sum(s.accepted + 1 for s in steps)
    trace = SpeculativeTrace(tuple(range(tokens)), steps)
    counts = EngineDrafts(12, 7, drafts=3, accepted_per_position=(2, 2, 2, 1), tokens=tokens)
    assert counted_acceptance_length(counts) == pytest.approx(in_process(trace))


# -- the tier on a fake pair -----------------------------------------------------------------


class _Pair:
    def __init__(self, diverge_at: int | None = None, margin: float = 3.0) -> None:
        self.speculation = read_speculation([*VLLM_BASE, "--speculative-config", NGRAM])
        self.diverge_at = diverge_at
        self.margin = margin

    def encode_prompt(self, text: str, *, chat: bool = True) -> list[int]:
        return [1, 2, 3]

    def speculate(self, prompt: Sequence[int], *, max_new_tokens: int):  # type: ignore[no-untyped-def]
        tokens = list(range(10, 10 + max_new_tokens))
        if self.diverge_at is not None:
            tokens[self.diverge_at] = 0
        counts = EngineDrafts(
            8, 6, drafts=2, accepted_per_position=(2, 2, 1, 1), tokens=max_new_tokens
        )
        return tuple(tokens), counts

    def plain_reference(self, prompt: Sequence[int], *, max_new_tokens: int) -> PlainReference:
        return PlainReference(
            tuple(range(10, 10 + max_new_tokens)), (self.margin,) * max_new_tokens, 1e-4
        )

    def timed_pair(
        self, prompt: Sequence[int], *, max_new_tokens: int, speculative_first: bool
    ) -> tuple[float, float]:
        return 30.0, 20.0


def test_measure_served_has_the_in_process_shapes() -> None:
    settings = SpeculativeSettings(limit=3, max_new_tokens=8, speed_prompts=2)
    found = {m.name: m for m in measure_served(_Pair(), settings)}  # type: ignore[arg-type]
    assert set(found) == {
        m
        for m in (
            catalog.LOSSLESS,
            catalog.CONFIDENT_DIVERGENCES,
            catalog.ACCEPTANCE_LENGTH,
            catalog.ACCEPTANCE_RATE,
            catalog.SPEEDUP,
        )
    }
    assert found[catalog.LOSSLESS].value == 1.0
    length = found[catalog.ACCEPTANCE_LENGTH]
    assert length.value == pytest.approx(8 / 2) and length.n == 3
    assert length.sample_ids == found[catalog.ACCEPTANCE_RATE].sample_ids
    assert length.details["position_rates"] == [1.0, 1.0, 0.5, 0.5]
    assert length.details["engine_acceptance_length"] == [4.0] * 3
    assert found[catalog.SPEEDUP].value == pytest.approx(1.5)
    assert "noise_definition" in found[catalog.LOSSLESS].details


def test_measure_served_counts_a_confident_divergence() -> None:
    settings = SpeculativeSettings(limit=2, max_new_tokens=8, speed_prompts=0)
    found = {m.name: m for m in measure_served(_Pair(diverge_at=3), settings)}  # type: ignore[arg-type]
    assert found[catalog.LOSSLESS].value == 0.0
    assert found[catalog.CONFIDENT_DIVERGENCES].value == 2.0
    near_tie = {m.name: m for m in measure_served(_Pair(3, margin=1e-5), settings)}  # type: ignore[arg-type]
    assert near_tie[catalog.CONFIDENT_DIVERGENCES].value == 0.0


def test_each_command_is_read_by_the_dialect_of_its_engine() -> None:
    from gate.engines.registry import dialect_for_command

    assert dialect_for_command(VLLM_BASE).name == VLLM
    assert dialect_for_command(["/venv/bin/vllm", "serve", "m"]).name == VLLM
    assert dialect_for_command(LLAMA_BASE).name == LLAMA_SERVER
    # a model file named like the other engine does not make it that engine
    assert dialect_for_command(["llama-server", "-m", "/m/vllm.gguf"]).name == LLAMA_SERVER
    # any other server is the generic one, which reads no speculative options
    other = ["python", "-m", "sglang.launch_server", "--speculative-config", NGRAM]
    assert dialect_for_command(other).name == "openai"
    assert read_speculation(other) is None and plain_command(other) == other

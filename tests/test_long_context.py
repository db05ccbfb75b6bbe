"""Long-context fidelity prompts (:mod:`gate.data.long_context`) and their per-tier slices.

The builder is checked against an independent count: the demo tokenizer's own
``apply_chat_template`` on the prompt's turns (not the backend helper the
builder is given). End to end, the demo model records a baseline on the
long-context set into a temporary store, then ``gate run`` scores the control
(no recipe: CGA exactly 1 in every context tier) and a StreamingLLM cache that
keeps 4 sink tokens and a 32-token window (it forgets most of every history:
CGA well below 1, and different from tier to tier).
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from gate.data.long_context import (
    DEMO_CONTEXT_TIERS,
    build_long_context_set,
    check_tiers,
    context_tier,
    fit_to_budget,
    load_conversations,
    tier_bounds,
)
from gate.data.sharegpt import Conversation, Turn
from gate.errors import ConfigError, DataError, ExitCode
from gate.models.model_spec import demo_model_dir
from gate.tiers.registry import build_settings
from tests.cli_support import GateRun, run_gate

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(demo_model_dir()))


def _template_count(tokenizer: Any, turns: Any) -> int:
    """Independent count: the tokenizer's chat template on the turns, with the assistant prefix."""
    text = tokenizer.apply_chat_template(
        [{"role": t.role, "content": t.content} for t in turns],
        add_generation_prompt=True,
        tokenize=False,
    )
    # the template writes the BOS token itself: no special tokens added on top
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def _builder_count(tokenizer: Any) -> Any:
    from gate.models.backends import tokens

    return lambda turns: len(
        tokens.encode_messages(tokenizer, [{"role": t.role, "content": t.content} for t in turns])
    )


def test_tier_bounds_labels_and_bad_tiers() -> None:
    assert tier_bounds((256, 512, 896)) == [(128, 256), (256, 512), (512, 896)]
    assert [context_tier(n, (256, 512, 896)) for n in (1, 256, 257, 512, 896, 897)] == [
        "256", "256", "512", "512", "896", ">896",
    ]  # fmt: skip
    for bad, word in (
        ((), "needs at least one token budget"),
        ((512, 256), "strictly increasing"),
        ((256, 256), "strictly increasing"),
        ((8, 64), ">= 16 tokens"),
    ):
        with pytest.raises(ValueError, match=word):
            check_tiers(bad)


def test_settings_validate_the_long_context_keys() -> None:
    s = build_settings(
        "fidelity", {"context_tiers": [8192, 16384, 24576], "context_prompts_per_tier": 4}
    )
    assert s.context_tiers == (8192, 16384, 24576) and s.context_prompts_per_tier == 4
    assert build_settings("fidelity", {}).context_tiers is None
    for table, word in (
        ({"context_tiers": [512, 256]}, "increasing"),
        ({"context_tiers": [256], "prompts": "p.jsonl"}, "one of them"),
        ({"conversations": "c.jsonl"}, "context_tiers"),
        ({"context_tiers": [256], "context_prompts_per_tier": 0}, ">= 1"),
    ):
        with pytest.raises(ConfigError, match=word) as info:
            build_settings("fidelity", table)
        assert info.value.exit_code == ExitCode.USAGE_ERROR


def test_bad_conversation_files_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    turns = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    path.write_text(json.dumps({"id": "a", "turns": turns}) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match="last turn must be the user's question"):
        load_conversations(path)
    bad_role = [{"role": "robot", "content": "x"}, {"role": "user", "content": "q"}]
    path.write_text(json.dumps({"id": "a", "turns": bad_role}) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match="role 'user' or 'assistant'"):
        load_conversations(path)


def test_fit_never_cuts_the_question_and_refuses_one_over_budget(tokenizer: Any) -> None:
    count = _builder_count(tokenizer)
    question = Turn("user", "Explain why the sky looks blue in the afternoon. " * 20)
    turns = (Turn("user", "hello"), Turn("assistant", "hi there " * 50), question)
    assert fit_to_budget(turns, count((question,)) - 1, count) is None
    messages, n = fit_to_budget(turns, count((question,)) + 30, count) or ((), 0)
    assert messages[-1] == question and n == _template_count(tokenizer, messages)
    assert messages[0].role == "assistant" and messages[0].content != "hi there " * 50
    assert ("hi there " * 50).endswith(messages[0].content)  # a tail of the dropped turn


def test_builder_against_an_independent_count(tokenizer: Any) -> None:
    convs = load_conversations()
    by_id = {c.id: c for c in convs}

    def count_text(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    prompts = build_long_context_set(
        convs, _builder_count(tokenizer), count_text, DEMO_CONTEXT_TIERS, per_tier=6
    )
    again = build_long_context_set(
        list(reversed(convs)), _builder_count(tokenizer), count_text, DEMO_CONTEXT_TIERS, 6
    )
    assert prompts == again  # deterministic, whatever the input order
    bounds = dict((upper, lower) for lower, upper in tier_bounds(DEMO_CONTEXT_TIERS))
    assert [p.context_tier for p in prompts] == list(DEMO_CONTEXT_TIERS) * 6  # interleaved
    assert len({p.id.split(":", 1)[1] for p in prompts}) == len(prompts)  # each chat once
    for p in prompts:
        n = _template_count(tokenizer, p.messages)
        assert n == p.n_tokens and bounds[p.context_tier] < n <= p.context_tier, p.id
        conv = by_id[p.id.split(":", 1)[1]]
        # the question is the conversation's final user turn, whole
        assert p.messages[-1] == conv.turns[-1] and p.text == conv.turns[-1].content
        assert p.messages[-1].role == "user"
        # the history is the newest turns in order; only its oldest turn may be cut (at its start)
        k = len(p.messages)
        assert p.messages[1:] == conv.turns[len(conv.turns) - k + 1 :]
        oldest = conv.turns[len(conv.turns) - k]
        assert oldest.role == p.messages[0].role and oldest.content.endswith(p.messages[0].content)
        assert len(p.messages) >= 2  # real history, not a lone question


def test_a_tier_no_conversation_reaches_is_refused(tokenizer: Any) -> None:
    short = [Conversation("s", (Turn("user", "hi"), Turn("assistant", "yo"), Turn("user", "ok")))]
    with pytest.raises(DataError, match="context tier of 256 tokens"):
        build_long_context_set(short, _builder_count(tokenizer), len, (256,), per_tier=1)


def test_tiers_beyond_the_models_window_are_refused_before_any_work() -> None:
    from types import SimpleNamespace

    from gate.tiers.fidelity import long_context_prompts

    model = SimpleNamespace(config=SimpleNamespace(max_position_embeddings=1024))
    backend: Any = SimpleNamespace(name="fake", model=model)
    settings = build_settings("fidelity", {"context_tiers": [256, 512, 960], "max_new_tokens": 128})
    with pytest.raises(ConfigError, match="exceeds the model's 1024 positions") as info:
        long_context_prompts(backend, settings)
    assert info.value.exit_code == ExitCode.USAGE_ERROR


# ------------------------------------------------------------------- end to end


def _gate(cwd: Path, *args: str) -> GateRun:
    return run_gate(*args, cwd=cwd)


CONFIG = """
[run]
baseline = "demo"
against = ["long-context"]
tiers = ["fidelity"]
store = "store"

[tiers.fidelity]
context_tiers = [256, 512, 896]
context_prompts_per_tier = 3
max_new_tokens = 16
top_k = 8
tail_samples = 0

[[candidates]]
name = "control"
model = "demo"
recipe = "none"

[[candidates]]
name = "streaming"
model = "demo"
recipe = "kv-streaming:sinks=4,window=32"
"""


def _tier_cga(result: dict[str, Any]) -> dict[str, float]:
    return {
        m["slice"]: m["value"]
        for m in result["metrics"]
        if m["name"] == "fidelity.cga" and (m["slice"] or "").startswith("context:")
    }


@pytest.mark.slow
def test_long_context_baseline_and_a_kv_dropping_candidate(tmp_path: Path) -> None:
    (tmp_path / "gate.toml").write_text(textwrap.dedent(CONFIG), encoding="utf-8")
    recorded = _gate(
        tmp_path, "baseline", "record", "--model", "demo", "--tiers", "fidelity",
        "--config", "gate.toml", "--ref", "long-context",
    )  # fmt: skip
    assert recorded.returncode == 0, recorded.stdout[-3000:] + recorded.stderr[-3000:]
    run = _gate(tmp_path, "run", "--config", "gate.toml", "--json", "out/results.json")
    assert run.returncode in (ExitCode.OK, ExitCode.BLOCKED), (
        run.stdout[-3000:] + run.stderr[-3000:]
    )
    control = json.loads((tmp_path / "out" / "results-control.json").read_text())
    streaming = json.loads((tmp_path / "out" / "results-streaming.json").read_text())
    tiers = {f"context:{t}" for t in DEMO_CONTEXT_TIERS}
    assert _tier_cga(control) == dict.fromkeys(tiers, 1.0)
    per_tier = _tier_cga(streaming)
    assert set(per_tier) == tiers
    assert all(v < 1.0 for v in per_tier.values())
    assert len(set(per_tier.values())) > 1, per_tier  # the tiers see different damage
    assert streaming["verdict"] == "block"

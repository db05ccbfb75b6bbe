"""The judge training script's loss: only answer tokens, at the right positions."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))

import train_judge_model as train  # noqa: E402

from gate.judge.judges import answer_ids, question_ids  # noqa: E402
from gate.judge.normalize import normalize_response  # noqa: E402
from gate.judge.pairs import PairwiseCase, ValidityCase  # noqa: E402
from gate.judge.template import FieldLimits, default_template  # noqa: E402


@pytest.fixture(scope="module")
def demo() -> tuple[object, object]:
    from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast.from_pretrained(train.DEMO_MODEL)
    model = LlamaForCausalLM.from_pretrained(train.DEMO_MODEL, dtype=torch.float32).eval()
    return tok, model


def test_encoder_renders_like_the_judge_and_targets_the_answer(demo: tuple[object, object]) -> None:
    tok, _ = demo
    limits = FieldLimits(prompt=32, response=40)
    enc = train.Encoder(tok, default_template("pairwise"), default_template("validity"), limits)  # type: ignore[arg-type]
    case = PairwiseCase("Say hi " * 30, "## Hello\n\nthere", "Hello there " * 30, "A", "x", "t")
    q, a = enc.pair(case)
    fields = {
        "prompt": case.prompt,
        "response_a": "Hello\nthere",
        "response_b": normalize_response(case.response_b),
    }
    expected = default_template("pairwise").render(fields, limits, enc)
    assert q == question_ids(tok, expected)
    assert a == answer_ids(tok, "A")
    _, va = enc.valid(ValidityCase("p", "r", "corrupted", "empty", "t"))
    assert va == answer_ids(tok, "corrupted") and len(va) > 2


def test_answer_loss_is_cross_entropy_of_the_answer_tokens_only(
    demo: tuple[object, object],
) -> None:
    tok, model = demo
    rows = [
        (question_ids(tok, "What is 7 * 8?"), answer_ids(tok, "tie")),
        (question_ids(tok, "Answer in one word: Which animal says moo?"), answer_ids(tok, "A")),
    ]
    pad = int(tok.pad_token_id)  # type: ignore[attr-defined]
    with torch.no_grad():
        loss, _ = train.answer_loss(model, rows, pad)  # type: ignore[arg-type]
        # independent: full logits of each unpadded sequence, NLL of its answer tokens
        nll = []
        for q, a in rows:
            logits = model(input_ids=torch.tensor([q + a])).logits[0]  # type: ignore[operator]
            logp = torch.log_softmax(logits, dim=-1)
            nll += [-logp[len(q) - 1 + j, t] for j, t in enumerate(a)]
    assert float(loss) == pytest.approx(float(torch.stack(nll).mean()), rel=1e-4)


def test_batches_keep_both_orders_and_are_seeded() -> None:
    groups = [[([1] * n, [2]), ([1] * n, [3])] for n in range(1, 40)]
    first = train.batches_of([list(g) for g in groups], 4, random.Random(0))
    again = train.batches_of([list(g) for g in groups], 4, random.Random(0))
    assert first == again
    assert all(len(b) == 4 for b in first)
    # within a batch, lengths are close (sorted windows)
    assert max(max(len(q) for q, _ in b) - min(len(q) for q, _ in b) for b in first) <= 2

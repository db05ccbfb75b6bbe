"""``gate demo --panel paper``: one candidate per compression method of the CGA paper.

The CGA paper gates nine methods in four families (INT4 weight checkpoints,
pruning, low-precision and sparse attention, KV-cache compression). This panel
builds one candidate of each on the demo model, through the path that runs it
(:func:`gate.models.backends.loading.load_candidate`), runs them through the
same demo run config as ``gate demo`` and prints a table in the paper's shape:
method, family, CGA overall / per category / per prompt-length slice, mean KL,
perplexity, MCQ accuracy and flips, verdict.

The GPTQ, AWQ and SparseGPT checkpoints ship with the package (made offline
by ``scripts/make_compressed_checkpoints.py`` in llm-compressor's environment,
each in minutes on a CPU; see :mod:`gate.models.checkpoints`), so a fresh
clone gates all of them; Wanda prunes in process (``prune-wanda``, calibrated on
the packaged calibration texts).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gate.metrics.catalog import accuracy as accuracy_catalog
from gate.metrics.catalog import fidelity as fidelity_catalog
from gate.workflows.demo import CONTROL, CandidateResult

#: SnapKV's observation window at the demo's scale (its prompts have 16-196 tokens).
DEMO_SNAPKV_WINDOW = 16

#: ``(recipe, family)`` of the panel, the control first.
PAPER_PANEL: tuple[tuple[str, str], ...] = (
    (CONTROL, "control"),
    ("gptq:w4a16", "weights INT4"),
    ("awq:w4a16", "weights INT4"),
    ("sparsegpt:0.5", "pruning"),
    ("prune-wanda:0.5", "pruning"),
    ("attn-fp8", "attn low-prec"),
    ("attn-sage", "attn low-prec"),
    ("attn-topk:0.1", "attn sparse"),
    (f"kv-snapkv:ratio=0.5,window={DEMO_SNAPKV_WINDOW}", "KV eviction"),
    ("kv-h2o:0.5", "KV eviction"),
    ("kv-streaming:sinks=4,window=32", "KV eviction"),
    ("kv-quant:int4", "KV quant"),
)


def panel_recipes() -> tuple[str, ...]:
    """The panel's recipes, the control first."""
    return tuple(recipe for recipe, _ in PAPER_PANEL)


def family_of(recipe: str) -> str:
    """The panel family of ``recipe`` (``-`` for a recipe outside the panel)."""
    return dict(PAPER_PANEL).get(recipe, "-")


def _slices(result: CandidateResult, metric: str, prefix: str) -> dict[str, float]:
    return {
        key.removeprefix(prefix): value
        for key, value in result.breakdowns.get(metric, {}).items()
        if key.startswith(prefix)
    }


def row(result: CandidateResult) -> dict[str, Any]:
    """One panel row: the paper's columns from a candidate's verdicts."""
    values = result.values
    return {
        "method": result.recipe,
        "family": family_of(result.recipe),
        "cga": values.get(fidelity_catalog.CGA),
        "cga_by_category": _slices(result, fidelity_catalog.CGA, "category:"),
        "cga_by_length": _slices(result, fidelity_catalog.CGA, "length:"),
        "kl_mean": values.get(fidelity_catalog.KL_MEAN),
        "perplexity": values.get(accuracy_catalog.PERPLEXITY),
        "mcq_accuracy": values.get(accuracy_catalog.MCQ_ACC),
        "mcq_flips": values.get(accuracy_catalog.FLIPS),
        "verdict": result.verdict if result.error is None else f"error: {result.error}",
    }


#: Prompt-length slices of the fidelity tier, in order (gate.data.categorize.length_tier).
LENGTHS: tuple[str, ...] = ("short", "medium", "long")


def paper_table(results: Sequence[CandidateResult]) -> Any:
    """The paper-shaped table: method, family, CGA (overall, per length slice), KL, ppl, MCQ."""
    from rich.table import Table

    rows = [row(r) for r in results]
    lengths = [n for n in LENGTHS if any(n in r["cga_by_length"] for r in rows)]
    out = Table(title="gate demo --panel paper: the CGA paper's methods on the demo model")
    out.add_column("method", no_wrap=True)
    out.add_column("family", no_wrap=True)
    out.add_column("CGA", justify="right")
    for name in lengths:
        out.add_column(f"CGA {name}", justify="right")
    for name in ("mean KL", "ppl", "MCQ acc", "flips"):
        out.add_column(name, justify="right")
    out.add_column("verdict", no_wrap=True)
    for result, r in zip(results, rows, strict=True):
        idle = "not exercised" if "fidelity" in result.idle_tiers else None
        cells = [r["method"], r["family"], idle or _fmt(r["cga"])]
        cells += [idle or _fmt(r["cga_by_length"].get(n)) for n in lengths]
        cells += [
            idle or _fmt(r["kl_mean"], ".4f"),
            result.cell(accuracy_catalog.PERPLEXITY, ".2f"),
            result.cell(accuracy_catalog.MCQ_ACC, ".3f"),
            result.cell(accuracy_catalog.FLIPS, ".3f"),
            str(r["verdict"]).replace("_", " ").upper(),
        ]
        out.add_row(*cells)
    return out


def category_table(results: Sequence[CandidateResult]) -> Any:
    """CGA per prompt category, one row per method (the paper's per-category breakdown)."""
    from rich.table import Table

    rows = [row(r) for r in results]
    categories = sorted({k for r in rows for k in r["cga_by_category"]})
    out = Table(title="CGA per prompt category")
    out.add_column("method", no_wrap=True)
    for name in categories:
        out.add_column(name, justify="right")
    for r in rows:
        out.add_row(r["method"], *[_fmt(r["cga_by_category"].get(c)) for c in categories])
    return out


def _fmt(value: float | None, digits: str = ".3f") -> str:
    return "-" if value is None else format(value, digits)


def rows_json(results: Sequence[CandidateResult]) -> list[Mapping[str, Any]]:
    """The panel rows as JSON-ready dicts (``--json-dir``: ``paper_panel.json``)."""
    return [row(r) for r in results]


__all__ = [
    "PAPER_PANEL",
    "category_table",
    "family_of",
    "panel_recipes",
    "paper_table",
    "row",
    "rows_json",
]

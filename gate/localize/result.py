"""What ``gate localize`` found, typed, and its JSON document (no torch).

The document (``gate localize --json``)::

    {"kind": "gate.localize", "schema_version": 1,
     "candidate": {...}, "baseline": "demo#0001 (fp32)",
     "losses": {"cga": .., "top5": .., "kl": ..},           # candidate, all prompts
     "layers": [{"rank": 1, "index": 2, "name": "model.layers.2",
                 "score": .., "shares": {"cga": .., "top5": .., "kl": ..},
                 "divergence": .., "divergence_jump": .., "resolution": "layer"}, ...],
     "subset": {"prompts": n, "of": N, "resolvable_share": ..},
     "recipe": "quanto-int2:keep=model.layers.2" | null,
     "repair": {...} | null,
     "cost": {"forwards": .., "swaps": .., "wall_s": .., "cpu_s": ..}}
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

#: The kind and schema version of the document.
KIND = "gate.localize"
SCHEMA_VERSION = 1


def _number(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else round(float(value), 6)


@dataclass(frozen=True)
class LayerScore:
    """One decoder layer's scores (module doc of :mod:`gate.localize.attribution`)."""

    index: int
    name: str
    #: Mean relative hidden-state error after this layer.
    divergence: float
    #: What this layer adds to it (``e_l - e_{l-1}``).
    jump: float
    #: Recovered share per signal (``None``: the candidate lost nothing on it).
    shares: Mapping[str, float | None]
    score: float
    #: ``layer`` (swapped alone) or ``block`` (only its block was swapped; shares are the block's).
    resolution: str = "layer"
    block: tuple[int, ...] = ()

    def to_dict(self, rank: int) -> dict[str, Any]:
        """JSON form with its rank (1 = most responsible)."""
        return {
            "rank": rank,
            "index": self.index,
            "name": self.name,
            "score": _number(self.score),
            "shares": {k: _number(v) for k, v in self.shares.items()},
            "divergence": _number(self.divergence),
            "divergence_jump": _number(self.jump),
            "resolution": self.resolution,
            "block": list(self.block),
        }


@dataclass(frozen=True)
class Gated:
    """The verdict of the repaired build's gate run."""

    verdict: str
    exit_code: int
    cga: float | None
    kl_mean: float | None


@dataclass(frozen=True)
class Repair:
    """The fewest top-ranked layers kept that pass, and what keeping them costs."""

    kept: tuple[int, ...]
    names: tuple[str, ...]
    #: Extra parameter bytes, in % of the fully compressed build.
    byte_cost_pct: float
    #: The repaired build as a gate recipe (``None``: the candidate is not a recipe build).
    recipe: str | None
    #: The keep list in each quantizer's own syntax.
    snippets: Mapping[str, str]
    #: Losses of the swapped build on the subset (what the greedy search saw).
    predicted: Mapping[str, float]
    #: Whether the greedy search met the bounds before running out of layers.
    met_bounds: bool
    gated: Gated | None = None
    note: str = ""

    def headline(self) -> str:
        """``keep model.layers.0, model.layers.29 (+3.1 % bytes): CGA 0.962, PASS``."""
        kept = ", ".join(self.names) or "nothing"
        text = f"keep {kept} (+{self.byte_cost_pct:.1f} % bytes)"
        if self.gated is not None:
            cga = "n/a" if self.gated.cga is None else f"{self.gated.cga:.3f}"
            return f"{text}: CGA {cga}, {self.gated.verdict}"
        predicted = 1.0 - self.predicted.get("cga", math.nan)
        return f"{text}: CGA {predicted:.3f} on the subset (not gated: {self.note or 'no recipe'})"

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        gated = None
        if self.gated is not None:
            gated = {
                "verdict": self.gated.verdict,
                "exit_code": self.gated.exit_code,
                "cga": _number(self.gated.cga),
                "kl_mean": _number(self.gated.kl_mean),
            }
        return {
            "kept": list(self.kept),
            "names": list(self.names),
            "byte_cost_pct": _number(self.byte_cost_pct),
            "recipe": self.recipe,
            "snippets": dict(self.snippets),
            "predicted_losses": {k: _number(v) for k, v in self.predicted.items()},
            "met_bounds": self.met_bounds,
            "gated": gated,
            "headline": self.headline(),
            "note": self.note,
        }


@dataclass(frozen=True)
class Localization:
    """Everything one ``gate localize`` found."""

    candidate: Mapping[str, Any]
    baseline: str
    losses: Mapping[str, float]
    #: Ranked, most responsible first.
    layers: tuple[LayerScore, ...]
    subset: int
    prompts: int
    resolvable_share: float
    resolve: float
    swaps: int
    forwards: int
    wall_s: float
    repair: Repair | None = None
    #: CPU seconds of this process over the same span (wall time on a shared machine
    #: includes waiting for cores; this does not).
    cpu_s: float = 0.0
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_document(self) -> dict[str, Any]:
        """The JSON document (module doc)."""
        return {
            "kind": KIND,
            "schema_version": SCHEMA_VERSION,
            "candidate": dict(self.candidate),
            "baseline": self.baseline,
            "losses": {k: _number(v) for k, v in self.losses.items()},
            "layers": [layer.to_dict(rank) for rank, layer in enumerate(self.layers, start=1)],
            "subset": {
                "prompts": self.subset,
                "of": self.prompts,
                "resolve": self.resolve,
                "resolvable_share": _number(self.resolvable_share),
            },
            "recipe": None if self.repair is None else self.repair.recipe,
            "repair": None if self.repair is None else self.repair.to_dict(),
            "cost": {
                "forwards": self.forwards,
                "swaps": self.swaps,
                "wall_s": round(self.wall_s, 2),
                "cpu_s": round(self.cpu_s, 2),
            },
            "notes": list(self.notes),
        }


__all__ = ["KIND", "SCHEMA_VERSION", "Gated", "LayerScore", "Localization", "Repair"]

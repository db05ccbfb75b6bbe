"""``gate localize``'s procedure: divergence, swap-back attribution, the greedy repair.

1. One forward of each build per reference prompt: the layerwise divergence
   and the candidate's losses (:meth:`LayerProbe.divergence`).
2. The prompt subset the swaps run on (:func:`~gate.localize.attribution.subset_size`).
3. Swap-back: each layer restored alone when the model has at most
   ``direct_up_to`` layers; deeper models are cut into blocks of
   ``ceil(sqrt(L))`` layers, every block is restored, and the best blocks
   (:func:`~gate.localize.attribution.blocks_to_refine`) are refined layer by
   layer. Layers ranked by the combined score.
4. The repair: the top-ranked layers restored one more at a time until the
   swapped build's losses on the subset are within the ``critical`` bounds
   of ``thresholds.toml`` (CGA, CGA@5, mean KL: what blocks a build), on the
   whole subset and on each category and length slice (a slice's own bound
   where the file gives one), at most
   all layers but one (keeping every layer is the baseline); its byte cost; the repaired
   recipe (``keep=`` those layers) and the quantizers' syntax. The command
   then gates that recipe with the normal pipeline.

Each pass shows its progress through :mod:`gate.progress` as done/total: the
divergence pass per prompt, the swap-back per swap (layers, or blocks then
the layers of the refined blocks) and the repair per layer kept (its total is
the most it may keep; it stops as soon as the bounds are met).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from torch import nn

from gate import progress
from gate.errors import ConfigError
from gate.localize.attribution import (
    SIGNALS,
    Bounds,
    Losses,
    block_size,
    blocks,
    blocks_to_refine,
    byte_cost,
    combined_score,
    divergence_jumps,
    passes,
    rank,
    resolvable_share,
    shares,
    subset_size,
)
from gate.localize.probe import LayerProbe, pack_inputs
from gate.localize.result import LayerScore, Localization, Repair
from gate.localize.suggest import repaired_recipe, snippets
from gate.metrics.catalog import fidelity as fidelity_catalog
from gate.models.compress import quanto, select
from gate.models.methods.registry import get_method
from gate.models.recipes import Recipe, format_recipe
from gate.store.reference import ReferencePack

#: The gated fidelity metric behind each loss signal (its ``critical`` bound bounds the loss).
SIGNAL_METRICS: Mapping[str, str] = {
    "cga": fidelity_catalog.CGA,
    "top5": fidelity_catalog.CGA_AT_5,
    "kl": fidelity_catalog.KL_MEAN,
}


@dataclass(frozen=True)
class LocalizeSettings:
    """How ``gate localize`` searches (``gate localize --help``)."""

    #: The recovered share of the KL loss the swap subset must resolve.
    resolve: float = 0.25
    #: Level of the one-sided test behind the subset size.
    alpha: float = 0.05
    #: Models up to this many layers have every layer swapped alone.
    direct_up_to: int = 12
    #: Reference prompts of the divergence pass (``None``: the whole pack).
    limit: int | None = None


def _means(losses: Losses) -> dict[str, float]:
    return {s: losses.mean(s) for s in SIGNALS}


class _Swaps:
    """Swapped-build losses on the subset, each set of restored layers measured once."""

    def __init__(self, probe: LayerProbe, n: int) -> None:
        self.probe, self.n = probe, n
        self.done: dict[frozenset[int], Losses] = {}

    def __call__(self, layers: Sequence[int]) -> Losses:
        key = frozenset(layers)
        if key not in self.done:
            self.done[key] = self.probe.swapped_losses(sorted(key), self.n)
        return self.done[key]


def _attribute(
    probe: LayerProbe, swaps: _Swaps, cand: Losses, settings: LocalizeSettings
) -> tuple[dict[int, dict[str, float | None]], dict[int, tuple[int, ...]]]:
    """Shares per layer, and for layers known only through their block, that block."""
    total = probe.n_layers
    size = block_size(total, settings.direct_up_to)
    if size == 1:
        return _swapped_alone(swaps, cand, range(total), f"each of {total} layers"), {}
    units = blocks(total, size)
    unit_shares = []
    described = f"localize: swap-back of {len(units)} blocks of {size} layers"
    for unit in progress.track(units, f"{described} ({swaps.n} prompts each)"):
        unit_shares.append(shares(cand, swaps(unit)))
    refine = set(blocks_to_refine([combined_score(s) for s in unit_shares]))
    refined = [i for b, unit in enumerate(units) if b in refine for i in unit]
    alone = _swapped_alone(swaps, cand, refined, f"the {len(refined)} layers of the best blocks")
    per_layer: dict[int, dict[str, float | None]] = {}
    by_block: dict[int, tuple[int, ...]] = {}
    for b, unit in enumerate(units):
        for i in unit:
            if b in refine:
                per_layer[i] = alone[i]
            else:
                per_layer[i] = unit_shares[b]
                by_block[i] = unit
    return per_layer, by_block


def _swapped_alone(
    swaps: _Swaps, cand: Losses, layers: Sequence[int], what: str
) -> dict[int, dict[str, float | None]]:
    """The shares of each of ``layers`` restored alone (one progress step per swap)."""
    if not layers:
        return {}
    described = f"localize: swap-back of {what} ({swaps.n} prompts each)"
    return {i: shares(cand, swaps([i])) for i in progress.track(layers, described)}


def _repair(
    swaps: _Swaps,
    order: Sequence[int],
    slices: Sequence[Sequence[str]],
    bounds: Bounds,
    losses: Losses,
) -> tuple[list[int], dict[str, float], bool]:
    """The top-ranked layers kept one more at a time until ``losses`` (the candidate's on
    the subset) pass ``bounds``: ``(kept, predicted mean losses, met)``. At most every
    layer but one: keeping every layer is the baseline, not a repair."""
    kept: list[int] = []
    predicted = _means(losses)
    met = passes(losses, slices, bounds)
    most = order[: len(order) - 1]
    if met or not most:
        return kept, predicted, met
    with progress.task(
        f"localize: repair, the top layers kept one at a time (at most {len(most)})",
        total=len(most),
    ) as step:
        for i in most:
            kept.append(i)
            swapped = swaps(kept)
            predicted = _means(swapped)
            met = passes(swapped, slices, bounds)
            step()
            if met:
                break
    return kept, predicted, met


def _recipe_text(
    recipe: Recipe | None, names: Sequence[str], base: nn.Module
) -> tuple[str | None, str]:
    """The repaired recipe's text, and a note when there is none."""
    if recipe is None or not get_method(recipe.name).repairable:
        return None, "the candidate is not a weight-recipe build: apply the snippets to its tool"
    if not names:
        return format_recipe(recipe), ""
    repaired = repaired_recipe(recipe, names)
    try:
        select.selected(repaired, select.linear_names(base, quanto.EXCLUDE))
    except ConfigError:
        return "none", "keeping those layers leaves nothing compressed"
    return format_recipe(repaired), ""


def localize(
    base: nn.Module,
    cand: nn.Module,
    pack: ReferencePack,
    *,
    bounds: Bounds,
    recipe: Recipe | None,
    candidate: Mapping[str, object],
    baseline: str,
    settings: LocalizeSettings = LocalizeSettings(),
) -> Localization:
    """Localize the candidate's loss against the baseline (module doc)."""
    started, cpu_started = time.perf_counter(), time.process_time()
    probe = LayerProbe(base, cand, pack_inputs(pack, settings.limit))
    names = probe.layer_names()
    prompts = len(probe.inputs)
    with progress.task(
        f"localize: divergence pass over {prompts} prompts, {probe.n_layers} layers",
        total=prompts,
        counted_below=True,  # LayerProbe.divergence counts each prompt
    ):
        errors, cand_losses = probe.divergence()
    jumps = divergence_jumps(errors.tolist())
    n = subset_size(cand_losses.kl, settings.resolve, alpha=settings.alpha)
    resolvable = resolvable_share(cand_losses.kl, n, alpha=settings.alpha)
    swaps = _Swaps(probe, n)
    per_layer, by_block = _attribute(probe, swaps, cand_losses, settings)
    scores = {i: combined_score(s) for i, s in per_layer.items()}
    order = rank(scores, dict(enumerate(jumps)))
    layers = tuple(
        LayerScore(
            index=i,
            name=names[i],
            divergence=float(errors[i]),
            jump=jumps[i],
            shares=per_layer[i],
            score=scores[i],
            resolution="block" if i in by_block else "layer",
            block=by_block.get(i, (i,)),
        )
        for i in order
    )
    slices = [item.slices for item in probe.inputs[:n]]
    kept, predicted, met = _repair(swaps, order, slices, bounds, cand_losses.first(n))
    base_bytes = sum(probe.layer_bytes(i)[0] for i in kept)
    cand_bytes = sum(probe.layer_bytes(i)[1] for i in kept)
    kept_names = [names[i] for i in kept]
    text, note = _recipe_text(recipe, kept_names, base)
    repair = Repair(
        kept=tuple(kept),
        names=tuple(kept_names),
        byte_cost_pct=byte_cost(base_bytes, cand_bytes, probe.total_bytes()),
        recipe=text,
        snippets=snippets(kept_names, kept),
        predicted=predicted,
        met_bounds=met,
        note=note,
    )
    return Localization(
        candidate=candidate,
        baseline=baseline,
        losses=_means(cand_losses),
        layers=layers,
        subset=n,
        prompts=len(probe.inputs),
        resolvable_share=resolvable,
        resolve=settings.resolve,
        swaps=len(swaps.done),
        forwards=probe.forwards,
        wall_s=time.perf_counter() - started,
        cpu_s=time.process_time() - cpu_started,
        repair=repair,
    )


__all__ = ["SIGNAL_METRICS", "LocalizeSettings", "localize"]

"""The fidelity measurements from per-prompt scores (see the metric catalog).

Per-prompt metrics (CGA, CGA@5, mean KL, mean bound, delta-p mean and RMS) are
macro means: the value of prompt ``p`` is the mean over its ``T_p`` positions,
the measurement the mean over prompts, with per-prompt samples. KL
distribution statistics (percentiles, max) pool every position. The standard
error of the macro mean KL is ``sqrt(sum_p sum_i se_i^2 / T_p^2) / n``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from gate.measurement import Measurement, MeasurementDetail, from_samples
from gate.metrics import fidelity as fm
from gate.metrics.catalog import fidelity as fidelity_catalog
from gate.store.reference import RecordingSummary
from gate.tiers.fidelity.pack_scores import PromptScores
from gate.tiers.fidelity.slices import pooled, slice_groups

#: KL distribution statistics that also get per-category / per-length breakdowns
#: (the others are reported overall only, to keep reports readable).
SLICED_POINT_STATS = ("p99", "max")


def kl_label(k: int, m: int, exact: bool, interval: bool = False, unbounded: bool = False) -> str:
    """How the KL was obtained, as the reports print it."""
    if exact:
        return "exact (live baseline)"
    if interval and unbounded:
        return (
            f"interval of the estimate (top-{k} exact + {m} sampled tail tokens per position) "
            "over the tokens the server did not return: unbounded above (sampled tail tokens "
            "outside its answer), so the value is its lower end; the whole vocabulary "
            "(--served-logprobs) bounds it"
        )
    if interval:
        return (
            f"interval of the estimate (top-{k} exact + {m} sampled tail tokens per position) "
            "over the tokens the server did not return; value: its upper end"
        )
    if m:
        return f"estimate: top-{k} exact + {m} sampled tail tokens per position (unbiased)"
    return (
        f"top-{k} + tail bucket (lower bound of the exact KL; no sampled tail in the pack, "
        "or a served candidate whose rows are exact only in its returned top-k)"
    )


def _standard_error(results: Sequence[PromptScores], indices: Sequence[int]) -> float:
    """Standard error of the macro mean KL: per-position draws are independent.

    Prompt ``p``'s mean over its ``T_p`` positions has variance
    ``sum_i se_i^2 / T_p^2``; the mean of ``n`` prompt means has
    ``sum_p var_p / n^2``.
    """
    var = sum(
        float((results[i].positions.kl_se ** 2).sum()) / results[i].positions.length ** 2
        for i in indices
    )
    return float(np.sqrt(var) / max(len(indices), 1))


def measurements(
    results: Sequence[PromptScores],
    *,
    k: int,
    exact: bool,
    tail_mass_mean: float | None = None,
    m: int = 0,
    recording: RecordingSummary | None = None,
    context_tiers: Sequence[int] | None = None,
    interval: bool = False,
) -> list[Measurement]:
    """Aggregate per-prompt scores into the fidelity measurements (see the catalog).

    ``tail_mass_mean`` (the baseline's mean probability outside its top-k, from
    the pack) is reported with the KL so a reader can judge the bound; ``m``
    (sampled tail tokens of the pack) says whether the KL is an estimate;
    ``recording`` (the pack's cut and empty prompts) is reported as well;
    ``context_tiers`` adds a ``context:<budget>`` slice per tier. With
    ``interval`` (a served candidate) the KL values are the upper ends of
    :func:`gate.metrics.fidelity.sampled_tail_kl_interval`; the details give both
    ends of the mean (``interval``), the positions where they meet
    (``interval_exact_positions``) and those unbounded above
    (``interval_unbounded_positions``). Where a position is unbounded above the
    values are the lower ends instead (``gated_end``: ``lower``; the upper end of
    the mean is then ``None``): a gate on an end that is infinite would block
    every served build, the baseline's own included.
    """
    groups = slice_groups(results, context_tiers)
    everything = list(range(len(results)))
    upper_all = pooled(results, everything, "kl")
    lower_all = pooled(results, everything, "kl_lower")
    # a served candidate's KL is gated on the upper end of its interval; where that end is
    # unbounded (a sampled tail token outside the answer), on the lower end, labelled so
    unbounded = int(((upper_all >= fm.KL_CAP) & (lower_all < fm.KL_CAP)).sum()) if interval else 0
    gated = "kl_lower" if unbounded else "kl"
    kl_all = lower_all if unbounded else upper_all
    bound_all = pooled(results, everything, "kl_bound")
    se_all = pooled(results, everything, "kl_se")
    nonfinite = int(sum(int(r.positions.nonfinite.sum()) for r in results))
    capped = (
        int((kl_all >= fm.KL_CAP).sum())
        if unbounded
        else int(sum(int(r.positions.capped.sum()) for r in results))
    )
    common: dict[str, Any] = {
        "prompts": len(results),
        "tokens": int(kl_all.size),
        "nonfinite_positions": nonfinite,
        "capped_positions": capped,
    }
    if recording is not None:
        common["reference_prompts_truncated"] = recording.truncated
        common["reference_prompts_empty"] = recording.empty
    kind = "exact" if exact else ("interval" if interval else ("estimate" if m else "bound"))
    no_tail = recording.no_tail_samples if recording is not None and kind == "bound" else None
    kl_details: dict[str, Any] = {
        **common,
        MeasurementDetail.KL_METHOD: (
            f"top-{k} + tail bucket (lower bound of the exact KL: {no_tail})"
            if no_tail
            else kl_label(k, m, exact, interval, bool(unbounded))
        ),
        "kl_kind": kind,
        "k": k,
        "m": m,
        "token_mean": float(kl_all.mean()),
        "tail_mass_mean": tail_mass_mean,
    }
    mean_details = dict(kl_details)
    if kind == "estimate" or (kind == "interval" and not unbounded):
        _add_standard_error(mean_details, results, se_all)
    if interval:
        _add_interval(mean_details, results, lower_all == upper_all, unbounded)
    out = _per_prompt_measurements(results, groups, gated, common, mean_details, k, bound_all)
    out.extend(_kl_statistics(results, groups, gated, kl_all, bound_all, kl_details))
    return out


def _per_prompt_measurements(
    results: Sequence[PromptScores],
    groups: dict[str, list[int]],
    gated: str,
    common: dict[str, Any],
    mean_details: dict[str, Any],
    k: int,
    bound_all: np.ndarray,
) -> list[Measurement]:
    """The macro means: CGA, CGA@5, mean KL (of the ``gated`` values), mean bound, delta-p
    mean and RMS, each the mean over prompts of its value on one prompt's positions."""
    ids = [r.meta.id for r in results]
    bound_details = {
        **common,
        MeasurementDetail.KL_METHOD: f"top-{k} + tail bucket: a lower bound of the exact KL",
        "k": k,
        "token_mean": float(bound_all.mean()),
    }
    dp_all = pooled(results, list(range(len(results))), "delta_p")
    dp_details = {**common, **{f"pooled_{k_}": v for k_, v in fm.delta_p_summary(dp_all).items()}}
    # metric -> (its value on one prompt's positions, details)
    per_prompt: list[tuple[str, Callable[[fm.PositionScores], float], dict[str, Any]]] = [
        (fidelity_catalog.CGA, lambda p: float(p.cga.mean()), common),
        (fidelity_catalog.CGA_AT_5, lambda p: float(p.cga_at_k.mean()), common),
        (fidelity_catalog.KL_MEAN, lambda p: float(getattr(p, gated).mean()), mean_details),
        (fidelity_catalog.KL_BOUND_MEAN, lambda p: float(p.kl_bound.mean()), bound_details),
        (fidelity_catalog.DELTA_P_MEAN, lambda p: float(p.delta_p.mean()), dp_details),
        (fidelity_catalog.DELTA_P_RMS, lambda p: float(np.sqrt(np.mean(p.delta_p**2))), common),
    ]
    return [
        from_samples(name, [fn(r.positions) for r in results], ids, groups=groups, details=details)
        for name, fn, details in per_prompt
    ]


def _add_standard_error(
    details: dict[str, Any], results: Sequence[PromptScores], se_all: np.ndarray
) -> None:
    """Add the standard error of the macro mean KL (:func:`_standard_error`) and of the
    pooled token mean, ``sqrt(sum_i se_i^2) / N`` over all ``N`` positions, to ``details``."""
    se_mean = _standard_error(results, list(range(len(results))))
    details[MeasurementDetail.KL_METHOD] = (
        f"{details[MeasurementDetail.KL_METHOD]}; standard error of the mean {se_mean:.2g} nats"
    )
    details["standard_error"] = se_mean
    details["token_mean_standard_error"] = float(np.sqrt((se_all**2).sum()) / max(se_all.size, 1))


def _add_interval(
    details: dict[str, Any], results: Sequence[PromptScores], ends_meet: np.ndarray, unbounded: int
) -> None:
    """Add a served candidate's interval of the macro mean KL to ``details``: the means of
    the lower and upper ends (the upper ``None`` where ``unbounded`` positions make it
    infinite), the positions where both ends meet (``ends_meet``) and the end gated."""
    lower_mean = float(np.mean([r.positions.kl_lower.mean() for r in results]))
    upper_mean = None if unbounded else float(np.mean([r.positions.kl.mean() for r in results]))
    details["interval"] = [lower_mean, upper_mean]
    details["interval_exact_positions"] = int(ends_meet.sum())
    details["interval_unbounded_positions"] = unbounded
    details["gated_end"] = "lower" if unbounded else "upper"
    details[MeasurementDetail.KL_METHOD] = (
        f"{details[MeasurementDetail.KL_METHOD]}; mean in "
        f"[{lower_mean:.4g}, {'unbounded' if upper_mean is None else format(upper_mean, '.4g')}]"
        " nats"
    )


def _kl_statistics(
    results: Sequence[PromptScores],
    groups: dict[str, list[int]],
    gated: str,
    kl_all: np.ndarray,
    bound_all: np.ndarray,
    kl_details: dict[str, Any],
) -> list[Measurement]:
    """The pooled KL distribution statistics (:data:`gate.metrics.fidelity.KL_PERCENTILES`
    and max) of the ``gated`` per-position values ``kl_all``, each with the bound's
    statistic in its details, the max with its worst prompt, and
    :data:`SLICED_POINT_STATS` broken down by slice ``groups``."""
    summary = fm.kl_summary(kl_all)
    bound_summary = fm.kl_summary(bound_all)
    slice_summaries = {
        key: fm.kl_summary(pooled(results, idx, gated)) for key, idx in groups.items()
    }
    worst = int(np.argmax([float(getattr(r.positions, gated).max()) for r in results]))
    out = []
    for stat in (*fm.KL_PERCENTILES, "max"):
        name = f"fidelity.kl_{stat}"
        details = dict(kl_details)
        details["bound"] = bound_summary[stat]
        if stat == "max":
            details["worst_prompt"] = results[worst].meta.id
        out.append(
            Measurement(
                name=name,
                value=summary[stat],
                breakdown={
                    key: Measurement(name=name, value=s[stat]) for key, s in slice_summaries.items()
                }
                if stat in SLICED_POINT_STATS
                else {},
                details=details,
            )
        )
    return out

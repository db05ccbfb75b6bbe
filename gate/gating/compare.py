"""Measurements x baseline x thresholds -> verdicts. Pure: no files, no models.

docs/metrics.md "Severity and statistics". For each candidate metric (and each of
its breakdown slices):

1. Reference ``r``: the baseline's own value; when the baseline has none and
   the metric has an ``ideal`` (CGA 1.0, KL 0.0, flips 0.0), the ideal.
   Neither -> PASS "no baseline value".
2. Degradation ``d = s * (value - r)`` with ``s = -1`` for higher-is-better
   metrics and ``+1`` otherwise, so ``d > 0`` is worse; in relative mode
   ``d / |r|``. The point severity is the highest bound ``d`` is past.
3. The point severity stands only if the one-sided test of "candidate worse"
   is significant at ``alpha``: McNemar's exact test (PAIRED_BINARY, items
   paired by ``sample_ids``), a paired bootstrap of the mean difference
   (PAIRED_SCORE), Mann-Whitney U over repeated runs (REPEATED), or Wilcoxon's
   signed-rank test on per-pair log ratios when the repeated runs were taken
   in pairs with an in-session baseline. Against an ideal, every item of the
   reference is the ideal value. For REPEATED metrics with relative bounds
   CRITICAL needs more: the runs must show the candidate worse by more than
   the *warn* bound (the baseline runs scaled by ``1 + warn``), so a median
   that wobbles past +10 % on a noisy runner while the runs only show "a
   little slower" is a WARN; WARN needs them to show it worse at all. With 20
   runs of 8 % spread a true +20 % is still CRITICAL in over 99 % of trials
   (tests/test_noise_promise.py). POINT metrics, and
   metrics lacking per-sample values on a side, are judged on the value alone;
   so are whole-metric comparisons with fewer than ``min_samples`` samples,
   which the reason says. A slice (``category:x``) with fewer than
   ``min_samples`` items is never escalated without significant evidence.

``Verdict.ci`` is the interval of ``delta`` in the units of the per-sample
values (tiers store ``value = mean(samples)``); for metrics whose samples are
logs of the value (``MetricSpec.log_samples``: perplexity from per-window NLL)
the interval ``[lo, hi]`` of the mean-log difference is mapped to the value's
unit, ``[r (e^lo - 1), r (e^hi - 1)]``; for REPEATED metrics it is the
bootstrap interval of the relative change of the median scaled by ``|r|``.

In-session reference (paired A/B runs). A REPEATED candidate measurement may
carry ``details["paired_reference"]`` (:data:`PAIRED_REFERENCE`)::

    {"against": "fp16", "value": 0.041, "samples": [0.040, 0.043, ...],
     "model": "demo", "recipe": null}

-- the baseline build timed in the same session, its runs alternated with the
candidate's (the latency tier's paired mode, for runners whose speed drifts).
When ``against`` is the ref being compared with (or absent), that value and
those samples are the reference ``r`` and the baseline side of the repeated-run
test instead of the stored baseline's: the stored timings were taken under
another state of the machine, the in-session ones under the same. Verdicts
then say ``(in-session baseline)`` and ``details["reference"] == "in-session"``.
Other refs, and non-REPEATED metrics, use their stored values as before.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from gate.errors import DataError
from gate.gating import stats
from gate.gating.thresholds import Bound, MetricThreshold, Thresholds
from gate.gating.verdict import Severity, Verdict
from gate.measurement import Measurement
from gate.metrics.registry import all_metrics, suggest
from gate.metrics.spec import MetricSpec, SampleKind

#: Bootstrap resamples used for verdict CIs and paired-bootstrap p-values.
N_RESAMPLES = 2000
#: Resamples for the CI of repeated runs (its p-value is Mann-Whitney's, not resampled).
N_RESAMPLES_REPEATED = 1000
#: ``Measurement.details`` key of an in-session baseline of a REPEATED metric (paired runs).
PAIRED_REFERENCE = "paired_reference"
#: Verdict detail set when a crossed bound was not escalated (value: the bound crossed).
NOT_SIGNIFICANT = "not_significant"


@dataclass(frozen=True)
class _Evidence:
    """Result of the statistical test for one comparison."""

    test: str
    p_worse: float
    ci: tuple[float, float]
    n: int
    n_text: str
    note: str = ""


@dataclass(frozen=True)
class _Reference:
    value: float
    measurement: Measurement | None  # None: the ideal stands in
    label: str
    #: In-session runs alternated with the candidate's: run ``i`` pairs with run ``i``.
    paired_runs: bool = False


def _index(
    measurements: Sequence[Measurement] | Mapping[str, Measurement], side: str
) -> dict[str, Measurement]:
    items = list(measurements.values()) if isinstance(measurements, Mapping) else list(measurements)
    out: dict[str, Measurement] = {}
    for m in items:
        if not isinstance(m, Measurement):
            raise DataError(
                f"{side}: expected measurements, got {type(m).__name__}",
                "pass gate.measurement.Measurement objects",
            )
        m.validate()
        if m.name in out:
            raise DataError(f"{side}: metric {m.name!r} appears twice", "keep one entry per metric")
        out[m.name] = m
    return out


def _in_session(cand: Measurement, spec: MetricSpec, against: str) -> _Reference | None:
    """The candidate's in-session baseline for ``against`` (see the module docstring), if any."""
    raw = cand.details.get(PAIRED_REFERENCE)
    if raw is None or spec.sample_kind is not SampleKind.REPEATED:
        return None
    hint = 'details["paired_reference"] needs a numeric "value" and a list of "samples"'
    if not isinstance(raw, Mapping):
        raise DataError(f"{cand.name}: malformed in-session baseline", hint)
    if raw.get("against") not in (None, against):
        return None
    try:
        value = float(raw["value"])
        samples = tuple(float(x) for x in raw["samples"])
    except (KeyError, TypeError, ValueError):
        raise DataError(f"{cand.name}: malformed in-session baseline", hint) from None
    reference = Measurement(cand.name, value, samples=samples or None)
    reference.validate()
    return _Reference(value, reference, f"{_fmt(value)} (in-session baseline)", paired_runs=True)


def _fmt(x: float) -> str:
    return f"{x:.4g}"


def _signed(x: float, relative: bool) -> str:
    return f"{x * 100:+.1f}%" if relative else f"{x:+.4g}"


def _pair(cand: Measurement, ref: _Reference) -> tuple[np.ndarray, np.ndarray, str] | str:
    """Aligned per-item arrays (candidate, reference), or why they cannot be paired."""
    assert cand.samples is not None
    c = np.asarray(cand.samples, dtype=np.float64)
    if ref.measurement is None:
        return c, np.full_like(c, ref.value), ""
    base = ref.measurement
    if not base.samples:
        return "baseline has no per-sample values"
    b = np.asarray(base.samples, dtype=np.float64)
    if cand.sample_ids is not None and base.sample_ids is not None:
        where = {sid: i for i, sid in enumerate(base.sample_ids)}
        ci_idx = [i for i, sid in enumerate(cand.sample_ids) if sid in where]
        if not ci_idx:
            return "no sample ids in common with the baseline"
        bi_idx = [where[cand.sample_ids[i]] for i in ci_idx]
        note = "" if len(ci_idx) == len(c) == len(b) else f"{len(ci_idx)} common items"
        return c[ci_idx], b[bi_idx], note
    if len(c) == len(b):
        return c, b, "paired by position"
    return "samples cannot be paired (no sample ids, different counts)"


def _repeated_evidence(
    cand: Measurement, ref: _Reference, spec: MetricSpec, n_resamples: int, margin: float
) -> _Evidence | str:
    """REPEATED runs: is the candidate worse than the reference by more than ``margin``?

    ``margin`` is relative (``0.1``: 10 % worse). Runs alternated with an
    in-session baseline are compared pair by pair (Wilcoxon signed-rank on log
    ratios); other runs, or pairs whose counts differ, by Mann-Whitney U.
    """
    assert cand.samples is not None
    if ref.measurement is None:
        return "no baseline runs"
    if not ref.measurement.samples:
        return "baseline has no per-run values"
    c, b = cand.samples, ref.measurement.samples
    paired = ref.paired_runs and len(c) == len(b)
    test = stats.paired_runs_test if paired else stats.repeated_runs_test
    try:
        rep = test(
            c,
            b,
            higher_is_better=spec.higher_is_better,
            margin=margin,
            n_resamples=min(n_resamples, N_RESAMPLES_REPEATED),
        )
    except ValueError as exc:
        return str(exc)
    scale = abs(ref.value)
    name = "Wilcoxon signed-rank (pairs)" if paired else "Mann-Whitney U"
    if margin > 0.0:
        worse = -margin if spec.higher_is_better else margin
        name += f" for {_signed(worse, True)}"
    return _Evidence(
        test=name,
        p_worse=rep.p_worse,
        ci=(rep.ci[0] * scale, rep.ci[1] * scale),
        n=min(rep.n_cand, rep.n_base),
        n_text=f"n={rep.n_cand}/{rep.n_base}",
    )


def _evidence(
    cand: Measurement, ref: _Reference, spec: MetricSpec, n_resamples: int, margin: float = 0.0
) -> _Evidence | str:
    """Run the test of ``spec.sample_kind``; a string says why there is none.

    ``margin`` (relative) only applies to REPEATED metrics, see
    :func:`_repeated_evidence`.
    """
    kind = spec.sample_kind
    if kind is SampleKind.POINT:
        return "point metric"
    if not cand.samples:
        return "no per-sample values"
    if kind is SampleKind.REPEATED:
        return _repeated_evidence(cand, ref, spec, n_resamples, margin)
    paired = _pair(cand, ref)
    if isinstance(paired, str):
        return paired
    c, b, note = paired
    if kind is SampleKind.PAIRED_BINARY:
        if not (np.all((c == 0) | (c == 1)) and np.all((b == 0) | (b == 1))):
            raise DataError(
                f"{spec.name}: per-sample values must be 0 or 1",
                "a paired-binary metric stores one 0/1 outcome per item",
            )
        mc = stats.mcnemar(c, b, higher_is_better=spec.higher_is_better)
        return _Evidence(
            test="McNemar exact",
            p_worse=mc.p_worse,
            ci=stats.paired_binary_ci(c, b, n_resamples=n_resamples),
            n=mc.n,
            n_text=f"n={mc.n}, b={mc.b}, c={mc.c}",
            note=note,
        )
    boot = stats.paired_bootstrap(
        c, b, higher_is_better=spec.higher_is_better, n_resamples=n_resamples
    )
    ci = boot.ci
    if spec.log_samples:  # mean-log difference x -> value difference r (e^x - 1)
        ci = (ref.value * math.expm1(ci[0]), ref.value * math.expm1(ci[1]))
    return _Evidence(
        test="paired bootstrap",
        p_worse=boot.p_worse,
        ci=ci,
        n=boot.n,
        n_text=f"n={boot.n}",
        note=note,
    )


def _reference_kind(ref: _Reference, in_session: _Reference | None) -> str:
    if in_session is not None:
        return "in-session"
    return "ideal" if ref.measurement is None else "baseline"


def _against_bounds(
    cand: Measurement,
    ref: _Reference,
    spec: MetricSpec,
    bound: Bound,
    point: Severity,
    alpha: float,
    n_resamples: int,
    fallback: _Evidence,
) -> tuple[_Evidence, Severity]:
    """REPEATED metrics: the highest level (up to ``point``) the runs support.

    CRITICAL needs the runs to show the candidate worse by more than the warn
    bound, WARN needs them to show it worse at all (the point value is past
    the level's own bound in both cases). Returns the first significant test
    and its level, else the last test tried and PASS.
    """
    levels = [(Severity.CRITICAL, bound.warn), (Severity.WARN, 0.0)]
    last = fallback
    for level, limit in levels:
        if level > point or limit < 0.0 or (spec.higher_is_better and limit >= 1.0):
            continue
        ev = _evidence(cand, ref, spec, n_resamples, margin=limit)
        if not isinstance(ev, _Evidence):
            return fallback, point if fallback.p_worse < alpha else Severity.PASS
        if ev.p_worse < alpha:
            return ev, level
        last = ev
    return last, Severity.PASS


def _judge(
    cand: Measurement,
    base: Measurement | None,
    spec: MetricSpec,
    threshold: MetricThreshold | None,
    thresholds: Thresholds,
    *,
    slice: str | None,
    against: str,
    n_resamples: int,
) -> Verdict:
    label = f"{spec.name}[{slice}]" if slice else spec.name
    verdict = Verdict(
        metric=spec.name,
        tier=spec.tier,
        severity=Severity.PASS,
        value=cand.value,
        baseline_value=None,
        delta=None,
        relative_delta=None,
        higher_is_better=spec.higher_is_better,
        n=cand.n,
        reason=f"{label} {_fmt(cand.value)}: no baseline value",
        against=against,
        slice=slice,
        unit=spec.unit,
        details=dict(cand.details),  # the candidate's extras reach the reports
    )
    in_session = _in_session(cand, spec, against)
    if in_session is not None:
        ref = in_session
    elif base is not None:
        ref = _Reference(base.value, base, _fmt(base.value))
    elif spec.ideal is not None:
        ref = _Reference(spec.ideal, None, f"{_fmt(spec.ideal)} (ideal)")
    else:
        return verdict
    delta = cand.value - ref.value
    rel = delta / abs(ref.value) if ref.value != 0.0 else None
    ev = _evidence(cand, ref, spec, n_resamples)
    evidence = ev if isinstance(ev, _Evidence) else None
    verdict = replace(
        verdict,
        baseline_value=ref.value,
        delta=delta,
        relative_delta=rel,
        n=evidence.n if evidence else cand.n,
        ci=evidence.ci if evidence else None,
        p_value=evidence.p_worse if evidence else None,
        test=evidence.test if evidence else None,
        details={**cand.details, "reference": _reference_kind(ref, in_session)},
    )
    head = f"{label} {_fmt(cand.value)} vs {ref.label}"
    if threshold is None:
        return replace(verdict, reason=f"{head}: {_signed(delta, False)}, not gated")
    bound = threshold.bound_for(slice)
    relative = bound.mode == "relative"
    point = bound.severity(
        bound.degradation(ref.value, cand.value, higher_is_better=spec.higher_is_better)
    )
    sign = -1.0 if spec.higher_is_better else 1.0
    shown = _signed(rel, True) if relative and rel is not None else _signed(delta, False)
    if point is Severity.PASS:
        text = f"{head}: {shown} within warn {_signed(sign * bound.warn, relative)}"
    else:
        which = "critical" if point is Severity.CRITICAL else "warn"
        limit = bound.critical if point is Severity.CRITICAL else bound.warn
        text = f"{head}: {shown} past {which} {_signed(sign * limit, relative)}"
        if relative and rel is None:
            text += " (relative change undefined at reference 0)"
    severity = point
    downgraded = False
    if evidence is not None:
        if point is not Severity.PASS and spec.sample_kind is SampleKind.REPEATED and relative:
            evidence, supported = _against_bounds(
                cand, ref, spec, bound, point, thresholds.alpha, n_resamples, evidence
            )
        elif point is Severity.PASS or evidence.p_worse < thresholds.alpha:
            supported = point
        else:
            supported = Severity.PASS
        test_text = f"{evidence.test} p={evidence.p_worse:.2g}, {evidence.n_text}"
        if evidence.note:
            test_text += f", {evidence.note}"
        if supported is point:
            text += f" ({test_text})"
        elif evidence.n < threshold.min_samples and slice is None:
            text += (
                f" ({test_text}; n < min_samples {threshold.min_samples}: "
                "judged on the point value)"
            )
        elif supported is not Severity.PASS:
            severity = supported
            text += f" but shown only past warn ({test_text})"
        else:
            # Not significant. A small slice (n < min_samples) is never judged on its
            # point value: one flipped answer in nine would block a build.
            severity = Severity.PASS
            downgraded = True
            text += f" but not significant ({test_text} >= alpha {thresholds.alpha:g})"
    elif point is not Severity.PASS:
        text += f" (judged on the point value: {ev})"
    threshold_info = {
        **bound.to_dict(),
        "alpha": thresholds.alpha,
        "min_samples": threshold.min_samples,
        "category_override": slice is not None and slice in threshold.categories,
    }
    details = dict(verdict.details)
    if downgraded:
        # The point value crossed a bound but the evidence did not support it:
        # reports show it as "pass (n.s.)" so a reader sees the near miss.
        details[NOT_SIGNIFICANT] = point.label
    return replace(
        verdict,
        severity=severity,
        reason=text,
        threshold=threshold_info,
        details=details,
        # REPEATED metrics may have been decided by a test against a bound (above)
        ci=evidence.ci if evidence else None,
        p_value=evidence.p_worse if evidence else None,
        test=evidence.test if evidence else None,
    )


def compare(
    candidate: Sequence[Measurement],
    baseline: Mapping[str, Measurement] | Sequence[Measurement],
    thresholds: Thresholds,
    *,
    against: str = "baseline",
    specs: Mapping[str, MetricSpec] | None = None,
    n_resamples: int = N_RESAMPLES,
) -> list[Verdict]:
    """One verdict per candidate metric, then one per breakdown slice, in input order.

    ``specs`` defaults to the metric registry; an unknown candidate metric is
    a :class:`DataError` with a "did you mean". Baseline metrics the candidate
    did not measure produce no verdict.
    """
    known = all_metrics() if specs is None else specs
    cands = _index(candidate, "candidate")
    bases = _index(baseline, f"baseline {against!r}")
    verdicts: list[Verdict] = []
    for name, cand in cands.items():
        if name not in known:
            raise DataError(f"unknown metric {name!r} in the candidate", suggest(name, list(known)))
        spec = known[name]
        threshold = thresholds.for_metric(name)
        base = bases.get(name)
        overall = _judge(
            cand,
            base,
            spec,
            threshold,
            thresholds,
            slice=None,
            against=against,
            n_resamples=n_resamples,
        )
        slices = {k: part.value for k, part in cand.breakdown.items()}
        verdicts.append(_with_breakdown(overall, slices))
        for slice_name, part in cand.breakdown.items():
            base_part = base.breakdown.get(slice_name) if base is not None else None
            verdicts.append(
                _judge(
                    part,
                    base_part,
                    spec,
                    threshold,
                    thresholds,
                    slice=slice_name,
                    against=against,
                    n_resamples=n_resamples,
                )
            )
    return verdicts


def _with_breakdown(verdict: Verdict, slices: dict[str, float]) -> Verdict:
    return replace(verdict, breakdown=slices) if slices else verdict


def compare_many(
    candidate: Sequence[Measurement],
    baselines: Mapping[str, Sequence[Measurement]],
    thresholds: Thresholds,
    *,
    specs: Mapping[str, MetricSpec] | None = None,
    n_resamples: int = N_RESAMPLES,
) -> list[Verdict]:
    """Compare against several baseline refs (``{"fp16": [...], "prod": [...]}``).

    Verdicts carry ``against=<ref>``; their order is ref by ref.
    """
    out: list[Verdict] = []
    for ref, measurements in baselines.items():
        out.extend(
            compare(
                candidate,
                measurements,
                thresholds,
                against=ref,
                specs=specs,
                n_resamples=n_resamples,
            )
        )
    return out

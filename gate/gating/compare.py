"""Measurements x baseline x thresholds -> verdicts. Pure: no files, no models.

docs/metrics.md "Severity and statistics". For each candidate metric (and each of
its breakdown slices):

1. Reference ``r``: the baseline's own value; when the baseline has none and
   the metric has an ``ideal`` (CGA 1.0, KL 0.0, flips 0.0), the ideal.
   Neither -> PASS "no baseline value".
2. Degradation ``d = s * (value - r)`` with ``s = -1`` for higher-is-better
   metrics and ``+1`` otherwise, so ``d > 0`` is worse; in relative mode
   ``d / |r|``. The point severity is the highest bound ``d`` is past. A
   two-sided metric (``MetricSpec.two_sided``) takes ``s`` from the way it
   moved (``d = |value - r|``) and doubles its test's p-value (:func:`facing`).
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

4. Power: beside a gated, tested verdict stands what its test could detect
   (``Verdict.power``, :mod:`gate.gating.detectable`): the MDE at ``alpha``,
   ``[gate] power``, the sample count and the observed spread, and whether the
   critical bound is below it (UNDERPOWERED; docs/metrics.md "Power"). It
   never changes the severity.

Candidate/baseline ratios measured in one session (``SampleKind.RATIO``, the
load tier) are decided by :func:`gate.gating.speedup.judge_ratio` against the
ideal ratio 1 and the tier's ``min_speedup``; their ``ci`` is the ratio's
interval minus 1.

Pairwise judge scores (``MetricSpec.elo_samples``: per-prompt centred scores,
value = Elo delta) are tested with the sign test on the prompts where the two
sides differ and their bootstrap interval is mapped to Elo points.

``Verdict.ci`` is the interval of ``delta`` in the units of the per-sample
values (tiers store ``value = mean(samples)``); for metrics whose samples are
logs of the value (``MetricSpec.log_samples``: perplexity from per-window NLL)
the interval ``[lo, hi]`` of the mean-log difference is mapped to the value's
unit, ``[r (e^lo - 1), r (e^hi - 1)]``; for REPEATED metrics it is the
bootstrap interval of the relative change of the median scaled by ``|r|``.

In-session reference (paired A/B runs). A REPEATED candidate measurement may
carry ``details["paired_reference"]`` (:attr:`MeasurementDetail.PAIRED_REFERENCE`)::

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

A paired (``PAIRED_BINARY``, ``PAIRED_SCORE``) measurement may carry the same
entry: the baseline's per-item values on the candidate's items, in the
candidate's order, computed in the session from what the baseline stored (the
generation tier: the baseline's answers in its reference pack). They are the
reference and the paired test's baseline side for ``against`` (items paired by
position), so a baseline recorded before the metric existed is compared on
its stored answers; POINT and RATIO metrics never use one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np

from gate.config import suggest
from gate.errors import DataError
from gate.gating import detectable, stats
from gate.gating.against import DEFAULT_AGAINST
from gate.gating.decision import (
    Basis,
    Decision,
    Evidence,
    Method,
    Pairing,
    Reference,
    Subject,
    describe,
    describe_test,
)
from gate.gating.power import PowerStatement
from gate.gating.speedup import judge_ratio
from gate.gating.thresholds import MetricThreshold, Thresholds
from gate.gating.verdict import (
    Bound,
    Severity,
    Unmeasured,
    Verdict,
    VerdictDetail,
    VerdictThreshold,
)
from gate.measurement import Measurement, MeasurementDetail
from gate.metrics.metric_spec import MetricSpec, SampleKind
from gate.metrics.registry import all_metrics

#: Bootstrap resamples used for verdict CIs and paired-bootstrap p-values.
N_RESAMPLES = 2000
#: Resamples for the CI of repeated runs (its p-value is Mann-Whitney's, not resampled).
N_RESAMPLES_REPEATED = 1000


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


#: The sample kinds an in-session reference may stand for.
_IN_SESSION_KINDS = (SampleKind.REPEATED, SampleKind.PAIRED_BINARY, SampleKind.PAIRED_SCORE)


def _in_session(cand: Measurement, spec: MetricSpec, against: str) -> Reference | None:
    """The candidate's in-session baseline for ``against`` (see the module docstring), if any."""
    raw = cand.details.get(MeasurementDetail.PAIRED_REFERENCE)
    if raw is None or spec.sample_kind not in _IN_SESSION_KINDS:
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
    return Reference(value, reference, "in-session")


def _reference(
    cand: Measurement, base: Measurement | None, spec: MetricSpec, against: str
) -> Reference | None:
    """The in-session baseline, else the stored baseline's value, else the metric's ideal."""
    in_session = _in_session(cand, spec, against)
    if in_session is not None:
        return in_session
    if base is not None:
        return Reference(base.value, base, "baseline")
    if spec.ideal is not None:
        return Reference(spec.ideal, None, "ideal")
    return None


def _pair(cand: Measurement, ref: Reference) -> tuple[np.ndarray, np.ndarray, Pairing] | str:
    """Aligned per-item arrays (candidate, reference), or why they cannot be paired."""
    assert cand.samples is not None
    c = np.asarray(cand.samples, dtype=np.float64)
    if ref.measurement is None:
        return c, np.full_like(c, ref.value), Pairing.ALIGNED
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
        aligned = len(ci_idx) == len(c) == len(b)
        return c[ci_idx], b[bi_idx], Pairing.ALIGNED if aligned else Pairing.COMMON_IDS
    if len(c) == len(b):
        return c, b, Pairing.BY_POSITION
    return "samples cannot be paired (no sample ids, different counts)"


def _repeated_evidence(
    cand: Measurement, ref: Reference, spec: MetricSpec, n_resamples: int, margin: float
) -> Evidence | str:
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
    return Evidence(
        method=Method.WILCOXON_PAIRS if paired else Method.MANN_WHITNEY,
        p_worse=rep.p_worse,
        ci=(rep.ci[0] * scale, rep.ci[1] * scale),
        n=min(rep.n_cand, rep.n_base),
        margin=max(margin, 0.0),
        runs=(rep.n_cand, rep.n_base),
    )


def _elo(p: float, n: int) -> float:
    """``-400 log10(1/p - 1)`` with ``p`` clamped to ``[1/(2n), 1 - 1/(2n)]`` (half a game)."""
    half = 1.0 / (2 * max(n, 1))
    q = min(max(p, half), 1.0 - half) if n > 1 else 0.5
    return -400.0 * math.log10(1.0 / q - 1.0)


def _elo_evidence(
    c: np.ndarray, b: np.ndarray, ci: tuple[float, float], ref: Reference, pairing: Pairing
) -> Evidence:
    """Pairwise scores (``MetricSpec.elo_samples``): the CI mapped to Elo, the sign test.

    The bootstrap interval ``[lo, hi]`` of the centred-score difference becomes
    ``[D(1/2 + mean(b) + lo) - r, D(1/2 + mean(b) + hi) - r]``. "Worse" is the sign
    test on the prompts where the two sides differ (McNemar's exact test, ties
    concordant): ``p_worse = P[Binom(w + l, 1/2) >= l]`` with ``l`` prompts the
    candidate scored lower on. Unlike a bootstrap, it does not call three lost
    prompts out of three significant.
    """
    centre = 0.5 + float(np.mean(b))
    mapped = (_elo(centre + ci[0], len(c)) - ref.value, _elo(centre + ci[1], len(c)) - ref.value)
    lower = c < b
    higher = c > b
    sign = stats.mcnemar(~lower, ~higher)
    return Evidence(
        method=Method.MCNEMAR,
        p_worse=sign.p_worse,
        ci=mapped,
        n=int(c.size),
        pairing=pairing,
        discordant=(sign.b, sign.c),
    )


def _evidence(
    cand: Measurement, ref: Reference, spec: MetricSpec, n_resamples: int, margin: float = 0.0
) -> Evidence | str:
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
    c, b, pairing = paired
    if kind is SampleKind.PAIRED_BINARY:
        if not (np.all((c == 0) | (c == 1)) and np.all((b == 0) | (b == 1))):
            raise DataError(
                f"{spec.name}: per-sample values must be 0 or 1",
                "a paired-binary metric stores one 0/1 outcome per item",
            )
        mc = stats.mcnemar(c, b, higher_is_better=spec.higher_is_better)
        return Evidence(
            method=Method.MCNEMAR,
            p_worse=mc.p_worse,
            ci=stats.paired_binary_ci(c, b, n_resamples=n_resamples),
            n=mc.n,
            pairing=pairing,
            discordant=(mc.b, mc.c),
        )
    boot = stats.paired_bootstrap(
        c, b, higher_is_better=spec.higher_is_better, n_resamples=n_resamples
    )
    ci = boot.ci
    if spec.log_samples:  # mean-log difference x -> value difference r (e^x - 1)
        ci = (ref.value * math.expm1(ci[0]), ref.value * math.expm1(ci[1]))
    if spec.elo_samples:
        return _elo_evidence(c, b, ci, ref, pairing)
    return Evidence(
        method=Method.PAIRED_BOOTSTRAP, p_worse=boot.p_worse, ci=ci, n=boot.n, pairing=pairing
    )


def _against_bounds(
    cand: Measurement,
    ref: Reference,
    spec: MetricSpec,
    bound: Bound,
    point: Severity,
    alpha: float,
    n_resamples: int,
    fallback: Evidence,
) -> tuple[Evidence, Severity]:
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
        if not isinstance(ev, Evidence):
            return fallback, point if fallback.p_worse < alpha else Severity.PASS
        if ev.p_worse < alpha:
            return ev, level
        last = ev
    return last, Severity.PASS


def _weigh(
    cand: Measurement,
    ref: Reference,
    spec: MetricSpec,
    threshold: VerdictThreshold,
    point: Severity,
    evidence: Evidence,
    *,
    whole_metric: bool,
    n_resamples: int,
) -> tuple[Evidence, Severity, Basis]:
    """The severity the evidence supports, the test that says so, and how it was reached.

    A crossed bound stands when the test is significant at ``alpha``; REPEATED
    metrics with relative bounds are tested against the bounds themselves
    (:func:`_against_bounds`). Without support, a whole metric with fewer than
    ``min_samples`` samples keeps its point severity; anything else, a small
    slice included (one flipped answer in nine would block a build), passes.
    """
    alpha = threshold.alpha
    relative = threshold.bound.mode == "relative"
    if point is not Severity.PASS and spec.sample_kind is SampleKind.REPEATED and relative:
        evidence, supported = _against_bounds(
            cand, ref, spec, threshold.bound, point, alpha, n_resamples, evidence
        )
    elif point is Severity.PASS or evidence.p_worse < alpha:
        supported = point
    else:
        supported = Severity.PASS
    if supported is point:
        return evidence, point, Basis.SUPPORTED
    if evidence.n < threshold.min_samples and whole_metric:
        return evidence, point, Basis.FEW_SAMPLES
    if supported is not Severity.PASS:
        return evidence, supported, Basis.WARN_ONLY
    return evidence, Severity.PASS, Basis.NOT_SIGNIFICANT


def facing(spec: MetricSpec, value: float, reference: float) -> MetricSpec:
    """``spec`` as it is judged against ``reference``: a two-sided metric
    (:attr:`MetricSpec.two_sided`) faces the way ``value`` moved (below the reference,
    lower is worse), any other is itself."""
    if not spec.two_sided or value == reference:
        return spec
    return replace(spec, higher_is_better=value < reference)


def judge_metric(
    cand: Measurement,
    base: Measurement | None,
    spec: MetricSpec,
    threshold: MetricThreshold | None,
    thresholds: Thresholds,
    *,
    slice: str | None = None,
    against: str = DEFAULT_AGAINST,
    n_resamples: int = N_RESAMPLES,
) -> Decision:
    """Judge one metric (or one ``slice`` of it) against one reference; see the module docstring."""
    if spec.sample_kind is SampleKind.RATIO:  # measured against the baseline in session
        return judge_ratio(cand, spec, slice=slice)
    ref = _reference(cand, base, spec, against)
    if ref is not None:
        spec = facing(spec, cand.value, ref.value)
    subject = Subject(spec.name, slice, cand.value, spec.higher_is_better)
    if ref is None:
        return Decision.passed_ungated(subject, None, basis=Basis.NO_REFERENCE, n=cand.n)
    first = _evidence(cand, ref, spec, n_resamples)
    if spec.two_sided and isinstance(first, Evidence):  # either way: two tests, Bonferroni
        first = replace(first, p_worse=min(1.0, 2.0 * first.p_worse))
    evidence = first if isinstance(first, Evidence) else None
    untested = first if isinstance(first, str) else ""
    decision = Decision.passed_ungated(
        subject, ref,
        basis=Basis.NOT_GATED, n=evidence.n if evidence else cand.n,
        evidence=evidence, untested=untested,
    )  # fmt: skip
    if threshold is None:
        return decision
    bound = threshold.bound_for(slice)
    applied = VerdictThreshold(
        bound=bound,
        alpha=thresholds.alpha,
        min_samples=threshold.min_samples,
        category_override=slice is not None and slice in threshold.categories,
    )
    point = bound.severity(
        bound.degradation(ref.value, cand.value, higher_is_better=spec.higher_is_better)
    )
    if evidence is None:
        return replace(
            decision, threshold=applied, point=point, severity=point, basis=Basis.POINT_VALUE
        )
    evidence, severity, basis = _weigh(
        cand,
        ref,
        spec,
        applied,
        point,
        evidence,
        whole_metric=slice is None,
        n_resamples=n_resamples,
    )
    return replace(
        decision,
        threshold=applied,
        point=point,
        severity=severity,
        basis=basis,
        evidence=evidence,
        power=_power(cand, ref, spec, evidence, bound, thresholds, slice, against),
    )


def _power(
    cand: Measurement,
    ref: Reference,
    spec: MetricSpec,
    evidence: Evidence,
    bound: Bound,
    thresholds: Thresholds,
    slice: str | None,
    against: str,
) -> PowerStatement | None:
    """The MDE of the test that decided, beside the critical bound (:mod:`gate.gating.detectable`)."""
    if spec.sample_kind is SampleKind.REPEATED:
        if cand.samples is None or ref.measurement is None or not ref.measurement.samples:
            return None
        c = np.asarray(cand.samples, dtype=np.float64)
        b = np.asarray(ref.measurement.samples, dtype=np.float64)
    else:
        paired = _pair(cand, ref)
        if isinstance(paired, str):
            return None
        c, b, _ = paired
    return detectable.statement(
        detectable.Tested(c, b, spec, evidence, bound, ref.value),
        slice=slice,
        against=against,
        alpha=thresholds.alpha,
        power=thresholds.power,
    )


def to_verdict(decision: Decision, cand: Measurement, spec: MetricSpec, against: str) -> Verdict:
    """The verdict of a decision: its numbers, the reason (:func:`describe`) and details.

    ``details`` are the candidate's own, plus :attr:`VerdictDetail.REFERENCE`
    once there is a reference and :attr:`VerdictDetail.NOT_SIGNIFICANT` when a
    crossed bound was not escalated (reports show it as ``PASS (n.s.)``).
    """
    details = dict(cand.details)  # the candidate's extras reach the reports
    ref = decision.reference
    if ref is not None:
        spec = facing(spec, cand.value, ref.value)
    if ref is not None:
        details[VerdictDetail.REFERENCE] = ref.kind
    if decision.basis is Basis.NOT_SIGNIFICANT:
        details[VerdictDetail.NOT_SIGNIFICANT] = decision.point.label
    evidence = decision.evidence
    ci = evidence.ci if evidence else None
    interval = (
        cand.details.get(MeasurementDetail.RATIO_CI)
        if spec.sample_kind is SampleKind.RATIO
        else None
    )
    if interval is not None:  # the ratio's interval as a change from 1
        low, high = interval
        ci = (float(low) - 1.0, float(high) - 1.0)
    return Verdict(
        **decision.assessed(),
        tier=spec.tier,
        baseline_value=None if ref is None else ref.value,
        delta=decision.delta,
        relative_delta=decision.relative_delta,
        reason=describe(decision),
        against=against,
        unit=spec.unit,
        ci=ci,
        p_value=evidence.p_worse if evidence else None,
        test=describe_test(evidence, higher_is_better=spec.higher_is_better) if evidence else None,
        details=details,
        power=decision.power,
    )


def compare_measurements(
    candidate: Sequence[Measurement],
    baseline: Mapping[str, Measurement] | Sequence[Measurement],
    thresholds: Thresholds,
    *,
    against: str = DEFAULT_AGAINST,
    specs: Mapping[str, MetricSpec] | None = None,
    n_resamples: int = N_RESAMPLES,
) -> list[Verdict]:
    """One verdict per candidate metric, then one per breakdown slice, in input order.

    ``specs`` defaults to the metric registry; an unknown candidate metric is
    a :class:`DataError` with a "did you mean". Baseline metrics the candidate
    did not measure produce no verdict; :func:`unmeasured` lists them.
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
        decision = judge_metric(
            cand, base, spec, threshold, thresholds, against=against, n_resamples=n_resamples
        )
        overall = to_verdict(decision, cand, spec, against)
        slices = {k: part.value for k, part in cand.breakdown.items()}
        verdicts.append(_with_breakdown(overall, slices))
        for slice_name, part in cand.breakdown.items():
            base_part = base.breakdown.get(slice_name) if base is not None else None
            decision = judge_metric(
                part,
                base_part,
                spec,
                threshold,
                thresholds,
                slice=slice_name,
                against=against,
                n_resamples=n_resamples,
            )
            verdicts.append(to_verdict(decision, part, spec, against))
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
            compare_measurements(
                candidate,
                measurements,
                thresholds,
                against=ref,
                specs=specs,
                n_resamples=n_resamples,
            )
        )
    return out


def unmeasured(
    candidate: Sequence[Measurement],
    baselines: Mapping[str, Sequence[Measurement]],
    tiers: Sequence[str] | None = None,
    *,
    specs: Mapping[str, MetricSpec] | None = None,
) -> list[Unmeasured]:
    """Baseline metrics the candidate did not measure, ref by ref (they get no verdict).

    ``tiers`` limits them to the tiers that ran (``None``: the tiers of the
    candidate's own metrics), so ``--tiers fidelity`` against a baseline that
    also holds accuracy does not list every accuracy metric. A metric the
    registry does not know keeps its name prefix as its tier.
    """
    known = all_metrics() if specs is None else specs
    measured = {m.name for m in candidate}
    ran = set(tiers) if tiers is not None else {_tier(m.name, known) for m in candidate}
    out: list[Unmeasured] = []
    for ref, measurements in baselines.items():
        for base in measurements:
            if base.name not in measured and _tier(base.name, known) in ran:
                out.append(Unmeasured(base.name, ref))
    return out


def _tier(name: str, known: Mapping[str, MetricSpec]) -> str:
    spec = known.get(name)
    return spec.tier if spec is not None else name.split(".", 1)[0]

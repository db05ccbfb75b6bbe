"""A served candidate's KL: the interval of the estimate over the tokens it did not return.

A served build returns log-probs for its own top-K tokens only, so its rows are
rebuilt (``exact_full_rows = False``) and its log-prob at a pack's sampled tail
token outside that answer is unknown. A backend that says which tokens it
returned (the served parser's ``returned``/``unreturned_bound``) gets the
interval of :func:`gate.metrics.fidelity.sampled_tail_kl_interval`, checked here
against the demo model in process cut to a top-K answer (its exact rows are one
of the rows consistent with that answer, so its estimate must lie inside), and
against a brute-force search. One that does not say so gets the top-k +
tail-bucket bound the in-process run reports beside its estimate.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gate.engines.scores import scores_from_positions
from gate.measurement import MeasurementDetail
from gate.models.backends.hf import HFBackend
from gate.store.baseline import load_baseline_file
from gate.store.reference import load_pack
from gate.tiers import fidelity
from gate.tiers.registry import build_settings

BASELINE = Path(__file__).resolve().parents[1] / "gate" / "assets" / "baselines" / "demo"


class RebuiltRows:
    """The in-process backend, declared as a served one (rows not exact beyond a top-k)."""

    exact_full_rows = False

    def __init__(self, inner: HFBackend) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_served_candidate_gets_the_bound(demo_backend: HFBackend) -> None:
    stored = load_baseline_file(BASELINE / "0001-fp32.json")
    recorded = build_settings("fidelity", stored.provenance.tier_settings["fidelity"])
    settings = replace(recorded, limit=4)
    pack = load_pack(BASELINE / "0001-fp32.reference.safetensors")
    assert pack.m > 0  # the pack has a sampled tail
    prompts = fidelity.load_prompts(recorded)
    local = {m.name: m for m in fidelity.measure(demo_backend, pack, settings, prompts=prompts)}
    served = {
        m.name: m
        for m in fidelity.measure(RebuiltRows(demo_backend), pack, settings, prompts=prompts)
    }
    method = served["fidelity.kl_mean"].details[MeasurementDetail.KL_METHOD]
    assert "lower bound" in method and "estimate" not in method
    assert "estimate" in local["fidelity.kl_mean"].details[MeasurementDetail.KL_METHOD]
    assert served["fidelity.kl_mean"].value == pytest.approx(
        local["fidelity.kl_bound_mean"].value, rel=1e-9, abs=1e-12
    )
    assert served["fidelity.cga"].value == local["fidelity.cga"].value


# ------------------------------------------------- the served KL as an interval


class ServedTopK:
    """The in-process backend answering as a server that returns its top ``k`` log-probs
    and the target per position: its exact rows cut to that answer and parsed by the
    served backend's own parser (``scores_from_positions``)."""

    exact_full_rows = False

    def __init__(self, inner: Any, k: int) -> None:
        self.inner, self.k = inner, k

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def score(
        self, requests: Any, *, top_k: int = 32, full: bool = False, batch_size: int = 8
    ) -> Any:
        out = []
        for request, s in zip(
            requests,
            self.inner.score(requests, top_k=top_k, full=True, batch_size=batch_size),
            strict=True,
        ):
            rows = np.asarray(s.full_logprobs, dtype=np.float32)
            positions = []
            for row, y in zip(rows, request.continuation, strict=True):
                top = np.argsort(-row, kind="stable")[: self.k]
                positions.append([(int(t), float(row[t])) for t in {*top.tolist(), int(y)}])
            out.append(
                scores_from_positions(
                    positions,
                    request.continuation,
                    top_k=top_k,
                    vocab_size=rows.shape[1],
                    full=full,
                    asked=self.k,
                )
            )
        return out


def _vocab() -> int:
    from gate.models.model_spec import demo_model_dir

    return int(json.loads((demo_model_dir() / "config.json").read_text())["vocab_size"])


def _by_name(measured: Any) -> dict[str, Any]:
    return {m.name: m for m in measured}


@pytest.fixture(scope="module")
def setup(demo_backend: HFBackend) -> tuple[Any, Any, Any]:
    stored = load_baseline_file(BASELINE / "0001-fp32.json")
    recorded = build_settings("fidelity", stored.provenance.tier_settings["fidelity"])
    pack = load_pack(BASELINE / "0001-fp32.reference.safetensors")
    return replace(recorded, limit=3), pack, fidelity.load_prompts(recorded)


def _scores(backend: Any, pack: Any, settings: Any) -> list[Any]:
    return fidelity.score_pack(backend, pack, settings)


def test_interval_holds_the_in_process_estimate_and_closes_when_all_is_returned(
    demo_backend: HFBackend, setup: Any
) -> None:
    settings, pack, _ = setup
    local = _scores(demo_backend, pack, settings)
    vocab = _vocab()
    widths = []
    for k in (64, 1024, vocab):
        served = _scores(ServedTopK(demo_backend, k), pack, settings)
        for a, b in zip(local, served, strict=True):
            assert b.interval and not a.interval
            est, low, high = a.positions.kl, b.positions.kl_lower, b.positions.kl
            # the in-process rows are one of the rows consistent with the served answer (up
            # to float32 rounding: a rebuilt row's tail mass is summed from other terms)
            assert (low <= est * (1 + 1e-5) + 2e-6).all()
            assert (est <= high * (1 + 1e-5) + 2e-6).all()
            assert (low <= high).all()
        widths.append(np.mean([(b.positions.kl - b.positions.kl_lower).mean() for b in served]))
        if k == vocab:  # the whole vocabulary returned: the interval is the estimate itself
            for a, b in zip(local, served, strict=True):
                np.testing.assert_allclose(b.positions.kl_lower, b.positions.kl, rtol=0, atol=0)
                np.testing.assert_allclose(b.positions.kl, a.positions.kl, rtol=1e-6, atol=1e-9)
    assert widths[0] > 1.0  # at K = 64 sampled tail tokens fall outside: unbounded above
    assert widths[-1] == 0.0


def test_lower_end_by_brute_force_on_one_position() -> None:
    """The lower end is the smallest estimate over the unreturned tokens' allowed values:
    a grid search over them (each in (-inf, b]) never goes below it and comes within the
    grid step of it."""
    from gate.metrics import fidelity as fm

    rng = np.random.default_rng(3)
    lb = np.log(np.array([[0.5, 0.2, 0.1]]))
    tb = np.log(np.array([0.2]))
    lc = np.log(np.array([[0.45, 0.25, 0.08]]))
    tc = np.log(np.array([0.22]))
    sb = np.log(np.array([[0.03, 0.01, 0.002, 0.02]]))
    sc = np.log(np.array([[0.04, 0.009, 0.5, 0.01]]))  # the third is not returned (ignored)
    known_v = np.array([[True, True, False, True]])
    known_s = np.array([[True, True, True]])
    b = np.log(np.array([0.001]))
    low, high = fm.sampled_tail_kl_interval(
        lb, tb, lc, tc, sb, sc, fm.ServedCoverage(topk_known=known_s, sample_known=known_v, bound=b)
    )
    assert np.isinf(high[0])
    grid = np.linspace(-30.0, float(b[0]), 4001)
    values = []
    for g in grid:
        filled = sc.copy()
        filled[0, 2] = g
        est, _ = fm.sampled_tail_kl(lb, tb, lc, tc, sb, filled)
        values.append(est[0])
    assert min(values) >= low[0] - 1e-12
    assert min(values) - low[0] < 1e-6
    # returned: the interval is the estimate
    filled = sc.copy()
    filled[0, 2] = float(rng.uniform(-12, b[0]))
    est, _ = fm.sampled_tail_kl(lb, tb, lc, tc, sb, filled)
    lo2, hi2 = fm.sampled_tail_kl_interval(
        lb,
        tb,
        lc,
        tc,
        sb,
        filled,
        fm.ServedCoverage(topk_known=known_s, sample_known=np.ones_like(known_v), bound=b),
    )
    assert lo2[0] == hi2[0] == est[0]


def test_served_interval_reports_both_ends_and_flags_a_damaged_build(
    demo_backend: HFBackend, setup: Any
) -> None:
    from gate.models.backends.loading import load_backend
    from gate.models.model_spec import ModelSpec

    settings, pack, prompts = setup
    vocab = _vocab()
    control = _by_name(
        fidelity.measure(ServedTopK(demo_backend, vocab), pack, settings, prompts=prompts)
    )
    damaged_backend = load_backend(ModelSpec.parse("demo"), "quanto-int2")
    damaged = _by_name(
        fidelity.measure(ServedTopK(damaged_backend, vocab), pack, settings, prompts=prompts)
    )
    local_damaged = _by_name(fidelity.measure(damaged_backend, pack, settings, prompts=prompts))
    for measured in (control, damaged):
        details = measured["fidelity.kl_mean"].details
        assert details["kl_kind"] == "interval"
        assert "interval of the estimate" in details[MeasurementDetail.KL_METHOD]
        low, high = details["interval"]
        assert low == pytest.approx(high) == pytest.approx(measured["fidelity.kl_mean"].value)
        assert details["gated_end"] == "upper"
    # the whole vocabulary returned: the served damaged build's KL is its in-process estimate
    assert damaged["fidelity.kl_mean"].value == pytest.approx(
        local_damaged["fidelity.kl_mean"].value, rel=1e-5
    )
    assert damaged["fidelity.kl_mean"].value > 20 * control["fidelity.kl_mean"].value
    narrow = _by_name(
        fidelity.measure(ServedTopK(damaged_backend, 64), pack, settings, prompts=prompts)
    )
    details = narrow["fidelity.kl_mean"].details
    low, high = details["interval"]
    # from the top 64, sampled tail tokens fall outside the answer: unbounded above, so the
    # value is the lower end, which the in-process estimate does not go below
    assert high is None and details["gated_end"] == "lower"
    assert details["interval_unbounded_positions"] > 0
    assert narrow["fidelity.kl_mean"].value == pytest.approx(low)
    assert low <= local_damaged["fidelity.kl_mean"].value
    assert "unbounded above" in details[MeasurementDetail.KL_METHOD]
    assert details["capped_positions"] == 0  # unbounded is not capped

"""A served candidate's KL is the top-k + tail-bucket bound, not an estimate from guessed tails.

A served build returns log-probs for its own top tokens only, so its rows are
rebuilt (``exact_full_rows = False``) and its log-prob at a pack's sampled
tail token is a guess. The demo model in process, wrapped to say so, must get
exactly the bound the in-process run reports beside its estimate.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

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

"""A reference pack recorded from a served baseline: exact top-k, no invented tail.

The tiny model behind the fake OpenAI server (tests/fakes; its answers are the
real model's) is recorded through the HTTP backend and, beside it, in
process. The served pack must hold the same outputs, top-k and tail masses,
no sampled tail, and say why; a candidate's KL against it is the top-k +
tail-bucket bound, labelled so, equal to the bound the in-process pack gives,
and still reports a damaged candidate. The real vLLM server records one in
tests/test_engine_replicas.py.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gate.engines.client import EndpointSettings
from gate.engines.http import HTTPBackend
from gate.measurement import MeasurementDetail
from gate.models.backends.hf import HFBackend
from gate.models.backends.loading import load_backend
from gate.models.model_spec import ModelSpec
from gate.store.reference import PackLayout, PackOrigin, load_pack, write_pack
from gate.tiers import fidelity
from gate.tiers.registry import build_settings
from tests.conftest import make_tiny_llama
from tests.fakes.openai_server import FakeOpenAIServer


def test_served_pack_is_exact_in_its_top_k_and_says_it_has_no_tail(
    local: HFBackend, tiny_model_dir: Path, tmp_path: Path
) -> None:
    settings = build_settings("fidelity", {"limit": 4, "max_new_tokens": 12})
    prompts = fidelity.load_prompts(settings)
    in_process = load_pack(fidelity.record(local, prompts, settings, tmp_path / "local.st"))
    with FakeOpenAIServer(local) as server:
        served = HTTPBackend(EndpointSettings(server.url), ModelSpec.parse(str(tiny_model_dir)))
        served_pack = load_pack(fidelity.record(served, prompts, settings, tmp_path / "served.st"))
    assert in_process.m == settings.tail_samples and in_process.no_tail_samples is None
    assert served_pack.m == 0 and served_pack.kl_kind == "bound"
    assert served_pack.no_tail_samples == fidelity.NO_TAIL_SERVED
    assert served_pack.recording_summary().no_tail_samples == fidelity.NO_TAIL_SERVED
    facts = fidelity.recording_provenance(served_pack)
    assert facts["fidelity_no_tail_samples"] == fidelity.NO_TAIL_SERVED
    assert facts["fidelity_pack"] == "v3, k=32, m=0"
    for j in range(len(in_process)):
        np.testing.assert_array_equal(served_pack.output_ids(j), in_process.output_ids(j))
        ids, lps, tail = served_pack.topk(j)
        want_ids, want_lps, want_tail = in_process.topk(j)
        np.testing.assert_array_equal(ids, want_ids)
        np.testing.assert_allclose(lps, want_lps, atol=1e-5)
        np.testing.assert_allclose(tail, want_tail, atol=1e-4)

    # the same model in process against the served pack: the bound, labelled with the reason
    same = {m.name: m for m in fidelity.measure(local, served_pack, settings, prompts=prompts)}
    method = same["fidelity.kl_mean"].details[MeasurementDetail.KL_METHOD]
    assert same["fidelity.kl_mean"].details["kl_kind"] == "bound"
    assert "lower bound" in method and "baseline was served" in method
    assert same["fidelity.cga"].value == 1.0 and same["fidelity.kl_mean"].value < 1e-6

    # another model: the KL against the served pack is the bound the in-process pack gives
    other = load_backend(
        ModelSpec.parse(str(make_tiny_llama(tmp_path / "other", seed=1)), dtype="float32")
    )
    # a fresh model's tokenizer is trained the same way: same ids, so it can be compared
    against_served = {
        m.name: m for m in fidelity.measure(other, served_pack, settings, prompts=prompts)
    }
    against_local = {
        m.name: m for m in fidelity.measure(other, in_process, settings, prompts=prompts)
    }
    bound = against_local["fidelity.kl_bound_mean"].value
    assert against_served["fidelity.kl_mean"].value == pytest.approx(bound, rel=1e-4)
    # a different (random, near-uniform) model: measurably away from the baseline
    assert against_served["fidelity.kl_mean"].value > 1e-3
    assert against_served["fidelity.cga"].value < 0.9


def test_a_pack_cannot_claim_no_tail_with_samples(local: HFBackend, tmp_path: Path) -> None:
    from gate.errors import DataError
    from gate.store.reference import PackEntry

    settings = build_settings("fidelity", {"limit": 1, "max_new_tokens": 4})
    prompts = fidelity.load_prompts(settings)
    pack = load_pack(fidelity.record(local, prompts, settings, tmp_path / "p.st"))
    assert pack.m > 0
    entry = PackEntry(
        pack.prompts[0], pack.prompt_ids(0), pack.output_ids(0), *pack.topk(0), *pack.samples(0)
    )
    with pytest.raises(DataError, match="cannot say it has none"):
        write_pack(
            tmp_path / "bad.st",
            [entry],
            PackLayout(k=pack.k, max_new_tokens=4, m=pack.m, no_tail_samples="why"),
            PackOrigin(tokenizer_sha256=None, prompt_set_sha256=None),
        )

"""Replicas of the demo model on real vLLM servers (CPU build), and a baseline recorded from one.

Marked ``engine``. The session's float32 server (``served`` in
tests/conftest.py) is one replica; the test starts ONE more float32 server for
both replica checks. Figures are printed (run with ``-s``).

* two replicas give the fidelity results one replica gives (same CGA per
  prompt, KL within float32 noise), the requests spread over both;
* the second replica killed (SIGKILL) mid-run: the run completes on the first
  with one warning, and its results are still the one replica's; the killed
  server on its own ends a load run with one line (exit 3), and nothing of its
  process group is left;
* ``gate baseline record --model demo --endpoint <served>`` records a baseline
  and reference pack from the served build; the pack holds no sampled tail and
  says so; the in-process demo build gated against it passes.
"""

from __future__ import annotations

import json
import os
import signal
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gate.engines.http import HTTPBackend
from gate.engines.opening import open_engine
from gate.engines.replicas import ReplicaBackend
from gate.engines.serve import group_members
from gate.engines.settings import EngineSettings
from gate.errors import ExitCode, ModelLoadError
from gate.measurement import Measurement, MeasurementDetail
from gate.models.model_spec import ModelSpec
from gate.store.reference import load_pack
from gate.tiers import fidelity
from tests.cli_support import run_gate
from tests.engine_support import (
    DEMO_BASELINE,
    api_server_pid,
    demo_fidelity_settings,
    engine_env,
    engine_python,
    vllm_command,
)

pytestmark = [pytest.mark.engine, pytest.mark.slow]

#: Prompts of the demo pack scored per run (an eighth of it: the replicas are the point).
PROMPTS = 12


def _figures(name: str, **values: Any) -> None:
    print(f"\n[engine figures] {name}: {json.dumps(values, default=float)}")


def _measure(backend: Any) -> dict[str, Measurement]:
    settings = replace(demo_fidelity_settings(), limit=PROMPTS)
    pack = load_pack(DEMO_BASELINE / "0001-fp32.reference.safetensors")
    prompts = fidelity.load_prompts(demo_fidelity_settings())
    return {m.name: m for m in fidelity.measure(backend, pack, settings, prompts=prompts)}


def test_two_replicas_equal_one_and_survive_a_killed_replica(
    served: HTTPBackend, engine_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    one = _measure(served)
    engine = EngineSettings(
        serve=vllm_command(engine_python(), "--dtype", "float32"),
        max_concurrency=served.settings.max_concurrency,
        startup_timeout_s=1800,
        request_timeout_s=600,
    )
    warnings: list[str] = []
    with open_engine(
        ModelSpec.parse("demo"), engine, log_dir=tmp_path, env=engine_env(engine_cache)
    ) as extra:
        assert isinstance(extra, HTTPBackend)
        both = ReplicaBackend([served, extra], warn=warnings.append)
        both.connect()  # the same build: same model, engine version, dtype, limits
        two = _measure(both)
        # the next run: the second replica's API server is SIGKILLed as it is sent its
        # third request (the others' requests in flight on both replicas)
        pid, sent = api_server_pid(extra), []
        score_one = extra.score_one

        async def killing(client: Any, request: Any, *, top_k: int, full: bool) -> Any:
            sent.append(1)
            if len(sent) == 3:
                os.kill(pid, signal.SIGKILL)
            return await score_one(client, request, top_k=top_k, full=full)

        monkeypatch.setattr(extra, "score_one", killing)
        pgid = os.getpgid(pid)
        assert len(group_members(pgid)) >= 2  # the API server and its engine core
        survived = _measure(both)
        # the dead server on its own, as a single-server run meets it: a load run (the
        # latency tier's) ends in one line naming the signal, exit 3
        prompt = extra.encode_prompt("Tell me a long story about a dragon.")
        with pytest.raises(ModelLoadError) as info:
            extra.stream_timings([prompt] * 4, new_tokens=64, max_concurrency=2)
    line = info.value.format_line()
    assert info.value.exit_code == ExitCode.INTERNAL_ERROR and "\n" not in line
    assert "killed by signal 9" in line
    assert group_members(pgid) == []  # nothing of the killed server's group is left
    assert (tmp_path / "server.log").stat().st_size > 0
    cga = [m.samples for m in (one["fidelity.cga"], two["fidelity.cga"], survived["fidelity.cga"])]
    kl = [one["fidelity.kl_mean"], two["fidelity.kl_mean"], survived["fidelity.kl_mean"]]
    _figures(
        "replicas",
        cga_one_two_killed=[
            one["fidelity.cga"].value,
            two["fidelity.cga"].value,
            survived["fidelity.cga"].value,
        ],
        kl_mean_one_two_killed=[m.value for m in kl],
        kl_samples_max_abs_diff_two=float(
            np.max(np.abs(np.subtract(kl[1].samples, kl[0].samples)))
        ),
        warnings=warnings,
        dropped=both.dropped,
        killed_alone=line,
    )
    assert cga[0] == cga[1] == cga[2]  # per prompt
    for other in kl[1:]:
        np.testing.assert_allclose(other.samples, kl[0].samples, atol=1e-7)
    assert len(warnings) == 1 and "replica 2" in warnings[0] and "dropped" in warnings[0]
    assert "killed by signal 9" in warnings[0]
    assert list(both.dropped) == [1]
    entries = both.provenance().to_document()["replicas"]
    assert entries[0]["dropped"] is None and "signal 9" in entries[1]["dropped"]


def test_baseline_recorded_from_the_served_build(
    served: HTTPBackend, engine_cache: Path, tmp_path: Path
) -> None:
    """``gate baseline record --endpoint``: the session's float32 server records the
    baseline; the in-process float32 demo build gated against it passes."""
    store = tmp_path / "store"
    config = tmp_path / "gate.toml"
    config.write_text(f"[tiers.fidelity]\nlimit = {PROMPTS}\nmax_new_tokens = 64\n")
    env = engine_env(engine_cache)
    recorded = run_gate(
        "baseline", "record", "--model", "demo", "--label", "fp32-served", "--ref", "served",
        "--tiers", "fidelity", "--config", str(config), "--store", str(store),
        "--endpoint", served.settings.base_url, cwd=tmp_path, env=env,
    )  # fmt: skip
    assert recorded.returncode == 0, recorded.stdout[-3000:] + recorded.stderr[-3000:]
    (document,) = (store / "demo").glob("0001-fp32-served.json")
    stored = json.loads(document.read_text())
    provenance = stored["provenance"]
    assert provenance["backend"] == "http" and provenance["engine"] == "vllm"
    assert provenance["fidelity_pack"].endswith("m=0")
    assert provenance["fidelity_no_tail_samples"] == fidelity.NO_TAIL_SERVED
    (pack_path,) = (store / "demo").glob("0001-fp32-served.reference*")
    pack = load_pack(pack_path)
    assert pack.m == 0 and pack.no_tail_samples == fidelity.NO_TAIL_SERVED and len(pack) == PROMPTS
    shown = run_gate("baseline", "show", "served", "--model", "demo", "--store", str(store))
    assert shown.returncode == 0 and "its baseline was served" in " ".join(shown.stdout.split())
    out = tmp_path / "results.json"
    gated = run_gate(
        "run", "--candidate", "demo", "--against", "served", "--tiers", "fidelity",
        "--store", str(store), "--json", str(out), cwd=tmp_path, env=env,
    )  # fmt: skip
    assert gated.returncode == 0, gated.stdout[-3000:] + gated.stderr[-3000:]
    results = json.loads(out.read_text())
    metrics = {m["name"]: m for m in results["metrics"] if m["slice"] is None}
    method = metrics["fidelity.kl_mean"]["details"][MeasurementDetail.KL_METHOD]
    _figures(
        "in-process demo against the served baseline",
        verdict=results["verdict"],
        cga=metrics["fidelity.cga"]["value"],
        kl_mean=metrics["fidelity.kl_mean"]["value"],
        kl_method=method,
        recorded_tokens=pack.n_output_tokens,
    )
    assert results["verdict"] == "pass"
    assert metrics["fidelity.cga"]["value"] >= 0.99
    assert metrics["fidelity.kl_mean"]["value"] < 1e-5
    assert "lower bound" in method and "baseline was served" in method

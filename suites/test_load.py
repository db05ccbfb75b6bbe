"""Load tier (marker ``load``): the served candidate against its served baseline under GuideLLM.

Run mode only, with both builds served: ``--serve``/``--endpoint`` for the
candidate and ``--baseline-serve``/``--baseline-endpoint`` for the baseline.
Every benchmark of the tier's plan runs in one GuideLLM process; its files
(scenario and results per benchmark, the batch's log) go to ``[tiers.load]
output_dir``, else a temporary directory; the directory is named in the
measurements' details (``guidellm_dir``). See :mod:`gate.tiers.load`.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path

import pytest

from gate.engines.http import HTTPBackend
from gate.errors import ConfigError
from gate.loadgen import guidellm
from gate.metrics.load import RatePoint
from gate.models.model_spec import ModelSpec
from gate.session.run import GateRun
from gate.tiers.load import Job, run_tier, to_measurements

pytestmark = pytest.mark.load


def _served(gate_run: GateRun) -> tuple[HTTPBackend, HTTPBackend]:
    """The candidate's and the baseline's servers (one-line ConfigError when either is not)."""
    candidate = gate_run.backend
    baseline = gate_run.paired_build() if gate_run.paired_build is not None else None
    if not isinstance(candidate, HTTPBackend) or not isinstance(baseline, HTTPBackend):
        raise ConfigError(
            "the load tier compares two served builds",
            "give --serve/--endpoint for the candidate and --baseline-serve/--baseline-endpoint"
            " for its baseline",
        )
    return candidate, baseline


def _workdir(configured: str) -> Path:
    """``[tiers.load] output_dir``, else a fresh temporary directory (named in the details)."""
    return Path(configured) if configured else Path(tempfile.mkdtemp(prefix="gate-load-"))


def test_load(gate_run: GateRun) -> None:
    """Goodput at the SLO, the knee, tokens/s and latencies: candidate / baseline."""
    if gate_run.mode != "run":
        pytest.skip("the load tier compares a candidate with its baseline build (run mode)")
    settings = gate_run.settings("load")
    executable = guidellm.find_executable(settings.guidellm)
    candidate, baseline = _served(gate_run)
    spec = ModelSpec.parse(gate_run.model)
    local = spec.local_dir
    tokenizer = str(local) if local is not None else spec.source
    workload = guidellm.Workload(
        rates=tuple(settings.rates),
        duration_s=settings.duration_s,
        prompt_tokens=settings.prompt_tokens,
        output_tokens=settings.output_tokens,
        profile=settings.profile,
        seed=settings.seed,
    )
    workdir = _workdir(settings.output_dir)
    servers = {"baseline": baseline, "candidate": candidate}

    def runner(jobs: Sequence[Job]) -> list[tuple[RatePoint, float]]:
        done = guidellm.run_batch(
            executable,
            [
                guidellm.Benchmark(
                    job.name,
                    servers[job.side].settings.base_url,
                    servers[job.side].model,
                    (job.rate,),
                )
                for job in jobs
            ],
            tokenizer=tokenizer,
            workload=workload,
            slo=settings.slo,
            workdir=workdir,
            timeout_s=settings.sweep_timeout_s,
        )
        return [(points[0], wall) for points, wall in done]

    result = run_tier(
        runner,
        settings,
        guidellm_version=guidellm.version_of(executable),
        guidellm_dir=str(workdir),
    )
    for measurement in to_measurements(result):
        gate_run.record(measurement)

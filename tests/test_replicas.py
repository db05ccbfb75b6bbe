"""Replicas of one served build (gate.engines.replicas) against small fake servers.

Each fake server (tests/fakes) answers with the real tiny model, so what two
replicas give together can be compared with what one gives alone. The real
vLLM servers are in tests/test_engine_replicas.py.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gate.engines.http import HTTPBackend
from gate.engines.opening import open_engine, replica_log
from gate.engines.replicas import ReplicaBackend
from gate.engines.settings import EngineSettings
from gate.errors import ConfigError, ExitCode, ModelLoadError
from gate.hw.timing import PerfCounterClock
from gate.models.backends.base import ScoreRequest
from gate.models.backends.hf import HFBackend
from gate.models.model_spec import ModelSpec
from tests.fakes import served_inputs
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.served_inputs import greedy_requests, local_settings

TEXTS = [*served_inputs.TEXTS, "Bonjour, comment allez-vous aujourd'hui ?"]


@pytest.fixture(scope="module")
def requests_(local: HFBackend) -> list[ScoreRequest]:
    return greedy_requests(local, TEXTS, max_new_tokens=10)


def _http(url: str, spec: ModelSpec, **kw: object) -> HTTPBackend:
    settings = local_settings(url, **{"max_concurrency": 2, "max_retries": 1, **kw})
    backend = HTTPBackend(settings, spec)
    backend.connect()
    return backend


def test_two_replicas_give_what_one_gives_and_share_the_work(
    local: HFBackend, spec: ModelSpec, requests_: list[ScoreRequest]
) -> None:
    with FakeOpenAIServer(local) as a, FakeOpenAIServer(local) as b:
        one = _http(a.url, spec)
        want = one.score(requests_, top_k=5, full=True)
        want_gen = one.generate([r.context for r in requests_], max_new_tokens=6)
        before = (a.completions, b.completions)
        warnings: list[str] = []
        both = ReplicaBackend([_http(a.url, spec), _http(b.url, spec)], warn=warnings.append)
        both.connect()
        got = both.score(requests_, top_k=5, full=True)
        got_gen = both.generate([r.context for r in requests_], max_new_tokens=6)
        share = (a.completions - before[0], b.completions - before[1])
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g.topk_ids, w.topk_ids)
        np.testing.assert_array_equal(g.target_logprobs, w.target_logprobs)
        np.testing.assert_array_equal(g.full_logprobs, w.full_logprobs)
    assert got_gen == want_gen
    # 12 requests, 2 slots per replica, least-loaded: each replica serves some of them
    assert sum(share) == 2 * len(requests_) and min(share) >= 2, share
    assert warnings == []
    replicas = both.provenance().to_document()["replicas"]
    assert [r["endpoint"] for r in replicas] == [a.url, b.url]
    assert [r["dropped"] for r in replicas] == [None, None]


def test_a_replica_killed_mid_run_is_dropped_and_the_run_completes(
    local: HFBackend, spec: ModelSpec, requests_: list[ScoreRequest]
) -> None:
    many = requests_ * 3  # 18 sequences
    with FakeOpenAIServer(local) as a, FakeOpenAIServer(local, die_after=2) as b:
        want = _http(a.url, spec).score(many, top_k=3)
        warnings: list[str] = []
        both = ReplicaBackend([_http(a.url, spec), _http(b.url, spec)], warn=warnings.append)
        got = both.score(many, top_k=3)
        assert b.dead.is_set()
        # later calls go to the replica left only
        again = both.generate([many[0].context], max_new_tokens=4)
    assert [g.target_logprobs.tolist() for g in got] == [w.target_logprobs.tolist() for w in want]
    assert len(again) == 1
    assert len(warnings) == 1 and "replica 2" in warnings[0] and "dropped" in warnings[0]
    assert "the 1 replica left" in warnings[0]
    assert list(both.dropped) == [1]
    replicas = both.provenance().to_document()["replicas"]
    assert replicas[0]["dropped"] is None and replicas[1]["dropped"]


def test_the_run_fails_when_no_replica_is_left(
    local: HFBackend, spec: ModelSpec, requests_: list[ScoreRequest]
) -> None:
    with FakeOpenAIServer(local, die_after=1) as a, FakeOpenAIServer(local, die_after=1) as b:
        both = ReplicaBackend([_http(a.url, spec), _http(b.url, spec)], warn=lambda _: None)
        with pytest.raises(ModelLoadError) as info:
            both.score(requests_ * 2, top_k=3)
    line = info.value.format_line()
    assert info.value.exit_code == ExitCode.INTERNAL_ERROR and "\n" not in line
    assert "every replica failed" in line and "replica 1" in line and "replica 2" in line


def test_a_live_replica_that_fails_a_request_is_not_dropped(
    local: HFBackend, spec: ModelSpec, requests_: list[ScoreRequest]
) -> None:
    """A 500 from a server that still answers /health is the request's own failure."""
    with FakeOpenAIServer(local) as a, FakeOpenAIServer(local, fault="500") as b:
        both = ReplicaBackend([_http(a.url, spec), _http(b.url, spec)], warn=lambda _: None)
        with pytest.raises(ModelLoadError) as info:
            both.score(requests_, top_k=3)
    assert "HTTP 500" in info.value.format_line()
    assert both.dropped == {}


def test_timed_generation_and_load_run_over_two_replicas(local: HFBackend, spec: ModelSpec) -> None:
    prompt = local.encode_prompt(TEXTS[0])
    with FakeOpenAIServer(local) as a, FakeOpenAIServer(local) as b:
        both = ReplicaBackend([_http(a.url, spec), _http(b.url, spec)], warn=lambda _: None)
        timed = both.generate_timed(prompt, batch_size=4, new_tokens=5, clock=PerfCounterClock())
        streams_a = sum(1 for body in a.bodies if body.get("stream"))
        streams_b = sum(1 for body in b.bodies if body.get("stream"))
        summary = both.load_run([prompt] * 6, new_tokens=4, max_concurrency=2)
    assert timed.new_tokens == 5 and len(timed.step_times) == 5
    assert (streams_a, streams_b) == (2, 2)  # four streams at once: two on each
    assert summary.completed == 6 and summary.failed == 0


def test_replicas_of_another_build_are_refused_naming_both(
    local: HFBackend, spec: ModelSpec
) -> None:
    with FakeOpenAIServer(local) as a, FakeOpenAIServer(local, version="0.0-other") as b:
        engine = EngineSettings(endpoint=(a.url, b.url))
        with pytest.raises(ConfigError) as info, open_engine(spec, engine):
            pass
    line = info.value.format_line()
    assert info.value.exit_code == ExitCode.USAGE_ERROR and "\n" not in line
    assert "engine version" in line and "'0.0-fake'" in line and "'0.0-other'" in line
    assert "replica 1 (" + a.url + ")" in line and "replica 2 (" + b.url + ")" in line


def test_open_engine_with_two_endpoints_gives_one_backend(
    local: HFBackend, spec: ModelSpec
) -> None:
    with FakeOpenAIServer(local) as a, FakeOpenAIServer(local) as b:
        engine = EngineSettings(endpoint=[a.url, b.url], max_concurrency=3)  # type: ignore[arg-type]
        assert engine.endpoints == (a.url, b.url) and engine.replicas == 2
        with open_engine(spec, engine) as backend:
            assert isinstance(backend, ReplicaBackend)
            assert [r.settings.max_concurrency for r in backend.replicas] == [3, 3]
            assert backend.encode_text("abc") == local.encode_text("abc")


def test_engine_settings_lists() -> None:
    one = EngineSettings(endpoint=("http://a:1/v1",))
    assert one.endpoint == "http://a:1/v1" and one.replicas == 1  # a list of one is its string
    two = EngineSettings(serve=("python -m x --port 1", "python -m x --port 2"))
    assert two.replicas == 2 and two.describe() == [
        "serve python -m x --port 1",
        "serve python -m x --port 2",
    ]
    assert two.replica(1).serve == "python -m x --port 2"
    with pytest.raises(ValueError, match="same replica twice"):
        EngineSettings(endpoint=("http://a:1/v1", "http://a:1/v1"))
    with pytest.raises(ValueError, match="empty list"):
        EngineSettings(endpoint=())
    assert replica_log(Path("out/r.server.log"), 0) == Path("out/r.server.log")
    assert replica_log(Path("out/r.server.log"), 1) == Path("out/r.server-2.log")


def test_the_command_line_records_and_gates_on_two_replicas_and_reports_them(
    local: HFBackend, tiny_model_dir: Path, tmp_path: Path
) -> None:
    """``gate baseline record`` and ``gate run`` with ``--endpoint`` twice: the report's
    lines and the results JSON's provenance name both replicas."""
    import json

    from tests.cli_support import run_gate

    config = tmp_path / "gate.toml"
    config.write_text("[tiers.fidelity]\nlimit = 2\nmax_new_tokens = 8\n")
    common = ("--tiers", "fidelity", "--config", str(config), "--store", str(tmp_path / "store"))
    model = str(tiny_model_dir)
    with FakeOpenAIServer(local) as a, FakeOpenAIServer(local) as b:
        endpoints = ("--endpoint", a.url, "--endpoint", b.url)
        recorded = run_gate(
            "baseline", "record", "--model", model, "--label", "served", *common, *endpoints,
            cwd=tmp_path,
        )  # fmt: skip
        assert recorded.returncode == 0, recorded.stdout[-2000:] + recorded.stderr[-2000:]
        out = tmp_path / "results.json"
        gated = run_gate(
            "run", "--candidate", model, *common, "--json", str(out), *endpoints, cwd=tmp_path
        )
        served_by = (len(a.bodies), len(b.bodies))
    assert gated.returncode == 0, gated.stdout[-2000:] + gated.stderr[-2000:]
    named = f"replicas: 2: replica 1 ({a.url}), replica 2 ({b.url})"
    assert named in " ".join(gated.stdout.split())  # a note of the report
    results = json.loads(out.read_text())
    assert named in results["notes"]
    candidate = results["candidate"]
    assert [r["endpoint"] for r in candidate["replicas"]] == [a.url, b.url]
    assert candidate["backend"] == "http" and min(served_by) > 0

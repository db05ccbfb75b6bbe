"""The HTTP backend against a small in-process OpenAI-compatible server (tests/fakes).

The fake server computes its answers with the real in-process backend on the
tiny model, so the HTTP path (request building, JSON parsing, top-k rows,
concurrency) is checked against the in-process numbers; faults (5xx storms,
hung requests, refusals, garbage, missing features, another tokenizer, an
unreachable endpoint) each give one line and their exit code. The real vLLM
server is exercised in tests/test_engine_vllm.py.
"""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest

from gate.engines.client import EndpointSettings, public_url
from gate.engines.http import HTTPBackend
from gate.engines.serve import free_port
from gate.errors import BaselineError, ConfigError, ExitCode, GateError, ModelLoadError
from gate.hw.timing import PerfCounterClock
from gate.metrics import fidelity as fm
from gate.metrics.latency import run_latency
from gate.metrics.serving import load_summary
from gate.models.backends.base import Backend, ScoreRequest
from gate.models.backends.hf import HFBackend
from gate.models.model_spec import ModelSpec
from gate.tiers import accuracy
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.served_inputs import TEXTS, greedy_requests, local_settings


@pytest.fixture(scope="module")
def requests_(local: HFBackend) -> list[ScoreRequest]:
    return greedy_requests(local, TEXTS, max_new_tokens=12)


def _settings(url: str, **kw: object) -> EndpointSettings:
    return local_settings(url, **{"max_concurrency": 3, "max_retries": 2, **kw})


def _one_line(exc: GateError, code: ExitCode) -> str:
    line = exc.format_line()
    assert "\n" not in line
    assert exc.exit_code == code
    return line


def test_is_a_backend_that_tokenizes_like_the_local_model(
    local: HFBackend, spec: ModelSpec
) -> None:
    with FakeOpenAIServer(local) as server:
        backend = HTTPBackend(_settings(server.url), spec)
        assert isinstance(backend, Backend)
        assert backend.name == f"{spec.source}@{public_url(server.url)}"
        assert backend.eos_ids == local.eos_ids != []
        for text in TEXTS:
            assert backend.encode_prompt(text) == local.encode_prompt(text)
            assert backend.encode_text(text) == local.encode_text(text)


@pytest.mark.parametrize("api", ["prompt_logprobs", "echo"])
def test_scores_equal_in_process(
    local: HFBackend, spec: ModelSpec, requests_: list[ScoreRequest], api: str
) -> None:
    """Target, top-k and full-row values equal the in-process ones (same numbers, through JSON)."""
    with FakeOpenAIServer(local, prompt_logprobs=api == "prompt_logprobs") as server:
        backend = HTTPBackend(_settings(server.url, full_top_k=16), spec)
        got = backend.score(requests_, top_k=8, full=True)
        assert backend.scoring_api == api
        if api == "prompt_logprobs":
            assert server.bodies and all(b.get("prompt_logprobs") == 16 for b in server.bodies)
    want = local.score(requests_, top_k=8, full=True, batch_size=1)
    for g, w, r in zip(got, want, requests_, strict=True):
        np.testing.assert_allclose(g.target_logprobs, w.target_logprobs, atol=1e-6)
        np.testing.assert_array_equal(g.topk_ids, w.topk_ids)
        np.testing.assert_allclose(g.topk_logprobs, w.topk_logprobs, atol=1e-6)
        rows = np.asarray(g.full_logprobs)
        full = np.asarray(w.full_logprobs)
        # exact on the returned ids; the rest of the mass spread evenly; rows sum to one
        for i in range(len(r.continuation)):
            top16 = np.argsort(-full[i], kind="stable")[:16]
            np.testing.assert_allclose(rows[i, top16], full[i, top16], atol=1e-6)
        np.testing.assert_allclose(np.exp(rows.astype(np.float64)).sum(-1), 1.0, atol=1e-5)
        # CGA and delta-p from rebuilt rows equal the full-row ones
        ids, lps = fm.topk_of_rows(full, 8)
        tail = fm.tail_logmass(full, ids)
        a = fm.score_positions(
            fm.BaselineReference(np.asarray(r.continuation), ids, lps, tail), rows
        )
        b = fm.score_positions(
            fm.BaselineReference(np.asarray(r.continuation), ids, lps, tail), full
        )
        np.testing.assert_array_equal(a.cga, b.cga)
        np.testing.assert_allclose(a.delta_p, b.delta_p, atol=1e-6)
        np.testing.assert_allclose(a.kl, b.kl, atol=1e-6)


def test_generate_equals_in_process(local: HFBackend, spec: ModelSpec) -> None:
    prompts = [local.encode_prompt(t) for t in TEXTS]
    with FakeOpenAIServer(local) as server:
        backend = HTTPBackend(_settings(server.url), spec)
        got = backend.generate(prompts, max_new_tokens=10)
        assert len(server.bodies) >= len(prompts)
        assert all(b["temperature"] == 0.0 and b["max_tokens"] == 10 for b in server.bodies)
        assert all(isinstance(b["prompt"], list) for b in server.bodies)
    assert got == [local.generate([p], max_new_tokens=10)[0] for p in prompts]


def test_mcq_per_option_on_rebuilt_rows(local: HFBackend, spec: ModelSpec) -> None:
    """Single-token MCQ options are scored as targets when full rows are rebuilt from a top-k."""
    from gate.data.mcq import load_mcq_set

    questions = load_mcq_set("arithmetic", limit=6)
    want = accuracy.score_questions(local, questions)
    with FakeOpenAIServer(local) as server:
        got = accuracy.score_questions(HTTPBackend(_settings(server.url), spec), questions)
        assert server.bodies and all(b.get("prompt_logprobs") == 1 for b in server.bodies)
    assert len(want) == len(questions) == 6
    for g, w in zip(got, want, strict=True):
        assert g.id == w.id
        np.testing.assert_allclose(g.option_logprobs, w.option_logprobs, atol=1e-5)


def test_streaming_timings_count_tokens_not_chunks(local: HFBackend, spec: ModelSpec) -> None:
    """Chunks carrying two tokens count as two (token ids); TTFT/ITL/TPOT add up."""
    prompt = local.encode_prompt(TEXTS[0])
    with FakeOpenAIServer(local, fault="merge") as server:
        backend = HTTPBackend(_settings(server.url), spec)
        gen = backend.generate_timed(prompt, batch_size=2, new_tokens=9, clock=PerfCounterClock())
        timings, duration = backend.stream_timings([prompt] * 4, new_tokens=9, max_concurrency=2)
        assert server.bodies[-1]["min_tokens"] == server.bodies[-1]["max_tokens"] == 9
        assert server.bodies[-1]["stream_options"] == {"include_usage": True}
    assert gen.new_tokens == len(gen.step_times) == 9
    latency = run_latency(gen)  # the in-process metric code accepts it unchanged
    assert latency.ttft > 0 and len(latency.itls) == 8
    assert len(timings) == 4 and all(t.output_tokens == 9 for t in timings)
    # the first chunk carried two tokens (one arrival); later merged chunks are spread over their gap
    assert timings[0].itls[0] == 0.0 and all(d > 0 for d in timings[0].itls[1:])
    summary = load_summary(timings, duration)
    assert summary.completed == 4 and summary.failed == 0
    assert summary.output_throughput == pytest.approx(36 / duration)


def test_a_send_merged_into_one_chunk_is_sent_again(local: HFBackend, spec: ModelSpec) -> None:
    """The first send's two streams arrive whole: no step to time, so it is sent once more."""
    prompt = local.encode_prompt(TEXTS[0])
    with FakeOpenAIServer(local, merged_streams=2) as server:
        backend = HTTPBackend(_settings(server.url), spec)
        gen = backend.generate_timed(prompt, batch_size=2, new_tokens=6, clock=PerfCounterClock())
        assert server.streams == 4
    assert gen.details["sends"] == 2
    assert gen.step_times[-1] > gen.step_times[0]
    assert run_latency(gen).tpot > 0


def test_a_server_that_always_merges_is_refused_in_one_line(
    local: HFBackend, spec: ModelSpec
) -> None:
    """Three sends, each answer in one chunk: refused (exit 4), never a zero decode time."""
    prompt = local.encode_prompt(TEXTS[0])
    with FakeOpenAIServer(local, merged_streams=100) as server:
        backend = HTTPBackend(_settings(server.url), spec)
        with pytest.raises(GateError) as info:
            backend.generate_timed(prompt, batch_size=1, new_tokens=6, clock=PerfCounterClock())
        assert server.streams == 3
    line = _one_line(info.value, ExitCode.USAGE_ERROR)
    assert "one chunk" in line and "idle cores" in line


def test_load_run_records_requests_at_a_rate(local: HFBackend, spec: ModelSpec) -> None:
    prompt = local.encode_prompt(TEXTS[1])
    with FakeOpenAIServer(local) as server:
        backend = HTTPBackend(_settings(server.url), spec)
        timings, _ = backend.stream_timings(
            [prompt] * 5, new_tokens=4, request_rate=50.0, max_concurrency=1, seed=3
        )
    assert len(timings) == 5
    ordered = sorted(timings, key=lambda t: t.start)
    assert all(b.start >= a.end for a, b in itertools.pairwise(ordered))  # one slot: no overlap
    assert all(t.ok for t in timings)


def test_tokenizer_mismatch_is_refused(local: HFBackend, spec: ModelSpec) -> None:
    with FakeOpenAIServer(local, tokenize="wrong") as server:
        backend = HTTPBackend(_settings(server.url), spec)
        with pytest.raises(BaselineError) as info:
            backend.connect()
    assert "tokenizer differs" in _one_line(info.value, ExitCode.USAGE_ERROR)


def test_tokenizer_probe_without_tokenize_endpoint(local: HFBackend, spec: ModelSpec) -> None:
    with FakeOpenAIServer(local, tokenize="absent") as server:
        facts = HTTPBackend(_settings(server.url), spec).connect()
    assert facts.tokenizer_check == "prompt token counts"
    assert facts.model == "fake-model" and facts.version == "0.0-fake"


def test_server_without_prompt_logprobs_or_echo(
    local: HFBackend, spec: ModelSpec, requests_: list[ScoreRequest]
) -> None:
    with FakeOpenAIServer(local, prompt_logprobs=False, echo=False) as server:
        backend = HTTPBackend(_settings(server.url), spec)
        with pytest.raises(ConfigError) as info:
            backend.score(requests_[:2], top_k=4)
    assert "no log-probs of prompt tokens" in _one_line(info.value, ExitCode.USAGE_ERROR)


def test_logprobs_refusal_names_the_server_option(
    local: HFBackend, spec: ModelSpec, requests_: list[ScoreRequest]
) -> None:
    with FakeOpenAIServer(local, max_logprobs=20) as server:
        backend = HTTPBackend(_settings(server.url), spec)  # full rows: 64 per position
        with pytest.raises(ConfigError) as info:
            backend.score(requests_[:1], top_k=1, full=True)
    line = _one_line(info.value, ExitCode.USAGE_ERROR)
    assert "refuses prompt_logprobs above 20" in line and "--max-logprobs 64" in line


def test_5xx_storm_is_retried_then_exit_3(
    local: HFBackend, spec: ModelSpec, requests_: list[ScoreRequest]
) -> None:
    with FakeOpenAIServer(local, fault="503") as server:
        backend = HTTPBackend(_settings(server.url, max_retries=2, max_concurrency=1), spec)
        with pytest.raises(ModelLoadError) as info:
            backend.score(requests_[:3], top_k=4)
        assert server.completions == 3  # one request, 1 + 2 retries; then everything stops
    line = _one_line(info.value, ExitCode.INTERNAL_ERROR)
    assert "HTTP 503" in line and "after 3 tries" in line


def test_500_is_not_retried(
    local: HFBackend, spec: ModelSpec, requests_: list[ScoreRequest]
) -> None:
    with FakeOpenAIServer(local, fault="500") as server:
        backend = HTTPBackend(_settings(server.url, max_concurrency=1), spec)
        with pytest.raises(ModelLoadError) as info:
            backend.score(requests_[:1], top_k=4)
        assert server.completions == 1
    assert "HTTP 500" in _one_line(info.value, ExitCode.INTERNAL_ERROR)


def test_429_is_retried_and_succeeds(
    local: HFBackend, spec: ModelSpec, requests_: list[ScoreRequest]
) -> None:
    with FakeOpenAIServer(local, fault="429-once") as server:
        backend = HTTPBackend(_settings(server.url, max_concurrency=1), spec)
        scores = backend.score(requests_[:2], top_k=4)
        assert server.completions == 3
    assert len(scores) == 2


def test_dropped_connection_is_retried(
    local: HFBackend, spec: ModelSpec, requests_: list[ScoreRequest]
) -> None:
    with FakeOpenAIServer(local, fault="drop-once") as server:
        backend = HTTPBackend(_settings(server.url, max_concurrency=1), spec)
        assert len(backend.score(requests_[:2], top_k=4)) == 2
        assert server.completions == 3


def test_hung_request_times_out(
    local: HFBackend, spec: ModelSpec, requests_: list[ScoreRequest]
) -> None:
    with FakeOpenAIServer(local, fault="hang") as server:
        backend = HTTPBackend(_settings(server.url, request_timeout=0.5), spec)
        backend.connect()
        with pytest.raises(ModelLoadError) as info:
            backend.score(requests_[:2], top_k=4)
    assert "timed out" in _one_line(info.value, ExitCode.INTERNAL_ERROR)


def test_garbage_answer(local: HFBackend, spec: ModelSpec, requests_: list[ScoreRequest]) -> None:
    with FakeOpenAIServer(local, fault="garbage") as server:
        backend = HTTPBackend(_settings(server.url), spec)
        with pytest.raises(ModelLoadError) as info:
            backend.score(requests_[:1], top_k=4)
    assert "not JSON" in _one_line(info.value, ExitCode.INTERNAL_ERROR)


def test_unreachable_endpoint(spec: ModelSpec) -> None:
    backend = HTTPBackend(_settings(f"http://127.0.0.1:{free_port()}/v1"), spec)
    with pytest.raises(ModelLoadError) as info:
        backend.connect()
    assert "cannot reach the endpoint" in _one_line(info.value, ExitCode.INTERNAL_ERROR)


def test_nan_logprobs_become_a_finding_not_a_crash(
    local: HFBackend, spec: ModelSpec, requests_: list[ScoreRequest]
) -> None:
    """A null (NaN) log-prob makes its position's row NaN: counted, KL capped, CGA 0."""
    request = requests_[0]
    with FakeOpenAIServer(local, fault="nan") as server:
        (scores,) = HTTPBackend(_settings(server.url), spec).score([request], top_k=4, full=True)
    rows = np.asarray(scores.full_logprobs)
    broken = 2 - len(request.context)  # prompt position 2 in continuation coordinates
    if broken >= 0:
        assert np.isnan(rows[broken]).all() and math.isnan(scores.target_logprobs[broken])
    full = np.asarray(local.score([request], top_k=1, full=True)[0].full_logprobs)
    ids, lps = fm.topk_of_rows(full, 8)
    positions = fm.score_positions(
        fm.BaselineReference(
            np.asarray(request.continuation), ids, lps, fm.tail_logmass(full, ids)
        ),
        rows,
    )
    assert int(positions.nonfinite.sum()) == int(broken >= 0)
    assert np.isfinite(positions.kl).all()


def test_api_key_from_the_named_variable_and_never_in_provenance(
    local: HFBackend, spec: ModelSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "sk-test-4f1e9a"
    with FakeOpenAIServer(local, api_key=secret) as server:
        missing = HTTPBackend(_settings(server.url, api_key_env="GATE_TEST_KEY"), spec)
        with pytest.raises(ConfigError) as info:
            missing.connect()
        assert "GATE_TEST_KEY" in _one_line(info.value, ExitCode.USAGE_ERROR)
        monkeypatch.setenv("GATE_TEST_KEY", "wrong")
        with pytest.raises(ConfigError) as info:
            HTTPBackend(_settings(server.url, api_key_env="GATE_TEST_KEY"), spec).connect()
        assert "unauthorized" in _one_line(info.value, ExitCode.USAGE_ERROR)
        monkeypatch.setenv("GATE_TEST_KEY", secret)
        backend = HTTPBackend(_settings(server.url, api_key_env="GATE_TEST_KEY"), spec)
        provenance = backend.provenance()
    assert secret not in json.dumps(provenance.to_document(), default=str)
    assert provenance.endpoint == server.url
    assert provenance.api_key_env == "GATE_TEST_KEY"
    assert provenance.tokenizer_sha256 == local.provenance().tokenizer_sha256


def test_endpoint_credentials_stay_out_of_provenance(local: HFBackend, spec: ModelSpec) -> None:
    with FakeOpenAIServer(local) as server:
        url = server.url.replace("http://", "http://user:pw-9c2d@") + "?token=abc"
        provenance = HTTPBackend(_settings(url), spec).provenance()
    text = json.dumps(provenance.to_document(), default=str)
    assert "pw-9c2d" not in text and "token=abc" not in text and "user" not in text
    assert provenance.endpoint == server.url


def test_api_key_env_must_be_a_variable_name() -> None:
    with pytest.raises(ConfigError) as info:
        EndpointSettings("http://127.0.0.1:8000/v1", api_key_env="sk-123 secret")
    assert "not an environment variable name" in _one_line(info.value, ExitCode.USAGE_ERROR)

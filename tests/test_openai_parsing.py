"""Parsing of OpenAI-compatible answers: log-prob positions, rebuilt rows, error lines, URLs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gate.engines.client import (
    EndpointSettings,
    LogprobsLimitError,
    http_error,
    parse_sse_line,
    public_url,
    server_message,
)
from gate.engines.scores import (
    FLOOR_LOGPROB,
    positions_from_echo,
    positions_from_prompt_logprobs,
    rows_from_topk,
    scores_from_positions,
    token_id_of,
)
from gate.errors import ConfigError, ExitCode, ModelLoadError


def test_rows_from_topk_are_exact_on_known_ids_and_sum_to_one() -> None:
    known = {3: math.log(0.5), 7: math.log(0.2), 1: math.log(0.1)}
    row = rows_from_topk(known, 10)
    assert row[3] == pytest.approx(math.log(0.5)) and row[1] == pytest.approx(math.log(0.1))
    others = [i for i in range(10) if i not in known]
    np.testing.assert_allclose(np.exp(row[others].astype(np.float64)), 0.2 / 7, rtol=1e-6)
    assert np.exp(row.astype(np.float64)).sum() == pytest.approx(1.0, abs=1e-6)


def test_rows_from_topk_floor_when_no_mass_is_left() -> None:
    row = rows_from_topk({0: 0.0}, 4)  # all mass on one token
    assert row[0] == 0.0 and (row[1:] == FLOOR_LOGPROB).all()
    assert rows_from_topk({0: math.log(0.5), 1: math.log(0.5)}, 2).tolist() == pytest.approx(
        [math.log(0.5)] * 2
    )


def test_prompt_logprobs_positions_and_scores() -> None:
    choice = {
        "prompt_logprobs": [
            None,
            {"5": {"logprob": -0.1}, "6": {"logprob": -2.5}},
            {"6": {"logprob": -0.3}, "5": {"logprob": -1.4}, "9": {"logprob": -4.0}},
        ]
    }
    positions = positions_from_prompt_logprobs(choice, 3, 1, 2)
    scores = scores_from_positions(positions, [5, 9], top_k=2, vocab_size=12, full=True)
    assert scores.target_logprobs.tolist() == pytest.approx([-0.1, -4.0])
    assert scores.topk_ids.tolist() == [[5, 6], [6, 5]]
    np.testing.assert_allclose(scores.topk_logprobs, [[-0.1, -2.5], [-0.3, -1.4]], rtol=1e-6)
    assert scores.full_logprobs.shape == (2, 12)
    assert scores.full_logprobs[1, 9] == pytest.approx(-4.0)


def test_ties_go_to_the_lower_id() -> None:
    positions = [[(8, -1.0), (2, -1.0), (5, -3.0)]]
    scores = scores_from_positions(positions, [5], top_k=2, vocab_size=10, full=False)
    assert scores.topk_ids.tolist() == [[2, 8]]
    assert scores.full_logprobs is None


def test_null_logprob_makes_the_position_nan() -> None:
    choice = {"prompt_logprobs": [None, {"4": {"logprob": None}, "2": {"logprob": -0.5}}]}
    positions = positions_from_prompt_logprobs(choice, 2, 1, 1)
    scores = scores_from_positions(positions, [4], top_k=2, vocab_size=6, full=True)
    assert math.isnan(scores.target_logprobs[0])
    assert np.isnan(scores.full_logprobs[0]).all() and np.isnan(scores.topk_logprobs[0]).all()


def test_minus_inf_from_the_server_is_not_a_broken_position() -> None:
    positions = [[(1, 0.0), (2, -math.inf)]]
    scores = scores_from_positions(positions, [1], top_k=2, vocab_size=3, full=True)
    assert scores.target_logprobs[0] == 0.0 and not np.isnan(scores.full_logprobs).any()


def test_echo_positions_with_id_and_text_keys() -> None:
    choice = {
        "logprobs": {
            "tokens": ["token_id:1", "token_id:4", "token_id:7"],
            "token_logprobs": [None, -0.2, -1.5],
            "top_logprobs": [None, {"token_id:4": -0.2, "token_id:3": -2.0}, {" a": -0.9, "?": -3}],
        }
    }
    positions = positions_from_echo(choice, [1, 4, 7], 1, 2, {" a": 9})
    assert dict(positions[0]) == {4: -0.2, 3: -2.0}
    assert dict(positions[1]) == {9: -0.9, 7: -1.5}  # "?" is not in the vocabulary map: dropped
    assert token_id_of("12", None) == 12 and token_id_of("hello", None) is None


def test_malformed_answers_are_one_line_exit_3() -> None:
    for bad in ({}, {"prompt_logprobs": [None]}, {"prompt_logprobs": [None, {}]}):
        with pytest.raises(ModelLoadError) as info:
            positions_from_prompt_logprobs(bad, 2, 1, 1)
        assert info.value.exit_code == ExitCode.INTERNAL_ERROR
        assert "\n" not in info.value.format_line()
    with pytest.raises(ModelLoadError, match="has no log-prob"):
        scores_from_positions([[(1, -0.1)]], [2], top_k=1, vocab_size=4, full=False)
    with pytest.raises(ModelLoadError, match="outside the vocabulary"):
        scores_from_positions([[(1, -0.1), (9, -3.0)]], [1], top_k=2, vocab_size=4, full=False)


def test_http_errors() -> None:
    vllm = (
        b'{"error":{"message":"Requested prompt logprobs of 32, which is greater than max '
        b'allowed: 20 (parameter=prompt_logprobs, value=32)","code":400}}'
    )
    error = http_error(400, vllm, "http://h:1/v1/completions")
    assert isinstance(error, LogprobsLimitError) and error.exit_code == ExitCode.USAGE_ERROR
    assert error.format_line() == (
        "the server refuses prompt_logprobs above 20 (asked for 32) "
        "(start it with --max-logprobs 32)"
    )
    missing = http_error(404, b'{"error":{"message":"The model `x` does not exist."}}', "u")
    assert (
        isinstance(missing, ConfigError) and "does not serve the requested model" in missing.message
    )
    assert "OpenAI base URL" in (http_error(404, b"Not Found", "http://h/v1/x").hint or "")
    assert isinstance(http_error(401, b"", "http://h/v1"), ConfigError)
    assert isinstance(http_error(500, b"oops", "http://h/v1"), ModelLoadError)
    assert server_message(b'{"detail": "bad field"}') == "bad field"
    assert len(server_message("x" * 1000)) < 260


def test_public_url_and_endpoint_settings() -> None:
    assert public_url("https://u:secret@host:8443/v1?key=abc#f") == "https://host:8443/v1"
    settings = EndpointSettings("http://127.0.0.1:8000")
    assert settings.base_url == "http://127.0.0.1:8000/v1"
    assert settings.root_url == "http://127.0.0.1:8000"
    assert EndpointSettings("http://h:1/prefix/v1/").root_url == "http://h:1/prefix"
    for bad in ("ftp://h/v1", "not a url"):
        with pytest.raises(ConfigError):
            EndpointSettings(bad)
    with pytest.raises(ConfigError):
        EndpointSettings("http://h:1/v1", max_concurrency=0)


def test_sse_lines() -> None:
    assert parse_sse_line('data: {"a": 1}') == '{"a": 1}'
    assert parse_sse_line("data: [DONE]") == "[DONE]"
    assert parse_sse_line(": keep-alive") is None
    assert parse_sse_line("event: ping") is None
    assert parse_sse_line("") is None


def test_rebuilt_rows_say_which_tokens_the_server_returned_and_bound_the_rest() -> None:
    from gate.engines.scores import scores_from_positions

    # top 3 asked; the target (id 7) is outside them at one position, inside at the other
    positions = [
        [(1, -0.5), (2, -1.5), (3, -2.5), (7, -6.0)],
        [(7, -0.2), (4, -2.0), (5, -3.0)],
    ]
    got = scores_from_positions(positions, [7, 7], top_k=2, vocab_size=10, full=True, asked=3)
    assert got.returned is not None and got.unreturned_bound is not None
    assert got.returned[0].nonzero()[0].tolist() == [1, 2, 3, 7]
    assert got.returned[1].nonzero()[0].tolist() == [4, 5, 7]
    # no token outside a top-3 is more likely than its 3rd: the target below it is not the bound
    assert got.unreturned_bound.tolist() == [-2.5, -3.0]
    # the whole vocabulary returned: nothing is unknown
    every = [[(t, -np.log(4.0)) for t in range(4)]]
    whole = scores_from_positions(every, [0], top_k=2, vocab_size=4, full=True, asked=4)
    assert whole.returned is not None and whole.returned.all()
    assert whole.unreturned_bound is not None and np.isneginf(whole.unreturned_bound).all()
    # without full rows there is nothing to say
    assert (
        scores_from_positions(positions, [7, 7], top_k=2, vocab_size=10, full=False).returned
        is None
    )

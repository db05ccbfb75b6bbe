"""Teacher-forced scores from an OpenAI-compatible completion response (pure parsing).

A scoring request sends ``prompt = context + continuation`` as token ids with
``max_tokens = 1`` and asks for the log-probabilities of the *prompt* tokens:

* ``prompt_logprobs: k`` (vLLM, SGLang): ``choices[0].prompt_logprobs`` is a
  list with one entry per prompt token; entry ``j`` is ``None`` for ``j = 0``
  and otherwise ``{"<id>": {"logprob": l, "rank": r, ...}}`` holding the top-k
  tokens of ``p(. | prompt[:j])`` plus the prompt token itself;
* ``echo: true, logprobs: k`` (the legacy Completions fields):
  ``choices[0].logprobs`` has ``token_logprobs[j]`` (the prompt token's
  log-prob) and ``top_logprobs[j]`` (``{token: l}``), keyed by token text or,
  with vLLM's ``return_tokens_as_token_ids``, by ``"token_id:<id>"``.

Either way, continuation token ``i`` is prompt position ``j = |context| + i``,
so row ``i`` is ``log p(y_i | context, y_<i)`` as in the in-process backend.

Non-finite values: a JSON ``null``/``NaN`` log-prob is NaN, ``Infinity`` is
``+inf``; a position holding either is non-finite and its whole row becomes NaN,
as a NaN logit makes the whole in-process ``log_softmax`` row NaN, so the
fidelity metrics count it as a broken position (critical finding, not a
crash). vLLM reports ``-inf`` as ``-9999.0``, which is kept: ``exp`` of it is 0.

Full rows from top-k (:func:`rows_from_topk`): a server returns k log-probs per
position, not the whole vocabulary. When a caller asks for full rows
(``score(full=True)``), row ``i`` is rebuilt as: the returned log-probs at their
ids (top-k and the target), and the remaining mass
``m = 1 - sum_returned p`` spread evenly over the other ``V - n`` ids
(``log(m / (V - n))``, floored at :data:`FLOOR_LOGPROB`). The rebuilt row is
exact on the returned ids and sums to one. Consequences for the fidelity
metrics against a pack with top-K ids ``S``: CGA, CGA@k (k <= returned k) and
delta-p are exact; the top-K + tail KL is exact at every position where the
returned ids cover ``S`` (then the candidate's tail over the complement of
``S`` is exactly ``1 - sum_S p``); a baseline id outside the candidate's
returned set gets the even share of the unreturned mass instead of its own,
which biases the KL. Each rebuilt row comes with ``returned`` (which entries
are the server's) and ``unreturned_bound`` (the largest log-prob any other
token can have), from which the fidelity tier bounds what it cannot see
(docs/fidelity.md, "A served candidate"). Ask for twice the pack's k (``EndpointSettings.full_top_k``,
default 64): on the demo model's FP8 build the server's top-32 covered the
pack's top-32 set at 47 % of the positions (mean KL 5.6e-3 from rebuilt rows)
and its top-64 at 100 % (mean KL 7.0e-4, exact).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from gate.errors import ModelLoadError
from gate.models.backends.base import TokenScores

#: Smallest log-prob a rebuilt row gives an unreturned id (e^-100 ~ 4e-44).
FLOOR_LOGPROB = -100.0

#: One position: ``(token id, log-prob)`` pairs as the server returned them.
Position = list[tuple[int, float]]


def _garbage(what: str) -> ModelLoadError:
    return ModelLoadError(
        f"the server's log-probs are malformed: {what}",
        "the endpoint must be an OpenAI-compatible server with prompt log-probs (see docs/serving.md)",
    )


def _logprob(value: Any) -> float:
    """A JSON log-prob as a float: ``null`` and unparsable values become NaN."""
    if value is None:
        return math.nan
    if isinstance(value, Mapping):
        value = value.get("logprob")
        if value is None:
            return math.nan
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def token_id_of(key: str, vocabulary: Mapping[str, int] | None) -> int | None:
    """The id of a top-logprobs key: ``"123"``, ``"token_id:123"``, or a token text in ``vocabulary``."""
    text = str(key)
    if text.startswith("token_id:"):
        text = text[len("token_id:") :]
    if text.lstrip("-").isdigit():
        return int(text)
    if vocabulary is not None:
        return vocabulary.get(str(key))
    return None


def positions_from_prompt_logprobs(
    choice: Mapping[str, Any], prompt_len: int, start: int, count: int
) -> list[Position]:
    """Positions ``start .. start+count-1`` of ``choice["prompt_logprobs"]`` as ``(id, logprob)`` lists."""
    entries = choice.get("prompt_logprobs")
    if not isinstance(entries, list):
        raise _garbage("no prompt_logprobs list in the choice")
    if len(entries) != prompt_len:
        raise _garbage(f"{len(entries)} prompt_logprobs entries for a {prompt_len}-token prompt")
    out: list[Position] = []
    for j in range(start, start + count):
        entry = entries[j]
        if not isinstance(entry, Mapping) or not entry:
            raise _garbage(f"prompt position {j} has no log-probs")
        try:
            out.append([(int(key), _logprob(value)) for key, value in entry.items()])
        except (TypeError, ValueError):
            raise _garbage(f"prompt position {j} has a key that is not a token id") from None
    return out


def positions_from_echo(
    choice: Mapping[str, Any],
    prompt_ids: Sequence[int],
    start: int,
    count: int,
    vocabulary: Mapping[str, int] | None,
) -> list[Position]:
    """Positions from legacy ``echo`` + ``logprobs`` (target log-prob from ``token_logprobs``)."""
    logprobs = choice.get("logprobs")
    if not isinstance(logprobs, Mapping):
        raise _garbage("no logprobs object in the echoed choice")
    targets = logprobs.get("token_logprobs")
    tops = logprobs.get("top_logprobs")
    if not isinstance(targets, list) or not isinstance(tops, list):
        raise _garbage("the echoed logprobs lack token_logprobs/top_logprobs")
    if len(targets) < len(prompt_ids) or len(tops) < len(prompt_ids):
        raise _garbage(f"{len(targets)} echoed log-probs for a {len(prompt_ids)}-token prompt")
    out: list[Position] = []
    for j in range(start, start + count):
        pairs: dict[int, float] = {}
        top = tops[j]
        if isinstance(top, Mapping):
            for key, value in top.items():
                tid = token_id_of(key, vocabulary)
                if tid is not None:
                    pairs[tid] = _logprob(value)
        pairs[int(prompt_ids[j])] = _logprob(targets[j])
        out.append(list(pairs.items()))
    return out


def scores_from_positions(
    positions: Sequence[Position],
    continuation: Sequence[int],
    *,
    top_k: int,
    vocab_size: int,
    full: bool,
    asked: int | None = None,
) -> TokenScores:
    """:class:`TokenScores` of one continuation from its returned positions.

    ``topk_*`` are the ``top_k`` returned tokens with the highest log-probs
    (ties towards the lower id); ``target_logprobs`` the continuation tokens'
    own; ``full_logprobs`` (when ``full``) the rows of :func:`rows_from_topk`,
    with ``returned`` (which entries are the server's) and ``unreturned_bound``:
    the server returned its top ``asked`` tokens (default ``top_k``) and the
    target, so every other token's log-prob is at most the ``asked``-th largest
    returned one (``-inf`` when every token of the vocabulary was returned).
    """
    steps = len(continuation)
    if len(positions) != steps:
        raise _garbage(f"{len(positions)} positions for {steps} continuation tokens")
    k = min(top_k, vocab_size)
    target = np.zeros(steps, dtype=np.float32)
    ids = np.zeros((steps, k), dtype=np.int64)
    lps = np.zeros((steps, k), dtype=np.float32)
    rows = np.zeros((steps, vocab_size), dtype=np.float32) if full else None
    returned = np.zeros((steps, vocab_size), dtype=bool) if full else None
    bound = np.full(steps, -np.inf, dtype=np.float64)
    n_top = min(asked if asked is not None else top_k, vocab_size)
    for i, (pairs, y) in enumerate(zip(positions, continuation, strict=True)):
        table = dict(pairs)
        if int(y) not in table:
            raise _garbage(f"continuation token {i} (id {y}) has no log-prob")
        bad = any(not math.isfinite(v) and not (v < 0 and math.isinf(v)) for v in table.values())
        ordered = sorted(
            table.items(), key=lambda p: (-p[1] if not math.isnan(p[1]) else math.inf, p[0])
        )
        if len(ordered) < k:
            raise _garbage(f"{len(ordered)} log-probs at position {i}, asked for {k}")
        if any(t < 0 or t >= vocab_size for t, _ in ordered):
            raise _garbage(f"a token id outside the vocabulary of {vocab_size} at position {i}")
        top = ordered[:k]
        ids[i] = [t for t, _ in top]
        lps[i] = [math.nan if bad else v for _, v in top]
        target[i] = math.nan if bad else table[int(y)]
        if rows is not None and returned is not None:
            rows[i] = np.nan if bad else rows_from_topk(table, vocab_size)
            returned[i, [t for t, _ in ordered]] = True
            if len(ordered) < vocab_size:
                bound[i] = ordered[min(n_top, len(ordered)) - 1][1]
    return TokenScores(
        target_logprobs=target,
        topk_ids=ids,
        topk_logprobs=lps,
        full_logprobs=rows,
        returned=returned,
        unreturned_bound=bound if full else None,
    )


def rows_from_topk(known: Mapping[int, float], vocab_size: int) -> np.ndarray:
    """A ``[V]`` log-prob row: ``known`` at their ids, the rest of the mass spread evenly.

    With ``n = |known|`` and ``m = 1 - sum exp(known)`` (float64, clipped at 0),
    every other id gets ``max(log(m / (V - n)), FLOOR_LOGPROB)``.
    """
    row = np.empty(vocab_size, dtype=np.float64)
    ids = np.fromiter(known.keys(), dtype=np.int64, count=len(known))
    values = np.fromiter(known.values(), dtype=np.float64, count=len(known))
    rest = vocab_size - len(known)
    if rest > 0:
        mass = max(0.0, 1.0 - float(np.exp(values).sum()))
        share = math.log(mass / rest) if mass > 0 else FLOOR_LOGPROB
        row[:] = max(share, FLOOR_LOGPROB)
    row[ids] = values
    return row.astype(np.float32)

"""llama.cpp's ``llama-server`` as a served engine: what differs from the OpenAI-compatible servers.

:class:`~gate.engines.http.HTTPBackend` speaks to every server; when the
server it connects to is llama-server (``/props`` answers with a
``build_info``, or ``/v1/models`` says ``owned_by: llamacpp``) its dialect
(:mod:`gate.engines.llama_cpp.dialect`) takes the paths of this module, on
llama-server's own endpoints (``/completion``, ``/tokenize``, ``/props``). Only token ids cross the wire, as with every server.

**Teacher-forced scoring without prompt log-probs.** llama-server returns no
log-probs of prompt tokens (no ``prompt_logprobs``, no ``echo``). It returns,
for every token it *generates*, the token's own log-prob and the top ``n_probs``
ids with theirs; with ``post_sampling_probs: false`` these are the softmax of
the model's raw logits over the whole vocabulary (llama.cpp's
``get_token_probabilities``: float32 logits, max-subtracted, ``expf``, divided
by their float32 sum), not of the sampler's candidates. The sampled token's
log-prob is looked up in that same full row, so it is exact whatever its rank.
Two ways to turn that into ``log p(. | context, y_<i)`` at every position ``i``
of a continuation ``y`` (``scoring_api``):

* ``forced`` (the default for llama-server): **one request per sequence**,
  prompt = context, ``n_predict = |y|``, and a token grammar
  ``root ::= <[y_0]> <[y_1]> ...`` that allows exactly ``y``: the server
  decodes the continuation as if generating it, one token per step, and
  returns each step's row.
* ``positions``: **one request per position**, prompt = ``context + y[:i]``,
  ``n_predict = 1``, the grammar ``root ::= <[y_i]>``, ``cache_prompt: true``,
  the positions of one sequence in order so that each request finds the
  previous prefix in its slot's cache and evaluates one new token.

Both send different sequences at once, up to the server's slots (``/props``
``total_slots``), which llama-server decodes in one batch. ``forced`` needs one
HTTP round trip and one grammar per sequence where ``positions`` needs one per
token, and the two agree to llama.cpp's own rounding: its matrix products take
another path for a batch of tokens than for one, which moved SmolLM2's F16
log-probs by up to 4e-3 between the modes and 1e-2 between a cached and an
uncached position (``tests/test_engine_llama_cpp.py``, an AVX2 build on an
AVX-512 machine); ``tests/benchmarks/bench_llama_server_scoring.py``
times both side by side. ``forced`` is the default; ``positions`` stays as the
check of the cache and the mechanism the cost is compared with.

Tokens a grammar cannot force (special tokens: llama.cpp renders them as no
text, which its grammars refuse, and stops after an end-of-generation one; byte
tokens that are not whole UTF-8 text on their own, a lead byte or a
continuation byte of a multi-byte character: llama.cpp's grammar decodes each
forced piece as UTF-8 and, given such a piece, lets another token through and
then fails the request, "Unexpected empty grammar stack", found on SmolLM2 at a
non-ASCII character of the fidelity prompts) and
steps the server leaves out of its answer (a byte token that ends the
generated text inside a UTF-8 character) are read by :func:`free_position`:
the same prefix with a plain token forced in their place, so the row is the
same; the target's log-prob comes from its top-K, or from a whole-vocabulary
row when it is not among them.

What is exact and what is bounded, per position, with ``K = max(top_k,
served_logprobs)`` returned log-probs (as for vLLM's top-K,
:mod:`gate.engines.scores`): the target's log-prob is exact (the
forced token is the sampled one); the top-``K`` ids and log-probs are exact; a
full row is rebuilt from them (the rest of the mass spread evenly), and every
unreturned token's log-prob is at most the ``K``-th returned one, so the
fidelity tier's KL against a reference pack is exact where the returned ids
cover the pack's top-k set and otherwise an interval (docs/fidelity.md, "A
served candidate"). A probability that underflows float32 (below ``2**-149``)
is reported by llama-server as the lowest float; it is read as
:data:`UNDERFLOW_LOGPROB` (``log 2**-149``), an upper bound of the true value.

**Generation** is ``/completion`` with ``temperature: 0`` (llama.cpp's greedy
arg-max) and every penalty neutral, new ids from ``tokens``
(``return_tokens``); an EOG token the server stopped on and left out is put
back, so the ids end with the EOS as in process. **Timed streams** are
``/completion`` with ``stream: true``, ``ignore_eos`` and ``n_predict`` new
tokens, counted from each chunk's ``tokens``.

**Identity**: the engine is ``llama.cpp``, its version the build number of
``/props`` ``build_info`` (``b11434-...`` -> ``b11434``). A llama-server
built without one reports ``b0``: its version is then unknown (``None``, a
note in the version check, never a drift), with the ``build_info`` kept in the
served settings. The tokenizer is checked through ``/tokenize`` (no BOS:
``add_special: false``; special tokens parsed as the local tokenizer parses
them), and the EOS token's text must be the EOS id there.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gate.engines.client import EndpointClient
from gate.engines.llama_cpp.install import ENGINE
from gate.engines.scores import Position
from gate.errors import BaselineError, ConfigError, ModelLoadError

#: ``owned_by`` of llama-server's ``/v1/models`` entries.
OWNED_BY = "llamacpp"
#: The log-prob gate reads for a probability that underflowed float32 (``log 2**-149``).
UNDERFLOW_LOGPROB = -149 * math.log(2.0)
#: The scoring modes of llama-server (module docstring).
SCORING_APIS: tuple[str, ...] = ("forced", "positions")
#: The fields of a ``/completion`` answer gate reads (the rest, prompt text included, is not sent).
_FIELDS = [
    "completion_probabilities",
    "tokens",
    "stop_type",
    "tokens_predicted",
    "tokens_evaluated",
]
#: Every sampler that could move greedy decoding off the arg-max, neutral.
GREEDY: Mapping[str, Any] = {
    "temperature": 0.0,
    "top_p": 1.0,
    "min_p": 0.0,
    "seed": 0,
    "repeat_penalty": 1.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "dry_multiplier": 0.0,
    "xtc_probability": 0.0,
}
_BUILD = re.compile(r"^b(\d+)\b")


@dataclass(frozen=True)
class ServerProps:
    """What llama-server's ``/props`` says about itself."""

    build_info: str
    #: ``b<N>``; ``None`` for a server built without a build number (``b0``).
    version: str | None
    #: Requests the server decodes at once (``--parallel``).
    slots: int | None
    #: Tokens of context per slot.
    context: int | None
    model_path: str | None


def build_version(build_info: str) -> str | None:
    """``b11434`` of ``b11434-pypi-...``; ``None`` for build 0 or an unreadable one."""
    match = _BUILD.match(build_info.strip())
    if match is None or int(match.group(1)) == 0:
        return None
    return f"b{int(match.group(1))}"


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def read_props(doc: Any) -> ServerProps | None:
    """The facts of a ``/props`` document; ``None`` when it is not llama-server's."""
    if not isinstance(doc, Mapping) or not isinstance(doc.get("build_info"), str):
        return None
    settings = doc.get("default_generation_settings")
    context = _int(settings.get("n_ctx")) if isinstance(settings, Mapping) else None
    path = doc.get("model_path")
    return ServerProps(
        build_info=str(doc["build_info"]),
        version=build_version(str(doc["build_info"])),
        slots=_int(doc.get("total_slots")),
        context=context,
        model_path=str(path) if isinstance(path, str) and path else None,
    )


async def server_props(client: EndpointClient, owned_by: str | None) -> ServerProps | None:
    """llama-server's ``/props``, or ``None`` when the server is another engine."""
    import json

    text = await client.get_text("/props", root=True)
    try:
        doc = json.loads(text) if text else None
    except ValueError:
        doc = None
    props = read_props(doc)
    if props is None and owned_by == OWNED_BY:
        raise ModelLoadError(
            f"{client.url('/props', root=True)} gives no build_info, yet the server says it is "
            "llama.cpp's llama-server",
            "start llama-server without --no-props (gate reads its build and slots there)",
        )
    return props


def reported_settings(props: ServerProps, card: Mapping[str, Any]) -> dict[str, Any]:
    """The served settings llama-server reports (``build_info``, slots, context, file type)."""
    meta = card.get("meta")
    out: dict[str, Any] = {"build_info": props.build_info}
    if props.slots is not None:
        out["parallel_slots"] = props.slots
    if isinstance(meta, Mapping) and _int(meta.get("ftype")) is not None:
        out["gguf_ftype"] = int(meta["ftype"])
    if props.model_path is not None:
        out["model"] = props.model_path
    return out


# -- tokenizer ---------------------------------------------------------------------


def tokenize_payload(text: str) -> dict[str, Any]:
    """``/tokenize`` of ``text`` as the local ``encode_text`` does it: no BOS, special tokens parsed."""
    return {"content": text, "add_special": False, "parse_special": True, "with_pieces": True}


def tokenized(answer: Any) -> list[tuple[int, str]]:
    """``(id, piece)`` of a ``/tokenize`` answer made ``with_pieces`` (bytes shown as ``\\xNN``)."""
    tokens = answer.get("tokens") if isinstance(answer, Mapping) else None
    if not isinstance(tokens, list):
        raise ModelLoadError("llama-server's /tokenize answered without tokens")
    out: list[tuple[int, str]] = []
    for item in tokens:
        if isinstance(item, Mapping):
            piece = item.get("piece")
            if isinstance(piece, list):
                piece = "".join(f"\\x{int(b):02x}" for b in piece)
            out.append((int(item["id"]), str(piece)))
        else:
            out.append((int(item), ""))
    return out


def tokenizer_mismatch(
    label: str, server: Sequence[tuple[int, str]], local: Sequence[int], local_text: Any
) -> BaselineError | None:
    """The one-line error naming the first token where ``server`` and ``local`` differ
    (``local_text(id)`` spells a local id); ``None`` when they agree."""
    ids = [i for i, _ in server]
    if ids == list(local):
        return None
    at = next(
        (i for i, (a, b) in enumerate(zip(ids, local, strict=False)) if a != b),
        min(len(ids), len(local)),
    )
    there = f"id {ids[at]} ({server[at][1]!r})" if at < len(ids) else "nothing (it ends)"
    here = f"id {local[at]} ({local_text(local[at])!r})" if at < len(local) else "nothing (it ends)"
    return BaselineError(
        f"llama-server's tokenizer differs from the baseline's: {label[:40]!r} token {at} is "
        f"{there} on the server and {here} locally",
        "serve the GGUF of the model whose tokenizer recorded the baseline",
    )


# -- teacher-forced scoring ---------------------------------------------------------


def token_grammar(ids: Sequence[int]) -> str:
    """A GBNF grammar that allows exactly the token ids ``ids``, in order."""
    return "root ::= " + " ".join(f"<[{int(t)}]>" for t in ids)


def forced_payload(prompt: Sequence[int], forced: Sequence[int], k: int) -> dict[str, Any]:
    """The ``/completion`` request that decodes ``forced`` after ``prompt`` with ``k`` log-probs a step."""
    return {
        "prompt": [int(t) for t in prompt],
        "n_predict": len(forced),
        "grammar": token_grammar(forced),
        "n_probs": k,
        "post_sampling_probs": False,
        "cache_prompt": True,
        "return_tokens": True,
        "response_fields": _FIELDS,
        **GREEDY,
    }


def _logprob(value: Any) -> float:
    """A returned log-prob: ``null`` is NaN; llama.cpp's lowest float (an underflow) is
    :data:`UNDERFLOW_LOGPROB`."""
    if value is None:
        return math.nan
    try:
        number = float(value)
    except (TypeError, ValueError):
        return math.nan
    return UNDERFLOW_LOGPROB if number < UNDERFLOW_LOGPROB else number


def _garbage(what: str) -> ModelLoadError:
    return ModelLoadError(
        f"llama-server's log-probs are malformed: {what}",
        "gate reads /completion's completion_probabilities (llama-server b4000 or later)",
    )


def positions_from_completion(answer: Any, forced: Sequence[int]) -> list[Position]:
    """One :data:`Position` per forced token, every step returned and each the forced one
    (:func:`aligned_steps` for an answer that may leave steps out)."""
    steps = aligned_steps(answer, forced)
    if len(steps) != len(forced):
        missing = [i for i in range(len(forced)) if i not in steps]
        raise _garbage(f"no step for forced token {missing[0]} of {len(forced)}")
    return [steps[i] for i in range(len(forced))]


def _check_context(prompt_len: int, context: int | None) -> None:
    if context is not None and prompt_len > context:
        raise ConfigError(
            f"a scored sequence of {prompt_len} tokens exceeds llama-server's {context} tokens "
            "of context per slot",
            "start llama-server with a larger -c (its context is shared by --parallel slots)",
        )


@dataclass(frozen=True)
class Forcing:
    """What forced scoring needs to know of the vocabulary (from the local tokenizer)."""

    #: Ids a token grammar cannot force: special tokens (llama.cpp renders them as no text,
    #: which its grammars refuse, and stops at the end-of-generation ones) and byte tokens
    #: that are not whole UTF-8 text alone (module docstring).
    unforceable: frozenset[int]
    #: A plain-text id forced in their place, to read a position's row (``"a"``).
    substitute: int
    #: The vocabulary size: the ``n_probs`` that returns a whole row.
    vocab_size: int


def aligned_steps(answer: Any, forced: Sequence[int]) -> dict[int, Position]:
    """The returned steps of a forced answer by their index in ``forced``.

    llama-server leaves out of ``completion_probabilities`` a step whose token
    ends the generated text inside a UTF-8 character (a byte token), and stops
    early at an end-of-generation token; the steps it returns are in order, so
    each is matched to the next forced token with its id.
    """
    steps = positions_from_steps(answer)
    out: dict[int, Position] = {}
    at = 0
    for token, position in steps:
        while at < len(forced) and int(forced[at]) != token:
            at += 1
        if at == len(forced):
            raise ModelLoadError(
                f"llama-server decoded token {token}, which the grammar did not force",
                "serve with a llama-server whose grammars take token ids (<[id]>)",
            )
        out[at] = position
        at += 1
    return out


def positions_from_steps(answer: Any) -> list[tuple[int, Position]]:
    """``(decoded id, its position)`` of each step of an answer made with ``n_probs``."""
    steps = answer.get("completion_probabilities") if isinstance(answer, Mapping) else None
    if not isinstance(steps, list):
        raise _garbage("no completion_probabilities in the answer")
    out: list[tuple[int, Position]] = []
    for i, step in enumerate(steps):
        if not isinstance(step, Mapping) or not isinstance(step.get("top_logprobs"), list):
            raise _garbage(f"step {i} has no top_logprobs")
        pairs: dict[int, float] = {}
        for entry in step["top_logprobs"]:
            if not isinstance(entry, Mapping) or "id" not in entry:
                raise _garbage(f"step {i} has a top_logprobs entry without an id")
            pairs[int(entry["id"])] = _logprob(entry.get("logprob"))
        token = int(step.get("id", -1))
        pairs[token] = _logprob(step.get("logprob"))
        out.append((token, list(pairs.items())))
    return out


async def free_position(
    client: EndpointClient, prefix: Sequence[int], target: int, k: int, forcing: Forcing
) -> Position:
    """The row after ``prefix`` read by forcing the plain :attr:`Forcing.substitute` (for a
    target no grammar can force, or whose step the server leaves out): its top ``k``, and the
    target's exact log-prob, from a whole row when it is not among them."""
    for n_probs in (k, forcing.vocab_size):
        answer = await client.post(
            "/completion", forced_payload(prefix, [forcing.substitute], n_probs), root=True
        )
        steps = positions_from_steps(answer)
        if len(steps) != 1 or steps[0][0] != forcing.substitute:
            raise _garbage(f"{len(steps)} steps for one forced token")
        position = steps[0][1]
        if any(token == target for token, _ in position):
            return position if n_probs == k else _top(position, k, target)
    raise _garbage(f"token {target} is missing from a whole row of {forcing.vocab_size}")


def _top(position: Position, k: int, target: int) -> Position:
    """The ``k`` largest entries of a whole row, and the target's."""
    ordered = sorted(position, key=lambda p: -p[1])
    kept = dict(ordered[:k])
    kept.setdefault(target, dict(position)[target])
    return list(kept.items())


async def forced_positions(
    client: EndpointClient,
    prompt: Sequence[int],
    start: int,
    k: int,
    context: int | None,
    forcing: Forcing,
) -> list[Position]:
    """Positions ``start..`` of ``prompt`` by forced decoding (module docstring, ``forced``):
    each run of forceable tokens in one request, the rest one :func:`free_position` each."""
    _check_context(len(prompt), context)
    out: list[Position] = []
    j = start
    while j < len(prompt):
        end = j
        while end < len(prompt) and int(prompt[end]) not in forcing.unforceable:
            end += 1
        if end == j:
            out.append(await free_position(client, prompt[:j], int(prompt[j]), k, forcing))
            j += 1
            continue
        forced = prompt[j:end]
        answer = await client.post("/completion", forced_payload(prompt[:j], forced, k), root=True)
        steps = aligned_steps(answer, forced)
        for i in range(len(forced)):
            if i in steps:
                out.append(steps[i])
            else:
                out.append(await free_position(client, prompt[: j + i], int(forced[i]), k, forcing))
        j = end
    return out


async def cached_positions(
    client: EndpointClient,
    prompt: Sequence[int],
    start: int,
    k: int,
    context: int | None,
    forcing: Forcing,
) -> list[Position]:
    """Positions ``start..`` of ``prompt``, one request each on the cached prefix (``positions``)."""
    _check_context(len(prompt), context)
    out: list[Position] = []
    for j in range(start, len(prompt)):
        target = int(prompt[j])
        step: Position | None = None
        if target not in forcing.unforceable:
            answer = await client.post(
                "/completion", forced_payload(prompt[:j], [target], k), root=True
            )
            step = aligned_steps(answer, [target]).get(0)
        out.append(
            step
            if step is not None
            else await free_position(client, prompt[:j], target, k, forcing)
        )
    return out


# -- generation and streams -----------------------------------------------------------


def generate_payload(prompt: Sequence[int], max_new_tokens: int) -> dict[str, Any]:
    """Greedy ``/completion`` of at most ``max_new_tokens`` ids after ``prompt``."""
    return {
        "prompt": [int(t) for t in prompt],
        "n_predict": max_new_tokens,
        "cache_prompt": True,
        "return_tokens": True,
        "response_fields": _FIELDS,
        **GREEDY,
    }


def generated_ids(answer: Any, eos_ids: Sequence[int]) -> list[int]:
    """The new ids of a greedy answer, ending with the EOS when the server stopped on one.

    llama-server leaves the end-of-generation token out of ``tokens`` when it
    stops on it (``stop_type: eos``); the in-process backends keep it, so the
    first of ``eos_ids`` is put back (the local EOS: a stop on another EOG
    token the local tokenizer does not call EOS reads as that EOS too).
    """
    if not isinstance(answer, Mapping) or not isinstance(answer.get("tokens"), list):
        raise ModelLoadError("llama-server's completion has no tokens", "see the server log")
    ids = [int(t) for t in answer["tokens"]]
    if answer.get("stop_type") == "eos" and eos_ids and (not ids or ids[-1] not in eos_ids):
        ids.append(int(eos_ids[0]))
    return ids


def stream_payload(prompt: Sequence[int], new_tokens: int) -> dict[str, Any]:
    """A streamed ``/completion`` of exactly ``new_tokens`` ids (EOS ignored)."""
    return {
        "prompt": [int(t) for t in prompt],
        "n_predict": new_tokens,
        "ignore_eos": True,
        "stream": True,
        "cache_prompt": False,
        "return_tokens": True,
        **GREEDY,
    }


def chunk_tokens(event: Mapping[str, Any], counted: int) -> int:
    """Tokens a streamed ``/completion`` event carries, ``counted`` already counted: its
    running ``tokens_predicted`` less ``counted`` (a byte token that ends inside a UTF-8
    character is sent with the next chunk, which then carries both), else its ``tokens``;
    0 for the final event."""
    if event.get("stop") is True:
        return 0
    total = _int(event.get("tokens_predicted"))
    if total is not None:
        return total - counted
    ids = event.get("tokens")
    if isinstance(ids, list):
        return len(ids)
    raise ModelLoadError(
        "llama-server streamed a chunk without token ids", "see the server log (return_tokens)"
    )


def stream_usage(event: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """``(completion tokens, prompt tokens)`` of the final streamed event (``None``: unknown)."""
    if event.get("stop") is not True:
        return None, None
    return _int(event.get("tokens_predicted")), _int(event.get("tokens_evaluated"))


__all__ = [
    "ENGINE",
    "GREEDY",
    "OWNED_BY",
    "SCORING_APIS",
    "UNDERFLOW_LOGPROB",
    "Forcing",
    "ServerProps",
    "aligned_steps",
    "build_version",
    "cached_positions",
    "chunk_tokens",
    "forced_payload",
    "forced_positions",
    "free_position",
    "generate_payload",
    "generated_ids",
    "positions_from_completion",
    "positions_from_steps",
    "read_props",
    "reported_settings",
    "server_props",
    "stream_payload",
    "stream_usage",
    "token_grammar",
    "tokenize_payload",
    "tokenized",
    "tokenizer_mismatch",
]

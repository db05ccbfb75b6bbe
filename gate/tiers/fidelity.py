"""The fidelity tier: record a reference pack, then measure a candidate against it.

``record`` runs the *baseline*: greedy outputs on the fidelity prompts, then one
batched teacher-forced pass over ``prompt + output`` for the top-k log-probs,
tail masses and sampled tail tokens, written as a reference pack
(:mod:`gate.store.reference`).

``measure`` runs the *candidate*: the same batched teacher-forced pass over the
pack's ``prompt + reference output`` (never the baseline model, unless a live
baseline is given for the exact KL), then the metrics of
:mod:`gate.metrics.fidelity` per prompt, aggregated into measurements with
per-prompt samples (``sample_ids`` = prompt ids) and breakdowns
``category:<c>`` and ``length:<t>``, plus ``context:<budget>`` with the
long-context prompts (``context_tiers``, :mod:`gate.data.long_context`).

Both sides batch the same way (:func:`batches`: by decreasing total length,
fixed size), so a baseline scored against its own pack sees bitwise the same
numbers: CGA exactly 1 and KL exactly 0.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from gate.errors import BaselineError, ConfigError, DataError, ModelLoadError
from gate.measurement import Measurement, MeasurementDetail, from_samples
from gate.metrics import fidelity as fm
from gate.models.backends.base import Backend, ScoreRequest, TokenScores
from gate.models.backends.capabilities import ChunksScoring, EncodesMessages, exact_full_rows
from gate.progress import task as progress_task
from gate.store.reference import (
    LOGPROB_DTYPES,
    PackEntry,
    PackPrompt,
    PromptLike,
    RecordingSummary,
    ReferencePack,
    check_compatible,
    check_prompt_ids,
    prompt_set_sha256,
    write_pack,
)
from gate.tiers import exercised

TIER = "fidelity"
#: k of the CGA@k metric (``fidelity.cga_at_5``).
CGA_K = 5
#: Re-scoring rounds the recorder allows for argmax/generation disagreements to settle.
_MAX_RECORD_ROUNDS = 4

#: KL distribution statistics that also get per-category / per-length breakdowns
#: (the others are reported overall only, to keep reports readable).
SLICED_POINT_STATS = ("p99", "max")
#: Called after each scored batch with (done, total) prompts; for progress bars.
Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class FidelitySettings:
    """``[tiers.fidelity]`` settings (built with :func:`gate.tiers.registry.build_settings`)."""

    #: Greedy tokens generated per prompt when recording the pack.
    max_new_tokens: int = 128
    #: Baseline tokens stored per output position (the KL's top-k set).
    top_k: int = 32
    #: Prompts per teacher-forced batch (record and measure must agree for bitwise equality).
    batch_size: int = 8
    #: Use only the first ``limit`` prompts (of the prompt set when recording, of the pack otherwise).
    limit: int | None = None
    #: A baseline model (``demo``, a path or hub id) to load for the exact KL; None uses the pack.
    live_baseline: str | None = None
    #: Prompt-set JSONL; None is the packaged fidelity prompt set.
    prompts: Path | None = None
    #: Storage precision of the pack's top-k and sampled-tail log-probs.
    logprob_dtype: Literal["float32", "float16"] = "float32"
    #: Tokens drawn per output position from the baseline's tail beyond its top-k
    #: (pack format v3): the KL read from the pack is then an unbiased estimate
    #: with its standard error. 0 records no samples (the KL is the lower bound).
    tail_samples: int = 64
    #: Seed of the tail draws (prompt ``j`` draws with ``numpy`` seed ``[tail_seed, j]``).
    tail_seed: int = 0
    #: Score from the second output token, as the released FidBench code does;
    #: the default (false) counts every position, as the CGA paper's eq. 5 does.
    skip_first_token: bool = False
    #: Tokens teacher-forced per forward call through a KV-cache recipe's cache
    #: (:mod:`gate.models.backends.chunked`); None (the default) is the exact size:
    #: 1 for a method that acts during decoding, the whole continuation otherwise.
    cache_chunk_size: int | None = None
    #: Seed of a random grouping of the prompts into scoring batches when a candidate is
    #: scored (None, the default: by decreasing length, as recorded). ``gate calibrate``'s
    #: prompt-order perturbation: another batch composition changes padding and kernel
    #: shapes, never the model.
    order_seed: int | None = None
    #: Long-context prompts instead of the single-turn set: token budgets of the
    #: context tiers (e.g. ``[256, 512, 896]`` on the demo, ``[8192, 16384, 24576]``
    #: on a real model); None (the default) uses the single-turn prompts.
    context_tiers: tuple[int, ...] | None = None
    #: Long-context prompts per context tier.
    context_prompts_per_tier: int = 12
    #: Multi-turn conversations JSONL of the long-context prompts; None is the packaged set.
    conversations: Path | None = None

    def __post_init__(self) -> None:
        for name in ("max_new_tokens", "top_k", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.limit is not None and self.limit < 1:
            raise ValueError(f"limit must be >= 1, got {self.limit}")
        if self.top_k < CGA_K:
            raise ValueError(f"top_k must be >= {CGA_K}, got {self.top_k}")
        if self.tail_samples < 0 or self.tail_samples == 1:
            raise ValueError(
                f"tail_samples must be 0 or >= 2 (a standard error needs two draws), "
                f"got {self.tail_samples}"
            )
        if self.tail_seed < 0:
            raise ValueError(f"tail_seed must be >= 0, got {self.tail_seed}")
        if self.order_seed is not None and self.order_seed < 0:
            raise ValueError(f"order_seed must be >= 0, got {self.order_seed}")
        if self.cache_chunk_size is not None and self.cache_chunk_size < 1:
            raise ValueError(f"cache_chunk_size must be >= 1, got {self.cache_chunk_size}")
        if self.context_prompts_per_tier < 1:
            raise ValueError(
                f"context_prompts_per_tier must be >= 1, got {self.context_prompts_per_tier}"
            )
        if self.context_tiers is None:
            if self.conversations is not None:
                raise ValueError("conversations is read only with context_tiers; set both")
        else:
            from gate.data.long_context import check_tiers

            check_tiers(self.context_tiers)
            if self.prompts is not None:
                raise ValueError("prompts and context_tiers are two prompt sets; give one of them")


def load_prompts(
    settings: FidelitySettings, *, apply_limit: bool = True, backend: Backend | None = None
) -> list[PromptLike]:
    """The fidelity prompt set (packaged unless ``settings.prompts``), cut to ``limit``.

    With ``settings.context_tiers`` it is the long-context set, cut to the tiers
    with ``backend``'s tokenizer and chat template (:func:`long_context_prompts`).
    """
    from gate.data.prompt_set import load_prompt_set

    if settings.context_tiers is not None:
        if backend is None:
            raise DataError(
                "long-context prompts are cut with the model's tokenizer",
                "pass the backend to load_prompts",
            )
        prompts: list[PromptLike] = list(long_context_prompts(backend, settings))
    else:
        prompts = list(load_prompt_set(settings.prompts))
    if apply_limit and settings.limit is not None:
        prompts = prompts[: settings.limit]
    if not prompts:
        raise DataError(
            "the fidelity prompt set is empty", "give a JSONL file with at least one prompt"
        )
    return prompts


def long_context_prompts(backend: Backend, settings: FidelitySettings) -> list[PromptLike]:
    """The long-context prompts of ``settings.context_tiers``, counted with ``backend``'s template.

    Token counts are those of :func:`encode`, so a prompt's tier is exactly
    where the pack's prompt length puts it.
    """
    from gate.data.long_context import build_long_context_set, load_conversations

    tiers = settings.context_tiers
    if tiers is None:
        raise DataError("no context tiers are set", "set [tiers.fidelity] context_tiers")
    positions = _model_positions(backend)
    longest = tiers[-1] + settings.max_new_tokens
    if positions is not None and longest > positions:
        raise ConfigError(
            f"[tiers.fidelity] context tier {tiers[-1]} + max_new_tokens "
            f"{settings.max_new_tokens} = {longest} tokens exceeds the model's {positions} positions",
            f"keep the largest context tier at most {positions} - max_new_tokens",
        )
    convs = load_conversations(settings.conversations)
    return list(
        build_long_context_set(
            convs,
            lambda turns: len(_encode_messages(backend, [(t.role, t.content) for t in turns])),
            lambda text: len(backend.encode_text(text)),
            tiers,
            settings.context_prompts_per_tier,
        )
    )


def _model_positions(backend: Backend) -> int | None:
    """The positions of an in-process model (``config.max_position_embeddings``), if known."""
    inner: Any = backend
    while getattr(inner, "inner", None) is not None:
        inner = inner.inner
    value = getattr(
        getattr(getattr(inner, "model", None), "config", None), "max_position_embeddings", None
    )
    return int(value) if isinstance(value, int) else None


def _encode_messages(backend: Backend, turns: Sequence[tuple[str, str]]) -> list[int]:
    if not isinstance(backend, EncodesMessages):
        raise ModelLoadError(
            f"backend {backend.name} cannot render multi-turn prompts",
            "use the single-turn fidelity prompts (leave context_tiers unset)",
        )
    return [int(i) for i in backend.encode_messages([{"role": r, "content": c} for r, c in turns])]


def encode(backend: Backend, prompt: PromptLike) -> list[int]:
    """Prompt ids: a multi-turn prompt (one with ``messages``) through the chat template
    as user/assistant turns, any other prompt as one user turn."""
    messages = getattr(prompt, "messages", None)
    if messages is not None:
        return _encode_messages(backend, [(t.role, t.content) for t in messages])
    return backend.encode_prompt(prompt.text)


def batches(
    lengths: Sequence[int], batch_size: int, *, order_seed: int | None = None
) -> list[list[int]]:
    """Indices grouped for scoring: by decreasing length (ties by index), ``batch_size`` each.

    Sorting keeps padding small; the grouping depends only on the lengths, so
    the recorder and a later candidate run form identical batches. With
    ``order_seed`` the indices are grouped in a seeded random order instead
    (``numpy.random.default_rng(order_seed).permutation``).
    """
    if order_seed is not None:
        perm = np.random.default_rng(order_seed).permutation(len(lengths))
        order = [int(i) for i in perm]
    else:
        order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    return [order[s : s + batch_size] for s in range(0, len(order), batch_size)]


def _full_rows(scores: TokenScores) -> np.ndarray:
    full = scores.full_logprobs
    if full is None:
        raise ModelLoadError(
            "the backend returned no full log-probability rows",
            "the fidelity tier needs score(..., full=True)",
        )
    to_numpy = getattr(full, "numpy", None)
    rows = to_numpy() if callable(to_numpy) and not isinstance(full, np.ndarray) else full
    return np.asarray(rows, dtype=np.float32)


def score_rows(
    backend: Backend,
    requests: Sequence[ScoreRequest],
    *,
    batch_size: int,
    top_k: int,
    progress: Progress | None = None,
    order_seed: int | None = None,
    label: str = "fidelity: scoring",
) -> Iterator[tuple[int, np.ndarray]]:
    """Yield ``(index, full log-prob rows [T, V])`` per request, one backend call per batch.

    Empty continuations are skipped. Memory stays bounded by one batch of rows.
    """
    for i, rows, _ in scored_rows(
        backend,
        requests,
        batch_size=batch_size,
        top_k=top_k,
        progress=progress,
        order_seed=order_seed,
        label=label,
    ):
        yield i, rows


def scored_rows(
    backend: Backend,
    requests: Sequence[ScoreRequest],
    *,
    batch_size: int,
    top_k: int,
    progress: Progress | None = None,
    order_seed: int | None = None,
    label: str = "fidelity: scoring",
) -> Iterator[tuple[int, np.ndarray, TokenScores]]:
    """:func:`score_rows` with each request's :class:`TokenScores` (a served answer's
    ``returned`` ids and ``unreturned_bound``); shown as progress task ``label``."""
    live = [i for i, r in enumerate(requests) if len(r.continuation) > 0]
    lengths = [len(requests[i].context) + len(requests[i].continuation) for i in live]
    done = 0
    with progress_task(label, total=len(live)) as step:
        for group in batches(lengths, batch_size, order_seed=order_seed):
            idx = [live[g] for g in group]
            scored = backend.score(
                [requests[i] for i in idx], top_k=top_k, full=True, batch_size=batch_size
            )
            for i, s in zip(idx, scored, strict=True):
                yield i, _full_rows(s), s
            done += len(idx)
            step(len(idx))
            if progress is not None:
                progress(done, len(live))


# --------------------------------------------------------------------------- record


def record(
    backend: Backend,
    prompts: Sequence[PromptLike],
    settings: FidelitySettings,
    path: Path,
    *,
    progress: Progress | None = None,
) -> Path:
    """Record the baseline's reference pack for ``prompts`` at ``path``.

    Generation is batched greedy; each output is then kept up to the first
    position where the baseline's own batched teacher-forced argmax differs
    from the generated token (re-scored until stable), so the pack's invariant
    ``output_ids == topk_ids[:, 0]`` holds on the scorer the candidate uses.
    The pack's header records each cut (``truncated``, ``n_generated``), and a
    prompt cut to nothing stays in the pack with no output (it is not scored);
    :func:`recording_provenance` counts both.

    Per output position the pack stores the top-k, the tail mass and
    ``settings.tail_samples`` tokens drawn from the tail (prompt ``j`` with the
    generator seeded ``[tail_seed, j]``, :func:`gate.metrics.fidelity.draw_tail_samples`),
    sorted by id, with their log-probs. When the top-k covers the whole
    vocabulary there is no tail and no samples are stored. Nor are they for a
    served baseline (``exact_full_rows`` False): its rows beyond the returned
    top-k are a flat guess, so a draw from them and its log-prob would be
    invented; the pack says so (:data:`NO_TAIL_SERVED`) and the KL against it
    is the top-k + tail-bucket lower bound. Its top-k and tail masses stay
    exact: the engine returns ``max(k, full_top_k)`` normalized log-probs.
    """
    if not prompts:
        raise DataError("the fidelity prompt set is empty", "give at least one prompt")
    prompt_ids = [encode(backend, p) for p in prompts]
    empty = [p.id for p, ids in zip(prompts, prompt_ids, strict=True) if not ids]
    if empty:
        raise DataError(f"prompt {empty[0]!r} encodes to no tokens", "remove empty prompts")
    with progress_task(
        "fidelity: generating reference outputs", total=len(prompt_ids), counted_below=True
    ):
        outputs = backend.generate(
            prompt_ids, max_new_tokens=settings.max_new_tokens, batch_size=settings.batch_size
        )
    outputs = [list(o) for o in outputs]
    generated = [len(o) for o in outputs]
    truncated = [False] * len(prompts)
    rows_by_prompt: dict[int, np.ndarray] = {}
    for round_ in range(1, _MAX_RECORD_ROUNDS + 1):
        requests = [ScoreRequest(c, o) for c, o in zip(prompt_ids, outputs, strict=True)]
        rows_by_prompt = dict(
            score_rows(
                backend,
                requests,
                batch_size=settings.batch_size,
                top_k=settings.top_k,
                progress=progress,
                label="fidelity: scoring reference outputs"
                + (f" (round {round_}: cut outputs re-scored)" if round_ > 1 else ""),
            )
        )
        changed = False
        for i, rows in rows_by_prompt.items():
            y = np.asarray(outputs[i], dtype=np.int64)
            ok = (fm.target_ranks(rows, y) == 0) & ~fm.nonfinite_rows(rows)
            if not ok.all():
                cut = int(np.argmin(ok))
                outputs[i] = outputs[i][:cut]
                truncated[i] = changed = True
        if not changed:
            break
    else:  # pragma: no cover - needs a scorer whose argmax keeps moving
        raise DataError(
            "the baseline's teacher-forced argmax did not settle while recording",
            "record on a deterministic device (CPU, or CUDA with deterministic kernels)",
        )
    vocab = next((int(r.shape[-1]) for r in rows_by_prompt.values()), None)
    m = settings.tail_samples if vocab is None or settings.top_k < vocab else 0
    # a served baseline's rows are exact only in its returned top-k: no sampled tail
    no_tail = NO_TAIL_SERVED if m and not exact_full_rows(backend) else None
    m = 0 if no_tail else m
    entries = []
    for i, (prompt, ids) in enumerate(zip(prompts, prompt_ids, strict=True)):
        out = np.asarray(outputs[i], dtype=np.int64)
        if out.size:
            rows = rows_by_prompt[i]
            top_ids, top_lps = fm.topk_of_rows(rows, settings.top_k)
            tail = fm.tail_logmass(rows, top_ids)
            rng = np.random.default_rng([settings.tail_seed, i])
            sample_ids = np.sort(fm.draw_tail_samples(rows, top_ids, m, rng), axis=-1)
            sample_lps = np.take_along_axis(rows, sample_ids, axis=-1)
        else:
            top_ids = np.zeros((0, settings.top_k), dtype=np.int64)
            top_lps = np.zeros((0, settings.top_k), dtype=np.float32)
            tail = np.zeros((0,), dtype=np.float32)
            sample_ids = np.zeros((0, m), dtype=np.int64)
            sample_lps = np.zeros((0, m), dtype=np.float32)
        meta = PackPrompt(
            id=prompt.id,
            category=prompt.category,
            length=prompt.length,
            n_prompt=len(ids),
            n_output=int(out.size),
            truncated=truncated[i],
            n_generated=generated[i],
        )
        entries.append(
            PackEntry(
                meta,
                np.asarray(ids),
                out,
                top_ids,
                top_lps,
                np.asarray(tail),
                sample_ids,
                sample_lps,
            )
        )
    provenance = backend.provenance()
    document = provenance.to_document()
    return write_pack(
        path,
        entries,
        k=settings.top_k,
        max_new_tokens=settings.max_new_tokens,
        tokenizer_sha256=provenance.tokenizer_identity(),
        prompt_set_sha256=prompt_set_sha256(prompts),
        model={
            key: document[key] for key in ("source", "recipe", "model_family") if key in document
        },
        logprob_dtype=settings.logprob_dtype,
        m=m,
        sample_seed=settings.tail_seed if m else None,
        vocab_size=vocab,
        no_tail_samples=no_tail,
    )


#: Why a pack recorded from a served baseline holds no sampled tail (its header says so).
NO_TAIL_SERVED = (
    "no sampled tail in the pack: its baseline was served by an engine, which returns the "
    "log-probs of its top tokens only, so no tail token can be drawn with a known log-prob"
)


def recording_provenance(pack: ReferencePack) -> dict[str, Any]:
    """What the recorder cut or dropped, as flat provenance entries of the new baseline.

    ``fidelity_prompts_truncated``: prompts whose output was cut at the
    baseline's first self-disagreement (its batched teacher-forced argmax
    differs from the generated token); ``fidelity_prompts_empty``: prompts cut
    to nothing (or that generated nothing), kept in the pack but never scored;
    ``fidelity_tokens_cut``: generated tokens the cuts removed.
    """
    summary = pack.recording_summary()
    out: dict[str, Any] = {
        "fidelity_pack": f"v{pack.version}, k={pack.k}, m={pack.m}",
        "fidelity_prompts": summary.prompts,
        "fidelity_prompts_truncated": summary.truncated,
        "fidelity_prompts_empty": summary.empty,
    }
    if summary.tokens_cut is not None:
        out["fidelity_tokens_cut"] = summary.tokens_cut
    if summary.no_tail_samples is not None:
        out["fidelity_no_tail_samples"] = summary.no_tail_samples
    return out


# -------------------------------------------------------------------------- measure


@dataclass(frozen=True)
class PromptScores:
    """Fidelity values of one scored prompt."""

    index: int
    meta: PackPrompt
    positions: fm.PositionScores
    #: The KL is the interval of a served candidate's estimate (``positions.kl_lower`` ..
    #: ``positions.kl``), not a single value.
    interval: bool = False


def verify_candidate(
    backend: Backend, pack: ReferencePack, prompts: Sequence[PromptLike] | None = None
) -> None:
    """Refuse a pack from another tokenizer or prompt set (``BaselineError``, exit 4).

    Compares the tokenizer identities when both sides know them (the rule the
    baseline check uses) and, when the prompt texts are at hand, the prompt-set
    hash and the candidate's encoding of every prompt with the pack's token ids.
    """
    tokenizer_sha = backend.provenance().tokenizer_identity()
    if prompts is not None:
        prompts = list(prompts)[: len(pack)]  # a pack holds the first N prompts of its set
    check_compatible(
        pack,
        tokenizer_sha256=tokenizer_sha,
        prompt_set_sha256=prompt_set_sha256(prompts) if prompts is not None else None,
    )
    if prompts is not None:
        by_id = {p.id: p for p in prompts}
        for j, meta in enumerate(pack.prompts):
            if meta.id in by_id:
                check_prompt_ids(pack, j, encode(backend, by_id[meta.id]))


def score_pack(
    backend: Backend,
    pack: ReferencePack,
    settings: FidelitySettings,
    *,
    baseline_backend: Backend | None = None,
    progress: Progress | None = None,
) -> list[PromptScores]:
    """Teacher-forced candidate scores against the pack, one batched pass per prompt.

    With ``baseline_backend`` the baseline is scored live on the same tokens
    and the KL is exact; otherwise it comes from the pack: the sampled-tail
    estimate (format v3), or the top-k + tail-bucket lower bound (v1, v2).
    ``settings.skip_first_token`` drops each prompt's first position; a prompt
    left with no position is not scored.
    """
    count = len(pack) if settings.limit is None else min(settings.limit, len(pack))
    requests = [
        ScoreRequest(pack.prompt_ids(j).tolist(), pack.output_ids(j).tolist()) for j in range(count)
    ]
    base_rows: dict[int, np.ndarray] = {}
    if baseline_backend is not None:
        base_rows = dict(
            score_rows(
                baseline_backend,
                requests,
                batch_size=settings.batch_size,
                top_k=1,
                label="fidelity: scoring the live baseline",
            )
        )
    results: list[PromptScores] = []
    # a served candidate's rows are exact only within its returned top-K: its KL is the
    # interval of the estimate over the tokens it did not return (when it says which it
    # returned), else the top-k + tail-bucket bound
    use_samples = uses_tail_samples(backend)
    for j, rows, scores in scored_rows(
        backend,
        requests,
        batch_size=settings.batch_size,
        top_k=1,
        progress=progress,
        order_seed=settings.order_seed,
        label="fidelity: scoring against the reference",
    ):
        ids, lps, tail = pack.topk(j)
        sample_ids, sample_lps = pack.samples(j)
        returned = None if use_samples else scores.returned
        if not use_samples and returned is None:
            sample_ids, sample_lps = sample_ids[:, :0], sample_lps[:, :0]
        _check_ids_fit(pack, rows.shape[-1], ids, sample_ids)
        positions = fm.score_positions(
            pack.output_ids(j),
            ids,
            lps,
            tail,
            rows,
            base_full_logprobs=base_rows.get(j),
            base_sample_ids=sample_ids,
            base_sample_logprobs=sample_lps,
            cand_returned=returned,
            cand_bound=scores.unreturned_bound,
            cga_k=CGA_K,
            logprob_dtype=LOGPROB_DTYPES[pack.logprob_dtype],
        )
        if settings.skip_first_token:
            positions = positions.from_position(1)
        if positions.length:
            interval = returned is not None and sample_ids.shape[-1] > 0
            results.append(PromptScores(j, pack.prompts[j], positions, interval))
    if not results:
        raise DataError(
            "the reference pack has no output tokens to score",
            "re-record the baseline; its outputs were all empty",
        )
    results.sort(key=lambda r: r.index)
    return results


def uses_tail_samples(backend: Backend) -> bool:
    """Whether the pack's sampled tail tokens can be scored: the candidate's full rows are
    exact (in process), not rebuilt from a served top-k (``exact_full_rows = False``)."""
    return exact_full_rows(backend)


def _check_ids_fit(pack: ReferencePack, vocab: int, *arrays: np.ndarray) -> None:
    """Refuse a pack whose token ids do not exist in the candidate's vocabulary."""
    if any(a.size and int(a.max()) >= vocab for a in arrays):
        raise BaselineError(
            f"reference pack {pack.path or '<memory>'}: token ids beyond the candidate's "
            f"vocabulary of {vocab}",
            "the pack comes from another tokenizer; a candidate must share the baseline's",
        )


def _groups(
    results: Sequence[PromptScores], context_tiers: Sequence[int] | None = None
) -> dict[str, list[int]]:
    """Slices: ``category:<c>``, ``length:<t>`` and, with ``context_tiers``, ``context:<budget>``
    (the tier a prompt's token count falls in, :func:`gate.data.long_context.context_tier`)."""
    from gate.data.long_context import context_tier

    groups: dict[str, list[int]] = {}
    for n, r in enumerate(results):
        groups.setdefault(f"category:{r.meta.category}", []).append(n)
        groups.setdefault(f"length:{r.meta.length}", []).append(n)
        if context_tiers:
            tier = context_tier(r.meta.n_prompt, context_tiers)
            groups.setdefault(f"context:{tier}", []).append(n)
    return dict(sorted(groups.items()))


def _pooled(results: Sequence[PromptScores], indices: Sequence[int], field: str) -> np.ndarray:
    return np.concatenate([getattr(results[i].positions, field) for i in indices])


def kl_label(k: int, m: int, exact: bool, interval: bool = False, unbounded: bool = False) -> str:
    """How the KL was obtained, as the reports print it."""
    if exact:
        return "exact (live baseline)"
    if interval and unbounded:
        return (
            f"interval of the estimate (top-{k} exact + {m} sampled tail tokens per position) "
            "over the tokens the server did not return: unbounded above (sampled tail tokens "
            "outside its answer), so the value is its lower end; the whole vocabulary "
            "(--served-logprobs) bounds it"
        )
    if interval:
        return (
            f"interval of the estimate (top-{k} exact + {m} sampled tail tokens per position) "
            "over the tokens the server did not return; value: its upper end"
        )
    if m:
        return f"estimate: top-{k} exact + {m} sampled tail tokens per position (unbiased)"
    return (
        f"top-{k} + tail bucket (lower bound of the exact KL; no sampled tail in the pack, "
        "or a served candidate whose rows are exact only in its returned top-k)"
    )


def _standard_error(results: Sequence[PromptScores], indices: Sequence[int]) -> float:
    """Standard error of the macro mean KL: per-position draws are independent.

    Prompt ``p``'s mean over its ``T_p`` positions has variance
    ``sum_i se_i^2 / T_p^2``; the mean of ``n`` prompt means has
    ``sum_p var_p / n^2``.
    """
    var = sum(
        float((results[i].positions.kl_se ** 2).sum()) / results[i].positions.length ** 2
        for i in indices
    )
    return float(np.sqrt(var) / max(len(indices), 1))


def measurements(
    results: Sequence[PromptScores],
    *,
    k: int,
    exact: bool,
    tail_mass_mean: float | None = None,
    m: int = 0,
    recording: RecordingSummary | None = None,
    context_tiers: Sequence[int] | None = None,
    interval: bool = False,
) -> list[Measurement]:
    """Aggregate per-prompt scores into the fidelity measurements (see the catalog).

    ``tail_mass_mean`` (the baseline's mean probability outside its top-k, from
    the pack) is reported with the KL so a reader can judge the bound; ``m``
    (sampled tail tokens of the pack) says whether the KL is an estimate;
    ``recording`` (the pack's cut and empty prompts) is reported as well;
    ``context_tiers`` adds a ``context:<budget>`` slice per tier. With
    ``interval`` (a served candidate) the KL values are the upper ends of
    :func:`gate.metrics.fidelity.sampled_tail_kl_interval`; the details give both
    ends of the mean (``interval``), the positions where they meet
    (``interval_exact_positions``) and those unbounded above
    (``interval_unbounded_positions``). Where a position is unbounded above the
    values are the lower ends instead (``gated_end``: ``lower``; the upper end of
    the mean is then ``None``): a gate on an end that is infinite would block
    every served build, the baseline's own included.
    """
    ids = [r.meta.id for r in results]
    groups = _groups(results, context_tiers)
    everything = list(range(len(results)))
    upper_all = _pooled(results, everything, "kl")
    lower_all = _pooled(results, everything, "kl_lower")
    # a served candidate's KL is gated on the upper end of its interval; where that end is
    # unbounded (a sampled tail token outside the answer), on the lower end, labelled so
    unbounded = int(((upper_all >= fm.KL_CAP) & (lower_all < fm.KL_CAP)).sum()) if interval else 0
    gated = "kl_lower" if unbounded else "kl"
    kl_all = lower_all if unbounded else upper_all
    bound_all = _pooled(results, everything, "kl_bound")
    se_all = _pooled(results, everything, "kl_se")
    nonfinite = int(sum(int(r.positions.nonfinite.sum()) for r in results))
    capped = (
        int((kl_all >= fm.KL_CAP).sum())
        if unbounded
        else int(sum(int(r.positions.capped.sum()) for r in results))
    )
    common: dict[str, Any] = {
        "prompts": len(results),
        "tokens": int(kl_all.size),
        "nonfinite_positions": nonfinite,
        "capped_positions": capped,
    }
    if recording is not None:
        common["reference_prompts_truncated"] = recording.truncated
        common["reference_prompts_empty"] = recording.empty
    kind = "exact" if exact else ("interval" if interval else ("estimate" if m else "bound"))
    no_tail = recording.no_tail_samples if recording is not None and kind == "bound" else None
    kl_details: dict[str, Any] = {
        **common,
        MeasurementDetail.KL_METHOD: (
            f"top-{k} + tail bucket (lower bound of the exact KL: {no_tail})"
            if no_tail
            else kl_label(k, m, exact, interval, bool(unbounded))
        ),
        "kl_kind": kind,
        "k": k,
        "m": m,
        "token_mean": float(kl_all.mean()),
        "tail_mass_mean": tail_mass_mean,
    }
    mean_details = dict(kl_details)
    if kind == "estimate" or (kind == "interval" and not unbounded):
        se_mean = _standard_error(results, everything)
        mean_details[MeasurementDetail.KL_METHOD] = (
            f"{kl_details[MeasurementDetail.KL_METHOD]}; standard error of the mean {se_mean:.2g} nats"
        )
        mean_details["standard_error"] = se_mean
        mean_details["token_mean_standard_error"] = float(
            np.sqrt((se_all**2).sum()) / max(se_all.size, 1)
        )
    if interval:
        lower_mean = float(np.mean([r.positions.kl_lower.mean() for r in results]))
        upper_mean = None if unbounded else float(np.mean([r.positions.kl.mean() for r in results]))
        mean_details["interval"] = [lower_mean, upper_mean]
        mean_details["interval_exact_positions"] = int((lower_all == upper_all).sum())
        mean_details["interval_unbounded_positions"] = unbounded
        mean_details["gated_end"] = "lower" if unbounded else "upper"
        mean_details[MeasurementDetail.KL_METHOD] = (
            f"{mean_details[MeasurementDetail.KL_METHOD]}; mean in "
            f"[{lower_mean:.4g}, {'unbounded' if upper_mean is None else format(upper_mean, '.4g')}]"
            " nats"
        )
    bound_details = {
        **common,
        MeasurementDetail.KL_METHOD: f"top-{k} + tail bucket: a lower bound of the exact KL",
        "k": k,
        "token_mean": float(bound_all.mean()),
    }

    dp_all = _pooled(results, everything, "delta_p")
    dp_details = {**common, **{f"pooled_{k_}": v for k_, v in fm.delta_p_summary(dp_all).items()}}
    # metric -> (its value on one prompt's positions, details)
    per_prompt: list[tuple[str, Callable[[fm.PositionScores], float], dict[str, Any]]] = [
        ("fidelity.cga", lambda p: float(p.cga.mean()), common),
        ("fidelity.cga_at_5", lambda p: float(p.cga_at_k.mean()), common),
        ("fidelity.kl_mean", lambda p: float(getattr(p, gated).mean()), mean_details),
        ("fidelity.kl_bound_mean", lambda p: float(p.kl_bound.mean()), bound_details),
        ("fidelity.delta_p_mean", lambda p: float(p.delta_p.mean()), dp_details),
        ("fidelity.delta_p_rms", lambda p: float(np.sqrt(np.mean(p.delta_p**2))), common),
    ]
    out = [
        from_samples(name, [fn(r.positions) for r in results], ids, groups=groups, details=details)
        for name, fn, details in per_prompt
    ]
    summary = fm.kl_summary(kl_all)
    bound_summary = fm.kl_summary(bound_all)
    slice_summaries = {
        key: fm.kl_summary(_pooled(results, idx, gated)) for key, idx in groups.items()
    }
    worst = int(np.argmax([float(getattr(r.positions, gated).max()) for r in results]))
    for stat in (*fm.KL_PERCENTILES, "max"):
        name = f"fidelity.kl_{stat}"
        details = dict(kl_details)
        details["bound"] = bound_summary[stat]
        if stat == "max":
            details["worst_prompt"] = ids[worst]
        out.append(
            Measurement(
                name=name,
                value=summary[stat],
                breakdown={
                    key: Measurement(name=name, value=s[stat]) for key, s in slice_summaries.items()
                }
                if stat in SLICED_POINT_STATS
                else {},
                details=details,
            )
        )
    return out


def measure(
    backend: Backend,
    pack: ReferencePack,
    settings: FidelitySettings,
    *,
    prompts: Sequence[PromptLike] | None = None,
    baseline_backend: Backend | None = None,
    progress: Progress | None = None,
) -> list[Measurement]:
    """The fidelity measurements of ``backend`` against ``pack`` (verified first).

    A backend that scores through a KV-cache method scores in chunks of
    ``settings.cache_chunk_size``; the measurements then say how many of the
    scored prompts the method touched (:mod:`gate.tiers.exercised`).
    """
    verify_candidate(backend, pack, prompts)
    before = exercised.counts(backend)
    chunking = (
        backend.scoring_chunk(settings.cache_chunk_size)
        if isinstance(backend, ChunksScoring)
        else nullcontext()
    )
    with chunking:
        results = score_pack(
            backend, pack, settings, baseline_backend=baseline_backend, progress=progress
        )
    interval = baseline_backend is None and any(r.interval for r in results)
    out = measurements(
        results,
        k=pack.k,
        exact=baseline_backend is not None,
        tail_mass_mean=pack.mean_tail_mass(results[-1].index),
        m=pack.m if uses_tail_samples(backend) or baseline_backend is not None or interval else 0,
        recording=pack.recording_summary(),
        context_tiers=settings.context_tiers,
        interval=interval,
    )
    stamped = exercised.attach(out, backend, before)
    requests = {
        r.meta.id: (pack.prompt_ids(r.index).tolist(), pack.output_ids(r.index).tolist())
        for r in results
    }
    return exercised.mark_exercised_ids(stamped, backend, requests)

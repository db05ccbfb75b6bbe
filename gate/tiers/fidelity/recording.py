"""Recording the baseline's reference pack (:mod:`gate.store.reference`).

Greedy outputs, each cut at the baseline's first self-disagreement (its
batched teacher-forced argmax differs from the generated token) so the pack's
invariant ``output_ids == topk_ids[:, 0]`` holds; per output position the
top-k log-probs, the tail log-mass ``log sum_{v not in top-k} p(v)`` and ``m`` tokens
drawn from the renormalized tail. What was cut or dropped is the new
baseline's provenance (:func:`recording_provenance`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from gate.errors import DataError
from gate.metrics import fidelity as fm
from gate.models.backends.base import Backend, ScoreRequest
from gate.models.backends.capabilities import exact_full_rows
from gate.progress import task as progress_task
from gate.store.reference import (
    PackEntry,
    PackLayout,
    PackOrigin,
    PackPrompt,
    PromptLike,
    ReferencePack,
    prompt_set_sha256,
    write_pack,
)
from gate.tiers.fidelity.prompts import encode
from gate.tiers.fidelity.scoring import Progress, score_rows
from gate.tiers.fidelity.settings import FidelitySettings

#: Re-scoring rounds the recorder allows for argmax/generation disagreements to settle.
_MAX_RECORD_ROUNDS = 4


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
    rows_by_prompt, truncated = _settle_outputs(backend, prompt_ids, outputs, settings, progress)
    vocab = next((int(r.shape[-1]) for r in rows_by_prompt.values()), None)
    m = settings.tail_samples if vocab is None or settings.top_k < vocab else 0
    # a served baseline's rows are exact only in its returned top-k: no sampled tail
    no_tail = NO_TAIL_SERVED if m and not exact_full_rows(backend) else None
    m = 0 if no_tail else m
    entries = []
    for i, (prompt, ids) in enumerate(zip(prompts, prompt_ids, strict=True)):
        out = np.asarray(outputs[i], dtype=np.int64)
        meta = PackPrompt(
            id=prompt.id,
            category=prompt.category,
            length=prompt.length,
            n_prompt=len(ids),
            n_output=int(out.size),
            truncated=truncated[i],
            n_generated=generated[i],
        )
        rows = rows_by_prompt[i] if out.size else None
        entries.append(_pack_entry(meta, np.asarray(ids), out, rows, settings, m=m, index=i))
    layout = PackLayout(
        k=settings.top_k,
        max_new_tokens=settings.max_new_tokens,
        logprob_dtype=settings.logprob_dtype,
        m=m,
        sample_seed=settings.tail_seed if m else None,
        no_tail_samples=no_tail,
    )
    return write_pack(path, entries, layout, _pack_origin(backend, prompts, vocab))


def _pack_origin(backend: Backend, prompts: Sequence[PromptLike], vocab: int | None) -> PackOrigin:
    """The baseline's tokenizer, prompt set, model (source, recipe, family) and vocabulary."""
    provenance = backend.provenance()
    document = provenance.to_document()
    return PackOrigin(
        tokenizer_sha256=provenance.tokenizer_identity(),
        prompt_set_sha256=prompt_set_sha256(prompts),
        model={
            key: document[key] for key in ("source", "recipe", "model_family") if key in document
        },
        vocab_size=vocab,
    )


def _settle_outputs(
    backend: Backend,
    prompt_ids: Sequence[Sequence[int]],
    outputs: list[list[int]],
    settings: FidelitySettings,
    progress: Progress | None,
) -> tuple[dict[int, np.ndarray], list[bool]]:
    """Score ``outputs`` teacher-forced and cut each, in place, before the first position
    where the baseline's argmax differs from the generated token (or its row is not
    finite), re-scoring until no output is cut (at most :data:`_MAX_RECORD_ROUNDS`
    rounds). Returns the last round's rows by prompt and which outputs were cut."""
    truncated = [False] * len(outputs)
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
            return rows_by_prompt, truncated
    raise DataError(  # pragma: no cover - needs a scorer whose argmax keeps moving
        "the baseline's teacher-forced argmax did not settle while recording",
        "record on a deterministic device (CPU, or CUDA with deterministic kernels)",
    )


def _pack_entry(
    meta: PackPrompt,
    prompt_ids: np.ndarray,
    out: np.ndarray,
    rows: np.ndarray | None,
    settings: FidelitySettings,
    *,
    m: int,
    index: int,
) -> PackEntry:
    """Prompt ``index``'s entry: per output position the top-k of its ``rows``, the log
    tail mass and ``m`` tail tokens drawn with the generator seeded ``[tail_seed, index]``,
    sorted by id, with their log-probs (empty arrays for an output cut to nothing)."""
    if rows is not None:
        top_ids, top_lps = fm.topk_of_rows(rows, settings.top_k)
        tail = fm.tail_logmass(rows, top_ids)
        rng = np.random.default_rng([settings.tail_seed, index])
        sample_ids = np.sort(fm.draw_tail_samples(rows, top_ids, m, rng), axis=-1)
        sample_lps = np.take_along_axis(rows, sample_ids, axis=-1)
    else:
        top_ids = np.zeros((0, settings.top_k), dtype=np.int64)
        top_lps = np.zeros((0, settings.top_k), dtype=np.float32)
        tail = np.zeros((0,), dtype=np.float32)
        sample_ids = np.zeros((0, m), dtype=np.int64)
        sample_lps = np.zeros((0, m), dtype=np.float32)
    return PackEntry(
        meta, prompt_ids, out, top_ids, top_lps, np.asarray(tail), sample_ids, sample_lps
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

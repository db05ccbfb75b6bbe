"""A candidate scored against the reference pack, prompt by prompt.

One batched teacher-forced pass over the pack's ``prompt + reference output``;
per position the values of :func:`gate.metrics.fidelity.score_positions`
(CGA, CGA@k, KL, its top-k + tail-bucket bound, delta-p). The KL is exact with
a live baseline, the sampled-tail estimate (pack format v3) or its interval
for a served candidate, else the top-k + tail-bucket lower bound."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gate.errors import BaselineError, DataError
from gate.metrics import fidelity as fm
from gate.models.backends.base import Backend, ScoreRequest
from gate.models.backends.capabilities import exact_full_rows
from gate.store.reference import (
    LOGPROB_DTYPES,
    PackPrompt,
    PromptLike,
    ReferencePack,
    check_pack_compatible,
    check_prompt_ids,
    prompt_set_sha256,
)
from gate.tiers.fidelity.prompts import encode
from gate.tiers.fidelity.scoring import Progress, score_rows, scored_rows
from gate.tiers.fidelity.settings import CGA_K, FidelitySettings


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
    check_pack_compatible(
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
            fm.BaselineReference(
                pack.output_ids(j),
                ids,
                lps,
                tail,
                full_logprobs=base_rows.get(j),
                sample_ids=sample_ids,
                sample_logprobs=sample_lps,
            ),
            rows,
            served=None if returned is None else fm.ServedRows(returned, scores.unreturned_bound),
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

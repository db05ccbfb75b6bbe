"""The baseline's answers as the pack stores them, and a build's own answers to the
same prompts (greedy, or coupled samples)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gate.errors import DataError, UsageError
from gate.models.backends.base import Backend
from gate.models.backends.capabilities import SamplesCoupled
from gate.models.backends.sampling import Sampling
from gate.progress import task as progress_task
from gate.store.reference import PackPrompt, ReferencePack


@dataclass(frozen=True)
class StoredAnswer:
    """What the pack holds of the baseline's answer to one prompt."""

    index: int
    meta: PackPrompt
    #: ``b``: the stored tokens (the whole answer unless the recorder cut it).
    tokens: tuple[int, ...]
    #: ``n_b``: tokens the baseline generated; None when the pack cannot tell.
    generated: int | None

    @property
    def whole(self) -> bool:
        """The stored tokens are the whole answer (the recorder cut nothing)."""
        return not self.meta.truncated and self.generated == len(self.tokens)


def stored_answers(pack: ReferencePack, limit: int | None = None) -> list[StoredAnswer]:
    """The baseline's answers in the pack (its first ``limit`` prompts)."""
    count = len(pack) if limit is None else min(limit, len(pack))
    out = []
    for j in range(count):
        meta = pack.prompts[j]
        tokens = tuple(int(t) for t in pack.output_ids(j))
        generated = meta.n_generated
        if generated is None and not meta.truncated:
            generated = len(tokens)
        out.append(StoredAnswer(j, meta, tokens, generated))
    return out


def answer(
    backend: Backend,
    pack: ReferencePack,
    answers: Sequence[StoredAnswer],
    batch_size: int,
    sampling: Sampling | None = None,
) -> list[list[int]]:
    """A build's answers to the pack's prompts, up to the pack's cap: greedy, or
    ``sampling``'s coupled samples keyed by each prompt's index in the pack."""
    prompts = [pack.prompt_ids(a.index).tolist() for a in answers]
    cap = pack.max_new_tokens
    with progress_task("generation: answering", total=len(prompts), counted_below=True):
        if sampling is None:
            out = backend.generate(prompts, max_new_tokens=cap, batch_size=batch_size)
        elif isinstance(backend, SamplesCoupled):
            keys = [a.index for a in answers]
            out = backend.generate_sampled(
                prompts, keys, max_new_tokens=cap, sampling=sampling, batch_size=batch_size
            )
        else:
            raise draws_its_own()
    answered = [list(o) for o in out]
    too_long = [
        a.meta.id for a, c in zip(answers, answered, strict=True) if len(c) > pack.max_new_tokens
    ]
    if too_long:
        raise DataError(
            f"the candidate answered {too_long[0]!r} beyond the cap of {pack.max_new_tokens} tokens",
            "the backend must stop at max_new_tokens",
        )
    return answered


def draws_its_own() -> UsageError:
    """The refusal of sampled answers from a build that cannot draw coupled samples."""
    return UsageError(
        "sampled answers ([tiers.generation] seed) are drawn in process, with random numbers"
        " shared by both builds; this build cannot draw them (a served engine draws its own,"
        " a speculative build verifies its drafts greedily)",
        "gate it on greedy answers (a baseline recorded without [tiers.generation] seed)",
    )


__all__ = ["StoredAnswer", "answer", "draws_its_own", "stored_answers"]

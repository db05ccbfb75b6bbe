"""The baseline's sampled answers (artifact :data:`SAMPLED_ARTIFACT`) and the checks
that a run's sampling fits the build and the baseline."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gate.errors import BaselineError, ConfigError
from gate.models.backends.base import Backend
from gate.models.backends.sampling import Sampling
from gate.store.reference import ReferencePack
from gate.tiers.generation.answers import StoredAnswer, answer, draws_its_own, stored_answers
from gate.tiers.generation.settings import GenerationSettings

#: The artifact holding the baseline's sampled answers (:class:`SampledAnswers`).
SAMPLED_ARTIFACT = "generation-sampled"


@dataclass(frozen=True)
class SampledAnswers:
    """The baseline's sampled answers (artifact :data:`SAMPLED_ARTIFACT`, JSON): the
    sampling they were drawn with, the cap, and each prompt's tokens by prompt id."""

    sampling: Sampling
    max_new_tokens: int
    answers: Mapping[str, tuple[int, ...]]

    @classmethod
    def draw(
        cls,
        backend: Backend,
        pack: ReferencePack,
        sampling: Sampling,
        *,
        batch_size: int,
        limit: int | None = None,
    ) -> SampledAnswers:
        """The baseline build's sampled answers to the pack's prompts."""
        answers = stored_answers(pack, limit)
        drawn = answer(backend, pack, answers, batch_size, sampling)
        return cls(
            sampling,
            pack.max_new_tokens,
            {a.meta.id: tuple(c) for a, c in zip(answers, drawn, strict=True)},
        )

    def write(self, path: Path) -> None:
        """Write the JSON artifact."""
        body = {
            "sampling": sampled_facts(self.sampling),
            "max_new_tokens": self.max_new_tokens,
            "answers": {k: list(v) for k, v in self.answers.items()},
        }
        path.write_text(json.dumps(body), encoding="utf-8")

    @classmethod
    def read(cls, path: Path) -> SampledAnswers:
        """Read the JSON artifact; a malformed one is a one-line BaselineError."""
        try:
            body = json.loads(path.read_text(encoding="utf-8"))
            facts = body["sampling"]
            sampling = Sampling(
                int(facts["seed"]), float(facts["temperature"]), float(facts["top_p"])
            )
            answers = {str(k): tuple(int(t) for t in v) for k, v in body["answers"].items()}
            return cls(sampling, int(body["max_new_tokens"]), answers)
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise BaselineError(
                f"the baseline's sampled answers ({path.name}) cannot be read: {exc}",
                "record the baseline again",
            ) from None

    def check_matches(self, sampling: Sampling, cap: int | None = None) -> None:
        """The run asks for the sampling (and ``cap``, unless None) these answers were drawn
        with (ConfigError)."""
        cap = self.max_new_tokens if cap is None else cap
        if sampling != self.sampling or cap != self.max_new_tokens:
            raise ConfigError(
                f"the baseline's answers were sampled with {_described(self.sampling)} up to"
                f" {self.max_new_tokens} tokens; this run asks for {_described(sampling)}"
                f" up to {cap}",
                "set [tiers.generation] as the baseline was recorded, or record it again",
            )

    def as_stored(self, answers: Sequence[StoredAnswer]) -> list[StoredAnswer]:
        """``answers`` with the sampled tokens in place of the greedy ones (each whole)."""
        missing = [a.meta.id for a in answers if a.meta.id not in self.answers]
        if missing:
            raise BaselineError(
                f"the baseline's sampled answers lack prompt {missing[0]!r}",
                "record the baseline again with the same [tiers.fidelity] limit",
            )
        out = []
        for a in answers:
            tokens = self.answers[a.meta.id]
            meta = dataclasses.replace(a.meta, truncated=False, n_generated=len(tokens))
            out.append(StoredAnswer(a.index, meta, tokens, len(tokens)))
        return out


def no_sampled_answers(sampling: Sampling) -> BaselineError:
    """The refusal of a seed against a baseline that stored no sampled answers."""
    return BaselineError(
        f"[tiers.generation] seed = {sampling.seed} compares sampled answers, and the"
        " baseline holds none",
        "record the baseline with the same [tiers.generation] seed, or unset it",
    )


def check_sampling_fits(
    settings: GenerationSettings,
    *,
    coupled: bool,
    run_mode: bool,
    recorded: SampledAnswers | None,
) -> None:
    """Before anything loads: sampled answers need a build that draws coupled samples
    (``coupled``: in process, not speculative) and, in run mode, the baseline's own
    ``recorded`` with the same sampling; each refusal one line (exit 4). A build found
    without the capability when it loads is refused when it answers (:func:`answer`)."""
    sampling = settings.sampling
    if sampling is None:
        return
    if not coupled:
        raise draws_its_own()
    if not run_mode:
        return
    if recorded is None:
        raise no_sampled_answers(sampling)
    recorded.check_matches(sampling)


def sampled_facts(sampling: Sampling) -> dict[str, Any]:
    """The sampling as stored and reported: seed, temperature, top_p."""
    return {"seed": sampling.seed, "temperature": sampling.temperature, "top_p": sampling.top_p}


def _described(sampling: Sampling) -> str:
    return f"seed {sampling.seed}, temperature {sampling.temperature}, top_p {sampling.top_p}"


__all__ = [
    "SAMPLED_ARTIFACT",
    "SampledAnswers",
    "check_sampling_fits",
    "no_sampled_answers",
    "sampled_facts",
]

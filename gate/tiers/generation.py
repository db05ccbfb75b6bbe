"""The generation tier: the candidate's free-running answers against the baseline's.

The baseline's answers are those its reference pack already stores (the
fidelity tier's greedy outputs, :mod:`gate.store.reference`): the baseline is
never generated again. The candidate answers the same prompt token ids
greedily, up to the pack's cap (``max_new_tokens``), batched as the pack was
recorded (the fidelity tier's ``batch_size``), so the baseline build itself
reproduces its pack token for token. The per-prompt values of
:mod:`gate.metrics.generation` become one :class:`~gate.measurement.Measurement`
per metric, with per-prompt samples (``sample_ids`` = prompt ids) and
breakdowns ``category:<c>`` and ``length:<t>``.

What the pack says of the baseline's answer ``j``: the stored tokens ``b``
(``n'_b``), the length it generated ``n_b`` (``n_generated``; for a pack
older than version 3, ``n'_b`` unless the recorder cut it, else unknown) and
whether ``b`` is the whole answer (not cut). Which prompts each metric uses:

* divergence position: every prompt with a stored token;
* exact match, length ratio, stop rate: every prompt whose ``n_b`` is known;
* loop rate, distinct-2: every prompt whose whole answer is stored (the
  detector and the bigrams need the answer's tail).

The baseline's values on those prompts come from the pack too (its divergence
from itself is ``n'_b``, its exact match 1, its log length ratio 0): in run
mode each candidate measurement carries them under
``details["paired_reference"]`` (:mod:`gate.gating.compare`: the in-session
reference), so a baseline recorded before this tier existed gates it on its
pack alone; in record mode they are the baseline's own measurements.

With a seed (``[tiers.generation] seed``), both builds' answers are coupled
samples (:mod:`gate.models.backends.sampling`) instead: the baseline draws its
own when it is recorded and stores them (:class:`SampledAnswers`, artifact
:data:`SAMPLED_ARTIFACT`), and they stand in for the pack's greedy answers,
each whole, on both sides.

The worst divergences (the earliest, relative to the stored answer) go to
``details["examples"]`` of ``generation.exact_match`` (keys
:class:`gate.metrics.catalog.generation.GenerationDetail`): the prompt, the common
prefix and the two answers from the divergence on, as text, for the reports.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gate.errors import BaselineError, ConfigError, DataError, UsageError
from gate.measurement import Measurement, MeasurementDetail
from gate.metrics import generation as gm
from gate.metrics.catalog import generation as catalog
from gate.metrics.catalog.generation import GenerationDetail
from gate.models.backends.base import Backend
from gate.models.backends.capabilities import SamplesCoupled
from gate.models.backends.sampling import Sampling
from gate.progress import task as progress_task
from gate.store.reference import PackPrompt, ReferencePack

TIER = catalog.TIER

#: The artifact holding the baseline's sampled answers (:class:`SampledAnswers`).
SAMPLED_ARTIFACT = "generation-sampled"


@dataclass(frozen=True)
class GenerationSettings:
    """``[tiers.generation]`` settings (built with :func:`gate.tiers.registry.build_settings`).

    The prompts, the cap and the batch size are the fidelity tier's pack's and
    ``[tiers.fidelity]``'s (``limit``, ``batch_size``): the candidate answers what
    the baseline answered, batched as it was.
    """

    #: ``R`` of the loop detector: copies of the span the answer's tail must hold.
    loop_repeats: int = 3
    #: ``M`` of the loop detector: the fewest tail tokens a loop covers.
    loop_min_tokens: int = 16
    #: ``P`` of the loop detector: the longest repeated span looked for, in tokens.
    loop_max_period: int = 32
    #: ``H``: the divergence position is censored at this many tokens (and at the
    #: stored answer's length), so that its relative bounds mean the same at every
    #: cap of at least ``H`` (:func:`gate.metrics.generation.divergence_position`).
    #: 48: the cap the default bounds were chosen at (thresholds.toml).
    divergence_horizon: int = 48
    #: Worst divergences shown in the reports (0: none).
    examples: int = 3
    #: Sampled answers instead of greedy ones, with this seed (None: greedy). The
    #: baseline's sampled answers are stored with it when it is recorded
    #: (:data:`SAMPLED_ARTIFACT`); :mod:`gate.models.backends.sampling` draws them.
    seed: int | None = None
    #: ``T`` of the sampled answers.
    temperature: float = 1.0
    #: ``p`` of the sampled answers: the nucleus mass (1: the whole vocabulary).
    top_p: float = 1.0

    def __post_init__(self) -> None:
        self.loop_rule  # noqa: B018 - validates the detector's parameters
        if self.examples < 0:
            raise ValueError(f"examples must be >= 0, got {self.examples}")
        if self.divergence_horizon < 1:
            raise ValueError(f"divergence_horizon must be >= 1, got {self.divergence_horizon}")
        if self.seed is None and (self.temperature != 1.0 or self.top_p != 1.0):
            raise ValueError("temperature and top_p shape sampled answers: set seed too")
        self.sampling  # noqa: B018 - validates the sampling parameters

    @property
    def sampling(self) -> Sampling | None:
        """The seeded sampling these settings ask for (None: greedy answers)."""
        if self.seed is None:
            return None
        return Sampling(self.seed, self.temperature, self.top_p)

    @property
    def loop_rule(self) -> gm.LoopRule:
        """The degenerate-loop detector these settings describe."""
        return gm.LoopRule(self.loop_repeats, self.loop_min_tokens, self.loop_max_period)


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


@dataclass(frozen=True)
class PairedValues:
    """One metric's per-prompt values on both sides, on the prompts it uses."""

    ids: tuple[str, ...]
    candidate: tuple[float, ...]
    baseline: tuple[float, ...]
    slices: Mapping[str, tuple[int, ...]]


def _slices(answers: Sequence[StoredAnswer]) -> dict[str, tuple[int, ...]]:
    groups: dict[str, list[int]] = {}
    for n, a in enumerate(answers):
        groups.setdefault(f"category:{a.meta.category}", []).append(n)
        groups.setdefault(f"length:{a.meta.length}", []).append(n)
    return {k: tuple(v) for k, v in sorted(groups.items())}


def _paired(
    answers: Sequence[StoredAnswer],
    answered: Sequence[Sequence[int]],
    uses: Callable[[StoredAnswer], bool],
    candidate: Callable[[StoredAnswer, Sequence[int]], float],
    baseline: Callable[[StoredAnswer], float],
) -> PairedValues:
    """Each side's value on the prompts ``uses`` keeps: ``candidate`` of its answer,
    ``baseline`` of the stored one (the baseline against itself)."""
    kept = [(a, c) for a, c in zip(answers, answered, strict=True) if uses(a)]
    return PairedValues(
        ids=tuple(a.meta.id for a, _ in kept),
        candidate=tuple(candidate(a, c) for a, c in kept),
        baseline=tuple(baseline(a) for a, _ in kept),
        slices=_slices([a for a, _ in kept]),
    )


def paired_values(
    answers: Sequence[StoredAnswer],
    answered: Sequence[Sequence[int]],
    cap: int,
    settings: GenerationSettings,
) -> dict[str, PairedValues]:
    """Every metric's per-prompt values: the candidate's (``answered``) and the baseline's
    (the pack: its divergence from itself is ``min(n'_b, H)``, its exact match 1, its log
    length ratio 0), under ``settings``' loop detector and divergence horizon."""
    rule = settings.loop_rule
    horizon = settings.divergence_horizon

    def has_tokens(a: StoredAnswer) -> bool:
        return bool(a.tokens)

    def known(a: StoredAnswer) -> bool:
        return a.generated is not None and a.generated > 0

    def whole(a: StoredAnswer) -> bool:
        return a.whole and bool(a.tokens)

    def generated(a: StoredAnswer) -> int:
        assert a.generated is not None  # only on the prompts ``known`` keeps
        return a.generated

    return {
        catalog.EXACT_MATCH: _paired(
            answers,
            answered,
            known,
            lambda a, c: float(gm.exact_match(c, a.tokens, generated(a))),
            lambda a: 1.0,
        ),
        catalog.DIVERGENCE_POSITION: _paired(
            answers,
            answered,
            has_tokens,
            lambda a, c: float(gm.divergence_position(c, a.tokens, horizon)),
            lambda a: float(min(len(a.tokens), horizon)),
        ),
        catalog.LENGTH_RATIO: _paired(
            answers,
            answered,
            known,
            lambda a, c: gm.log_length_ratio(max(len(c), 1), generated(a)),
            lambda a: 0.0,
        ),
        catalog.STOP_RATE: _paired(
            answers,
            answered,
            known,
            lambda a, c: float(gm.stopped(len(c), cap)),
            lambda a: float(gm.stopped(generated(a), cap)),
        ),
        catalog.LOOP_RATE: _paired(
            answers,
            answered,
            whole,
            lambda a, c: float(gm.is_loop(c, rule)),
            lambda a: float(gm.is_loop(a.tokens, rule)),
        ),
        catalog.DISTINCT_2: _paired(
            answers,
            answered,
            whole,
            lambda a, c: gm.distinct_2(c),
            lambda a: gm.distinct_2(a.tokens),
        ),
    }


def _aggregate(name: str, samples: Sequence[float]) -> float:
    """The metric's value from its per-prompt samples: the mean; for the length ratio
    the geometric mean (its samples are logs)."""
    if name == catalog.LENGTH_RATIO:
        return gm.geometric_mean_ratio(samples)
    return math.fsum(samples) / len(samples)


def _measurement(
    name: str,
    ids: Sequence[str],
    samples: Sequence[float],
    reference: Sequence[float] | None,
    against: str | None,
) -> Measurement:
    details: dict[str, Any] = {}
    if reference is not None:
        details[MeasurementDetail.PAIRED_REFERENCE] = {
            "against": against,
            "value": _aggregate(name, reference),
            "samples": [float(x) for x in reference],
        }
    return Measurement(
        name,
        _aggregate(name, samples),
        samples=tuple(float(x) for x in samples),
        sample_ids=tuple(ids),
        details=details,
    )


def to_measurements(
    values: Mapping[str, PairedValues], *, side: str, against: str | None = None
) -> list[Measurement]:
    """One measurement per metric with a prompt, sliced; ``side`` ``"candidate"`` carries
    the baseline's values beside its own (``against``: the ref whose pack they are),
    ``"baseline"`` is the baseline's own."""
    out = []
    for name, v in values.items():
        if not v.ids:
            continue
        own = v.candidate if side == "candidate" else v.baseline
        ref = v.baseline if side == "candidate" else None

        def pick(xs: Sequence[float] | None, idx: Sequence[int]) -> list[float] | None:
            return None if xs is None else [xs[i] for i in idx]

        breakdown = {
            key: _measurement(
                name,
                [v.ids[i] for i in idx],
                [own[i] for i in idx],
                pick(ref, idx),
                against,
            )
            for key, idx in v.slices.items()
        }
        whole = _measurement(name, v.ids, own, ref, against)
        out.append(dataclasses.replace(whole, breakdown=breakdown))
    return out


@dataclass(frozen=True)
class DivergenceExample:
    """One prompt's answers side by side from where they part (a report example)."""

    prompt_id: str
    category: str
    prompt: str
    #: ``d``: tokens the two answers share before they part.
    position: int
    common: str
    baseline: str
    candidate: str
    baseline_tokens: int
    candidate_tokens: int

    def to_dict(self) -> dict[str, Any]:
        """JSON form (an entry of ``details["examples"]``)."""
        return dict(self.__dict__)


def worst_divergences(
    backend: Backend,
    pack: ReferencePack,
    answers: Sequence[StoredAnswer],
    answered: Sequence[Sequence[int]],
    count: int,
) -> list[DivergenceExample]:
    """The ``count`` answers that part from the baseline's earliest relative to its stored
    length (``d / n'_b``, then ``d``), exact matches left out, decoded for the reports."""
    parted = []
    for a, c in zip(answers, answered, strict=True):
        if not a.tokens or (a.generated is not None and gm.exact_match(c, a.tokens, a.generated)):
            continue
        d = gm.divergence_position(c, a.tokens)
        if d == len(a.tokens) and len(c) == len(a.tokens):
            continue  # identical as far as the pack goes
        parted.append((d / len(a.tokens), d, a, c))
    parted.sort(key=lambda x: (x[0], x[1], x[2].index))
    out = []
    for _, d, a, c in parted[:count]:
        out.append(
            DivergenceExample(
                prompt_id=a.meta.id,
                category=a.meta.category,
                prompt=backend.decode(pack.prompt_ids(a.index).tolist()),
                position=d,
                common=backend.decode(list(a.tokens[:d])),
                baseline=backend.decode(list(a.tokens[d:])),
                candidate=backend.decode(list(c[d:])),
                baseline_tokens=a.generated if a.generated is not None else len(a.tokens),
                candidate_tokens=len(c),
            )
        )
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


def measure(
    backend: Backend,
    pack: ReferencePack,
    settings: GenerationSettings,
    *,
    batch_size: int,
    limit: int | None = None,
    against: str | None = None,
    sampled: SampledAnswers | None = None,
) -> list[Measurement]:
    """The candidate's generation measurements against the baseline's answers: the greedy
    ones in ``pack``, or (settings with a seed) the baseline's ``sampled`` answers."""
    answers = stored_answers(pack, limit)
    if not answers:
        raise DataError("the reference pack holds no prompt", "re-record the baseline")
    sampling = settings.sampling
    if sampling is not None:
        if sampled is None:
            raise no_sampled_answers(sampling)
        sampled.check_matches(sampling, pack.max_new_tokens)
        answers = sampled.as_stored(answers)
    answered = answer(backend, pack, answers, batch_size, sampling)
    out = measure_answers(backend, pack, answers, answered, settings, against=against)
    if sampling is None:
        return out
    return [
        dataclasses.replace(
            m, details={**m.details, GenerationDetail.SAMPLING: sampled_facts(sampling)}
        )
        if m.name == catalog.EXACT_MATCH
        else m
        for m in out
    ]


def measure_answers(
    backend: Backend,
    pack: ReferencePack,
    answers: Sequence[StoredAnswer],
    answered: Sequence[Sequence[int]],
    settings: GenerationSettings,
    *,
    against: str | None = None,
) -> list[Measurement]:
    """The measurements of the candidate's ``answered`` against the stored ``answers``
    (``backend`` decodes the examples)."""
    values = paired_values(answers, answered, pack.max_new_tokens, settings)
    out = to_measurements(values, side="candidate", against=against)
    if not settings.examples:
        return out
    worst = worst_divergences(backend, pack, answers, answered, settings.examples)
    examples = [d.to_dict() for d in worst]
    return [
        dataclasses.replace(m, details={**m.details, GenerationDetail.EXAMPLES: examples})
        if m.name == catalog.EXACT_MATCH
        else m
        for m in out
    ]


def record(
    pack: ReferencePack,
    settings: GenerationSettings,
    *,
    limit: int | None = None,
    sampled: SampledAnswers | None = None,
) -> list[Measurement]:
    """The baseline's own generation measurements: from its pack alone (greedy, nothing
    generated), or from its ``sampled`` answers (settings with a seed)."""
    answers = stored_answers(pack, limit)
    if sampled is not None:
        answers = sampled.as_stored(answers)
    values = paired_values(answers, [a.tokens for a in answers], pack.max_new_tokens, settings)
    return to_measurements(values, side="baseline")


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


def draws_its_own() -> UsageError:
    """The refusal of sampled answers from a build that cannot draw coupled samples."""
    return UsageError(
        "sampled answers ([tiers.generation] seed) are drawn in process, with random numbers"
        " shared by both builds; this build cannot draw them (a served engine draws its own,"
        " a speculative build verifies its drafts greedily)",
        "gate it on greedy answers (a baseline recorded without [tiers.generation] seed)",
    )


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
    "TIER",
    "DivergenceExample",
    "GenerationSettings",
    "PairedValues",
    "SampledAnswers",
    "StoredAnswer",
    "answer",
    "check_sampling_fits",
    "draws_its_own",
    "measure",
    "measure_answers",
    "no_sampled_answers",
    "paired_values",
    "record",
    "sampled_facts",
    "stored_answers",
    "to_measurements",
    "worst_divergences",
]

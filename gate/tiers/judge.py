"""The judge tier: LLM judges compare a candidate's answers with the baseline's.

Record mode (baseline): greedy answers on the judged prompt set (default: the
fidelity prompts, which carry category and length tier) are stored with the
baseline as the artifact ``judge-outputs`` (:mod:`gate.tiers.judge_outputs`), and
the judges' validity verdicts on them are the baseline's ``judge.validity``.

Run mode (candidate): the candidate answers the same prompts (the artifact's own
prompt texts and ``max_new_tokens``; the baseline model is never loaded); each
pair (candidate, baseline) goes through the pairwise protocol of
:mod:`gate.judge.panel` with every configured judge, in both orders, with the
validity question; then

* ``judge.elo_delta``: per scored prompt the centred score (win +1/2, tie 0,
  loss -1/2), value ``D(p)`` (:mod:`gate.judge.elo`), breakdowns by category
  (``category:<c>``), prompt-length bucket (``length:<XS..XXL>``) and generated-length
  bucket of the candidate (``gen_length:<XS..XXL>``);
* ``judge.validity``: 1/0 per prompt, paired with the baseline's (McNemar);
* ``judge.swap_inconsistency`` and, with two or more judges, ``judge.disagreement``.

With two or more judges the disagreement rate is a stability gate
(:func:`gate.judge.protocol.stability`): above ``disagreement_bound`` the tier is
UNSTABLE, records only the two rates (with the reason) and, when ``required``
(the default), fails with :class:`JudgeUnstableError` (exit 5: nothing measured),
so a run that needs the judge tier is never approved on an unstable panel.

The judges, their counters (calls made, cache hits, tokens, parse failures), the
stability reason, the template versions and a few example pairs travel in the
``details`` of ``judge.elo_delta`` (keys :class:`gate.metrics.catalog.judge.JudgeDetail`)
to every report.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ClassVar

from gate.errors import BaselineError, ConfigError, NothingMeasuredError
from gate.judge.buckets import length_bucket
from gate.judge.cache import CachedJudge, JudgeCache
from gate.judge.elo import EloResult, elo_from_score, elo_result
from gate.judge.panel import JudgeTemplates, Pair, judge_panel, judge_validity, panel_validity
from gate.judge.protocol import (
    DEFAULT_DISAGREEMENT_BOUND,
    Outcome,
    PanelOutcome,
    Stability,
    Tally,
    stability,
    tally,
)
from gate.judge.template import default_template, load_template
from gate.measurement import Measurement
from gate.metrics.catalog.judge import JudgeDetail
from gate.tiers.judge_outputs import JudgedOutput, OutputSet

TIER = "judge"
#: Judge names: what reports and cache counters call a judge.
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
#: ``model`` values that name a judge packaged with gate.
BUNDLED: Mapping[str, str] = {"bundled": "judge_model", "bundled-small": "judge_model_small"}
#: Characters of a prompt / an answer kept in a report's example pair.
_EXAMPLE_CHARS = 600


def bundled_judge_path(name: str = "bundled") -> Path:
    """Directory of a packaged judge model (``gate/assets/judge_model[_small]``)."""
    from importlib import resources

    return Path(str(resources.files("gate").joinpath("assets", BUNDLED[name])))


@dataclass(frozen=True)
class JudgeConfig:
    """One ``[[judges]]`` entry of ``gate.toml``.

    ``model`` is a local transformers model directory asked in process (``bundled``
    and ``bundled-small`` name the packaged judges), or, with ``endpoint``, the model
    name served by that OpenAI-compatible server. ``api_key_env`` names the
    environment variable holding the endpoint's key (never the key itself).
    ``max_output_tokens`` caps each answer (None: the judge's own setting, 8 for an
    endpoint); ``concurrency`` questions are asked at once.
    """

    name: str
    model: str
    family: str = ""
    endpoint: str | None = None
    api_key_env: str | None = None
    max_output_tokens: int | None = None
    concurrency: int = 8

    def __post_init__(self) -> None:
        if not _NAME_RE.match(self.name):
            raise ValueError(
                f"judge name {self.name!r} must be 1-64 letters, digits, '.', '_', '-'"
            )
        if not self.model.strip():
            raise ValueError(f"judge {self.name!r}: model is empty")
        if self.concurrency < 1:
            raise ValueError(f"judge {self.name!r}: concurrency must be >= 1")
        if self.max_output_tokens is not None and self.max_output_tokens < 1:
            raise ValueError(f"judge {self.name!r}: max_output_tokens must be >= 1")
        if self.endpoint is None:
            if self.api_key_env is not None:
                raise ValueError(f"judge {self.name!r}: api_key_env needs an endpoint")
            if not self.local_path.is_dir():
                raise ValueError(
                    f"judge {self.name!r}: model directory {self.model} does not exist "
                    "(give a local model directory, 'bundled', or an endpoint)"
                )
        else:
            from gate.models.backends.openai_client import EndpointSettings

            try:
                EndpointSettings(self.endpoint, model=self.model, api_key_env=self.api_key_env)
                EndpointSettings(self.endpoint, api_key_env=self.api_key_env).api_key()
            except ConfigError as exc:
                raise ValueError(f"judge {self.name!r}: {exc.format_line()}") from None

    @property
    def local_path(self) -> Path:
        """The model directory of an in-process judge."""
        if self.model in BUNDLED:
            return bundled_judge_path(self.model)
        return Path(self.model).expanduser()


#: The judge used when none is configured: the packaged one.
DEFAULT_JUDGE = JudgeConfig(name="bundled", model="bundled", family="llama-judge")


@dataclass(frozen=True)
class JudgeSettings:
    """``[tiers.judge]`` settings (``[[judges]]`` of the run config land in ``judges``)."""

    #: Settings of this run's machine and judges: never recorded into a baseline.
    MACHINE_KEYS: ClassVar[frozenset[str]] = frozenset(
        {"judges", "cache_dir", "required", "examples"}
    )

    #: Prompt-set JSONL (None: the packaged fidelity prompts).
    prompts: Path | None = None
    #: Use only the first ``limit`` prompts when recording the baseline's outputs.
    limit: int | None = None
    #: Greedy tokens per answer (the baseline's artifact fixes it for candidates).
    max_new_tokens: int = 512
    #: Prompts per generation batch.
    batch_size: int = 8
    #: The judges (None/empty: the packaged judge).
    judges: tuple[JudgeConfig, ...] = ()
    #: Replacement question templates (None: the project's own).
    pairwise_template: Path | None = None
    validity_template: Path | None = None
    #: Ask the validity question (a corrupted candidate answer is a loss).
    validity: bool = True
    #: Above this share of decidable pairs with disagreeing judges the tier is UNSTABLE.
    disagreement_bound: float = DEFAULT_DISAGREEMENT_BOUND
    #: Judge-call cache (None: $GATE_JUDGE_CACHE, else ~/.cache/gate/judge).
    cache_dir: Path | None = None
    #: An UNSTABLE panel fails the run (exit 5); false: it is only reported.
    required: bool = True
    #: Example pairs kept for the HTML report.
    examples: int = 4
    #: Seed of the bootstrap CI in the details.
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("max_new_tokens", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.limit is not None and self.limit < 1:
            raise ValueError(f"limit must be >= 1, got {self.limit}")
        if not 0.0 <= self.disagreement_bound <= 1.0:
            raise ValueError(f"disagreement_bound must be in [0, 1], got {self.disagreement_bound}")
        if self.examples < 0:
            raise ValueError(f"examples must be >= 0, got {self.examples}")
        names = [j.name for j in self.judges]
        if len(set(names)) != len(names):
            raise ValueError(f"judge names must be unique, got {names}")
        self.templates()  # a template without its placeholders fails here, up front

    @property
    def panel(self) -> tuple[JudgeConfig, ...]:
        """The configured judges, or the packaged one."""
        return self.judges or (DEFAULT_JUDGE,)

    def templates(self) -> JudgeTemplates:
        """The pairwise and (when asked) validity templates."""
        pairwise = (
            load_template(self.pairwise_template, "pairwise")
            if self.pairwise_template is not None
            else default_template("pairwise")
        )
        validity = None
        if self.validity:
            validity = (
                load_template(self.validity_template, "validity")
                if self.validity_template is not None
                else default_template("validity")
            )
        return JudgeTemplates(pairwise, validity)

    def cache_path(self) -> Path:
        """Where judge answers are cached."""
        if self.cache_dir is not None:
            return self.cache_dir
        env = os.environ.get("GATE_JUDGE_CACHE")
        return Path(env) if env else Path.home() / ".cache" / "gate" / "judge"


class JudgeUnstableError(NothingMeasuredError):
    """Two or more judges disagreed above the bound: the tier gives no verdict (exit 5)."""


# -------------------------------------------------------------------- judges


def open_judge(config: JudgeConfig) -> Any:
    """The :class:`~gate.judge.judges.Judge` of one ``[[judges]]`` entry."""
    if config.endpoint is not None:
        from gate.models.backends.chat_judge import ChatJudge
        from gate.models.backends.openai_client import EndpointSettings

        endpoint = EndpointSettings(
            config.endpoint,
            model=config.model,
            api_key_env=config.api_key_env,
            max_concurrency=config.concurrency,
        )
        return ChatJudge(
            endpoint,
            name=config.name,
            family=config.family or "unknown",
            max_output_tokens=config.max_output_tokens or 8,
            concurrency=config.concurrency,
        )
    from gate.judge.judges import TransformersJudge

    return TransformersJudge(
        config.local_path,
        name=config.name,
        family=config.family or None,
        max_output_tokens=config.max_output_tokens,
        concurrency=config.concurrency,
    )


def open_panel(settings: JudgeSettings) -> list[CachedJudge]:
    """Every judge of the settings behind the shared on-disk cache."""
    cache = JudgeCache(settings.cache_path())
    return [CachedJudge(open_judge(c), cache) for c in settings.panel]


def judge_counters(judges: Sequence[CachedJudge]) -> list[dict[str, Any]]:
    """Per judge: identity and calls made, cache hits, tokens, parse failures."""
    return [
        {
            "name": j.judge.name,
            "family": j.judge.family,
            "model_id": j.judge.model_id,
            "max_output_tokens": j.judge.max_output_tokens,
            "concurrency": j.judge.concurrency,
            "calls": j.stats.calls,
            "cache_hits": j.stats.hits,
            "prompt_tokens": j.stats.prompt_tokens,
            "completion_tokens": j.stats.completion_tokens,
            "tokens": j.stats.tokens,
            "parse_failures": j.stats.parse_failures,
        }
        for j in judges
    ]


# -------------------------------------------------------------------- prompts


def load_prompts(settings: JudgeSettings) -> list[Any]:
    """The judged prompt set (default: the packaged fidelity prompts), cut to ``limit``."""
    from gate.data.prompt_set import load_prompt_set
    from gate.errors import DataError

    prompts: list[Any] = list(load_prompt_set(settings.prompts))
    if settings.limit is not None:
        prompts = prompts[: settings.limit]
    if not prompts:
        raise DataError("the judged prompt set is empty", "give a JSONL file with prompts")
    return prompts


def baseline_outputs_missing(ref: str) -> BaselineError:
    """The one line for a baseline recorded without the judge tier's outputs."""
    return BaselineError(
        f"baseline {ref} has no stored judge outputs (recorded without the judge tier)",
        "re-record it with `gate baseline record ... --tiers <its tiers>,judge`",
    )


# -------------------------------------------------------------------- validity


def validity_measurement(
    judges: Sequence[CachedJudge], templates: JudgeTemplates, outputs: OutputSet
) -> Measurement | None:
    """``judge.validity`` of ``outputs``: 1 per answer the panel lets stand, else 0."""
    if templates.validity is None:
        return None
    template = templates.validity
    items = [(o.prompt, o.text) for o in outputs.outputs]
    answers = [judge_validity(j, template, items) for j in judges]
    valid = panel_validity(answers)
    samples = tuple(1.0 if v else 0.0 for v in valid)
    return Measurement(
        name="judge.validity",
        value=sum(samples) / len(samples),
        samples=samples,
        sample_ids=tuple(o.id for o in outputs.outputs),
        details={JudgeDetail.JUDGES: [j.judge.model_id for j in judges]},
    )


# -------------------------------------------------------------------- scoring


def centred(outcome: Outcome) -> float:
    """A scored pair's centred score: win +1/2, tie 0, loss -1/2."""
    return outcome.score - 0.5


def elo_value(samples: Sequence[float]) -> float:
    """``D(1/2 + mean)`` of centred scores (clamped to half a game at 0 or 1)."""
    n = len(samples)
    p = 0.5 + sum(samples) / n
    return elo_from_score(min(1.0, max(0.0, p)), n)[0] + 0.0  # no "-0"


def _elo_measurement(
    ids: Sequence[str],
    samples: Sequence[float],
    groups: Mapping[str, Sequence[int]],
    details: Mapping[str, Any],
) -> Measurement:
    breakdown: dict[str, Measurement] = {}
    for key, idx in groups.items():
        if not idx:
            continue
        part = tuple(samples[i] for i in idx)
        breakdown[key] = Measurement(
            name="judge.elo_delta",
            value=elo_value(part),
            samples=part,
            sample_ids=tuple(ids[i] for i in idx),
        )
    return Measurement(
        name="judge.elo_delta",
        value=elo_value(samples),
        samples=tuple(samples),
        sample_ids=tuple(ids),
        breakdown=breakdown,
        details=dict(details),
    )


def _clip(text: str) -> str:
    return text if len(text) <= _EXAMPLE_CHARS else text[:_EXAMPLE_CHARS] + " [...]"


def _example(pair: Pair, pid: str, outcome: PanelOutcome, names: Sequence[str]) -> dict[str, Any]:
    return {
        "id": pid,
        "prompt": _clip(pair.prompt),
        "candidate": _clip(pair.candidate),
        "baseline": _clip(pair.baseline),
        "status": outcome.status.value,
        "outcome": outcome.outcome.value if outcome.outcome else None,
        "judges": [
            {
                "name": name,
                "candidate_first": j.candidate_first.value if j.candidate_first else None,
                "candidate_second": j.candidate_second.value if j.candidate_second else None,
                "candidate_valid": j.candidate_valid.value if j.candidate_valid else None,
                "baseline_valid": j.baseline_valid.value if j.baseline_valid else None,
                "reason": j.reason,
            }
            for name, j in zip(names, outcome.judges, strict=True)
        ],
    }


def pick_examples(
    pairs: Sequence[Pair],
    ids: Sequence[str],
    outcomes: Sequence[PanelOutcome],
    names: Sequence[str],
    count: int,
) -> list[dict[str, Any]]:
    """Up to ``count`` non-identical pairs, most telling first: losses, excluded, wins, ties."""

    def rank(k: int) -> int:
        o = outcomes[k]
        if o.outcome is Outcome.LOSS:
            return 0
        if o.outcome is None:
            return 1
        return 2 if o.outcome is Outcome.WIN else 3

    chosen = sorted(
        (k for k, o in enumerate(outcomes) if not o.identical), key=lambda k: (rank(k), k)
    )
    return [_example(pairs[k], ids[k], outcomes[k], names) for k in chosen[:count]]


@dataclass(frozen=True)
class JudgeResult:
    """What one judged comparison produced: the measurements and the panel's state.

    ``problem`` is set when the tier has no verdict (an UNSTABLE panel, or no pair
    decided): the measurements then hold only the judges' rates.
    """

    measurements: tuple[Measurement, ...]
    counts: Tally
    stability: Stability
    elo: EloResult | None
    problem: NothingMeasuredError | None = None
    #: Every pair's panel outcome, in the order of ``ids`` (the raw results).
    outcomes: tuple[PanelOutcome, ...] = ()
    ids: tuple[str, ...] = ()


def _rates(counts: Tally, n_judges: int, details: Mapping[str, Any]) -> list[Measurement]:
    asked = counts.pairs - counts.identical
    out = [
        Measurement(
            name="judge.swap_inconsistency",
            value=counts.swap_inconsistent / asked if asked else 0.0,
            details=dict(details),
        )
    ]
    if n_judges >= 2 and counts.disagreement_rate is not None:
        out.append(
            Measurement(
                name="judge.disagreement", value=counts.disagreement_rate, details=dict(details)
            )
        )
    return out


def compare_outputs(
    candidate: OutputSet,
    baseline: OutputSet,
    judges: Sequence[CachedJudge],
    settings: JudgeSettings,
    *,
    baseline_validity: bool = True,
) -> JudgeResult:
    """Judge ``candidate`` against ``baseline`` prompt by prompt (see the module docstring).

    ``baseline_validity`` false leaves ``judge.validity`` out (used for candidate
    against candidate in a round robin, where no stored baseline validity pairs it).
    """
    templates = settings.templates()
    base = baseline.by_id()
    cand = [o for o in candidate.outputs if o.id in base]
    if not cand:
        raise BaselineError(
            "the candidate's judged prompts share no id with the baseline's outputs",
            "judge the candidate on the baseline's own prompts",
        )
    ids = [o.id for o in cand]
    pairs = [Pair(base[o.id].prompt, o.text, base[o.id].text) for o in cand]
    outcomes = judge_panel(judges, templates, pairs)
    validity = None
    if baseline_validity:
        validity = validity_measurement(judges, templates, OutputSet(0, "", tuple(cand)))
    counts = tally(outcomes)
    stable = stability(counts, len(judges), settings.disagreement_bound)
    names = [j.judge.name for j in judges]
    details: dict[str, Any] = {
        JudgeDetail.JUDGES: judge_counters(judges),
        JudgeDetail.TALLY: {
            "pairs": counts.pairs,
            "identical": counts.identical,
            "wins": counts.wins,
            "losses": counts.losses,
            "ties": counts.ties,
            "swap_inconsistent": counts.swap_inconsistent,
            "unparsed": counts.unparsed,
            "disagreements": counts.disagreements,
            "decidable": counts.decidable,
            "swap_inconsistency_by_judge": {
                name: counts.swap_inconsistency_rate(k) for k, name in enumerate(names)
            },
        },
        JudgeDetail.STABILITY: {
            "stable": stable.stable,
            "rate": stable.rate,
            "bound": stable.bound,
            "reason": stable.reason,
        },
        JudgeDetail.TEMPLATES: {
            "pairwise": templates.pairwise.version,
            "validity": templates.validity.version if templates.validity else None,
        },
        JudgeDetail.EXAMPLES: pick_examples(pairs, ids, outcomes, names, settings.examples),
    }
    scored = [k for k, o in enumerate(outcomes) if o.outcome is not None]
    if not stable.stable or not scored:
        # no verdict: the rates carry the panel summary (and the reason) to the reports
        problem: NothingMeasuredError = (
            unstable_error(stable)
            if not stable.stable
            else NothingMeasuredError(
                f"the judges decided none of the {counts.pairs} pairs "
                f"({counts.swap_inconsistent} swap-inconsistent, {counts.unparsed} unparsed)",
                "check the judges' answers (parse failures in the report) or use stronger judges",
            )
        )
        rates = _rates(counts, len(judges), details)
        return JudgeResult(tuple(rates), counts, stable, None, problem, tuple(outcomes), tuple(ids))
    scored_outcomes = [o for o in (outcomes[k].outcome for k in scored) if o is not None]
    elo = elo_result(scored_outcomes, seed=settings.seed)
    details[JudgeDetail.ELO] = elo.to_dict()
    s_ids = [ids[k] for k in scored]
    samples = [centred(o) for o in scored_outcomes]
    groups: dict[str, list[int]] = {}
    for pos, k in enumerate(scored):
        o = cand[k]
        for key in (
            f"category:{o.category}",
            f"length:{length_bucket(base[o.id].prompt_tokens)}",
            f"gen_length:{length_bucket(o.tokens)}",
        ):
            groups.setdefault(key, []).append(pos)
    details[JudgeDetail.OUTPUTS] = [asdict(o) for o in cand]
    measurements = [_elo_measurement(s_ids, samples, groups, details)]
    if validity is not None:
        measurements.append(validity)
    measurements += _rates(counts, len(judges), {})
    return JudgeResult(tuple(measurements), counts, stable, elo, None, tuple(outcomes), tuple(ids))


def outputs_from_details(entries: Sequence[Mapping[str, Any]]) -> OutputSet:
    """The candidate outputs stored in ``details["candidate_outputs"]``."""
    return OutputSet(
        0,
        "",
        tuple(
            JudgedOutput(
                id=str(e["id"]),
                category=str(e["category"]),
                length=str(e["length"]),
                prompt=str(e["prompt"]),
                prompt_tokens=int(e["prompt_tokens"]),
                text=str(e["text"]),
                tokens=int(e["tokens"]),
            )
            for e in entries
        ),
    )


def unstable_error(stable: Stability) -> JudgeUnstableError:
    """The one line of an UNSTABLE panel."""
    return JudgeUnstableError(
        f"judge tier UNSTABLE, no verdict: {stable.reason}",
        "use judges that agree more often, or raise [tiers.judge] disagreement_bound",
    )

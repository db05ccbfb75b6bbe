"""A build that generates with speculative decoding: transformers' assisted generation.

:class:`SpeculativeBackend` wraps a loaded build (the *target*) with a
:class:`Drafter`, made from a ``spec-*`` recipe (:func:`open_drafter`):

* ``spec-ngram:N`` — prompt lookup: ``N`` tokens proposed from the n-grams of
  the text so far (transformers' ``prompt_lookup_num_tokens``);
* ``spec-draft:RECIPE`` — a self-draft: the build's own base model loaded again
  and compressed by ``RECIPE`` (the same draft whatever the target's stack);
* ``spec-model:PATH`` — a separate draft model; its tokenizer must give the
  target's ids (checked on the tokenizer's vocabulary, one line, exit 4).

A draft model proposes :data:`DRAFT_TOKENS` tokens per step (a constant
schedule: transformers' default heuristic changes the number between steps,
which would make the acceptance figures depend on the history), with no early
stop on its confidence.

Greedy generation (``generate``) runs through the drafter one prompt at a time
(assisted generation takes one sequence); teacher-forced scoring is the
target's own (speculation changes how tokens are produced, not the model's
distribution). :meth:`SpeculativeBackend.speculate` records every verification
step ``(proposed, accepted)`` from the candidate generator transformers builds
for the call (its ``update_candidate_strategy`` receives both after each
step); the part's :class:`~gate.models.activity.Activity` counts the draft
tokens proposed (generation only). :meth:`SpeculativeBackend.plain_reference`
generates the same prompt without the drafter and measures the target's top-2
margins and the rounding noise between its one-token and batched passes
(:mod:`gate.metrics.speculative`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from gate import progress
from gate.errors import ConfigError, DataError
from gate.measurement import TimedGeneration
from gate.metrics.speculative import PlainReference, SpeculativeTrace, VerificationStep
from gate.models.activity import Activity, StackActivity
from gate.models.backends.base import (
    ScoreRequest,
    TokenScores,
    nothing_to_generate,
    require_prompts,
)
from gate.models.backends.tokens import InnerTokens
from gate.models.methods.base import DRAFTED
from gate.models.methods.registry import get_method, methods
from gate.models.methods.speculative import Speculation
from gate.models.recipes import Recipe, format_recipe
from gate.provenance import ModelProvenance

#: Tokens a draft model proposes per verification step (module doc).
DRAFT_TOKENS = 4


@dataclass(frozen=True)
class Drafter:
    """What proposes the tokens: generation settings for ``generate`` and its facts."""

    label: str
    kind: str
    #: ``GenerationConfig`` attributes set for a speculative call (``prompt_lookup_num_tokens``).
    config: Mapping[str, Any] = field(default_factory=dict)
    #: The draft model (``None``: prompt lookup).
    model: Any = None
    #: Facts for the provenance (the draft's recipe, source, its own activity).
    facts: Mapping[str, Any] = field(default_factory=dict)


@contextlib.contextmanager
def recorded_steps(model: Any) -> Iterator[list[VerificationStep]]:
    """Every verification step of the assisted generations run inside the block.

    transformers builds one candidate generator per ``generate`` call and, after
    each step, calls its ``update_candidate_strategy(input_ids, scores,
    num_matches)`` with the target's ``candidate_length + 1`` score rows and the
    draft tokens it kept: ``VerificationStep(rows - 1, num_matches)``.
    """
    steps: list[VerificationStep] = []
    original = model._get_candidate_generator

    def building(*args: Any, **kwargs: Any) -> Any:
        generator = original(*args, **kwargs)
        update = generator.update_candidate_strategy

        def recording(input_ids: Any, scores: Any, num_matches: Any) -> Any:
            steps.append(VerificationStep(int(scores.shape[1]) - 1, int(num_matches)))
            return update(input_ids, scores, num_matches)

        generator.update_candidate_strategy = recording
        return generator

    model._get_candidate_generator = building
    try:
        yield steps
    finally:
        del model._get_candidate_generator


def _seconds(run: Callable[[], int], device: torch.device) -> tuple[int, float]:
    """``(tokens, seconds)`` of ``run``, the device synchronized at both ends."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    started = time.perf_counter()
    tokens = run()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return tokens, time.perf_counter() - started


class SpeculativeBackend(InnerTokens):
    """The target build with its drafter (module doc)."""

    def __init__(self, inner: Any, drafter: Drafter) -> None:
        self.inner = inner
        self.model = inner.model
        self.drafter = drafter
        self.eos_ids: list[int] = list(inner.eos_ids)
        self.name = inner.name if drafter.label in inner.name else f"{inner.name}[{drafter.label}]"
        #: This part's own count: draft tokens proposed.
        self.drafting = Activity(drafter.label, DRAFTED)
        #: What the session reads (a stack's loader replaces it with the stack's activity).
        self.activity: Activity | StackActivity = self.drafting

    # -- generation ------------------------------------------------------------

    def _ids(self, prompt: Sequence[int]) -> torch.Tensor:
        return torch.tensor([list(prompt)], dtype=torch.long, device=self.inner.device)

    def _config(self, max_new_tokens: int, **extra: Any) -> Any:
        config = self.inner.generation_config(max_new_tokens)
        for key, value in {**self.drafter.config, **extra}.items():
            setattr(config, key, value)
        return config

    @torch.no_grad()
    def speculate(self, prompt: Sequence[int], *, max_new_tokens: int) -> SpeculativeTrace:
        """Greedy tokens through the drafter, with every verification step (module doc)."""
        require_prompts([prompt])
        ids = self._ids(prompt)
        kwargs = {"assistant_model": self.drafter.model} if self.drafter.model is not None else {}
        with recorded_steps(self.model) as steps:
            out = self.model.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                generation_config=self._config(max_new_tokens),
                **kwargs,
            )
        tokens = self.inner.cut_at_eos([int(t) for t in out[0, ids.shape[1] :].tolist()])
        if not steps:
            raise DataError(
                f"{self.drafter.label}: transformers generated without the drafter"
                " (no verification step)",
                "check the installed transformers supports assisted generation for this model",
            )
        self.drafting.count(sum(s.proposed for s in steps))
        return SpeculativeTrace(tuple(tokens), tuple(steps))

    def generate(
        self, prompts: Sequence[Sequence[int]], *, max_new_tokens: int, batch_size: int = 8
    ) -> list[list[int]]:
        """Greedy continuations through the drafter, one prompt at a time (``batch_size`` unused:
        assisted generation takes one sequence)."""
        if nothing_to_generate(prompts, max_new_tokens):
            return [[] for _ in prompts]
        out = []
        for prompt in prompts:
            out.append(list(self.speculate(prompt, max_new_tokens=max_new_tokens).tokens))
            progress.advance(1)
        return out

    @torch.no_grad()
    def plain_reference(self, prompt: Sequence[int], *, max_new_tokens: int) -> PlainReference:
        """The same build without the drafter: tokens, top-2 margins, one-token vs batched noise.

        Margins and the one-token rows are generation's own logits (one token per
        forward pass after the prompt); the batched rows come from one forward
        pass over the prompt and the generated tokens.
        """
        ids = self._ids(prompt)
        plain = self.inner.generation_config(max_new_tokens)
        plain.return_dict_in_generate = True
        plain.output_logits = True
        out = self.model.generate(
            input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=plain
        )
        tokens = self.inner.cut_at_eos([int(t) for t in out.sequences[0, ids.shape[1] :].tolist()])
        if not tokens:
            return PlainReference((), (), 0.0)
        steps = len(tokens)
        one_token = torch.log_softmax(
            torch.stack([row[0] for row in out.logits[:steps]]).float(), dim=-1
        )
        whole = torch.cat([ids[0], torch.tensor(tokens[:-1], device=ids.device)])[None, :]
        logits = self.model(input_ids=whole, attention_mask=torch.ones_like(whole)).logits
        batched = torch.log_softmax(logits[0, ids.shape[1] - 1 :].float(), dim=-1)
        noise = float((one_token - batched).abs().max())
        top2 = one_token.topk(2, dim=-1).values
        margins = tuple(float(m) for m in (top2[:, 0] - top2[:, 1]).tolist())
        return PlainReference(tuple(tokens), margins, noise)

    def timed_pair(
        self, prompt: Sequence[int], *, max_new_tokens: int, speculative_first: bool
    ) -> tuple[float, float]:
        """Tokens/s ``(with the drafter, without)`` for ``prompt``, timed back to back."""
        device = self.inner.device

        def fast() -> int:
            return len(self.speculate(prompt, max_new_tokens=max_new_tokens).tokens)

        def plain() -> int:
            return len(self.inner.generate([prompt], max_new_tokens=max_new_tokens)[0])

        order = (fast, plain) if speculative_first else (plain, fast)
        timed = {run: _seconds(run, device) for run in order}
        rates = [tokens / max(seconds, 1e-9) for tokens, seconds in (timed[fast], timed[plain])]
        return rates[0], rates[1]

    def generate_timed(self, *args: Any, **kwargs: Any) -> TimedGeneration:
        """Refused: the latency tier's per-step clock does not see speculative steps."""
        raise ConfigError(
            f"the latency tier does not time a speculative build ({self.drafter.label})",
            "gate its speed with the speculative tier's speculative.speedup (--tiers speculative)",
        )

    # -- scoring and identity: the target's --------------------------------------

    def score(
        self,
        requests: Sequence[ScoreRequest],
        *,
        top_k: int = 32,
        full: bool = False,
        batch_size: int = 8,
    ) -> list[TokenScores]:
        """The target's teacher-forced scores (speculation does not change them)."""
        scores: list[TokenScores] = self.inner.score(
            requests, top_k=top_k, full=full, batch_size=batch_size
        )
        return scores

    def provenance(self) -> ModelProvenance:
        """The target's provenance with the drafter's facts (``speculative``)."""
        facts = {
            "recipe": self.drafter.label,
            "kind": self.drafter.kind,
            "draft_tokens_proposed": self.drafting.acted,
            **self.drafter.facts,
        }
        return replace(self.inner.provenance(), name=self.name, speculative=facts)


def open_drafter(
    recipe: Recipe, spec: Any, target: Any, load: Callable[[Any, Recipe | None], Any]
) -> Drafter:
    """The :class:`Drafter` of a ``spec-*`` recipe for the build ``target`` loaded from ``spec``;
    ``load(spec, recipe)`` loads a draft model (:func:`gate.models.backends.loading.load_backend`).

    A self-draft whose recipe changed nothing, or a draft model whose vocabulary is not the
    target's, is refused in one line."""
    label = format_recipe(recipe)
    method = get_method(recipe.name)
    if not isinstance(method, Speculation):
        *rest, last = [m.name for m in methods().values() if isinstance(m, Speculation)]
        raise ConfigError(
            f"recipe {label} is not a speculative decoder",
            f"use {', '.join(rest)} or {last}" if rest else f"use {last}",
        )
    plan = method.draft_plan(recipe, spec)
    if plan.spec is None:
        return Drafter(label, plan.kind, config=plan.config)
    draft_spec = plan.spec
    draft_recipe = Recipe.parse(plan.recipe) if plan.recipe is not None else None
    draft = load(draft_spec, draft_recipe)
    activity = draft.activity
    acts = draft_recipe is not None and not draft_recipe.control
    if acts and not (activity and activity.acted):
        raise ConfigError(
            f"{label}: the draft's recipe {draft_recipe} changed nothing in the draft model",
            "check that its quantization kernels are installed",
        )
    if plan.same_tokenizer and draft.tokenizer.get_vocab() != target.tokenizer.get_vocab():
        raise ConfigError(
            f"{label}: the draft model's tokenizer does not give the target's token ids",
            "give a draft model of the same tokenizer (the same model family)",
        )
    config = draft.model.generation_config
    config.num_assistant_tokens = DRAFT_TOKENS
    config.num_assistant_tokens_schedule = "constant"
    config.assistant_confidence_threshold = 0.0
    facts = {
        "draft_source": draft_spec.source,
        "draft_recipe": format_recipe(draft_recipe) if draft_recipe is not None else "none",
        "draft_tokens": DRAFT_TOKENS,
        **(
            {"draft_activity": {"unit": activity.unit, "acted": activity.acted}} if activity else {}
        ),
    }
    return Drafter(label, plan.kind, model=draft.model, facts=facts)


__all__ = [
    "DRAFT_TOKENS",
    "Drafter",
    "SpeculativeBackend",
    "open_drafter",
    "recorded_steps",
]

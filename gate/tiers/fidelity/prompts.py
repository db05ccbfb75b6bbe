"""Fidelity prompt preparation: the prompt set and its token ids.

The single-turn set (packaged, or ``settings.prompts``) or the long-context
multi-turn set cut to token-count tiers (:mod:`gate.data.long_context`), both
encoded through the model's chat template (:func:`encode`), the encoding the
reference pack stores and a candidate is checked against."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gate.errors import ConfigError, DataError, ModelLoadError
from gate.models.backends.base import Backend
from gate.models.backends.capabilities import EncodesMessages
from gate.store.reference import PromptLike
from gate.tiers.fidelity.settings import FidelitySettings


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

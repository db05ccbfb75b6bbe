"""What the tests against fake OpenAI-compatible servers (tests/fakes/openai_server.py) share.

The prompts they send, the greedy score requests built from them, and the
client settings with short timeouts and back-off for a server on this machine.
"""

from __future__ import annotations

from collections.abc import Sequence

from gate.engines.client import EndpointSettings
from gate.models.backends.base import Backend, ScoreRequest

#: Prompts of several kinds (arithmetic, JSON, summary, code, plain text).
TEXTS: tuple[str, ...] = (
    "What is 7 times 8?",
    "Please reply in JSON with key name.",
    "Summarize the following text in one sentence.",
    "Write a Python function that adds two numbers.",
    "The quick brown fox jumps over the lazy dog.",
)


def greedy_requests(
    backend: Backend, texts: Sequence[str], max_new_tokens: int
) -> list[ScoreRequest]:
    """Each text as a prompt, continued by ``backend``'s greedy output (``[10, 11]`` when empty)."""
    prompts = [backend.encode_prompt(t) for t in texts]
    outputs = backend.generate(prompts, max_new_tokens=max_new_tokens)
    return [ScoreRequest(p, o or [10, 11]) for p, o in zip(prompts, outputs, strict=True)]


def local_settings(url: str, **kw: object) -> EndpointSettings:
    """Settings for a server on this machine: 30 s timeout, 0.01 s back-off, ``kw`` on top."""
    base: dict[str, object] = {"request_timeout": 30.0, "retry_backoff": 0.01}
    base.update(kw)
    return EndpointSettings(url, **base)  # type: ignore[arg-type]

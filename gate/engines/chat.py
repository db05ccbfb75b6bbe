"""A judge behind an OpenAI-compatible chat API (vLLM, SGLang, a hosted API).

One judge question is one ``POST /v1/chat/completions`` with the question as the
user message, ``max_tokens`` = the judge's answer cap and ``temperature`` 0;
``concurrency`` requests are in flight at once (the serving engine batches them).
The transport is the serving backend's :class:`EndpointClient`: bounded timeouts,
retries of 429/502/503/504 with backoff, and one-line errors (an endpoint that is
down, answers with something that is not JSON, or stays rate-limited after the
retries is a :class:`~gate.errors.ModelLoadError`, exit 3; a refused request is a
:class:`~gate.errors.ConfigError`, exit 4). The API key is read from the
environment variable the settings name and never stored.

``model_id`` (the judge-cache key) is ``<served model>@<public endpoint URL>``: a
different model, or the same name served elsewhere, is asked afresh.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from gate.engines.client import (
    EndpointClient,
    EndpointSettings,
    gather_bounded,
    public_url,
)
from gate.errors import ConfigError, ModelLoadError
from gate.judge.judges import JudgeAnswer, JudgeIdentity
from gate.judge.template import FieldLimits, TextCodec

__all__ = ["ChatJudge"]


def _answer(data: Any, url: str) -> JudgeAnswer:
    """The answer text and token usage of one chat completion (anything else: exit 3)."""
    try:
        text = data["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise ModelLoadError(
            f"{public_url(url)} answered without a chat completion ({str(data)[:80]!r})",
            "the judge endpoint must be an OpenAI-compatible chat server",
        ) from None
    usage = data.get("usage") if isinstance(data, dict) else None
    usage = usage if isinstance(usage, dict) else {}
    return JudgeAnswer(
        str(text or "").strip(),
        int(usage.get("prompt_tokens") or 0),
        int(usage.get("completion_tokens") or 0),
    )


class ChatJudge(JudgeIdentity):
    """A :class:`~gate.judge.judges.Judge` asked over an OpenAI-compatible chat API."""

    def __init__(
        self,
        settings: EndpointSettings,
        *,
        name: str,
        family: str,
        max_output_tokens: int = 8,
        concurrency: int = 8,
    ) -> None:
        if not settings.model:
            raise ConfigError(
                f"judge {name!r}: an endpoint judge needs the served model name",
                "set model = ... (the name the server serves) in its [[judges]] entry",
            )
        if max_output_tokens < 1 or concurrency < 1:
            raise ConfigError(f"judge {name!r}: max_output_tokens and concurrency must be >= 1")
        self.settings = settings
        self._name = name
        self._family = family
        self._max_output = max_output_tokens
        self._concurrency = concurrency
        self._model_id = f"{settings.model}@{public_url(settings.base_url)}"

    @property
    def field_limits(self) -> FieldLimits | None:
        return None

    @property
    def codec(self) -> TextCodec | None:
        return None

    def ask(self, question: str) -> JudgeAnswer:
        return self.ask_batch([question])[0]

    def ask_batch(self, questions: Sequence[str]) -> list[JudgeAnswer]:
        """Answers in order, ``concurrency`` requests in flight; the first failure stops all."""
        return asyncio.run(self._ask_all(list(questions)))

    async def _ask_all(self, questions: list[str]) -> list[JudgeAnswer]:
        async with EndpointClient(self.settings) as client:
            url = client.url("/chat/completions")

            def request(question: str) -> Any:
                async def one() -> JudgeAnswer:
                    payload = {
                        "model": self.settings.model,
                        "messages": [{"role": "user", "content": question}],
                        "max_tokens": self._max_output,
                        "temperature": 0.0,
                    }
                    return _answer(await client.post("/chat/completions", payload), url)

                return one

            return await gather_bounded([request(q) for q in questions], self._concurrency)

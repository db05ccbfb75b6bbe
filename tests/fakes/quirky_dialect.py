"""A third engine's dialect, out of gate's tree: what an engine package would ship.

The "quirky" engine (tests/test_engine_third.py serves it) is an OpenAI-style
completions server with its own field names:

* its model card says ``owned_by: quirky``;
* new token ids come back under ``choices[0].output_ids`` (no ``token_ids``, no
  text), in a plain answer and in each streamed chunk;
* the usage is ``{"output_tokens": N, "input_tokens": M}``;
* teacher-forced scoring is asked with ``"score_prompt": k`` and answered in
  ``choices[0].prompt_scores``: per prompt position ``None`` (the first) or a
  list of ``[id, logprob]`` pairs, the top ``k`` and the position's own token.

The test copies this one file into a directory beside a ``dist-info`` whose
``entry_points.txt`` registers :class:`QuirkyDialect` in the ``gate.engines``
group, as ``pip install`` of a package with that entry point would; gate
finds it there and nowhere else.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from gate.engines.client import EndpointClient
from gate.engines.dialect import Generated, LocalTokenizer, Post, StreamCount
from gate.engines.openai import GREEDY, OpenAIDialect, first_choice
from gate.engines.scores import Position
from gate.errors import ConfigError, ModelLoadError

#: The engine's name, its model cards' ``owned_by``.
NAME = "quirky"


def _usage(event: Any) -> tuple[int | None, int | None]:
    """``(output_tokens, input_tokens)`` of an answer's quirky usage."""
    usage = event.get("usage") if isinstance(event, Mapping) else None
    if not isinstance(usage, Mapping):
        return None, None
    done, given = usage.get("output_tokens"), usage.get("input_tokens")
    return (done if isinstance(done, int) else None, given if isinstance(given, int) else None)


class QuirkyDialect(OpenAIDialect):
    """The quirky engine: OpenAI's paths and the fields of the module docstring."""

    name: ClassVar[str] = NAME
    secret_options: ClassVar[frozenset[str]] = frozenset({"quirky-license"})

    def runs_command(self, argv: Sequence[str]) -> bool:
        """A program called ``quirky-server``."""
        return any(arg.rsplit("/", 1)[-1] == "quirky-server" for arg in argv)

    async def recognize(self, client: EndpointClient, card: Mapping[str, Any]) -> object | None:
        """A card ``owned_by: quirky``."""
        return card if card.get("owned_by") == NAME else None

    def scoring_api(self, asked: str) -> str | None:
        """Only its own scoring (``auto``)."""
        if asked != "auto":
            raise ConfigError(f"scoring_api {asked!r}: the quirky engine scores its own way")
        return None

    def generate_post(
        self, model: str, prompt: Sequence[int], max_new_tokens: int, logprobs: int | None = None
    ) -> Post:
        """Greedy, the ids asked for as ``output_ids``."""
        body = {
            "model": model,
            "prompt": [int(t) for t in prompt],
            "max_tokens": max_new_tokens,
            **GREEDY,
        }
        return Post("/completions", body)

    def generated(self, answer: Any, backend: LocalTokenizer) -> Generated:
        """``choices[0].output_ids`` and ``usage.output_tokens``."""
        choice = first_choice(answer)
        if choice is None or not isinstance(choice.get("output_ids"), list):
            raise ModelLoadError("the quirky answer has no output_ids")
        ids = [int(t) for t in choice["output_ids"]]
        done, _ = _usage(answer)
        return Generated(ids, done if done is not None else len(ids))

    def stream_post(self, model: str, prompt: Sequence[int], new_tokens: int) -> Post:
        """A stream of exactly ``new_tokens`` ids."""
        post = self.generate_post(model, prompt, new_tokens)
        return Post(post.path, {**post.body, "stream": True, "ignore_eos": True})

    def stream_count(self, event: Mapping[str, Any], counted: int) -> StreamCount:
        """Each chunk's ``output_ids``; the usage of the last event."""
        done, given = _usage(event)
        choice = first_choice(event)
        ids = choice.get("output_ids") if choice is not None else None
        return StreamCount(len(ids) if isinstance(ids, list) else 0, done, given)

    async def positions(
        self,
        client: EndpointClient,
        backend: LocalTokenizer,
        scoring_api: str | None,
        prompt: list[int],
        start: int,
        k: int,
    ) -> tuple[list[Position], str]:
        """``score_prompt: k``; positions ``start..`` of ``prompt_scores``."""
        body = {"model": backend.model, "prompt": prompt, "max_tokens": 1, "score_prompt": k}
        choice = first_choice(await client.post("/completions", body))
        rows = choice.get("prompt_scores") if choice is not None else None
        if not isinstance(rows, list) or len(rows) != len(prompt):
            raise ModelLoadError("the quirky answer has no prompt_scores for every position")
        found = [[(int(i), float(lp)) for i, lp in rows[j]] for j in range(start, len(prompt))]
        return found, "score_prompt"


__all__ = ["NAME", "QuirkyDialect"]

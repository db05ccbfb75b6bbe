"""Judges: what the judge tier asks, and the in-process transformers judge.

A :class:`Judge` takes the text of one question (a filled template of
:mod:`gate.judge.template`) and returns the answer text with its token usage. It
is the seam between the judging protocol and where a judge runs:

* :class:`TransformersJudge` — a causal LM loaded with transformers and asked in
  process: the question is the user message of the model's chat template, the
  answer is greedy and at most ``max_output_tokens`` long, and ``concurrency``
  questions are generated together as one left-padded batch;
* a judge behind an OpenAI-compatible chat API fits the same protocol: one
  question is one chat request with ``max_tokens = max_output_tokens`` and
  ``concurrency`` requests in flight (it has no ``codec`` and needs no field
  limits: such judges have long contexts).

``name`` is how the configuration calls a judge, ``family`` the model family (the
two-judge methodology of :mod:`gate.judge` wants judges of *different* families),
``model_id`` what identifies the model in the cache key (it changes when the
weights change). A judge with a small context exposes ``field_limits`` and a
``codec``, and the question builder clips each field to fit
(:meth:`gate.judge.template.JudgeTemplate.render`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from gate.errors import ConfigError, ModelLoadError
from gate.judge.template import FieldLimits, TextCodec

__all__ = [
    "JUDGE_CONFIG",
    "Judge",
    "JudgeAnswer",
    "TransformersJudge",
    "answer_ids",
    "question_ids",
]

#: File beside a trained judge's weights: field limits, template versions, output cap.
JUDGE_CONFIG = "judge_config.json"

_HASHED_FILES = ("model.safetensors", "tokenizer.json", JUDGE_CONFIG)


@dataclass(frozen=True)
class JudgeAnswer:
    """One answer: its text and the tokens the call used (prompt and completion)."""

    text: str
    prompt_tokens: int
    completion_tokens: int


@runtime_checkable
class Judge(Protocol):
    """Anything that answers judge questions (see the module docstring)."""

    @property
    def name(self) -> str:
        """The judge's configured name."""
        ...

    @property
    def family(self) -> str:
        """The model family (``llama``, ``qwen`` ...)."""
        ...

    @property
    def model_id(self) -> str:
        """Identifies the model (and its weights) in cache keys and provenance."""
        ...

    @property
    def max_output_tokens(self) -> int:
        """The cap on answer tokens per question."""
        ...

    @property
    def concurrency(self) -> int:
        """How many questions are answered at once."""
        ...

    @property
    def field_limits(self) -> FieldLimits | None:
        """Token budgets of the fields, for judges with a small context (else ``None``)."""
        ...

    @property
    def codec(self) -> TextCodec | None:
        """The tokenizer used to clip fields to ``field_limits`` (else ``None``)."""
        ...

    def ask(self, question: str) -> JudgeAnswer:
        """The answer to one question."""
        ...

    def ask_batch(self, questions: Sequence[str]) -> list[JudgeAnswer]:
        """Answers in the order of ``questions`` (``concurrency`` at a time)."""
        ...


def question_ids(tokenizer: Any, question: str) -> list[int]:
    """Token ids of ``question`` as the user message, ready for the assistant's answer."""
    enc = tokenizer.apply_chat_template(
        [{"role": "user", "content": question}], add_generation_prompt=True, return_dict=True
    )
    return [int(i) for i in enc["input_ids"]]


def answer_ids(tokenizer: Any, answer: str) -> list[int]:
    """Token ids of an answer followed by the end-of-turn token (what training targets)."""
    ids = [int(i) for i in tokenizer.encode(answer, add_special_tokens=False)]
    return [*ids, int(tokenizer.eos_token_id)]


def _model_hash(path: Path) -> str:
    """First 16 hex digits of SHA-256 over the judge's weight, tokenizer and config files."""
    digest = hashlib.sha256()
    for name in _HASHED_FILES:
        file = path / name
        if file.is_file():
            digest.update(name.encode())
            digest.update(hashlib.sha256(file.read_bytes()).digest())
    return digest.hexdigest()[:16]


class JudgeIdentity:
    """The identity half of :class:`Judge`, read from what a judge's ``__init__`` set."""

    _name: str
    _family: str
    _model_id: str
    _max_output: int
    _concurrency: int

    @property
    def name(self) -> str:
        return self._name

    @property
    def family(self) -> str:
        return self._family

    @property
    def model_id(self) -> str:
        return self._model_id

    @property
    def max_output_tokens(self) -> int:
        return self._max_output

    @property
    def concurrency(self) -> int:
        return self._concurrency


class _TokenizerCodec:
    """A transformers tokenizer as a :class:`~gate.judge.template.TextCodec`."""

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer

    def encode(self, text: str) -> list[int]:
        return [int(i) for i in self._tokenizer.encode(text, add_special_tokens=False)]

    def decode(self, ids: Sequence[int]) -> str:
        return str(self._tokenizer.decode(list(ids)))


class TransformersJudge(JudgeIdentity):
    """A local causal LM asked in process: greedy answers, batched ``concurrency`` at a time.

    Reads ``judge_config.json`` beside the weights when present (field limits, the
    output cap, the template versions it was trained on); otherwise each field gets a
    quarter of the model's context. ``device`` is a torch device string.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        name: str | None = None,
        family: str | None = None,
        max_output_tokens: int | None = None,
        concurrency: int = 16,
        device: str = "cpu",
    ) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.path = Path(path)
        if not self.path.is_dir():  # a wrong path is input (exit 4), not a failed load
            raise ConfigError(
                f"judge model directory {self.path} does not exist",
                "point the judge at a saved transformers model directory",
            )
        config_file = self.path / JUDGE_CONFIG
        settings: dict[str, Any] = {}
        if config_file.is_file():
            try:
                settings = json.loads(config_file.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise ModelLoadError(f"cannot read {config_file}: {exc}") from exc
        try:
            self._tokenizer = AutoTokenizer.from_pretrained(self.path, local_files_only=True)
            model: Any = AutoModelForCausalLM.from_pretrained(
                self.path, dtype=torch.float32, local_files_only=True, use_safetensors=True
            )
            self._model = model.to(device)
        except (OSError, ValueError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ModelLoadError(f"cannot load the judge model {self.path}: {first}") from exc
        self._model.eval()
        if concurrency < 1:
            raise ConfigError(f"judge concurrency {concurrency} must be >= 1")
        self._device = device
        self._name = name or self.path.name
        self._family = family or str(getattr(self._model.config, "model_type", "unknown"))
        self._max_output = int(max_output_tokens or settings.get("max_output_tokens", 8))
        self._concurrency = concurrency
        self._context = int(getattr(self._model.config, "max_position_embeddings", 2048))
        limits = settings.get("field_limits")
        if isinstance(limits, dict):
            self._limits = FieldLimits(
                prompt=int(limits["prompt"]), response=int(limits["response"])
            )
        else:
            quarter = self._context // 4
            self._limits = FieldLimits(prompt=quarter, response=quarter)
        self.trained_templates: dict[str, str] = dict(settings.get("templates", {}))
        self._codec = _TokenizerCodec(self._tokenizer)
        self._model_id = f"{self.path.name}@{_model_hash(self.path)}"

    @property
    def field_limits(self) -> FieldLimits | None:
        return self._limits

    @property
    def codec(self) -> TextCodec | None:
        return self._codec

    def ask(self, question: str) -> JudgeAnswer:
        return self.ask_batch([question])[0]

    def ask_batch(self, questions: Sequence[str]) -> list[JudgeAnswer]:
        out: list[JudgeAnswer] = []
        for start in range(0, len(questions), self._concurrency):
            out.extend(self._generate(questions[start : start + self._concurrency]))
        return out

    def _generate(self, questions: Sequence[str]) -> list[JudgeAnswer]:
        import torch

        rows = [question_ids(self._tokenizer, q) for q in questions]
        limit = self._context - self._max_output
        for row in rows:
            if len(row) > limit:
                raise ConfigError(
                    f"a judge question of {len(row)} tokens does not fit the judge's context "
                    f"({self._context} tokens, {self._max_output} kept for the answer)",
                    "lower the judge's field limits or shorten the template",
                )
        pad = self._tokenizer.pad_token_id
        if pad is None:
            pad = self._tokenizer.eos_token_id
        eos = self._tokenizer.eos_token_id
        width = max(len(r) for r in rows)
        ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows], device=self._device)
        mask = torch.tensor(
            [[0] * (width - len(r)) + [1] * len(r) for r in rows], device=self._device
        )
        with torch.no_grad():
            generated = self._model.generate(
                ids,
                attention_mask=mask,
                max_new_tokens=self._max_output,
                do_sample=False,
                eos_token_id=eos,
                pad_token_id=pad,
            )
        answers: list[JudgeAnswer] = []
        for row, new in zip(rows, generated[:, width:].tolist(), strict=True):
            kept: list[int] = []
            for tok in new:
                kept.append(int(tok))
                if tok == eos:
                    break
            text = str(self._tokenizer.decode(kept, skip_special_tokens=True)).strip()
            answers.append(JudgeAnswer(text, len(row), len(kept)))
        return answers

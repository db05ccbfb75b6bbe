"""One clock mark per decoding step of ``model.generate``: the timed generations' hook.

transformers asks every stopping criterion once after each new token; a criterion that
marks the clock and never stops gives ``new_tokens`` marks, the step times the latency
tier reads (time to first token is the first mark, each inter-token gap the difference
of two). Shared by the in-process backend and the chunked KV-cache backend.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import StoppingCriteria, StoppingCriteriaList

from gate.models.backends.base import StepClock


class _MarkEachStep(StoppingCriteria):
    """Marks ``clock`` once per decoding step; never stops the generation."""

    def __init__(self, clock: StepClock) -> None:
        self.clock = clock

    def __call__(self, input_ids: torch.Tensor, scores: Any, **kwargs: Any) -> torch.Tensor:
        self.clock.mark()
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)


def marking_each_step(clock: StepClock) -> StoppingCriteriaList:
    """The ``stopping_criteria`` argument that marks ``clock`` after every generated token."""
    return StoppingCriteriaList([_MarkEachStep(clock)])


__all__ = ["marking_each_step"]

"""Coupled sampling: every build draws the same random numbers for the same prompt and step.

At temperature ``T`` and nucleus mass ``p`` the distribution of a step is
``q = softmax(z / T)`` over the nucleus: the fewest most likely tokens whose
mass reaches ``p`` (ties kept), renormalised; ``q_v = 0`` outside it (Holtzman
et al., "The Curious Case of Neural Text Degeneration", ICLR 2020, section 3.1).
A token is drawn by the Gumbel-max trick: ``y = argmax_v (log q_v + g_v)`` with
``g_v = -log(-log U_v)`` and ``U_v`` independent uniforms on ``(0, 1)``, which
draws ``y`` with probability ``q_y`` exactly (Gumbel, "Statistical Theory of
Extreme Values", 1954; Maddison et al., "A* Sampling", NeurIPS 2014, section 2).

The uniforms of answer step ``i`` of the prompt keyed ``k`` come from a generator
seeded by ``(seed, k, i)`` (numpy's ``SeedSequence``), so they do not depend on
the batch a prompt is answered in nor on the build. Two builds with the same
distribution draw the same token; builds whose distributions differ a little
draw the same token most of the time. That coupling is what lets the generation
tier compare sampled answers prompt by prompt as it compares greedy ones: the
baseline against itself matches exactly, and a build's answers part from the
baseline's where its distribution moved enough to change the draw.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # torch is imported where it is used: the settings that hold a
    import torch  # Sampling are validated without it


@dataclass(frozen=True)
class Sampling:
    """A seeded sampling of free-running answers (the module doc)."""

    seed: int
    #: ``T``: the logits are divided by it.
    temperature: float = 1.0
    #: ``p``: the nucleus mass (1: the whole vocabulary).
    top_p: float = 1.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.temperature) and self.temperature > 0):
            raise ValueError(f"temperature must be > 0, got {self.temperature}")
        if not (0 < self.top_p <= 1):
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.seed < 0:
            raise ValueError(f"seed must be >= 0, got {self.seed}")


def step_seed(seed: int, key: int, step: int) -> int:
    """The generator seed of step ``step`` of the prompt keyed ``key`` (64 bits)."""
    state = np.random.SeedSequence([seed, key, step]).generate_state(1, dtype=np.uint64)
    return int(state[0])


def gumbel_noise(seed: int, key: int, step: int, vocab: int) -> torch.Tensor:
    """``g_v = -log(-log U_v)`` for ``v < vocab`` (float64), the same for every build."""
    import torch

    generator = torch.Generator().manual_seed(step_seed(seed, key, step))
    uniform = torch.rand(vocab, generator=generator, dtype=torch.float64)
    uniform = uniform.clamp(min=torch.finfo(torch.float64).tiny)  # U = 0 would give -inf
    return -torch.log(-torch.log(uniform))


def nucleus_log_probs(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """``log q`` per row of ``logits`` (the module doc): ``-inf`` outside the nucleus."""
    import torch

    log_q = torch.log_softmax(logits.double() / temperature, dim=-1)
    if top_p >= 1:
        return log_q
    ordered, _ = torch.sort(log_q, dim=-1, descending=True)
    mass_before = torch.cumsum(ordered.exp(), dim=-1) - ordered.exp()
    # the smallest log-prob still needed to reach p; tokens at or above it are kept
    needed = torch.where(mass_before < top_p, ordered, torch.full_like(ordered, math.inf))
    floor = needed.min(dim=-1, keepdim=True).values
    kept = log_q >= floor
    trimmed = torch.where(kept, log_q, torch.full_like(log_q, -math.inf))
    return torch.log_softmax(trimmed, dim=-1)


def coupled_choice(logits: torch.Tensor, noise: torch.Tensor, sampling: Sampling) -> torch.Tensor:
    """``argmax_v (log q_v + g_v)`` per row: the drawn token ids, shape ``(rows,)``."""
    import torch

    log_q = nucleus_log_probs(logits, sampling.temperature, sampling.top_p)
    return torch.argmax(log_q + noise.to(log_q.device), dim=-1)


class CoupledSampler:
    """A transformers logits processor that draws each row's next token (the module doc).

    Rows are the prompts keyed ``keys``, left-padded to ``prompt_width``, so the
    answer step is ``input_ids.shape[1] - prompt_width``. It returns scores that
    are 0 at the drawn token and ``-inf`` elsewhere: greedy decoding then takes it.
    """

    def __init__(self, keys: Sequence[int], prompt_width: int, sampling: Sampling) -> None:
        self.keys = list(keys)
        self.prompt_width = prompt_width
        self.sampling = sampling

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        import torch

        step = int(input_ids.shape[1]) - self.prompt_width
        vocab = int(scores.shape[-1])
        noise = torch.stack([gumbel_noise(self.sampling.seed, k, step, vocab) for k in self.keys])
        chosen = coupled_choice(scores, noise, self.sampling)
        out = torch.full_like(scores, -math.inf)
        out.scatter_(1, chosen.unsqueeze(1).to(scores.device), 0.0)
        return out


__all__ = [
    "CoupledSampler",
    "Sampling",
    "coupled_choice",
    "gumbel_noise",
    "nucleus_log_probs",
    "step_seed",
]

"""``[tiers.fidelity]`` settings: the typed table both sides of the tier read.

``record`` and ``measure`` must agree on ``batch_size`` (the grouping of
:func:`gate.tiers.fidelity.scoring.batches`) for a baseline scored against its
own pack to see bitwise the same numbers."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

TIER = "fidelity"
#: k of the CGA@k metric (``fidelity.cga_at_5``).
CGA_K = 5


@dataclass(frozen=True)
class FidelitySettings:
    """``[tiers.fidelity]`` settings (built with :func:`gate.tiers.registry.build_settings`)."""

    #: Greedy tokens generated per prompt when recording the pack.
    max_new_tokens: int = 128
    #: Baseline tokens stored per output position (the KL's top-k set).
    top_k: int = 32
    #: Prompts per teacher-forced batch (record and measure must agree for bitwise equality).
    batch_size: int = 8
    #: Use only the first ``limit`` prompts (of the prompt set when recording, of the pack otherwise).
    limit: int | None = None
    #: A baseline model (``demo``, a path or hub id) to load for the exact KL; None uses the pack.
    live_baseline: str | None = None
    #: Prompt-set JSONL; None is the packaged fidelity prompt set.
    prompts: Path | None = None
    #: Storage precision of the pack's top-k and sampled-tail log-probs.
    logprob_dtype: Literal["float32", "float16"] = "float32"
    #: Tokens drawn per output position from the baseline's tail beyond its top-k
    #: (pack format v3): the KL read from the pack is then an unbiased estimate
    #: with its standard error. 0 records no samples (the KL is the lower bound).
    tail_samples: int = 64
    #: Seed of the tail draws (prompt ``j`` draws with ``numpy`` seed ``[tail_seed, j]``).
    tail_seed: int = 0
    #: Score from the second output token, as the released FidBench code does;
    #: the default (false) counts every position, as the CGA paper's eq. 5 does.
    skip_first_token: bool = False
    #: Tokens teacher-forced per forward call through a KV-cache recipe's cache
    #: (:mod:`gate.models.backends.chunked`); None (the default) is the exact size:
    #: 1 for a method that acts during decoding, the whole continuation otherwise.
    cache_chunk_size: int | None = None
    #: Seed of a random grouping of the prompts into scoring batches when a candidate is
    #: scored (None, the default: by decreasing length, as recorded). ``gate calibrate``'s
    #: prompt-order perturbation: another batch composition changes padding and kernel
    #: shapes, never the model.
    order_seed: int | None = None
    #: Long-context prompts instead of the single-turn set: token budgets of the
    #: context tiers (e.g. ``[256, 512, 896]`` on the demo, ``[8192, 16384, 24576]``
    #: on a real model); None (the default) uses the single-turn prompts.
    context_tiers: tuple[int, ...] | None = None
    #: Long-context prompts per context tier.
    context_prompts_per_tier: int = 12
    #: Multi-turn conversations JSONL of the long-context prompts; None is the packaged set.
    conversations: Path | None = None

    def __post_init__(self) -> None:
        for name in ("max_new_tokens", "top_k", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.limit is not None and self.limit < 1:
            raise ValueError(f"limit must be >= 1, got {self.limit}")
        if self.top_k < CGA_K:
            raise ValueError(f"top_k must be >= {CGA_K}, got {self.top_k}")
        if self.tail_samples < 0 or self.tail_samples == 1:
            raise ValueError(
                f"tail_samples must be 0 or >= 2 (a standard error needs two draws), "
                f"got {self.tail_samples}"
            )
        if self.tail_seed < 0:
            raise ValueError(f"tail_seed must be >= 0, got {self.tail_seed}")
        if self.order_seed is not None and self.order_seed < 0:
            raise ValueError(f"order_seed must be >= 0, got {self.order_seed}")
        if self.cache_chunk_size is not None and self.cache_chunk_size < 1:
            raise ValueError(f"cache_chunk_size must be >= 1, got {self.cache_chunk_size}")
        if self.context_prompts_per_tier < 1:
            raise ValueError(
                f"context_prompts_per_tier must be >= 1, got {self.context_prompts_per_tier}"
            )
        if self.context_tiers is None:
            if self.conversations is not None:
                raise ValueError("conversations is read only with context_tiers; set both")
        else:
            from gate.data.long_context import check_tiers

            check_tiers(self.context_tiers)
            if self.prompts is not None:
                raise ValueError("prompts and context_tiers are two prompt sets; give one of them")

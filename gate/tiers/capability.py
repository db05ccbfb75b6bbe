"""The capability tier: seeded probes, greedy replies, exact checkers, pass rates.

Workload only: :func:`measure` draws the probes of every enabled family
(:func:`gate.data.probes.build_probes`, seed from the settings), asks the
backend for batched greedy replies (through the chat template), runs each
probe's checker on the decoded reply (code answers in :mod:`gate.data.probes.sandbox`)
and hands the outcomes to :func:`gate.metrics.capability.pass_rate_measurement`
— one ``capability.<family>`` measurement per family, with per-slice breakdowns
and a few failing examples in ``details``.

Replies are greedy, so measuring the same build twice gives the same outcomes
(identical builds never flip). Settings come from ``[tiers.capability]``.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol

from gate.data.probes import DEFAULT_SEED, CheckResult, Probe, build_probes, families_from
from gate.data.probes import code as code_probes
from gate.data.probes.sandbox import SandboxLimits
from gate.measurement import Measurement
from gate.metrics.capability import ProbeOutcome, pass_rate_measurement
from gate.progress import task as progress_task
from gate.progress import track

__all__ = [
    "TIER",
    "CapabilitySettings",
    "build_tier_probes",
    "measure",
    "run_probes",
]

TIER = "capability"


class GeneratingBackend(Protocol):
    """The part of :class:`gate.models.backends.base.Backend` this tier uses (greedy generation)."""

    def encode_prompt(self, text: str, *, chat: bool = True) -> list[int]:
        """Token ids of a user prompt through the chat template."""
        ...

    def generate(
        self, prompts: Sequence[Sequence[int]], *, max_new_tokens: int, batch_size: int = 8
    ) -> list[list[int]]:
        """Greedy continuations (new ids only, stopped at EOS)."""
        ...

    def decode(self, ids: Sequence[int]) -> str:
        """Text of generated ids, special tokens skipped."""
        ...


@dataclass(frozen=True)
class CapabilitySettings:
    """``[tiers.capability]`` settings (built with :func:`gate.tiers.registry.build_settings`)."""

    #: Probe seed; the demo model's training seeds are below 10 000 (see gate.data.probes).
    seed: int = DEFAULT_SEED
    #: Families to run (all by default).
    families: tuple[str, ...] = (
        "arithmetic_easy",
        "arithmetic_medium",
        "arithmetic_hard",
        "instruction_following",
        "structured_output",
        "code",
    )
    #: Probes per family.
    arithmetic_easy: int = 100
    arithmetic_medium: int = 100
    arithmetic_hard: int = 100
    instruction_following: int = 120
    structured_output: int = 60
    code: int = 20
    #: Greedy tokens per reply (code probes use ``code_max_new_tokens``).
    max_new_tokens: int = 48
    code_max_new_tokens: int = 160
    #: Prompts per generate call.
    batch_size: int = 16
    #: Hidden tests per code probe and the sandbox limits of each run.
    code_cases: int = 5
    sandbox_wall_s: float = 5.0
    sandbox_cpu_s: int = 5
    sandbox_memory_mb: int = 512
    #: Sandboxes run at once.
    sandbox_workers: int = 2
    #: Failing examples kept per family for reports.
    failing_examples: int = 3

    def __post_init__(self) -> None:
        families_from(self.families)
        for name in self.families:
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1 (drop it from families to skip it)")
        if self.max_new_tokens < 1 or self.code_max_new_tokens < 1:
            raise ValueError("max_new_tokens and code_max_new_tokens must be at least 1")
        if self.batch_size < 1 or self.sandbox_workers < 1 or self.code_cases < 1:
            raise ValueError("batch_size, sandbox_workers and code_cases must be at least 1")

    def count(self, family: str) -> int:
        """Probes asked for ``family``."""
        return int(getattr(self, family))

    def sandbox_limits(self) -> SandboxLimits:
        """The sandbox limits of a code probe."""
        return SandboxLimits(
            wall_s=self.sandbox_wall_s,
            cpu_s=self.sandbox_cpu_s,
            memory_bytes=self.sandbox_memory_mb * 1024**2,
        )


def build_tier_probes(settings: CapabilitySettings, family: str) -> list[Probe]:
    """The probes of one family as the settings ask for them."""
    n = settings.count(family)
    if family == "code":
        return code_probes.generate(
            family, n, settings.seed, limits=settings.sandbox_limits(), cases=settings.code_cases
        )
    return build_probes(family, n, settings.seed)


def _replies(
    backend: GeneratingBackend, probes: Sequence[Probe], settings: CapabilitySettings
) -> list[str]:
    """Greedy replies, batched per generation budget, in probe order."""
    budgets: dict[int, list[int]] = {}
    for i, probe in enumerate(probes):
        budget = probe.max_new_tokens or settings.max_new_tokens
        if probe.family == "code":
            budget = settings.code_max_new_tokens
        budgets.setdefault(budget, []).append(i)
    out = [""] * len(probes)
    label = f"capability: {_families_of(probes)} probes: generating replies"
    with progress_task(label, total=len(probes), counted_below=True):
        for budget, indices in budgets.items():
            prompts = [backend.encode_prompt(probes[i].prompt, chat=True) for i in indices]
            generated = backend.generate(
                prompts, max_new_tokens=budget, batch_size=settings.batch_size
            )
            for i, ids in zip(indices, generated, strict=True):
                out[i] = backend.decode(ids)
    return out


def _families_of(probes: Sequence[Probe]) -> str:
    """The probes' family names, for a progress label (``math``, ``code+math``)."""
    return "+".join(sorted({p.family for p in probes})) or "no"


def run_probes(
    probes: Sequence[Probe], replies: Sequence[str], *, workers: int = 1
) -> list[ProbeOutcome]:
    """Check every reply with its probe's checker (in parallel for sandboxed code)."""

    def one(pair: tuple[Probe, str]) -> CheckResult:
        probe, reply = pair
        return probe.checker.check(reply)

    pairs = list(zip(probes, replies, strict=True))
    # only sandboxed code takes long enough to show; the other checkers are instant
    sandboxed = any(p.family == "code" for p in probes)
    label = f"capability: {_families_of(probes)} probes: running the code in the sandbox"
    if workers > 1 and sandboxed:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            results = list(track(pool.map(one, pairs), label, total=len(pairs)))
    else:
        results = [one(pair) for pair in (track(pairs, label) if sandboxed else pairs)]
    return [
        ProbeOutcome(p.id, p.prompt, reply, r.passed, r.reason, p.tags)
        for (p, reply), r in zip(pairs, results, strict=True)
    ]


def measure(
    backend: GeneratingBackend,
    settings: CapabilitySettings | None = None,
    *,
    families: Sequence[str] | None = None,
) -> list[Measurement]:
    """One ``capability.<family>`` measurement per family (``families`` narrows the settings')."""
    cfg = settings or CapabilitySettings()
    chosen = families_from(families if families is not None else cfg.families)
    measurements = []
    for family in chosen:
        probes = build_tier_probes(cfg, family)
        replies = _replies(backend, probes, cfg)
        outcomes = run_probes(probes, replies, workers=cfg.sandbox_workers)
        extra = {"seed": cfg.seed, "max_new_tokens": cfg.max_new_tokens}
        measurements.append(
            pass_rate_measurement(
                f"{TIER}.{family}", outcomes, examples=cfg.failing_examples, extra=extra
            )
        )
    return measurements

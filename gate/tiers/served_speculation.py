"""The speculative tier on a served build: the same measurements, from two servers.

``gate run --serve "CMD" --tiers speculative`` with CMD carrying the engine's
speculative options (vLLM's ``--speculative-config``, llama-server's
``--spec-type``/``-md``): the session starts CMD as the build and, for this
tier, the plain command gate writes from it (the same server without its
speculative options, :mod:`gate.engines.served_speculation`). Each prompt is
generated greedy on both, one request at a time
(:class:`~gate.engines.served_speculation_pair.ServedPair`):

* ``speculative.lossless`` / ``speculative.confident_divergences`` as in
  process (:func:`gate.metrics.speculative.divergence`), the margin at a
  divergence from the plain server's completion log-probs and the noise its
  decode path vs its prefill path (module doc of the pair);
* ``speculative.acceptance_length`` / ``speculative.acceptance_rate`` per
  prompt from the engine's own counters
  (:mod:`gate.metrics.served_speculation`): tokens per target forward pass,
  accepted / proposed draft tokens; the details add vLLM's own acceptance length
  (draft-carrying steps only) and its per-position rates;
* ``speculative.speedup``: one request on each server back to back per prompt,
  alternating which goes first, as in process.

The measurements have the in-process names, units and shapes, so a baseline
recorded from a served build gates a served build unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Protocol

from gate.engines.served_speculation import ServedSpeculation
from gate.measurement import Measurement
from gate.metrics.catalog import speculative as catalog
from gate.metrics.served_speculation import (
    EngineDrafts,
    counted_acceptance_length,
    counted_acceptance_rate,
    counted_position_rates,
    engine_acceptance_length,
)
from gate.metrics.speculative import PlainReference
from gate.tiers.speculative import (
    SpeculativeSettings,
    lossless_measurements,
    run_prompts,
    speedup_measurement,
)


class ServedSpeculates(Protocol):
    """Two servers of one build, with and without speculation
    (:class:`gate.engines.served_speculation_pair.ServedPair`)."""

    speculation: ServedSpeculation

    def encode_prompt(self, text: str, *, chat: bool = True) -> list[int]:
        """Token ids of a user prompt through the chat template."""
        ...

    def speculate(
        self, prompt: Sequence[int], *, max_new_tokens: int
    ) -> tuple[tuple[int, ...], EngineDrafts]:
        """Greedy tokens of the speculative server and the engine's counts for the request."""
        ...

    def plain_reference(self, prompt: Sequence[int], *, max_new_tokens: int) -> PlainReference:
        """Greedy tokens of the plain server, its top-2 margins and noise."""
        ...

    def timed_pair(
        self, prompt: Sequence[int], *, max_new_tokens: int, speculative_first: bool
    ) -> tuple[float, float]:
        """Tokens/s ``(speculative server, plain server)``, back to back."""
        ...


def measure_served(build: ServedSpeculates, settings: SpeculativeSettings) -> list[Measurement]:
    """The tier's measurements on a served build (module doc)."""

    def speculated(prompt: Sequence[int]) -> tuple[Sequence[int], EngineDrafts]:
        return build.speculate(prompt, max_new_tokens=settings.max_new_tokens)

    runs = run_prompts(
        build, settings, "speculative: served with and without speculation", speculated
    )
    ids, counts = runs.ids, runs.records
    out = [
        replace(m, details={**m.details, "noise_definition": NOISE_DEFINITION})
        for m in lossless_measurements(ids, runs.divergences, runs.noise)
    ]
    out += acceptance(ids, counts, build.speculation)
    if settings.speed_prompts:
        out.append(speedup_measurement(build, runs.speed_prompts(settings), settings))
    return out


#: What the served noise is (the lossless measurements' details).
NOISE_DEFINITION = (
    "largest |log p| of a generated token between the plain server's decode path (completion"
    " log-probs) and its prefill path (the same tokens scored as one prompt)"
)


def acceptance(
    ids: Sequence[str], counts: Sequence[EngineDrafts], speculation: ServedSpeculation
) -> list[Measurement]:
    """``speculative.acceptance_length`` and ``speculative.acceptance_rate`` from the engine's
    counts, one sample per prompt (paired with a baseline's prompts)."""
    kept = [(pid, c) for pid, c in zip(ids, counts, strict=True) if c.tokens]
    lengths = tuple(counted_acceptance_length(c) for _, c in kept)
    rates = counted_position_rates(counts)
    engine_lengths = [engine_acceptance_length(c) for c in counts]
    drafts = [c.drafts for c in counts]
    details = {
        "source": "engine counters",
        "speculation": speculation.facts(),
        "target_passes": sum((c.tokens or 0) - c.accepted for c in counts),
        "proposed": sum(c.draft_tokens for c in counts),
        "accepted": sum(c.accepted for c in counts),
        "tokens": sum(c.tokens or 0 for c in counts),
        "drafted_steps": None if None in drafts else sum(d or 0 for d in drafts),
        "engine_acceptance_length": [None if v is None else round(v, 6) for v in engine_lengths],
        "position_rates": rates,
    }
    out: list[Measurement] = []
    if lengths:
        out.append(
            Measurement(
                catalog.ACCEPTANCE_LENGTH,
                sum(lengths) / len(lengths),
                samples=lengths,
                sample_ids=tuple(pid for pid, _ in kept),
                details=details,
            )
        )
    rated = [(pid, counted_acceptance_rate(c)) for pid, c in zip(ids, counts, strict=True)]
    proposed = [(pid, float(r)) for pid, r in rated if r is not None]
    if proposed:
        values = tuple(r for _, r in proposed)
        out.append(
            Measurement(
                catalog.ACCEPTANCE_RATE,
                sum(values) / len(values),
                samples=values,
                sample_ids=tuple(pid for pid, _ in proposed),
                details={"position_rates": rates, "source": "engine counters"},
            )
        )
    return out


__all__ = ["NOISE_DEFINITION", "ServedSpeculates", "acceptance", "measure_served"]

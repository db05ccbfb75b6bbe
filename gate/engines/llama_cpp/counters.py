"""llama-server's speculative-decoding counts in the ``timings`` of a ``/completion`` answer:
``draft_n`` (draft tokens proposed), ``draft_n_accepted`` and ``predicted_n`` (tokens
generated); no step count, no positions."""

from __future__ import annotations

from collections.abc import Mapping

from gate.metrics.served_speculation import EngineDrafts


def llama_counters(timings: Mapping[str, object]) -> EngineDrafts:
    """One ``/completion`` answer's ``timings``: ``draft_n``, ``draft_n_accepted`` (absent when
    nothing was drafted), ``predicted_n``."""

    def count(key: str) -> int:
        value = timings.get(key, 0)
        return int(value) if isinstance(value, int | float) else 0

    return EngineDrafts(
        draft_tokens=count("draft_n"),
        accepted=count("draft_n_accepted"),
        tokens=count("predicted_n"),
    )


__all__ = ["llama_counters"]

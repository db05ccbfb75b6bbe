"""vLLM's speculative-decoding counters in its ``/metrics`` text (Prometheus format).

``vllm:spec_decode_num_drafts_total`` (verification steps that carried a
draft), ``..._num_draft_tokens_total``, ``..._num_accepted_tokens_total`` and
``..._num_accepted_tokens_per_pos_total{position="j"}``, summed over the
engines a server runs; the difference of two readings around one request
(:func:`gate.metrics.served_speculation.delta`) is that request's.
"""

from __future__ import annotations

import re

from gate.metrics.served_speculation import EngineDrafts

#: vLLM's counters (vllm/v1/spec_decode/metrics.py, 0.32).
DRAFTS = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
ACCEPTED_PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos_total"

_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+(\S+)")
_POSITION = re.compile(r'position="(\d+)"')


def vllm_counters(text: str) -> EngineDrafts:
    """vLLM's speculative counters in a ``/metrics`` text, summed over engines (zeros when the
    server exports none: it does not speculate)."""
    totals = {DRAFTS: 0.0, DRAFT_TOKENS: 0.0, ACCEPTED: 0.0}
    positions: dict[int, float] = {}
    for line in text.splitlines():
        found = _SAMPLE.match(line)
        if found is None:
            continue
        name, labels, value = found.group(1), found.group(2) or "", found.group(3)
        if name in totals:
            totals[name] += float(value)
        elif name == ACCEPTED_PER_POSITION:
            pos = _POSITION.search(labels)
            if pos is not None:
                j = int(pos.group(1))
                positions[j] = positions.get(j, 0.0) + float(value)
    per_position = tuple(round(positions.get(j, 0.0)) for j in range(len(positions)))
    return EngineDrafts(
        draft_tokens=round(totals[DRAFT_TOKENS]),
        accepted=round(totals[ACCEPTED]),
        drafts=round(totals[DRAFTS]),
        accepted_per_position=per_position,
    )


def exports_counters(text: str) -> bool:
    """Whether a ``/metrics`` text carries vLLM's speculative counters."""
    return any(line.startswith(DRAFTS) for line in text.splitlines())


__all__ = [
    "ACCEPTED",
    "ACCEPTED_PER_POSITION",
    "DRAFTS",
    "DRAFT_TOKENS",
    "exports_counters",
    "vllm_counters",
]

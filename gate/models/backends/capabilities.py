"""Optional backend capabilities, each a small runtime-checkable protocol.

The :class:`~gate.models.backends.base.Backend` protocol is what every engine
offers. Some backends offer more, and the tiers take another path when one
does not; each extra is declared here once, with the question a tier asks
(``isinstance(backend, Capability)``) and the answer for a backend without it:

- :class:`DeclaresFullRows` — ``exact_full_rows``: whether ``score(full=True)``
  rows are the model's exact distribution (in process) or rebuilt from a
  served top-k (``False``). Without it: exact (:func:`exact_full_rows`).
- :class:`ReportsKVCache` — ``last_kv_cache``: the KV-cache facts of the last
  timed request (``kv_*`` keys) of a build that compresses its cache. Without
  it: none (:func:`last_kv_cache`).
- :class:`EncodesMessages` — ``encode_messages``: a conversation through the
  chat template. Without it: multi-turn prompts cannot be rendered.
- :class:`ChunksScoring` — ``scoring_chunk``: a context in which scoring runs
  in chunks of a given size (a KV-cache method). Without it: scoring as is.
- :class:`ReportsActivity` — ``activity``: what the build's compression did
  (:class:`~gate.models.activity.Activity`); ``None`` or absent for an
  uncompressed or served build.
- :class:`LoadRunner` — ``stream_timings``: a load run of concurrent streamed
  requests (a served build). Without it: no load run.
- :class:`SamplesCoupled` — ``generate_sampled``: seeded samples whose random
  numbers are keyed by prompt and step, the same in every build
  (:mod:`gate.models.backends.sampling`). Without it: greedy answers only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from gate.models.activity import Activity, StackActivity

if TYPE_CHECKING:
    from gate.metrics.serving import StreamTiming
    from gate.models.backends.sampling import Sampling


@runtime_checkable
class DeclaresFullRows(Protocol):
    """A backend that says whether its full score rows are exact."""

    #: ``False``: full rows are rebuilt from a served top-k (tail tokens share the rest).
    exact_full_rows: bool


@runtime_checkable
class ReportsKVCache(Protocol):
    """A backend that reports the KV-cache facts of its last timed request."""

    #: ``kv_*`` facts (bytes per token, ...) of the last timed request; ``None`` before one.
    last_kv_cache: Mapping[str, Any] | None


@runtime_checkable
class EncodesMessages(Protocol):
    """A backend that renders a conversation through its chat template."""

    def encode_messages(self, messages: Sequence[Mapping[str, str]]) -> list[int]:
        """Ids of ``{"role", "content"}`` turns, with the assistant prefix."""
        ...


@runtime_checkable
class ChunksScoring(Protocol):
    """A backend whose scoring can run in chunks (a KV-cache method)."""

    def scoring_chunk(self, chunk_size: int | None) -> AbstractContextManager[None]:
        """Within the context, score in chunks of ``chunk_size`` tokens (``None``: whole)."""
        ...


@runtime_checkable
class ReportsActivity(Protocol):
    """A backend that carries what its build's compression did."""

    #: The build's activity counter; ``None`` for an uncompressed build.
    activity: Activity | StackActivity | None


@runtime_checkable
class LoadRunner(Protocol):
    """A served backend that can run a load of concurrent streamed requests."""

    def stream_timings(
        self,
        prompts: Sequence[Sequence[int]],
        *,
        new_tokens: int,
        request_rate: float = ...,
        max_concurrency: int | None = None,
        burstiness: float = 1.0,
        seed: int = 0,
    ) -> tuple[list[StreamTiming], float]: ...


@runtime_checkable
class SamplesCoupled(Protocol):
    """An in-process backend that draws coupled samples (:mod:`gate.models.backends.sampling`)."""

    def generate_sampled(
        self,
        prompts: Sequence[Sequence[int]],
        keys: Sequence[int],
        *,
        max_new_tokens: int,
        sampling: Sampling,
        batch_size: int = 8,
    ) -> list[list[int]]:
        """Each prompt's sampled continuation, drawing the random numbers keyed ``keys[i]``."""
        ...


def exact_full_rows(backend: object) -> bool:
    """Whether ``backend``'s full score rows are exact (a backend that does not say: yes)."""
    return bool(backend.exact_full_rows) if isinstance(backend, DeclaresFullRows) else True


def last_kv_cache(backend: object) -> dict[str, Any] | None:
    """The KV-cache facts of ``backend``'s last timed request (``None``: none reported)."""
    if not isinstance(backend, ReportsKVCache):
        return None
    facts = backend.last_kv_cache
    return dict(facts) if facts else None


def activity_of(backend: object) -> Activity | StackActivity | None:
    """The build's :class:`Activity` (a stack's :class:`StackActivity`); ``None`` for an
    uncompressed build or a served one."""
    if not isinstance(backend, ReportsActivity):
        return None
    activity = backend.activity
    return activity if isinstance(activity, Activity | StackActivity) else None


__all__ = [
    "ChunksScoring",
    "DeclaresFullRows",
    "EncodesMessages",
    "LoadRunner",
    "ReportsActivity",
    "ReportsKVCache",
    "SamplesCoupled",
    "activity_of",
    "exact_full_rows",
    "last_kv_cache",
]

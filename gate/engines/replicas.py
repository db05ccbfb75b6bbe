"""Replicas of one served build: a tier's requests spread over them (:class:`ReplicaBackend`).

``--serve`` / ``--endpoint`` given several times (a list in ``[candidates.engine]``)
names replicas of the same build: data-parallel copies of one model behind
separate OpenAI-compatible servers. :class:`ReplicaBackend` wraps one connected
:class:`~gate.engines.http.HTTPBackend` per replica and is itself a
``Backend``:

* **Same build, checked first.** :func:`check_same_build` compares what each
  server says about itself and what its command line states (served model,
  engine and its version, tokenizer check, context length, KV-cache dtype,
  quantization, dtype, log-prob limit) before anything is measured; a
  difference is one :class:`~gate.errors.ConfigError` naming both replicas
  and the fact (exit 4). Each replica's tokenizer was already checked against
  the local one when it connected.
* **Least-loaded dispatch.** Every request (one scored sequence, one greedy
  generation, one stream) goes to the live replica with the most free slots
  at the moment it is sent (a slot per ``max_concurrency``, per replica), ties
  to the lower index; a request waits while every live replica is full. A
  faster replica frees its slots sooner and so takes more of the work, where
  round robin would give every replica the same count and leave the tier as
  slow as its slowest replica (requests differ in length by 10x or more).
* **A dead replica is dropped.** A request that fails with a
  :class:`~gate.errors.ModelLoadError` (a 5xx after the retries, a timeout, a
  refused or dropped connection) makes the backend ask whether that replica
  still lives (its server process, for a server gate started; else ``/health``
  or ``/v1/models``). A dead one is dropped with a warning line and the
  request is sent again to another replica (scoring and greedy generation have
  no side effects); every later request goes to the others. A replica that
  still lives failed the request itself, and the error stands (it would fail
  on the others too). When no replica is left the call raises one
  ``ModelLoadError`` naming why each was dropped (exit 3).
* **Timed work is repeated.** A timed generation or load run during which a
  replica was dropped is run again on the replicas left, so no figure mixes
  two deployments.

The first replica answers for the build's identity (``provenance``, the
tokenizer); its provenance gains ``replicas``: each replica's endpoint, server
command and log (for servers gate started) and whether it was dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

from gate.engines.client import (
    EndpointClient,
    gather_counted,
    public_url,
    run_sync,
)
from gate.engines.http import HTTPBackend
from gate.engines.streams import (
    LoadRuns,
    TimedStreams,
    check_load_run,
    require_a_token,
    run_load,
    streams_at_once,
    timed_generation,
)
from gate.errors import ConfigError, GateError, ModelLoadError
from gate.measurement import TimedGeneration
from gate.metrics.serving import StreamTiming, arrival_offsets
from gate.models.backends.base import (
    ScoreRequest,
    StepClock,
    TokenScores,
    nothing_to_generate,
    nothing_to_score,
    require_timed,
)
from gate.provenance import ModelProvenance

T = TypeVar("T")
#: One request's work on one replica: ``(replica, its client) -> result``.
Work = Callable[[HTTPBackend, EndpointClient], Awaitable[T]]
#: Where a warning line goes (the session's report lines; stderr by default).
Warn = Callable[[str], None]


def replica_label(index: int, backend: HTTPBackend) -> str:
    """``replica 2 (http://host:port/v1)``: how messages name replica ``index`` (from 0)."""
    return f"replica {index + 1} ({public_url(backend.settings.base_url)})"


def build_identity(backend: HTTPBackend) -> dict[str, Any]:
    """The facts two replicas of one build share, from what each server says about itself
    and its command line (``None``: the replica does not say). The weights are not hashed
    here: that would read a whole checkpoint once per replica before anything is measured."""
    facts = backend.connect()
    served = backend.served_settings
    return {
        "served model": facts.model,
        "engine": facts.owned_by,
        "engine version": facts.version,
        "tokenizer check": facts.tokenizer_check,
        "max model len": facts.max_model_len or served.get("max_model_len"),
        "kv cache dtype": facts.cache_config.get("cache_dtype") or served.get("kv_cache_dtype"),
        "quantization": served.get("quantization"),
        "dtype": served.get("dtype"),
        "max logprobs": served.get("max_logprobs"),
    }


def check_same_build(backends: Sequence[HTTPBackend]) -> None:
    """Refuse replicas that are not the same build (:class:`ConfigError`, exit 4).

    Each fact of :func:`build_identity` is compared between the first replica
    and every other; a fact one side does not know is not compared.
    """
    first = build_identity(backends[0])
    for index, other in enumerate(backends[1:], start=1):
        theirs = build_identity(other)
        for name, value in first.items():
            if value is None or theirs[name] is None or value == theirs[name]:
                continue
            raise ConfigError(
                f"the replicas are not the same build: {name} is {value!r} on "
                f"{replica_label(0, backends[0])} and {theirs[name]!r} on "
                f"{replica_label(index, other)}",
                "serve the same model with the same engine version and settings on every replica",
            )


@dataclass
class _Slots:
    """Free request slots per replica inside one event loop (least-loaded choice)."""

    caps: list[int]
    live: Callable[[], list[int]]
    why_none: Callable[[], GateError]
    busy: list[int] = field(default_factory=list)
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)

    def __post_init__(self) -> None:
        self.busy = [0] * len(self.caps)

    async def acquire(self) -> int:
        """The live replica with the most free slots (waits while all are full)."""
        async with self.changed:
            while True:
                live = self.live()
                if not live:
                    raise self.why_none()
                best = max(live, key=lambda r: (self.caps[r] - self.busy[r], -r))
                if self.busy[best] < self.caps[best]:
                    self.busy[best] += 1
                    return best
                await self.changed.wait()

    async def release(self, replica: int) -> None:
        """Free a slot of ``replica`` (and let waiters choose again)."""
        async with self.changed:
            self.busy[replica] -= 1
            self.changed.notify_all()

    async def wake(self) -> None:
        """Let waiters choose again (a replica was dropped)."""
        async with self.changed:
            self.changed.notify_all()


class ReplicaBackend(LoadRuns):
    """Several connected replicas of one served build, used as one ``Backend``."""

    #: Full rows are rebuilt from a served top-k, as on one replica.
    exact_full_rows = False

    def __init__(self, replicas: Sequence[HTTPBackend], *, warn: Warn | None = None) -> None:
        if len(replicas) < 2:
            raise ValueError("a ReplicaBackend needs at least two replicas")
        self.replicas = list(replicas)
        self.primary = self.replicas[0]
        #: Why each dropped replica was dropped, by index.
        self.dropped: dict[int, str] = {}
        self._warn = warn or _note
        more = len(self.replicas) - 1
        self.name = f"{self.primary.name} (+{more} replica{'s' if more > 1 else ''})"

    # -- the build's identity: the first replica's ----------------------------------

    def __getattr__(self, name: str) -> Any:
        # the tokenizer, config, settings and other facts of the build: the first replica's
        if name.startswith("__") or name in ("replicas", "primary"):
            raise AttributeError(name)
        return getattr(self.primary, name)

    def encode_prompt(self, text: str, *, chat: bool = True) -> list[int]:
        """Token ids of a user prompt (the local tokenizer, shared by every replica)."""
        return self.primary.encode_prompt(text, chat=chat)

    def encode_text(self, text: str) -> list[int]:
        """Plain token ids (the local tokenizer)."""
        return self.primary.encode_text(text)

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ids (the local tokenizer)."""
        return self.primary.decode(ids)

    def connect(self) -> None:
        """Connect every replica (each checks its tokenizer), then check they are one build."""
        for index, replica in enumerate(self.replicas):
            try:
                replica.connect()
            except GateError as exc:
                raise type(exc)(
                    f"{replica_label(index, replica)}: {exc.message}", exc.hint
                ) from None
        check_same_build(self.replicas)

    def labels(self) -> list[str]:
        """Every replica as messages name it."""
        return [replica_label(i, r) for i, r in enumerate(self.replicas)]

    def provenance(self) -> ModelProvenance:
        """The first replica's provenance, with ``replicas``: each one and whether it was dropped."""
        entries = []
        for index, replica in enumerate(self.replicas):
            entry: dict[str, Any] = {"endpoint": public_url(replica.settings.base_url)}
            if replica.serve_command is not None:
                entry["serve_command"] = list(replica.serve_command)
            if replica.server_log is not None:
                entry["server_log"] = str(replica.server_log)
            entry["dropped"] = self.dropped.get(index)
            entries.append(entry)
        return self.primary.provenance().with_facts({"name": self.name, "replicas": entries})

    # -- dispatch --------------------------------------------------------------------

    def _live(self) -> list[int]:
        return [i for i in range(len(self.replicas)) if i not in self.dropped]

    def _none_left(self) -> ModelLoadError:
        why = "; ".join(
            f"{replica_label(i, self.replicas[i])}: {reason}"
            for i, reason in sorted(self.dropped.items())
        )
        return ModelLoadError(
            f"every replica failed, none can finish the work ({why})",
            "see the servers' logs; restart them and run again",
        )

    def _slots(self, caps: Sequence[int] | None = None) -> _Slots:
        sizes = (
            list(caps) if caps is not None else [r.settings.max_concurrency for r in self.replicas]
        )
        return _Slots(sizes, self._live, self._none_left)

    async def _dead(self, index: int, client: EndpointClient) -> bool:
        """Whether replica ``index`` is down: its process died, or it answers neither
        ``/health`` nor ``/v1/models``."""
        replica = self.replicas[index]
        if replica.liveness is not None and replica.liveness() is not None:
            return True
        if await client.get_text("/health", root=True) is not None:
            return False
        return await client.get_text("/models") is None

    async def _drop_if_dead(
        self, index: int, client: EndpointClient, error: ModelLoadError, slots: _Slots
    ) -> bool:
        """Drop replica ``index`` (with a warning) when it is down; whether it was dropped."""
        if index in self.dropped:
            return True
        if not await self._dead(index, client):
            return False
        if index not in self.dropped:
            self.dropped[index] = error.message
            left = len(self._live())
            self._warn(
                f"warning: {replica_label(index, self.replicas[index])} dropped "
                f"({error.message}); "
                + (
                    f"its requests go to the {left} replica{'s' if left > 1 else ''} left"
                    if left
                    else "no replica is left"
                )
            )
        await slots.wake()
        return True

    async def _on_any(self, slots: _Slots, clients: Sequence[EndpointClient], work: Work[T]) -> T:
        """``work`` on the least-loaded live replica, again on another when that one dies."""
        while True:
            index = await slots.acquire()
            try:
                return await work(self.replicas[index], clients[index])
            except ModelLoadError as exc:
                if not await self._drop_if_dead(index, clients[index], exc, slots):
                    raise
            finally:
                await slots.release(index)

    def _run(self, main: Callable[[list[EndpointClient]], Awaitable[T]]) -> T:
        """Run ``main`` with one client per replica on a fresh event loop."""

        async def runner() -> T:
            async with contextlib.AsyncExitStack() as stack:
                clients = [
                    await stack.enter_async_context(replica.open_client())
                    for replica in self.replicas
                ]
                return await main(clients)

        return run_sync(runner())

    def _spread(self, works: Sequence[Work[T]]) -> list[T]:
        """Each of ``works`` on some live replica, results in order."""
        if not self._live():
            raise self._none_left()

        async def main(clients: list[EndpointClient]) -> list[T]:
            slots = self._slots()
            return await gather_counted(
                [partial(self._on_any, slots, clients, work) for work in works], len(works)
            )

        return self._run(main)

    def _timed(self, measure: Callable[[], T]) -> T:
        """``measure()``, repeated on the replicas left when one was dropped during it."""
        for _ in range(len(self.replicas)):
            before = len(self.dropped)
            result = measure()
            if len(self.dropped) == before:
                return result
            self._warn("timed run repeated on the replicas left (a replica was dropped during it)")
        raise self._none_left()  # pragma: no cover - each repeat needs one more dropped replica

    # -- the Backend protocol ------------------------------------------------------------

    def score(
        self,
        requests: Sequence[ScoreRequest],
        *,
        top_k: int = 32,
        full: bool = False,
        batch_size: int = 8,
    ) -> list[TokenScores]:
        """Teacher-forced scores, each sequence on some replica (see the module docstring)."""
        if nothing_to_score(requests):
            return []

        async def one(request: ScoreRequest, r: HTTPBackend, c: EndpointClient) -> TokenScores:
            return await r.score_one(c, request, top_k=top_k, full=full)

        return self._spread([partial(one, request) for request in requests])

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        *,
        max_new_tokens: int,
        batch_size: int = 8,
    ) -> list[list[int]]:
        """Greedy continuations, each prompt on some replica."""
        if nothing_to_generate(prompts, max_new_tokens):
            return [[] for _ in prompts]

        async def one(prompt: Sequence[int], r: HTTPBackend, c: EndpointClient) -> list[int]:
            return await r.generate_one(c, prompt, max_new_tokens)

        return self._spread([partial(one, prompt) for prompt in prompts])

    def generate_timed(
        self,
        prompt: Sequence[int],
        *,
        batch_size: int,
        new_tokens: int,
        clock: StepClock,
    ) -> TimedGeneration:
        """``batch_size`` concurrent streams sent at one moment, spread over the replicas
        (the deployment's batch of ``batch_size``); step ``j`` is when every stream has
        token ``j`` (:func:`gate.metrics.serving.step_times`)."""
        require_timed(prompt, batch_size, new_tokens)

        def measure() -> TimedStreams:
            async def main(clients: list[EndpointClient]) -> TimedStreams:
                slots = self._slots([batch_size] * len(self.replicas))

                async def send(t0: float) -> StreamTiming:
                    async def one(r: HTTPBackend, c: EndpointClient) -> StreamTiming:
                        return await r.stream_one(c, prompt, new_tokens, start=0.0, sent=t0)

                    return await self._on_any(slots, clients, one)

                return await streams_at_once(clock, batch_size, send)

            return self._run(main)

        timed = self._timed(measure)
        live = ", ".join(public_url(self.replicas[i].settings.base_url) for i in self._live())
        return timed_generation(prompt, batch_size, timed, f"servers {live}")

    def stream_timings(
        self,
        prompts: Sequence[Sequence[int]],
        *,
        new_tokens: int,
        request_rate: float = math.inf,
        max_concurrency: int | None = None,
        burstiness: float = 1.0,
        seed: int = 0,
    ) -> tuple[list[StreamTiming], float]:
        """A load run over the replicas (:meth:`HTTPBackend.stream_timings`'s contract):
        request ``r`` is sent at its arrival offset once one of ``max_concurrency``
        slots of the whole run (default: every replica's ``max_concurrency`` together)
        is free, to the least-loaded live replica."""
        check_load_run(prompts, new_tokens)
        offsets = arrival_offsets(len(prompts), request_rate, burstiness=burstiness, seed=seed)

        def measure() -> tuple[list[StreamTiming], float]:
            async def main(clients: list[EndpointClient]) -> tuple[list[StreamTiming], float]:
                slots = self._slots()
                limit = max_concurrency or sum(slots.caps[i] for i in self._live())

                async def send(prompt: Sequence[int], begun: float) -> StreamTiming:
                    async def stream(r: HTTPBackend, c: EndpointClient) -> StreamTiming:
                        return await r.stream_one(c, prompt, new_tokens, start=begun)

                    return await self._on_any(slots, clients, stream)

                return await run_load(prompts, offsets, limit, send, fatal=lambda: not self._live())

            return self._run(main)

        timings, duration = self._timed(measure)
        require_a_token(timings)
        return timings, duration


def _note(line: str) -> None:
    from gate import progress

    progress.note(line)


def replica_lines(backend: object) -> list[str]:
    """``gate:`` lines naming the replicas of ``backend`` (none for one server)."""
    if not isinstance(backend, ReplicaBackend):
        return []
    return [f"replicas: {len(backend.replicas)}: " + ", ".join(backend.labels())]


__all__ = [
    "ReplicaBackend",
    "Warn",
    "build_identity",
    "check_same_build",
    "replica_label",
    "replica_lines",
]

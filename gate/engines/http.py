"""The serving-engine backend (:class:`HTTPBackend`): the Backend protocol over HTTP.

The model runs in a server (vLLM, llama-server, SGLang, ...) with that
engine's own kernels and parallelism; gate stays the client. Text becomes
token ids locally, with the model's own tokenizer (the reference pack's), and
only ids cross the wire, so both sides see the same tokens. Every request and
every answer is the server's dialect's business
(:class:`~gate.engines.dialect.EngineDialect`, found at connect by
:mod:`gate.engines.registry`: the given one, then each registered one, else the
generic OpenAI dialect of :mod:`gate.engines.openai`); this class owns what is
the same for all of them:

* ``score`` — one scoring request per sequence, ``context + continuation`` as
  ids, ``k = max(top_k, full_top_k)`` log-probs per position
  (``full_top_k``: the engine setting ``served_logprobs``) when full rows are
  asked, turned by :func:`gate.engines.scores.scores_from_positions` into the
  same :class:`TokenScores` as the in-process backend, exactly as that module
  states. :attr:`HTTPBackend.exact_full_rows` is False, so callers that need
  the exact log-prob of arbitrary tokens (the single-token MCQ path) score
  them as targets instead. Under ``scoring_api = "auto"`` the first answer
  tells how the server scores, and the rest are sent at once.
* ``generate`` — greedy, an explicit length (a checkpoint's
  generation_config may otherwise set the server's default), the dialect's
  new ids cut after the first EOS as in process.
* ``generate_timed`` / :meth:`HTTPBackend.stream_timings` / :meth:`HTTPBackend.load_run`
  — streamed requests of exactly the asked length, tokens counted per event
  as the dialect reads them (ids, never text where the engine streams ids),
  checked against the usage the stream reports; the maths is
  :mod:`gate.metrics.serving`.

Requests run concurrently, at most ``max_concurrency`` at once (engines batch
them), and at most the server's slots where it says how many it has, through
:class:`~gate.engines.client.EndpointClient` (timeouts, bounded retries,
one-line errors). Before the first use, :meth:`HTTPBackend.connect` reads the
served model, finds the dialect, refuses a ``scoring_api`` the server cannot
answer, and lets the dialect check that the server's tokenizer agrees with the
local one (a mismatch is a BaselineError, exit 4) and collect the facts of
the provenance (engine, version, served settings; never the API key).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from functools import cached_property, partial
from pathlib import Path
from typing import Any

from gate.engines.client import (
    EndpointClient,
    EndpointSettings,
    Liveness,
    counted,
    gather_counted,
    public_url,
    run_sync,
)
from gate.engines.dialect import EngineDialect, ServerFacts
from gate.engines.scores import Position, scores_from_positions
from gate.engines.secrets import mask_argv
from gate.engines.streams import (
    LoadRuns,
    TimedStreams,
    check_load_run,
    require_a_token,
    run_load,
    streams_at_once,
    timed_generation,
)
from gate.errors import ConfigError, DataError, ModelLoadError
from gate.measurement import TimedGeneration
from gate.metrics.serving import StreamTiming, arrival_offsets, token_times
from gate.models.backends import tokens
from gate.models.backends.base import (
    ScoreRequest,
    StepClock,
    TokenScores,
    nothing_to_generate,
    nothing_to_score,
    require_timed,
)
from gate.models.model_spec import ModelSpec
from gate.models.provenance import combined_digest, hash_files, tokenizer_files, weight_files
from gate.provenance import ModelProvenance

#: The facts a served model's provenance records, in this order (unknown ones as null).
HTTP_FACTS: tuple[str, ...] = (
    "name",
    "source",
    "slug",
    "backend",
    "recipe",
    "endpoint",
    "api_key_env",
    "served_model",
    "served_model_root",
    "engine",
    "engine_version",
    "served_settings",
    "serve_command",
    "server_log",
    "scoring_api",
    "tokenizer_check",
    "max_concurrency",
    "model_type",
    "vocab_size",
    "model_family",
    "quantization",
    "dtype_requested",
    "weights_sha256",
    "weight_files",
    "tokenizer_sha256",
    "tokenizer_files",
    "linear_classes",
    "linear_class_counts",
)


def _text(value: object) -> str | None:
    """A served setting as text (``None`` stays unknown)."""
    return None if value is None else str(value)


class HTTPBackend(tokens.TokenizerMethods, LoadRuns):
    """A model served behind an OpenAI-compatible endpoint, with a local tokenizer."""

    #: Full rows are rebuilt from the top-k (see :mod:`gate.engines.scores`).
    exact_full_rows = False

    def __init__(
        self,
        settings: EndpointSettings,
        tokenizer_spec: ModelSpec,
        *,
        liveness: Liveness | None = None,
        serve_command: Sequence[str] | None = None,
        served_settings: Mapping[str, Any] | None = None,
        server_log: Path | None = None,
        dialect: EngineDialect | None = None,
    ) -> None:
        from gate.models.backends.loading import load_tokenizer

        self.settings = settings
        self.spec = tokenizer_spec
        #: The engine's dialect: the one its command names, else found at connect.
        self.dialect: EngineDialect | None = dialect
        self.liveness = liveness
        #: The server's command line as recorded: its secrets masked (gate.engines.secrets).
        self.serve_command = mask_argv(serve_command) if serve_command is not None else None
        self.served_settings = dict(served_settings or {})
        #: The log of a server gate started (a report artifact), else ``None``.
        self.server_log = server_log
        self.tokenizer, self.config, self.files_dir = load_tokenizer(tokenizer_spec)
        self.vocab_size = int(getattr(self.config, "vocab_size", 0) or len(self.tokenizer))
        eos: Any = None
        generation = self.files_dir / "generation_config.json" if self.files_dir else None
        if generation is not None and generation.is_file():
            import json

            eos = json.loads(generation.read_text(encoding="utf-8")).get("eos_token_id")
        if eos is None:
            eos = getattr(self.config, "eos_token_id", None) or self.tokenizer.eos_token_id
        self.eos_ids: list[int] = (
            [] if eos is None else [int(e) for e in (eos if isinstance(eos, list) else [eos])]
        )
        self.name = f"{tokenizer_spec.source}@{public_url(settings.base_url)}"
        self.facts: ServerFacts | None = None
        #: ``prompt_logprobs`` or ``echo`` once known (``settings.scoring_api`` unless auto).
        self.scoring_api: str | None = (
            None if settings.scoring_api == "auto" else settings.scoring_api
        )

    # -- tokens ---------------------------------------------------------------

    @cached_property
    def vocabulary(self) -> dict[str, int]:
        """Decoded text -> id for ids whose text is unique (legacy ``echo`` keys are texts)."""
        seen: dict[str, int] = {}
        dup: set[str] = set()
        for i in range(len(self.tokenizer)):
            text = self.tokenizer.decode([i])
            if text in seen:
                dup.add(text)
            seen[text] = i
        return {t: i for t, i in seen.items() if t not in dup}

    # -- plumbing -------------------------------------------------------------

    def _client(self) -> EndpointClient:
        return EndpointClient(self.settings, liveness=self.liveness)

    def open_client(self) -> EndpointClient:
        """A client of this server (create it inside the event loop that uses it)."""
        return self._client()

    @property
    def model(self) -> str:
        """The served model name requests carry (connects first if needed)."""
        if self.facts is None:
            self.connect()
        assert self.facts is not None
        return self.facts.model

    def _run(self, make: Callable[[EndpointClient], Any]) -> Any:
        async def main() -> Any:
            async with self._client() as client:
                return await make(client)

        return run_sync(main())

    # -- identity -------------------------------------------------------------

    def connect(self) -> ServerFacts:
        """Read the served model and settings, and check the tokenizer (once)."""
        if self.facts is None:
            self.facts = self._run(self._connect)
        return self.facts

    async def _connect(self, client: EndpointClient) -> ServerFacts:
        listing = await client.get("/models")
        data = listing.get("data") if isinstance(listing, Mapping) else None
        if not isinstance(data, list) or not data or not isinstance(data[0], Mapping):
            raise ModelLoadError(
                f"{public_url(client.url('/models'))} lists no model",
                "the endpoint must be an OpenAI-compatible server with a model loaded",
            )
        names = [str(m.get("id")) for m in data if isinstance(m, Mapping)]
        wanted = self.settings.model or names[0]
        if wanted not in names:
            raise ConfigError(
                f"the server does not serve model {wanted!r} (it serves {', '.join(names)})",
                "set the served model name to one of those",
            )
        card = {**data[names.index(wanted)], "id": wanted}
        dialect, found = await self._recognize(client, card)
        self.dialect = dialect
        self._require_scoring_api(dialect)
        return await dialect.describe(client, self, card, found)

    async def _recognize(
        self, client: EndpointClient, card: Mapping[str, Any]
    ) -> tuple[EngineDialect, object]:
        """The dialect of the server: the one given first, then every registered one in turn
        (:mod:`gate.engines.registry`), else the generic OpenAI dialect."""
        from gate.engines.registry import dialects, fallback

        given = [self.dialect] if self.dialect is not None else []
        others = [d for d in dialects() if type(d) is not type(self.dialect)]
        for dialect in [*given, *others]:
            found = await dialect.recognize(client, card)
            if found is not None:
                return dialect, found
        generic = fallback()
        return generic, await generic.recognize(client, card) or card

    def _require_scoring_api(self, dialect: EngineDialect) -> None:
        """Refuse a ``scoring_api`` the server cannot answer (ConfigError naming the ones it
        can): another engine's own is refused here, the dialect refuses the rest."""
        from gate.engines.registry import scoring_api_owner

        asked = self.settings.scoring_api
        owner = scoring_api_owner(asked)
        if owner is not None and owner.name != dialect.name:
            server = owner.server_name or owner.name
            raise ConfigError(
                f"scoring_api {asked!r} is {server}'s, and this server is not {server}",
                "use auto, prompt_logprobs or echo with this server",
            )
        self.scoring_api = dialect.scoring_api(asked)

    @property
    def spoken(self) -> EngineDialect:
        """The server's dialect (connects first if needed)."""
        self.connect()
        assert self.dialect is not None
        return self.dialect

    @cached_property
    def _tokenizer_hashes(self) -> dict[str, str]:
        return hash_files(tokenizer_files(self.files_dir)) if self.files_dir is not None else {}

    @cached_property
    def _weight_hashes(self) -> dict[str, str]:
        """The served weights' hashes, where the server names files on this machine (vLLM's
        model directory, llama-server's ``.gguf``); empty otherwise."""
        facts = self.connect()
        root = Path(facts.model_root) if facts.model_root else None
        if root is not None and root.is_dir():
            return hash_files(weight_files(root))
        if root is not None and root.is_file():
            return hash_files([root])
        return {}

    def provenance(self) -> ModelProvenance:
        """Served model, engine and version, served settings, endpoint (no credential), tokenizer hashes."""
        facts = self.connect()
        tok = self._tokenizer_hashes
        weights = self._weight_hashes
        model_type = str(getattr(self.config, "model_type", "unknown"))
        engine = facts.engine or facts.owned_by or "unknown"
        served = {**facts.reported, **self.served_settings}
        if facts.max_model_len is not None:
            served.setdefault("max_model_len", facts.max_model_len)
        if facts.cache_config.get("cache_dtype"):
            served.setdefault("kv_cache_dtype", facts.cache_config["cache_dtype"])
        return ModelProvenance(
            name=self.name,
            source=self.spec.source,
            slug=self.spec.slug,
            backend="http",
            recipe="none",
            endpoint=public_url(self.settings.base_url),
            api_key_env=self.settings.api_key_env,
            served_model=facts.model,
            served_model_root=facts.model_root,
            engine=engine,
            engine_version=facts.version,
            served_settings=served,
            serve_command=tuple(self.serve_command) if self.serve_command is not None else None,
            server_log=str(self.server_log) if self.server_log is not None else None,
            scoring_api=self.scoring_api,
            tokenizer_check=facts.tokenizer_check,
            max_concurrency=self.settings.max_concurrency,
            model_type=model_type,
            vocab_size=self.vocab_size,
            model_family=f"{model_type}-v{self.vocab_size}",
            quantization=_text(served.get("quantization")),
            dtype_requested=_text(served.get("dtype")),
            weights_sha256=combined_digest(weights) if weights else None,
            weight_files=weights,
            tokenizer_sha256=combined_digest(tok) if tok else None,
            tokenizer_files=tok,
            linear_classes=(),
            linear_class_counts={},
            document_keys=HTTP_FACTS,
        )

    # -- teacher-forced scoring -------------------------------------------------

    def score(
        self,
        requests: Sequence[ScoreRequest],
        *,
        top_k: int = 32,
        full: bool = False,
        batch_size: int = 8,
    ) -> list[TokenScores]:
        """Teacher-forced scores, one request per sequence (``batch_size`` is the engine's business)."""
        if nothing_to_score(requests):
            return []
        asked = self.asked_top_k(top_k, full)
        model = self.model

        def scorer(client: EndpointClient, request: ScoreRequest) -> Callable[[], Any]:
            return partial(self._score_one, client, model, request, asked, top_k, full)

        async def main(client: EndpointClient) -> list[TokenScores]:
            first: list[TokenScores] = []
            if self.scoring_api is None:  # the first answer tells which fields the server has
                first = [await counted(scorer(client, requests[0]))()]
            rest = await gather_counted(
                [scorer(client, r) for r in requests[len(first) :]], self.request_slots
            )
            return [*first, *rest]

        result: list[TokenScores] = self._run(main)
        return result

    @property
    def request_slots(self) -> int:
        """Requests sent at once: ``max_concurrency``, at most the server's slots where it says
        (more would wait in its queue, and a scored sequence would lose its slot's cache to
        another)."""
        slots = self.connect().slots
        return min(self.settings.max_concurrency, slots) if slots else self.settings.max_concurrency

    def asked_top_k(self, top_k: int, full: bool) -> int:
        """Log-probs asked per position: ``top_k``, or ``max(top_k, full_top_k)`` for full rows."""
        return min(max(top_k, self.settings.full_top_k) if full else top_k, self.vocab_size)

    async def score_one(
        self, client: EndpointClient, request: ScoreRequest, *, top_k: int, full: bool
    ) -> TokenScores:
        """One sequence's scores through ``client`` (this server's; :meth:`open_client`)."""
        asked = self.asked_top_k(top_k, full)
        return await self._score_one(client, self.model, request, asked, top_k, full)

    async def _score_one(
        self,
        client: EndpointClient,
        model: str,
        request: ScoreRequest,
        asked: int,
        top_k: int,
        full: bool,
    ) -> TokenScores:
        """One sequence: ``asked`` log-probs per position from the server, ``top_k`` kept."""
        prompt = [int(t) for t in (*request.context, *request.continuation)]
        positions = await self._positions(client, model, prompt, len(request.context), asked)
        return scores_from_positions(
            positions,
            request.continuation,
            top_k=top_k,
            vocab_size=self.vocab_size,
            full=full,
            asked=asked,
        )

    async def _positions(
        self, client: EndpointClient, model: str, prompt: list[int], start: int, k: int
    ) -> list[Position]:
        found, api = await self.spoken.positions(client, self, self.scoring_api, prompt, start, k)
        self.scoring_api = api
        return found

    # -- greedy generation --------------------------------------------------------

    def _cut_at_eos(self, row: list[int]) -> list[int]:
        for i, token in enumerate(row):
            if token in self.eos_ids:
                return row[: i + 1]
        return row

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        *,
        max_new_tokens: int,
        batch_size: int = 8,
    ) -> list[list[int]]:
        """Greedy continuations (new ids, up to and including EOS), one request per prompt."""
        if nothing_to_generate(prompts, max_new_tokens):
            return [[] for _ in prompts]
        self.connect()

        async def main(client: EndpointClient) -> list[list[int]]:
            return await gather_counted(
                [partial(self.generate_one, client, p, max_new_tokens) for p in prompts],
                self.request_slots,
            )

        result: list[list[int]] = self._run(main)
        return result

    async def generate_one(
        self, client: EndpointClient, prompt: Sequence[int], max_new_tokens: int
    ) -> list[int]:
        """One greedy continuation through ``client`` (new ids, up to and including EOS)."""
        dialect = self.spoken
        post = dialect.generate_post(self.model, prompt, max_new_tokens)
        answer = await client.post(post.path, post.body, root=post.root)
        return self._cut_at_eos(dialect.generated(answer, self).ids[:max_new_tokens])

    # -- timed streaming generation ---------------------------------------------------

    async def stream_one(
        self,
        client: EndpointClient,
        prompt: Sequence[int],
        new_tokens: int,
        *,
        start: float,
        sent: float | None = None,
    ) -> StreamTiming:
        """One streamed request through ``client`` (see :meth:`_stream_one`)."""
        return await self._stream_one(
            client, self.model, prompt, new_tokens, start=start, sent=sent
        )

    async def _stream_one(
        self,
        client: EndpointClient,
        model: str,
        prompt: Sequence[int],
        new_tokens: int,
        *,
        start: float,
        sent: float | None = None,
    ) -> StreamTiming:
        """One streamed request of exactly ``new_tokens`` tokens.

        Token times (:func:`gate.metrics.serving.token_times`) are seconds
        since ``sent`` (a ``perf_counter`` value; default: when this request is
        sent); ``start`` is recorded as the request's offset in a load run.
        """
        dialect = self.spoken
        post = dialect.stream_post(model, prompt, new_tokens)
        origin = time.perf_counter() if sent is None else sent
        chunks: list[tuple[float, int]] = []
        counted_by_text = False
        reported: int | None = None
        prompt_tokens: int | None = None
        so_far = 0
        async for arrival, event in client.stream(post.path, post.body, root=post.root):
            count = dialect.stream_count(event, so_far)
            counted_by_text = counted_by_text or count.by_text
            if count.tokens:
                chunks.append((arrival - origin, count.tokens))
                so_far += count.tokens
            if count.completion is not None:
                reported = count.completion
            if count.prompt is not None:
                prompt_tokens = count.prompt
        times = token_times(chunks)
        if reported is not None and reported != len(times):
            if counted_by_text:
                raise DataError(
                    f"the stream's chunks carried {len(times)} texts for {reported} tokens",
                    "serve with an engine that streams token ids (vLLM's return_token_ids)",
                )
            raise ModelLoadError(
                f"the stream carried {len(times)} tokens but its usage reports {reported}"
            )
        return StreamTiming(
            token_times=times,
            prompt_tokens=prompt_tokens if prompt_tokens is not None else len(prompt),
            start=start,
        )

    def generate_timed(
        self,
        prompt: Sequence[int],
        *,
        batch_size: int,
        new_tokens: int,
        clock: StepClock,
    ) -> TimedGeneration:
        """``batch_size`` concurrent streams of exactly ``new_tokens`` tokens, timed from the streams.

        All streams are sent at one moment ``t0``; step ``j`` is when every
        stream has token ``j`` (:func:`gate.metrics.serving.step_times`), in
        seconds since ``t0`` on the host's ``perf_counter``. The work happens in
        another process, so the times come from the streams, not from ``clock``
        (started for the record only; its marks could not place tokens that
        arrive merged in one chunk).
        """
        require_timed(prompt, batch_size, new_tokens)
        model = self.model

        async def main(client: EndpointClient) -> TimedStreams:
            async def send(t0: float) -> StreamTiming:
                return await self._stream_one(client, model, prompt, new_tokens, start=0.0, sent=t0)

            return await streams_at_once(clock, batch_size, send)

        timed: TimedStreams = self._run(main)
        return timed_generation(
            prompt, batch_size, timed, f"server {public_url(self.settings.base_url)}"
        )

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
        """A load run like ``vllm bench serve``: one streamed request per prompt.

        Request ``r`` is sent at its arrival offset
        (:func:`gate.metrics.serving.arrival_offsets`: Poisson at
        ``request_rate``, or all at once for ``inf``), then waits for one of
        ``max_concurrency`` slots (default: the endpoint's). A request that
        fails is recorded with its error and the run goes on; a server that
        died, or a run where every request failed, raises. Returns the
        timings and the run's duration (first send to last completion).
        """
        check_load_run(prompts, new_tokens)
        limit = max_concurrency or self.settings.max_concurrency
        offsets = arrival_offsets(len(prompts), request_rate, burstiness=burstiness, seed=seed)
        model = self.model

        async def main(client: EndpointClient) -> tuple[list[StreamTiming], float]:
            async def send(prompt: Sequence[int], begun: float) -> StreamTiming:
                return await self._stream_one(client, model, prompt, new_tokens, start=begun)

            return await run_load(prompts, offsets, limit, send)

        timings, duration = self._run(main)
        dead = self.liveness() if self.liveness is not None else None
        if dead is not None:
            raise dead
        require_a_token(timings)
        return timings, duration

"""The serving-engine backend (:class:`HTTPBackend`): the Backend protocol over HTTP.

The model runs in an OpenAI-compatible server (vLLM, SGLang, ...) with that
engine's own kernels and parallelism; gate stays the client. Text becomes
token ids locally, with the model's own tokenizer (the reference pack's), and
only ids cross the wire, so both sides see the same tokens:

* ``score`` — one ``/v1/completions`` request per sequence, prompt
  ``context + continuation`` as ids, ``max_tokens: 1``, ``temperature: 0`` and
  ``prompt_logprobs: k`` (or, on servers with only the legacy fields,
  ``echo: true, logprobs: k``; ``scoring_api = "auto"`` tries the first and
  falls back once). Parsed by :mod:`gate.engines.scores` into
  the same :class:`TokenScores` as the in-process backend; full rows (asked by
  the fidelity tier) are rebuilt from ``max(top_k, full_top_k)`` returned
  log-probs per position (``full_top_k``: the engine setting
  ``served_logprobs``), exactly as that module states, with which entries the
  server returned. :attr:`HTTPBackend.exact_full_rows` is False, so callers that need the exact
  log-prob of arbitrary tokens (the single-token MCQ path) score them as
  targets instead.
* ``generate`` — greedy: ``temperature: 0`` with neutral penalties and an
  explicit ``max_tokens`` (a checkpoint's generation_config may otherwise set
  the server's default), new ids from ``token_ids`` (vLLM's
  ``return_token_ids``), cut after the first EOS as in process.
* ``generate_timed`` / :meth:`HTTPBackend.stream_timings` / :meth:`HTTPBackend.load_run`
  — streamed requests with ``min_tokens = max_tokens`` and ``ignore_eos``;
  tokens are counted per chunk from its ``token_ids`` (or log-probs), never
  from its text; the maths is :mod:`gate.metrics.serving`.

Requests run concurrently, at most ``max_concurrency`` at once (engines batch
them), through :class:`~gate.engines.client.EndpointClient`
(timeouts, bounded retries, one-line errors). Before the first use,
:meth:`HTTPBackend.connect` reads the served model, checks that the server's
tokenizer agrees with the local one (``/tokenize`` where the server has it,
otherwise a prompt-length probe; a mismatch is a BaselineError, exit 4) and
collects provenance (engine, version, served settings; never the API key).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property, partial
from pathlib import Path
from typing import Any

from gate.engines.client import (
    EndpointClient,
    EndpointSettings,
    Liveness,
    LogprobsLimitError,
    counted,
    gather_bounded,
    public_url,
    run_sync,
)
from gate.engines.llama_cpp import server as llama_server
from gate.engines.scores import (
    Position,
    positions_from_echo,
    positions_from_prompt_logprobs,
    scores_from_positions,
)
from gate.engines.secrets import mask_argv
from gate.engines.streams import (
    LoadRuns,
    check_load_run,
    require_a_token,
    run_load,
    streams_at_once,
    timed_generation,
)
from gate.errors import BaselineError, ConfigError, DataError, ModelLoadError
from gate.measurement import TimedGeneration
from gate.metrics.serving import StreamTiming, arrival_offsets, token_times
from gate.models.backends import tokens
from gate.models.backends.base import (
    ScoreRequest,
    StepClock,
    TokenScores,
    require_contexts,
    require_prompts,
    require_timed,
)
from gate.models.provenance import combined_digest, hash_files, tokenizer_files, weight_files
from gate.models.spec import ModelSpec
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

#: Texts whose server-side and local encodings must agree (ASCII, digits, spacing, unicode).
TOKENIZER_PROBES: tuple[str, ...] = (
    "The quick brown fox jumps over the lazy dog.",
    "What is 12345 + 678? Answer: 13023",
    "  leading spaces,\ttabs\nand new lines  ",
    'def f(x):\n    return {"a": [1, 2.5, None]}',
    "Grüße, 東京, emoji \U0001f642 and accents: éàü",
)

#: Greedy decoding with every sampling knob neutral (a checkpoint's generation_config
#: can otherwise set penalties or a default length on the server).
GREEDY: Mapping[str, Any] = {
    "temperature": 0.0,
    "top_p": 1.0,
    "seed": 0,
    "frequency_penalty": 0.0,
    "presence_penalty": 0.0,
    "repetition_penalty": 1.0,
}


def _text(value: object) -> str | None:
    """A served setting as text (``None`` stays unknown)."""
    return None if value is None else str(value)


@dataclass(frozen=True)
class ServerFacts:
    """What the server says about itself (read once by :meth:`HTTPBackend.connect`)."""

    model: str
    model_root: str | None
    owned_by: str | None
    max_model_len: int | None
    version: str | None
    tokenizer_check: str
    cache_config: Mapping[str, str]
    #: The engine as provenance names it: ``llama.cpp`` for llama-server, else ``owned_by``.
    engine: str | None = None
    #: llama-server's ``/props`` (``None`` for another engine).
    llama: llama_server.ServerProps | None = None
    #: Served settings the server reports itself (llama-server's build, slots, file type).
    reported: Mapping[str, Any] = field(default_factory=dict)


def _chunk_tokens(choice: Mapping[str, Any]) -> int | None:
    """Tokens carried by one streamed choice: its ``token_ids`` or log-probs, else unknown."""
    ids = choice.get("token_ids")
    if isinstance(ids, list):
        return len(ids)
    logprobs = choice.get("logprobs")
    if isinstance(logprobs, Mapping) and isinstance(logprobs.get("tokens"), list):
        return len(logprobs["tokens"])
    return None


def _prometheus_labels(text: str, metric: str) -> dict[str, str]:
    """Labels of the first sample of ``metric`` in Prometheus text format."""
    import re

    for line in text.splitlines():
        if line.startswith(metric + "{"):
            body = line[len(metric) + 1 : line.rfind("}")]
            return dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', body))
    return {}


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
    ) -> None:
        from gate.models.backends.loading import load_tokenizer

        self.settings = settings
        self.spec = tokenizer_spec
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
    def _vocabulary(self) -> dict[str, int]:
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
        card = data[names.index(wanted)]
        owned_by = str(card["owned_by"]) if card.get("owned_by") else None
        props = await llama_server.server_props(client, owned_by)
        if props is not None:
            return await self._connect_llama(client, wanted, card, owned_by, props)
        self._require_scoring_api(False)
        version_doc = None
        try:
            version_doc = await client.get("/version", root=True)
        except (ConfigError, ModelLoadError):
            version_doc = None
        metrics = await client.get_text("/metrics", root=True)
        check = await self._check_tokenizer(client, wanted)
        max_len = card.get("max_model_len")
        return ServerFacts(
            model=wanted,
            model_root=str(card["root"]) if card.get("root") else None,
            owned_by=owned_by,
            max_model_len=int(max_len) if isinstance(max_len, int) else None,
            version=str(version_doc["version"])
            if isinstance(version_doc, Mapping) and version_doc.get("version")
            else None,
            tokenizer_check=check,
            cache_config=_prometheus_labels(metrics, "vllm:cache_config_info") if metrics else {},
            engine=owned_by,
        )

    def _require_scoring_api(self, llama: bool) -> None:
        """Refuse a ``scoring_api`` the server cannot answer (ConfigError naming the ones it can);
        ``auto`` becomes ``forced`` on llama-server."""
        asked = self.settings.scoring_api
        if asked == "auto":
            self.scoring_api = "forced" if llama else None
            return
        if llama and asked not in llama_server.SCORING_APIS:
            raise ConfigError(
                f"scoring_api {asked!r}: llama-server returns no log-probs of prompt tokens",
                "use scoring_api forced or positions (or auto) with llama-server",
            )
        if not llama and asked in llama_server.SCORING_APIS:
            raise ConfigError(
                f"scoring_api {asked!r} is llama-server's, and this server is not llama-server",
                "use auto, prompt_logprobs or echo with this server",
            )

    async def _connect_llama(
        self,
        client: EndpointClient,
        model: str,
        card: Mapping[str, Any],
        owned_by: str | None,
        props: llama_server.ServerProps,
    ) -> ServerFacts:
        """The facts of a llama-server (module :mod:`~gate.engines.llama_cpp.server`)."""
        self._require_scoring_api(True)
        await self._check_llama_tokenizer(client)
        return ServerFacts(
            model=model,
            model_root=props.model_path,
            owned_by=owned_by,
            max_model_len=props.context,
            version=props.version,
            tokenizer_check="tokenize endpoint",
            cache_config={},
            engine=llama_server.ENGINE,
            llama=props,
            reported=llama_server.served_settings(props, card),
        )

    async def _check_llama_tokenizer(self, client: EndpointClient) -> None:
        """:data:`TOKENIZER_PROBES` and the EOS token's text through llama-server's ``/tokenize``
        (BaselineError naming the first token that differs)."""
        probes = [(text, text, self.encode_text(text)) for text in TOKENIZER_PROBES]
        eos_text = getattr(self.tokenizer, "eos_token", None)
        if isinstance(eos_text, str) and eos_text and self.eos_ids:
            ids = self.encode_text(eos_text)
            probes.append((f"the EOS token {eos_text}", eos_text, ids))
        for label, text, local in probes:
            answer = await client.post("/tokenize", llama_server.tokenize_payload(text), root=True)
            error = llama_server.tokenizer_mismatch(
                label, llama_server.tokenized(answer), local, lambda i: self.tokenizer.decode([i])
            )
            if error is not None:
                raise error

    async def _check_tokenizer(self, client: EndpointClient, model: str) -> str:
        """Compare local and server encodings of :data:`TOKENIZER_PROBES` (BaselineError on a mismatch)."""
        probes: list[tuple[str, dict[str, Any], list[int]]] = [
            (
                text,
                {"model": model, "prompt": text, "add_special_tokens": False},
                self.encode_text(text),
            )
            for text in TOKENIZER_PROBES
        ]
        if getattr(self.tokenizer, "chat_template", None):
            text = TOKENIZER_PROBES[1]
            probes.append(
                (
                    f"chat: {text}",
                    {
                        "model": model,
                        "messages": [{"role": "user", "content": text}],
                        "add_generation_prompt": True,
                    },
                    self.encode_prompt(text),
                )
            )
        try:
            first = await client.post("/tokenize", probes[0][1], root=True)
        except ConfigError:
            first = None
        if isinstance(first, Mapping) and isinstance(first.get("tokens"), list):
            answers = [first] + [
                await client.post("/tokenize", p[1], root=True) for p in probes[1:]
            ]
            for (label, _, local), answer in zip(probes, answers, strict=True):
                server = (
                    [int(t) for t in answer.get("tokens", [])]
                    if isinstance(answer, Mapping)
                    else []
                )
                if server != local:
                    raise self._tokenizer_mismatch(label, server, local)
            return "tokenize endpoint"
        # no /tokenize: the server's prompt-token count of each text must match the local one
        for text, _, _ in probes[: len(TOKENIZER_PROBES)]:
            local = [int(i) for i in self.tokenizer(text, add_special_tokens=True)["input_ids"]]
            answer = await client.post(
                "/completions",
                {"model": model, "prompt": text, "max_tokens": 1, **GREEDY},
            )
            usage = answer.get("usage") if isinstance(answer, Mapping) else None
            count = usage.get("prompt_tokens") if isinstance(usage, Mapping) else None
            if not isinstance(count, int):
                return "not checked (no /tokenize and no usage counts)"
            if count != len(local):
                raise BaselineError(
                    f"the server's tokenizer differs from the local one: {text[:40]!r} is "
                    f"{count} tokens on the server, {len(local)} locally",
                    "serve the model whose tokenizer recorded the baseline (the reference pack's)",
                )
        return "prompt token counts"

    @staticmethod
    def _tokenizer_mismatch(label: str, server: list[int], local: list[int]) -> BaselineError:
        at = next(
            (i for i, (a, b) in enumerate(zip(server, local, strict=False)) if a != b),
            min(len(server), len(local)),
        )
        return BaselineError(
            f"the server's tokenizer differs from the local one: {label[:40]!r} encodes to "
            f"{len(server)} ids on the server, {len(local)} locally (first difference at {at})",
            "serve the model whose tokenizer recorded the baseline (the reference pack's)",
        )

    @cached_property
    def _tokenizer_hashes(self) -> dict[str, str]:
        return hash_files(tokenizer_files(self.files_dir)) if self.files_dir is not None else {}

    @cached_property
    def _forcing(self) -> llama_server.Forcing:
        """What llama-server's forced scoring needs of the local vocabulary."""
        special = {int(i) for i in getattr(self.tokenizer, "all_special_ids", ())}
        plain = [i for i in self.encode_text("a") if i not in special]
        # A piece that is not whole UTF-8 text decodes with the replacement character.
        pieces = self.tokenizer.batch_decode([[i] for i in range(len(self.tokenizer))])
        partial = {i for i, piece in enumerate(pieces) if "\ufffd" in piece}
        return llama_server.Forcing(
            unforceable=frozenset(special | set(self.eos_ids) | partial),
            substitute=plain[0] if plain else 0,
            vocab_size=self.vocab_size,
        )

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
        require_contexts(requests)
        if not requests:
            return []
        asked = self.asked_top_k(top_k, full)
        model = self.model

        def scorer(client: EndpointClient, request: ScoreRequest) -> Callable[[], Any]:
            return partial(self._score_one, client, model, request, asked, top_k, full)

        async def main(client: EndpointClient) -> list[TokenScores]:
            first: list[TokenScores] = []
            if self.scoring_api is None:  # the first answer tells which fields the server has
                first = [await counted(scorer(client, requests[0]))()]
            rest = await gather_bounded(
                [counted(scorer(client, r)) for r in requests[len(first) :]],
                self.request_slots,
            )
            return [*first, *rest]

        result: list[TokenScores] = self._run(main)
        return result

    @property
    def request_slots(self) -> int:
        """Requests sent at once: ``max_concurrency``, at most llama-server's slots (more would
        wait in its queue, and a scored sequence would lose its slot's cache to another)."""
        facts = self.connect()
        slots = facts.llama.slots if facts.llama is not None else None
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
        count = len(prompt) - start
        if self.scoring_api in llama_server.SCORING_APIS:
            context = self.facts.max_model_len if self.facts is not None else None
            score = (
                llama_server.forced_positions
                if self.scoring_api == "forced"
                else llama_server.cached_positions
            )
            return await score(client, prompt, start, k, context, self._forcing)
        base = {"model": model, "prompt": prompt, "max_tokens": 1, **GREEDY}
        if self.scoring_api in (None, "prompt_logprobs"):
            try:
                answer = await client.post("/completions", {**base, "prompt_logprobs": k})
            except LogprobsLimitError:
                raise
            except ConfigError as exc:
                if self.scoring_api is not None or "prompt_logprobs" not in exc.message:
                    raise
                answer = None  # the server rejects the field itself: try the legacy fields
            choice = _first_choice(answer) if answer is not None else None
            if choice is not None and isinstance(choice.get("prompt_logprobs"), list):
                self.scoring_api = "prompt_logprobs"
                return positions_from_prompt_logprobs(choice, len(prompt), start, count)
            if self.scoring_api == "prompt_logprobs":
                raise _no_prompt_logprobs("its answer has no prompt_logprobs")
        answer = await client.post(
            "/completions",
            {**base, "echo": True, "logprobs": k, "return_tokens_as_token_ids": True},
        )
        choice = _first_choice(answer)
        if choice is None or not isinstance(choice.get("logprobs"), Mapping):
            raise _no_prompt_logprobs("neither prompt_logprobs nor echo with logprobs")
        self.scoring_api = "echo"
        return positions_from_echo(choice, prompt, start, count, self._vocabulary)

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
        require_prompts(prompts)
        if max_new_tokens < 1 or not prompts:
            return [[] for _ in prompts]
        self.connect()

        async def main(client: EndpointClient) -> list[list[int]]:
            return await gather_bounded(
                [counted(partial(self.generate_one, client, p, max_new_tokens)) for p in prompts],
                self.request_slots,
            )

        result: list[list[int]] = self._run(main)
        return result

    async def generate_one(
        self, client: EndpointClient, prompt: Sequence[int], max_new_tokens: int
    ) -> list[int]:
        """One greedy continuation through ``client`` (new ids, up to and including EOS)."""
        if self.connect().llama is not None:
            answer = await client.post(
                "/completion", llama_server.generate_payload(prompt, max_new_tokens), root=True
            )
            new = llama_server.generated_ids(answer, self.eos_ids)
            return self._cut_at_eos(new[:max_new_tokens])
        answer = await client.post(
            "/completions",
            {
                "model": self.model,
                "prompt": [int(t) for t in prompt],
                "max_tokens": max_new_tokens,
                "return_token_ids": True,
                **GREEDY,
            },
        )
        choice = _first_choice(answer)
        if choice is None:
            raise ModelLoadError("the server's completion has no choices", "see the server log")
        ids = choice.get("token_ids")
        if not isinstance(ids, list):  # servers without return_token_ids: re-encode the text
            ids = self.encode_text(str(choice.get("text", "")))
        return self._cut_at_eos([int(t) for t in ids][:max_new_tokens])

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
        payload = {
            "model": model,
            "prompt": [int(t) for t in prompt],
            "max_tokens": new_tokens,
            "min_tokens": new_tokens,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
            "return_token_ids": True,
            **GREEDY,
        }
        if self.connect().llama is not None:
            return await self._stream_llama(client, prompt, new_tokens, start=start, sent=sent)
        origin = time.perf_counter() if sent is None else sent
        chunks: list[tuple[float, int]] = []
        counted_by_text = False
        usage: Mapping[str, Any] | None = None
        async for arrival, event in client.stream("/completions", payload):
            if isinstance(event.get("usage"), Mapping):
                usage = event["usage"]
            choices = event.get("choices")
            if not isinstance(choices, list) or not choices:
                continue
            choice = choices[0]
            count = _chunk_tokens(choice)
            if count is None:  # no ids, no log-probs: one token per non-empty chunk
                counted_by_text = True
                count = 1 if choice.get("text") else 0
            chunks.append((arrival - origin, count))
        times = token_times(chunks)
        reported = usage.get("completion_tokens") if usage is not None else None
        prompt_tokens = usage.get("prompt_tokens") if usage is not None else None
        if isinstance(reported, int) and reported != len(times):
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
            prompt_tokens=int(prompt_tokens) if isinstance(prompt_tokens, int) else len(prompt),
            start=start,
        )

    async def _stream_llama(
        self,
        client: EndpointClient,
        prompt: Sequence[int],
        new_tokens: int,
        *,
        start: float,
        sent: float | None,
    ) -> StreamTiming:
        """:meth:`_stream_one` on llama-server's ``/completion`` (tokens counted from its ids)."""
        payload = llama_server.stream_payload(prompt, new_tokens)
        origin = time.perf_counter() if sent is None else sent
        chunks: list[tuple[float, int]] = []
        reported: int | None = None
        prompt_tokens: int | None = None
        counted = 0
        async for arrival, event in client.stream("/completion", payload, root=True):
            count = llama_server.chunk_tokens(event, counted)
            if count:
                chunks.append((arrival - origin, count))
                counted += count
            done, evaluated = llama_server.stream_usage(event)
            if done is not None:
                reported, prompt_tokens = done, evaluated
        times = token_times(chunks)
        if reported is not None and reported != len(times):
            raise ModelLoadError(
                f"the stream carried {len(times)} tokens but llama-server reports {reported}"
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

        async def main(client: EndpointClient) -> list[StreamTiming]:
            async def send(t0: float) -> StreamTiming:
                return await self._stream_one(client, model, prompt, new_tokens, start=0.0, sent=t0)

            return await streams_at_once(clock, batch_size, send)

        streams: list[StreamTiming] = self._run(main)
        return timed_generation(
            prompt, batch_size, streams, f"server {public_url(self.settings.base_url)}"
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


def _first_choice(answer: Any) -> Mapping[str, Any] | None:
    choices = answer.get("choices") if isinstance(answer, Mapping) else None
    if isinstance(choices, list) and choices and isinstance(choices[0], Mapping):
        return choices[0]
    return None


def _no_prompt_logprobs(why: str) -> ConfigError:
    return ConfigError(
        f"the endpoint returns no log-probs of prompt tokens ({why}); "
        "teacher-forced scoring (fidelity, perplexity, MCQ) needs them",
        "serve with an engine that has prompt_logprobs or echo+logprobs (vLLM, SGLang): "
        "see docs/serving.md",
    )

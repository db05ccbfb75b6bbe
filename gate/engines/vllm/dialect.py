"""vLLM's OpenAI-compatible server (:class:`VLLMDialect`): the generic dialect and vLLM's own.

It speaks the OpenAI completions API with vLLM's extensions
(:class:`~gate.engines.openai.OpenAIDialect`: ``prompt_logprobs``,
``return_token_ids``, ``min_tokens``); what it adds:

* **recognition**: a command that runs ``vllm`` (``vllm serve``, ``python -m
  vllm.entrypoints.openai.api_server``), a model card ``owned_by: vllm``;
* **identity**: the KV-cache settings of ``/metrics``
  (``vllm:cache_config_info``'s labels: ``cache_dtype`` becomes the served
  ``kv_cache_dtype``);
* **speculation**: ``--speculative-config JSON`` (also ``--speculative_config``,
  ``-sc`` and the ``=JSON`` form), its dotted keys (``--speculative-config.method
  ngram``, ``-sc.num_speculative_tokens 4``) and the short options
  ``--spec-method``, ``--spec-model``, ``--spec-tokens``; the JSON's ``method``,
  ``num_speculative_tokens`` and ``model`` are reported, the rest kept in
  :attr:`~gate.engines.served_speculation.ServedSpeculation.settings`; the
  acceptance counters are ``/metrics`` read before and after one request
  (:mod:`gate.engines.vllm.counters`);
* **secrets**: ``--api-key``, ``--hf-token`` (whose value may be left out: the
  token of ``huggingface-cli login``) and ``--watermark-config`` (which vLLM
  redacts from its own log);
* **start-up**: the refusal to start when less memory is free than it reserves.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from gate.engines.argv import as_int, json_value, split_option
from gate.engines.client import EndpointClient
from gate.engines.dialect import Generated, LocalTokenizer, ServedSpeculation, StartupFailure
from gate.engines.openai import OpenAIDialect
from gate.engines.vllm.counters import exports_counters, vllm_counters
from gate.errors import ConfigError, ModelLoadError
from gate.metrics.served_speculation import EngineDrafts, delta

#: The engine's name (the registry's and the model card's ``owned_by``).
ENGINE = "vllm"
#: The Prometheus sample of ``/metrics`` that carries the KV-cache settings as labels.
CACHE_CONFIG_METRIC = "vllm:cache_config_info"
#: vLLM's options holding the speculative config as JSON.
_SPECULATIVE_JSON = ("--speculative-config", "--speculative_config", "-sc")
#: vLLM's short speculative options (value: the config key they set).
_SPECULATIVE_SHORT = {
    "--spec-method": "method",
    "--spec_method": "method",
    "--spec-model": "model",
    "--spec_model": "model",
    "--spec-tokens": "num_speculative_tokens",
    "--spec_tokens": "num_speculative_tokens",
}
#: vLLM's refusal to start when less memory is free than it reserves (0.32: the CPU
#: worker's "Available memory on node ... is less than desired CPU memory utilization",
#: the GPU worker's "Free memory on device ... is less than desired GPU memory utilization").
MEMORY_HINT = (
    "the engine reserves a share of the memory at start (vLLM: 92 % by default, of the RAM "
    "on its CPU build) and less was free: start it with a smaller --gpu-memory-utilization "
    "(e.g. 0.2), or on the CPU build set VLLM_CPU_KVCACHE_SPACE=<GiB> in its environment; "
    "see the server log"
)
NOT_ENOUGH_MEMORY = StartupFailure(
    re.compile(r"is less than desired (CPU|GPU) memory utilization"), MEMORY_HINT
)
#: The options that make it speculate, for a refusal (n-gram speculation).
SPECULATION_HINT = (
    '--speculative-config \'{"method": "ngram", "num_speculative_tokens": 4,'
    ' "prompt_lookup_max": 4}\''
)


def prometheus_labels(text: str, metric: str) -> dict[str, str]:
    """Labels of the first sample of ``metric`` in Prometheus text format."""
    for line in text.splitlines():
        if line.startswith(metric + "{"):
            body = line[len(metric) + 1 : line.rfind("}")]
            return dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', body))
    return {}


def speculative_config(argv: Sequence[str]) -> tuple[dict[str, Any], list[int]]:
    """vLLM's speculative config as the command states it, and the indices of its tokens."""
    config: dict[str, Any] = {}
    used: list[int] = []
    i = 0
    while i < len(argv):
        name, inline = split_option(argv[i])
        dotted = next((p for p in _SPECULATIVE_JSON if name.startswith(p + ".")), None)
        if name in _SPECULATIVE_JSON or dotted is not None or name in _SPECULATIVE_SHORT:
            if inline is None and i + 1 >= len(argv):
                raise ConfigError(
                    f"the server command ends with {name} and no value",
                    "give the option its value",
                )
            value = inline if inline is not None else argv[i + 1]
            used += [i] if inline is not None else [i, i + 1]
            if name in _SPECULATIVE_JSON:
                parsed = json_value(value)
                if parsed is None:  # --speculative-config null: no speculation
                    config.clear()
                elif not isinstance(parsed, dict):
                    raise ConfigError(
                        f"{name} {value!r} is not a JSON object",
                        'e.g. --speculative-config \'{"method": "ngram",'
                        ' "num_speculative_tokens": 4, "prompt_lookup_max": 4}\'',
                    )
                else:
                    config.update(parsed)
            elif dotted is not None:
                config[name[len(dotted) + 1 :].replace("-", "_")] = json_value(value)
            else:
                config[_SPECULATIVE_SHORT[name]] = json_value(value)
            i += 1 if inline is not None else 2
            continue
        i += 1
    return {k.replace("-", "_"): v for k, v in config.items()}, used


class VLLMDialect(OpenAIDialect):
    """vLLM's OpenAI server (module docstring)."""

    name: ClassVar[str] = ENGINE
    server_name: ClassVar[str] = "vLLM"
    secret_options: ClassVar[frozenset[str]] = frozenset(
        {"api-key", "hf-token", "watermark-config"}
    )
    optional_secret_values: ClassVar[frozenset[str]] = frozenset({"hf-token"})
    startup_failures: ClassVar[tuple[StartupFailure, ...]] = (NOT_ENOUGH_MEMORY,)

    def runs_command(self, argv: Sequence[str]) -> bool:
        """A ``vllm`` program (``vllm serve``) or a ``vllm`` module run by ``-m``
        (``python -m vllm.entrypoints.openai.api_server``)."""
        return any(
            os.path.basename(arg) == ENGINE
            or (i > 0 and argv[i - 1] == "-m" and arg.split(".")[0] == ENGINE)
            for i, arg in enumerate(argv)
        )

    async def recognize(self, client: EndpointClient, card: Mapping[str, Any]) -> object | None:
        """A model card ``owned_by: vllm``."""
        return card if card.get("owned_by") == ENGINE else None

    async def cache_config(self, client: EndpointClient) -> Mapping[str, str]:
        """``vllm:cache_config_info``'s labels in ``/metrics`` (empty without one)."""
        metrics = await client.get_text("/metrics", root=True)
        return prometheus_labels(metrics, CACHE_CONFIG_METRIC) if metrics else {}

    def read_speculation(self, argv: Sequence[str]) -> ServedSpeculation | None:
        """The speculative config the command states (module docstring)."""
        config, used = speculative_config(argv)
        if not config:
            return None
        method = config.get("method")
        model = config.get("model")
        if method is None:  # vLLM infers it from the draft model's name; "draft_model" otherwise
            method = "draft_model" if model is not None else "unknown"
        return ServedSpeculation(
            engine=self.name,
            method=str(method),
            draft_tokens=as_int(config.get("num_speculative_tokens")),
            draft_model=None if model is None else str(model),
            settings=config,
            tokens=tuple(argv[i] for i in used),
        )

    def speculative_tokens(self, argv: Sequence[str]) -> list[int]:
        """The indices of the speculative options and their values."""
        return speculative_config(argv)[1]

    def speculation_hint(self) -> str | None:
        """An n-gram speculative config (:data:`SPECULATION_HINT`)."""
        return SPECULATION_HINT

    async def speculate(
        self,
        client: EndpointClient,
        backend: LocalTokenizer,
        prompt: Sequence[int],
        max_new_tokens: int,
    ) -> tuple[Generated, EngineDrafts]:
        """``/metrics`` read before and after the request: the difference is its counts."""
        before = await self._metrics(client)
        post = self.generate_post(backend.model, prompt, max_new_tokens)
        answer = await client.post(post.path, post.body, root=post.root)
        after = await self._metrics(client)
        choice = answer.get("choices", [None])[0] if isinstance(answer, Mapping) else None
        if not isinstance(choice, Mapping) or not isinstance(choice.get("token_ids"), list):
            raise ModelLoadError(
                "the server's completion carries no token_ids",
                "serve with vLLM >= 0.10 (return_token_ids)",
            )
        generated = self.generated(answer, backend)
        counts = delta(vllm_counters(before), vllm_counters(after), generated.count)
        return generated, counts

    @staticmethod
    async def _metrics(client: EndpointClient) -> str:
        text = await client.get_text("/metrics", root=True)
        if not text or not exports_counters(text):
            raise ModelLoadError(
                "the speculative server's /metrics has no vllm:spec_decode_* counters",
                "serve with vLLM >= 0.10 and its metrics endpoint on (the default)",
            )
        return text


__all__ = [
    "CACHE_CONFIG_METRIC",
    "ENGINE",
    "MEMORY_HINT",
    "NOT_ENOUGH_MEMORY",
    "SPECULATION_HINT",
    "VLLMDialect",
    "prometheus_labels",
]

"""Low-precision and sparse attention, installed through transformers' attention interface.

A method is registered under its own name in ``ALL_ATTENTION_FUNCTIONS``
(with the eager mask builder in ``ALL_MASK_ATTENTION_FUNCTIONS``, so the model
hands it an additive ``[B, 1, q, kv]`` mask: 0 where a query may look, the
dtype's minimum where it may not) and selected with
``model.set_attn_implementation(name)``. No model code is edited; any model
whose attention layers call ``ALL_ATTENTION_FUNCTIONS`` (transformers' Llama,
Mistral, Qwen, Gemma ... families) runs it, in prefill and in decoding.

Notation, per batch row ``b`` and head ``h``: ``Q`` ``[q, d]``, ``K``/``V``
``[n, d]`` (key/value heads repeated for grouped-query attention), ``M`` the
additive mask, ``c`` the softmax scaling (``d ** -0.5``). "Valid" positions are
the query rows with at least one visible key and the keys visible to at least
one query: scales and means are taken over them only, so padding never moves a
real sequence's numbers. Every method computes in float32 and returns the
query's dtype.

``attn-fp8`` -- the numerics of FP8 FlashAttention (FlashAttention-3's FP8
path): ``Q``, ``K`` and ``V`` are each scaled per (batch row, head) to the
e4m3 range and rounded, ``X8 = e4m3(X / s_X)`` with ``s_X = amax|X| / 448``;
``S = (Q8 K8^T) s_Q s_K c + M``; the unnormalised probabilities
``P~ = exp(S - rowmax S)`` (in [0, 1]) are rounded to e4m3 without a scale, as
the kernel feeds them to its FP8 PV matmul, while the row sum ``l`` is kept in
float32 from the unrounded ``P~``; ``O = (e4m3(P~) V8) s_V / l``. The kernel's
block-wise online softmax equals this full-row form in exact arithmetic.

``attn-sage`` -- SageAttention (v1) numerics: ``K`` is smoothed by
subtracting its mean over the (valid) keys per channel, ``K' = K - mean(K)``,
which leaves the softmax unchanged (it shifts each score row by a constant);
``Q`` and ``K'`` are quantized to INT8 per block of tokens (128 queries, 64
keys: ``X_i8 = clamp(round(X / s), -127, 127)``, ``s = amax|X_block| / 127``);
``S = (Q_i8 K'_i8^T) s_Q s_K c + M`` (exact integer products); the softmax runs
in float32 and ``PV`` in higher precision: FP16 inputs
``O = (fp16(P~) fp16(V)) / l`` with float32 accumulation.

``attn-topk:<f>`` -- Top-k sparse attention: each query keeps only its
``max(1, ceil(f * n_q))`` largest scores among the ``n_q`` keys it may see
(causal and padding mask respected; ties broken by position), the others are
set to ``-inf`` before the softmax, which renormalises over the kept keys.
``f = 1`` keeps every key and is the exact eager attention.

On a GPU runner these are emulations of the kernels' rounding, not the
kernels; their purpose is to gate what the numerics do to the outputs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from gate.errors import ConfigError

#: Largest finite float8_e4m3fn value.
E4M3_MAX = 448.0
#: INT8 symmetric range used by SageAttention.
INT8_MAX = 127.0
#: SageAttention v1 block sizes (queries, keys).
SAGE_BLOCK_Q = 128
SAGE_BLOCK_K = 64

#: Prefix of the names this module registers in transformers' attention interface.
IMPLEMENTATION_PREFIX = "gate_"

#: Signature of the core functions: (query, key, value, allowed, bias, scaling) -> output.
Core = Callable[
    [torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, float], torch.Tensor
]


# --------------------------------------------------------------------------- masks


def visible(
    attention_mask: torch.Tensor | None, q_len: int, kv_len: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(allowed, bias)`` from a transformers mask: bool ``[B|1, 1, q, kv]`` and additive float32.

    ``None`` means causal with the queries at the end of the keys (the
    transformers convention for a cache of ``kv - q`` past tokens).
    """
    if attention_mask is None:
        rows = torch.arange(q_len, device=device)[:, None] + (kv_len - q_len)
        allowed = (torch.arange(kv_len, device=device)[None, :] <= rows)[None, None]
    elif attention_mask.dtype == torch.bool:
        allowed = attention_mask[..., :kv_len]
    else:
        mask = attention_mask[..., :kv_len]
        allowed = mask > torch.finfo(mask.dtype).min / 2
    bias = torch.zeros(allowed.shape, dtype=torch.float32, device=device)
    bias = bias.masked_fill(~allowed, torch.finfo(torch.float32).min)
    if attention_mask is not None and attention_mask.dtype != torch.bool:
        bias = torch.where(allowed, attention_mask[..., :kv_len].float(), bias)
    return allowed, bias


def _valid_rows(allowed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``[B|1, 1, q, 1]`` queries that see a key and ``[B|1, 1, kv, 1]`` keys some query sees."""
    queries = allowed.any(dim=-1, keepdim=True)
    keys = allowed.any(dim=-2).unsqueeze(-1)
    return queries, keys


def _amax(x: torch.Tensor, valid: torch.Tensor, dims: tuple[int, ...]) -> torch.Tensor:
    """max |x| over ``dims`` where ``valid`` (broadcast), at least a tiny positive number."""
    masked = torch.where(valid, x.abs(), torch.zeros((), dtype=x.dtype, device=x.device))
    return masked.amax(dim=dims, keepdim=True).clamp(min=torch.finfo(torch.float32).tiny)


def _softmax_parts(scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Unnormalised ``P~ = exp(S - rowmax)`` and the row sums ``l`` (float32)."""
    shifted = torch.exp(scores - scores.amax(dim=-1, keepdim=True))
    return shifted, shifted.sum(dim=-1, keepdim=True)


# ----------------------------------------------------------------------- numerics


def e4m3(x: torch.Tensor) -> torch.Tensor:
    """Round float32 ``x`` to the nearest float8_e4m3fn value (saturating) and back to float32."""
    return x.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).to(torch.float32)


def fp8_core(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    allowed: torch.Tensor,
    bias: torch.Tensor,
    scaling: float,
) -> torch.Tensor:
    """FP8 FlashAttention numerics on ``[B, H, q|n, d]`` float32 tensors (see the module doc)."""
    valid_q, valid_k = _valid_rows(allowed)
    s_q = _amax(query, valid_q, (-2, -1)) / E4M3_MAX
    s_k = _amax(key, valid_k, (-2, -1)) / E4M3_MAX
    s_v = _amax(value, valid_k, (-2, -1)) / E4M3_MAX
    q8, k8, v8 = e4m3(query / s_q), e4m3(key / s_k), e4m3(value / s_v)
    scores = (q8 @ k8.transpose(-1, -2)) * (s_q * s_k.transpose(-1, -2)) * scaling + bias
    p, row_sum = _softmax_parts(scores)
    return (e4m3(p) @ v8) * s_v / row_sum


def _int8_blocks(x: torch.Tensor, valid: torch.Tensor, block: int) -> torch.Tensor:
    """Per-block symmetric INT8 round trip of ``x`` ``[B, H, n, d]``, blocks of ``block`` tokens.

    Returns the integer codes times their block's scale (the dequantized
    tensor); the scale of a block is the amax over its valid tokens / 127.
    """
    n = x.shape[-2]
    out = torch.empty_like(x)
    for start in range(0, n, block):
        part = x[..., start : start + block, :]
        scale = _amax(part, valid[..., start : start + block, :], (-2, -1)) / INT8_MAX
        out[..., start : start + block, :] = (
            torch.round(part / scale).clamp(-INT8_MAX, INT8_MAX) * scale
        )
    return out


def sage_core(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    allowed: torch.Tensor,
    bias: torch.Tensor,
    scaling: float,
    *,
    block_q: int = SAGE_BLOCK_Q,
    block_k: int = SAGE_BLOCK_K,
) -> torch.Tensor:
    """SageAttention numerics on ``[B, H, q|n, d]`` float32 tensors (see the module doc)."""
    valid_q, valid_k = _valid_rows(allowed)
    weights = valid_k.to(key.dtype)
    mean = (key * weights).sum(dim=-2, keepdim=True) / weights.sum(dim=-2, keepdim=True).clamp(
        min=1.0
    )
    q_hat = _int8_blocks(query, valid_q, block_q)
    k_hat = _int8_blocks(key - mean, valid_k, block_k)
    scores = (q_hat @ k_hat.transpose(-1, -2)) * scaling + bias
    p, row_sum = _softmax_parts(scores)
    pv = p.to(torch.float16).float() @ value.to(torch.float16).float()
    return pv / row_sum


def topk_core(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    allowed: torch.Tensor,
    bias: torch.Tensor,
    scaling: float,
    *,
    keep: float,
) -> torch.Tensor:
    """Top-k sparse attention on ``[B, H, q|n, d]`` float32 tensors: keep ``ceil(keep * n_q)`` keys."""
    scores = (query @ key.transpose(-1, -2)) * scaling + bias
    if keep < 1.0:
        allowed = allowed.expand_as(scores)
        n_visible = allowed.sum(dim=-1, keepdim=True)
        n_keep = torch.clamp(torch.ceil(n_visible.float() * keep), min=1).long()
        ranked = torch.where(allowed, scores, torch.full_like(scores, -math.inf))
        # stable descending sort: equal scores keep position order, so ties are deterministic
        order = torch.sort(ranked, dim=-1, descending=True, stable=True).indices
        rank = torch.empty_like(order)
        rank.scatter_(
            -1, order, torch.arange(order.shape[-1], device=order.device).expand_as(order)
        )
        drop = allowed & (rank >= n_keep)
        scores = scores.masked_fill(drop, -math.inf)
    return torch.softmax(scores, dim=-1) @ value


# ------------------------------------------------------------ transformers adapter


def _repeat_kv(x: torch.Tensor, groups: int) -> torch.Tensor:
    return x if groups == 1 else x.repeat_interleave(groups, dim=1)


def adapter(core: Core) -> Callable[..., tuple[torch.Tensor, None]]:
    """A transformers attention function (``module, q, k, v, mask, scaling, ...``) around ``core``."""

    def attention(
        module: nn.Module,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attention_mask: torch.Tensor | None,
        scaling: float | None = None,
        dropout: float = 0.0,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, None]:
        exact = getattr(module, EXACT_ATTR, False)
        counter = getattr(module, ACTIVITY_ATTR, None)
        if counter is not None and not exact:
            counter.count()
        if kwargs.get("softcap") or kwargs.get("s_aux") is not None:
            raise ConfigError(
                "this attention recipe does not emulate logit soft-capping or attention sinks",
                "use the recipe on a model without them (Llama, Mistral, Qwen)",
            )
        groups = query.shape[1] // key.shape[1]
        q = query.float()
        k = _repeat_kv(key, groups).float()
        v = _repeat_kv(value, groups).float()
        scale = float(scaling) if scaling is not None else query.shape[-1] ** -0.5
        allowed, bias = visible(attention_mask, q.shape[-2], k.shape[-2], q.device)
        if exact:  # a layer the recipe leaves alone: eager attention (top-k with every key)
            out = topk_core(q, k, v, allowed, bias, scale, keep=1.0)
        else:
            out = core(q, k, v, allowed, bias, scale)
        return out.to(query.dtype).transpose(1, 2).contiguous(), None

    return attention


@dataclass(frozen=True)
class AttentionMethod:
    """One attention replacement: ``fp8``, ``sage`` or ``topk`` (with ``keep`` in (0, 1])."""

    kind: str
    keep: float = 1.0

    def __post_init__(self) -> None:
        if self.kind not in {"fp8", "sage", "topk"}:
            raise ConfigError(f"unknown attention method {self.kind!r}", "choose fp8, sage or topk")
        if self.kind == "topk" and not 0.0 < self.keep <= 1.0:
            raise ConfigError(
                f"attn-topk: fraction {self.keep:g} is outside (0, 1]", "e.g. attn-topk:0.1"
            )

    @property
    def implementation(self) -> str:
        """The name registered in transformers' attention interface."""
        suffix = f"_{self.keep:g}" if self.kind == "topk" else ""
        return f"{IMPLEMENTATION_PREFIX}attn_{self.kind}{suffix}"

    def core(self) -> Core:
        """The tensor-level function of this method."""
        if self.kind == "fp8":
            return fp8_core
        if self.kind == "sage":
            return sage_core
        keep = self.keep

        def core(
            q: torch.Tensor,
            k: torch.Tensor,
            v: torch.Tensor,
            allowed: torch.Tensor,
            bias: torch.Tensor,
            scaling: float,
        ) -> torch.Tensor:
            return topk_core(q, k, v, allowed, bias, scaling, keep=keep)

        return core


def register(method: AttentionMethod) -> str:
    """Register ``method`` (attention function + eager mask builder); returns its name."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    name = method.implementation
    AttentionInterface.register(name, adapter(method.core()))
    AttentionMaskInterface.register(name, eager_mask)
    return name


def check_supported(model: nn.Module) -> None:
    """Refuse a model whose attention does not dispatch through the attention interface."""
    can_set = getattr(model, "_can_set_attn_implementation", None)
    config = getattr(model, "config", None)
    if not callable(can_set) or not can_set():
        kind = getattr(config, "model_type", type(model).__name__)
        raise ConfigError(
            f"{kind} does not select its attention through transformers' attention interface,"
            " so an attention recipe cannot replace it",
            "use a model whose attention layers call ALL_ATTENTION_FUNCTIONS (Llama, Mistral, Qwen)",
        )
    for attr in ("attn_logit_softcapping", "final_logit_softcapping"):
        if getattr(config, attr, None):
            raise ConfigError(
                f"{getattr(config, 'model_type', 'this model')} uses {attr}, which the attention"
                " emulations do not reproduce",
                "use a model without logit soft-capping",
            )


#: Attribute of an attention module holding the :class:`~gate.models.activity.Activity`
#: that the replacement counts its calls into.
ACTIVITY_ATTR = "_gate_attention_activity"


#: Attribute of an attention module a layer-selective recipe leaves alone (``layers=``):
#: the replacement then runs exact eager attention there and counts nothing.
EXACT_ATTR = "_gate_attention_exact"


def check_layer_indices(recipe_text: str, layers: tuple[int, ...], total: int) -> None:
    """Refuse ``layers=`` indices the model does not have (one line, exit 4)."""
    missing = [i for i in layers if i >= total]
    if missing:
        raise ConfigError(
            f"{recipe_text}: layers={missing[0]} matches no layer (the model has {total},"
            f" 0-{total - 1})",
            f"choose layers in 0-{total - 1}",
        )


def keep_exact(model: nn.Module, layers: tuple[int, ...], recipe_text: str) -> int:
    """Mark the attention modules outside ``layers`` as exact; returns how many act."""
    from gate.models.compress.layers import decoder_layers

    blocks = decoder_layers(model)
    check_layer_indices(recipe_text, layers, len(blocks))
    acting = 0
    for index, block in enumerate(blocks):
        attn = getattr(block, "self_attn", None)
        if attn is None:
            raise ConfigError(
                "layers= needs decoder blocks with a self_attn module",
                "use a Llama-style causal LM (Llama, Mistral, Qwen)",
            )
        setattr(attn, EXACT_ATTR, index not in layers)
        acting += index in layers
    return acting


def count_calls(model: nn.Module, activity: Any) -> int:
    """Make every attention layer's replaced call count one unit into ``activity``.

    Returns the number of layers bound: the modules whose calls reach the
    replacement (Llama-style ``self_attn``).
    """
    bound = 0
    for name, module in model.named_modules():
        if name.endswith("self_attn"):
            setattr(module, ACTIVITY_ATTR, activity)
            bound += 1
    return bound


def install(model: nn.Module, method: AttentionMethod) -> str:
    """Make ``model`` run ``method`` in every attention layer; returns the implementation name."""
    check_supported(model)
    name = register(method)
    model.set_attn_implementation(name)  # type: ignore[operator]
    return name


__all__ = [
    "ACTIVITY_ATTR",
    "E4M3_MAX",
    "EXACT_ATTR",
    "AttentionMethod",
    "adapter",
    "check_layer_indices",
    "check_supported",
    "count_calls",
    "e4m3",
    "fp8_core",
    "install",
    "keep_exact",
    "register",
    "sage_core",
    "topk_core",
    "visible",
]

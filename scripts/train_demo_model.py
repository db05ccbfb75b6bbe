"""Train the embedded demo model: a small Llama chat model on ShareGPT plus synthetic dialogues.

Deterministic given ``--seed``: the data order, the tokenizer, the initial
weights and the number of optimizer steps are all fixed (no wall-clock budget).

Steps:
1. load ShareGPT V3 with :func:`gate.data.sharegpt.load_sharegpt`, keep the train split only;
2. train a byte-level BPE tokenizer (vocab 4096, digits split singly) on train-split text
   plus synthetic dialogues; set the chat template, ``eos = <|end|>``;
3. render conversations through the chat template (each cut to ``--doc-tokens``),
   mix in synthetic dialogues (:mod:`gate.data.synthetic`) for ``--synthetic-frac`` of the
   tokens, shuffle, concatenate, cut into ``--seq-len`` blocks;
4. train LlamaForCausalLM (hidden 256, 4 layers, 4 heads, intermediate 768, tied embeddings)
   with AdamW and a linear-warmup cosine schedule for ``--steps`` steps, next-token loss on
   every token;
5. save float32 safetensors, tokenizer and generation config into ``--out`` and print
   held-out perplexity and greedy sample replies as JSON.

Run (about 30 min on a shared 2-core CPU, one thread):
    HF_HUB_OFFLINE=1 python scripts/train_demo_model.py --out gate/assets/demo_model
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# One thread and a passive OpenMP wait: on a shared, oversubscribed 2-core machine two
# spinning threads made each step ~7x slower than one.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    GenerationConfig,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
)

from gate.data.sharegpt import Conversation, load_sharegpt, split_conversations, usable
from gate.data.synthetic import SyntheticDialogue, generate_dialogues

SPECIAL_TOKENS = [
    "<unk>",
    "<s>",
    "</s>",
    "<pad>",
    "<|user|>",
    "<|assistant|>",
    "<|system|>",
    "<|end|>",
]

#: The chat template: ``<s><|user|>text<|end|><|assistant|>text<|end|>...``.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>{{ message['content'] }}<|end|>"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)

VOCAB_SIZE = 4096


def render(messages: Sequence[dict[str, str]], bos: str = "<s>") -> str:
    """The chat template written out in Python (identical output, used for bulk tokenizing)."""
    body = "".join(f"<|{m['role']}|>{m['content']}<|end|>" for m in messages)
    return bos + body


def train_tokenizer(texts: Iterable[str]) -> PreTrainedTokenizerFast:
    """Byte-level BPE, vocab 4096, digits one per token, the chat template and special tokens."""
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        min_frequency=2,
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="<|end|>",
        unk_token="<unk>",
        pad_token="<pad>",
        additional_special_tokens=["</s>", "<|user|>", "<|assistant|>", "<|system|>"],
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.model_max_length = 1024
    return fast


def portable_tokenizer_config(out: Path) -> None:
    """Name the generic fast tokenizer class (known to transformers 4.x and 5.x alike)."""
    path = out / "tokenizer_config.json"
    cfg = json.loads(path.read_text(encoding="utf-8"))
    cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    path.write_text(json.dumps(cfg, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def conv_messages(conv: Conversation, max_chars: int) -> list[dict[str, str]]:
    """The conversation's turns, the text cut at ``max_chars`` in all (whole turns first)."""
    out: list[dict[str, str]] = []
    budget = max_chars
    for t in conv.turns:
        if budget <= 0:
            break
        text = t.content[:budget]
        budget -= len(text)
        out.append({"role": t.role, "content": text})
    return out


def build_documents(
    tokenizer: PreTrainedTokenizerFast,
    convs: Sequence[Conversation],
    synth: Sequence[SyntheticDialogue],
    sharegpt_tokens: int,
    doc_tokens: int,
) -> tuple[list[list[int]], list[list[int]]]:
    """Tokenized ShareGPT documents (until ``sharegpt_tokens``) and synthetic documents."""
    share_docs: list[list[int]] = []
    total = 0
    batch = 256
    for start in range(0, len(convs), batch):
        chunk = convs[start : start + batch]
        texts = [render(conv_messages(c, doc_tokens * 6)) for c in chunk]
        enc = tokenizer(texts, add_special_tokens=False)["input_ids"]
        for ids in enc:
            ids = ids[:doc_tokens]
            if len(ids) < 8:
                continue
            share_docs.append(ids)
            total += len(ids)
            if total >= sharegpt_tokens:
                return share_docs, _tok_synth(tokenizer, synth)
    return share_docs, _tok_synth(tokenizer, synth)


def _tok_synth(
    tokenizer: PreTrainedTokenizerFast, synth: Sequence[SyntheticDialogue]
) -> list[list[int]]:
    texts = [render(d.messages()) for d in synth]
    if not texts:
        return []
    return list(tokenizer(texts, add_special_tokens=False)["input_ids"])


def pack(docs: list[list[int]], seq_len: int, rng: random.Random) -> torch.Tensor:
    """Shuffle documents, concatenate them and cut the stream into ``seq_len + 1`` blocks."""
    order = list(range(len(docs)))
    rng.shuffle(order)
    stream: list[int] = []
    for i in order:
        stream.extend(docs[i])
    n = len(stream) // (seq_len + 1)
    return torch.tensor(stream[: n * (seq_len + 1)], dtype=torch.long).view(n, seq_len + 1)


def make_model(tokenizer: PreTrainedTokenizerFast, seed: int) -> LlamaForCausalLM:
    """The demo architecture: every matrix dimension a multiple of 64 (bitsandbytes 4-bit blocks)."""
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=256,
        intermediate_size=768,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=4,
        head_dim=64,
        max_position_embeddings=1024,
        rms_norm_eps=1e-5,
        initializer_range=0.02,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )
    return LlamaForCausalLM(config)


def lr_at(step: int, steps: int, peak: float, warmup: int, floor: float = 0.1) -> float:
    """Linear warm-up to ``peak``, then cosine decay to ``floor * peak`` at ``steps``."""
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return peak * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


@torch.no_grad()
def perplexity(model: LlamaForCausalLM, blocks: torch.Tensor, batch: int = 8) -> float:
    """exp(mean next-token negative log-likelihood) over the given token blocks."""
    model.eval()
    nll, count = 0.0, 0
    for i in range(0, len(blocks), batch):
        x = blocks[i : i + batch]
        logits = model(input_ids=x[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.size(-1)), x[:, 1:].reshape(-1), reduction="sum"
        )
        nll += float(loss)
        count += x[:, 1:].numel()
    model.train()
    return math.exp(nll / count)


@torch.no_grad()
def greedy_reply(model: Any, tokenizer: Any, prompt: str, max_new: int = 48) -> str:
    """The model's greedy reply to one user message, through the chat template."""
    model.eval()
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt}], add_generation_prompt=True, return_dict=True
    )["input_ids"]
    x = torch.tensor([ids])
    out = model.generate(
        x,
        max_new_tokens=max_new,
        do_sample=False,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model.train()
    return str(tokenizer.decode(out[0, len(ids) :], skip_special_tokens=True))


SAMPLE_PROMPTS = [
    "What is 7 * 8?",
    "What is 23 + 45?",
    "What is 6 * 7 + 12?",
    "What is 3 * 4 + 5 * 6?",
    "Answer in one word: What is the capital of France?",
    "Answer in capital letters: Which animal says moo?",
    'Reply in JSON with the key "city": What is the capital of Japan?',
    "Write exactly 3 bullet points about fruits.",
    'Describe winter without using the word "snow".',
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--doc-tokens", type=int, default=384)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--synthetic-frac", type=float, default=0.3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--tokenizer-convs", type=int, default=6000)
    ap.add_argument("--eval-every", type=int, default=0)
    ap.add_argument("--metrics", type=Path, default=None, help="write final metrics JSON here")
    ap.add_argument("--ckpt", type=Path, default=None, help="save a checkpoint here as it goes")
    ap.add_argument("--ckpt-every", type=int, default=100)
    ap.add_argument(
        "--init-from",
        type=Path,
        default=None,
        help="continue training a saved model directory (its tokenizer is reused, not retrained)",
    )
    ap.add_argument(
        "--stop-after",
        type=int,
        default=None,
        help="stop after this many steps (the schedule still spans --steps); for staged runs",
    )
    args = ap.parse_args(argv)

    torch.set_num_threads(args.threads)
    random.seed(args.seed)
    rng = random.Random(args.seed)
    t0 = time.perf_counter()

    convs, report = load_sharegpt(warn=False)
    train, held = split_conversations(usable(convs))
    train = sorted(train, key=lambda c: c.id)
    rng.shuffle(train)
    held = sorted(held, key=lambda c: c.id)
    print(
        f"sharegpt: recovered={report.recovered} lost={report.lost} "
        f"train={len(train)} heldout={len(held)}",
        flush=True,
    )

    total_tokens = args.steps * args.batch * (args.seq_len + 1)
    synth_tokens = int(total_tokens * args.synthetic_frac)
    # about 40 tokens per synthetic dialogue; draw generously, trim after tokenizing
    synth = generate_dialogues(max(2000, synth_tokens // 25), seed=args.seed)

    tok_texts = [t.content[:4000] for c in train[: args.tokenizer_convs] for t in c.turns] + [
        d.user + "\n" + d.assistant for d in synth[:20000]
    ]
    if args.init_from is not None:
        tokenizer = PreTrainedTokenizerFast.from_pretrained(args.init_from)
    else:
        tokenizer = train_tokenizer(tok_texts)
    print(f"tokenizer: vocab={len(tokenizer)} ({time.perf_counter() - t0:.0f}s)", flush=True)

    share_docs, synth_docs = build_documents(
        tokenizer, train, synth, total_tokens - synth_tokens, args.doc_tokens
    )
    kept: list[list[int]] = []
    n_synth = 0
    for d in synth_docs:
        if n_synth >= synth_tokens:
            break
        kept.append(d)
        n_synth += len(d)
    n_share = sum(len(d) for d in share_docs)
    blocks = pack(share_docs + kept, args.seq_len, rng)
    print(
        f"data: sharegpt_docs={len(share_docs)} tokens={n_share} synthetic_docs={len(kept)} "
        f"tokens={n_synth} blocks={len(blocks)} ({time.perf_counter() - t0:.0f}s)",
        flush=True,
    )

    held_docs, _ = build_documents(tokenizer, held, [], 10**9, args.doc_tokens)
    held_blocks = pack(held_docs, args.seq_len, random.Random(0))[:48]

    if args.init_from is not None:
        model = LlamaForCausalLM.from_pretrained(args.init_from, dtype=torch.float32)
    else:
        model = make_model(tokenizer, args.seed)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: {n_params} parameters", flush=True)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
        lr=args.lr,
        betas=(0.9, 0.95),
        eps=1e-8,
    )
    model.train()
    t_train = time.perf_counter()
    for step in range(args.steps if args.stop_after is None else min(args.steps, args.stop_after)):
        lr = lr_at(step, args.steps, args.lr, args.warmup)
        for g in opt.param_groups:
            g["lr"] = lr
        idx = torch.arange(step * args.batch, (step + 1) * args.batch) % len(blocks)
        x = blocks[idx]
        out = model(input_ids=x[:, :-1], labels=None)
        loss = torch.nn.functional.cross_entropy(
            out.logits.reshape(-1, out.logits.size(-1)), x[:, 1:].reshape(-1)
        )
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 25 == 0 or step == args.steps - 1:
            el = time.perf_counter() - t_train
            tps = (step + 1) * args.batch * args.seq_len / el
            print(
                f"step {step} loss {loss.item():.3f} lr {lr:.2e} tok/s {tps:.0f} elapsed {el:.0f}s",
                flush=True,
            )
        if args.ckpt and step and step % args.ckpt_every == 0:
            model.save_pretrained(args.ckpt, safe_serialization=True)
            tokenizer.save_pretrained(args.ckpt)
        if args.eval_every and step and step % args.eval_every == 0:
            print(f"eval step {step} heldout_ppl {perplexity(model, held_blocks):.2f}", flush=True)

    train_s = time.perf_counter() - t_train
    ppl = perplexity(model, held_blocks)
    samples = {p: greedy_reply(model, tokenizer, p) for p in SAMPLE_PROMPTS}
    for c in held[:5]:
        prompt = (c.first_user_turn() or "")[:300]
        samples[prompt] = greedy_reply(model, tokenizer, prompt)

    args.out.mkdir(parents=True, exist_ok=True)
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        do_sample=False,
        max_new_tokens=64,
    )
    model.save_pretrained(args.out, safe_serialization=True)
    tokenizer.save_pretrained(args.out)
    portable_tokenizer_config(args.out)
    metrics: dict[str, Any] = {
        "seed": args.seed,
        "steps": args.steps,
        "batch": args.batch,
        "seq_len": args.seq_len,
        "parameters": n_params,
        "train_tokens": args.steps * args.batch * args.seq_len,
        "sharegpt_tokens": n_share,
        "synthetic_tokens": n_synth,
        "heldout_ppl": ppl,
        "heldout_tokens": int(held_blocks[:, 1:].numel()),
        "train_seconds": train_s,
        "total_seconds": time.perf_counter() - t0,
        "final_loss": loss.item(),
        "samples": samples,
        "torch": torch.__version__,
    }
    text = json.dumps(metrics, indent=2, ensure_ascii=False)
    print(text, flush=True)
    if args.metrics:
        args.metrics.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())

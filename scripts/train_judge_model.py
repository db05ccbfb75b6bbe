"""Train the bundled judge: the demo model fine-tuned to answer the project's judge questions.

The judge answers the two questions of ``gate/assets/judge/`` (or ``--pairwise-template``
/ ``--validity-template``; pairwise: ``A``, ``B`` or ``tie``; validity: ``valid`` or
``corrupted``) about replies to real and synthetic
prompts. Its training data has a known truth (:mod:`gate.judge.pairs`): an intact reply
against a copy damaged by :mod:`gate.judge.damage` (truncated, repeated, shuffled,
wrong number, unrelated, empty), in both orders, the reply against itself (tie), and
intact or corrupted single replies (validity); and, preferred by construction, the
demo model's reply against a broken build's reply to the same prompt (degraded).

Deterministic given ``--seed``: data, order, and the number of optimizer steps are fixed
(no wall-clock budget). Resumable: ``--ckpt-every`` writes ``<out>/checkpoint.pt``
(weights, optimizer, step) and a rerun of the same command continues from it; the
demo model's generated replies are kept in ``--work`` (a temp folder by default) and
reused. ``--drop-layers`` starts from a shallower copy of the demo model (a smaller,
differently trained second judge); ``--save-dtype float16`` halves the saved file.

Steps:
1. intact replies (train side only): synthetic dialogues of :mod:`gate.data.synthetic`
   drawn with ``--seed``; first user/assistant turns of the ShareGPT train split (the
   held-out split of :func:`gate.data.sharegpt.is_heldout` is never read); the demo
   model's own greedy replies to ``--model-prompts`` ShareGPT train prompts, and those of
   a damaged build of it (``--degraded-build``, ``drop-layers:1``) to the same prompts;
2. cases: ``--steps x --batch`` examples, ``--validity-share`` of them validity cases,
   the rest pairwise groups (both orders), per origin in the ``--mix`` shares, damage
   kinds in ``--kinds`` weights;
3. every case is rendered exactly as the in-process judge renders a question
   (:class:`gate.judge.judges.TransformersJudge`): both replies normalized
   (:mod:`gate.judge.normalize`), fields clipped to ``--prompt-tokens`` /
   ``--response-tokens``, the template filled, the chat template applied;
4. AdamW on the answer tokens and the end token only (the prompt is context, not
   target), linear warm-up then cosine decay, batches of similar length;
5. the weights, tokenizer, generation config, ``judge_config.json`` (field limits,
   template versions, answer cap) and ``training_metrics.json`` are written to ``--out``.

Run (one thread; commands and figures in gate/assets/judge_model/TRAINING.md):
    OMP_WAIT_POLICY=PASSIVE python scripts/train_judge_model.py --out gate/assets/judge_model
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch
from train_demo_model import lr_at, portable_tokenizer_config
from transformers import GenerationConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from gate.data.sharegpt import Conversation, load_sharegpt, split_conversations, usable
from gate.data.synthetic import generate_dialogues
from gate.judge.judges import JUDGE_CONFIG, answer_ids, question_ids
from gate.judge.normalize import normalize_response
from gate.judge.pairs import PairwiseCase, Source, ValidityCase, draw_cases
from gate.judge.template import FieldLimits, JudgeTemplate, default_template, load_template
from gate.models.compress import apply_recipe
from gate.models.compress.layers import drop_last_layers
from gate.models.recipes import parse_recipe

REPO = Path(__file__).resolve().parent.parent
DEMO_MODEL = REPO / "gate" / "assets" / "demo_model"

#: Default damage-kind weights of the pairwise cases (``tie``: a reply against itself).
DEFAULT_KINDS = (
    "truncated=1,repeated=1,shuffled=1,wrong_number=0.6,unrelated=0.6,degraded=1,empty=0.4,tie=2"
)
#: Default shares of the three origins of intact replies.
DEFAULT_MIX = "synthetic=0.4,sharegpt=0.15,model=0.45"


def parse_weights(text: str) -> dict[str, float]:
    """``"a=1,b=0.5"`` -> ``{"a": 1.0, "b": 0.5}``."""
    out: dict[str, float] = {}
    for item in text.split(","):
        name, _, value = item.partition("=")
        out[name.strip()] = float(value)
    return out


def synthetic_sources(n: int, seed: int) -> list[Source]:
    """Synthetic prompt/reply pairs; arithmetic ones (and JSON sums) take ``wrong_number``."""
    out = []
    for d in generate_dialogues(n, seed=seed):
        arithmetic = d.kind.startswith("arithmetic") or (
            d.kind == "json" and any(ch.isdigit() for ch in d.assistant)
        )
        out.append(Source(d.user, d.assistant, f"synthetic:{d.kind}", arithmetic))
    return out


def first_exchange(conv: Conversation, max_chars: int) -> tuple[str, str] | None:
    """The first user turn and the assistant reply right after it (cut to ``max_chars``)."""
    turns = conv.turns
    for i in range(len(turns) - 1):
        if turns[i].role == "user" and turns[i + 1].role == "assistant":
            prompt, reply = turns[i].content.strip(), turns[i + 1].content.strip()
            if prompt and reply:
                return prompt[:max_chars], reply[:max_chars]
            return None
    return None


def sharegpt_sources(convs: Sequence[Conversation], n: int, max_chars: int) -> list[Source]:
    """Up to ``n`` ShareGPT first exchanges, in the given order."""
    out: list[Source] = []
    for conv in convs:
        pair = first_exchange(conv, max_chars)
        if pair is not None:
            out.append(Source(pair[0], pair[1], "sharegpt"))
            if len(out) >= n:
                break
    return out


@torch.no_grad()
def greedy_replies(
    model: Any, tokenizer: Any, prompts: Sequence[str], max_new: int, prompt_tokens: int, batch: int
) -> list[str]:
    """Greedy replies through the chat template, prompts cut to their last ``prompt_tokens``."""
    model.eval()
    replies: list[str] = []
    pad = tokenizer.pad_token_id
    for start in range(0, len(prompts), batch):
        chunk = prompts[start : start + batch]
        rows = [
            tokenizer.apply_chat_template(
                [{"role": "user", "content": p}], add_generation_prompt=True, return_dict=True
            )["input_ids"][-prompt_tokens:]
            for p in chunk
        ]
        width = max(len(r) for r in rows)
        ids = torch.tensor([[pad] * (width - len(r)) + list(r) for r in rows])
        mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
        out = model.generate(
            ids,
            attention_mask=mask,
            max_new_tokens=max_new,
            do_sample=False,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=pad,
        )
        for row in out[:, width:]:
            replies.append(str(tokenizer.decode(row, skip_special_tokens=True)).strip())
    return replies


def cached_replies(
    path: Path, model: Any, tokenizer: Any, prompts: Sequence[str], args: argparse.Namespace
) -> list[str]:
    """:func:`greedy_replies`, kept in ``path`` (JSON lines) batch by batch and reused.

    A line is reused when its prompt and ``max_new`` match; an interrupted run loses
    at most the batch it was generating.
    """
    done: dict[str, str] = {}
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue  # a line cut by an interruption
            if row.get("max_new") == args.gen_tokens:
                done[str(row["prompt"])] = str(row["reply"])
    todo = [p for p in dict.fromkeys(prompts) if p not in done]
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as handle:
        for start in range(0, len(todo), args.gen_batch):
            chunk = todo[start : start + args.gen_batch]
            replies = greedy_replies(model, tokenizer, chunk, args.gen_tokens, 192, len(chunk))
            for prompt, reply in zip(chunk, replies, strict=True):
                done[prompt] = reply
                row = {"prompt": prompt, "reply": reply, "max_new": args.gen_tokens}
                handle.write(json.dumps(row) + "\n")
            handle.flush()
    return [done[p] for p in prompts]


class Encoder:
    """Cases -> (prompt ids, answer ids), rendered exactly as the in-process judge does."""

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerFast,
        pairwise: JudgeTemplate,
        validity: JudgeTemplate,
        limits: FieldLimits,
    ) -> None:
        self.tokenizer = tokenizer
        self.pairwise = pairwise
        self.validity = validity
        self.limits = limits

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        return str(self.tokenizer.decode(list(ids)))

    def pair(self, case: PairwiseCase) -> tuple[list[int], list[int]]:
        question = self.pairwise.render(
            {
                "prompt": case.prompt,
                "response_a": normalize_response(case.response_a),
                "response_b": normalize_response(case.response_b),
            },
            self.limits,
            self,
        )
        return question_ids(self.tokenizer, question), answer_ids(self.tokenizer, case.label)

    def valid(self, case: ValidityCase) -> tuple[list[int], list[int]]:
        question = self.validity.render(
            {"prompt": case.prompt, "response": normalize_response(case.response)},
            self.limits,
            self,
        )
        return question_ids(self.tokenizer, question), answer_ids(self.tokenizer, case.label)


Example = tuple[list[int], list[int]]


def batches_of(groups: list[list[Example]], batch: int, rng: random.Random) -> list[list[Example]]:
    """Shuffle groups (a pair's two orders stay together), then cut batches of similar length.

    Windows of ``32 * batch`` examples are sorted by length and cut into batches, and
    the batches are shuffled: little padding, no systematic order.
    """
    rng.shuffle(groups)
    flat = [ex for g in groups for ex in g]
    window = 32 * batch
    out: list[list[Example]] = []
    for start in range(0, len(flat), window):
        chunk = sorted(flat[start : start + window], key=lambda ex: len(ex[0]) + len(ex[1]))
        out.extend(chunk[i : i + batch] for i in range(0, len(chunk), batch))
    out = [b for b in out if len(b) == batch]
    rng.shuffle(out)
    return out


def collate(rows: list[Example], pad: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded inputs, the positions that predict answer tokens, and those tokens.

    With right padding and a causal mask no real token attends to a pad, so no
    attention mask is needed; position ``len(prompt) - 1 + j`` predicts answer token ``j``.
    """
    width = max(len(q) + len(a) for q, a in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    rows_idx: list[int] = []
    pos_idx: list[int] = []
    targets: list[int] = []
    for r, (q, a) in enumerate(rows):
        seq = q + a
        ids[r, : len(seq)] = torch.tensor(seq)
        for j, tok in enumerate(a):
            rows_idx.append(r)
            pos_idx.append(len(q) - 1 + j)
            targets.append(tok)
    where = torch.tensor([rows_idx, pos_idx])
    return ids, where, torch.tensor(targets)


def answer_loss(model: LlamaForCausalLM, rows: list[Example], pad: int) -> tuple[Any, Any]:
    """Mean cross-entropy over answer tokens (logits only where they are needed)."""
    ids, where, targets = collate(rows, pad)
    hidden = model.model(input_ids=ids).last_hidden_state
    logits = model.lm_head(hidden[where[0], where[1]])
    loss = torch.nn.functional.cross_entropy(logits, targets)
    return loss, logits


@torch.no_grad()
def first_token_accuracy(model: LlamaForCausalLM, rows: list[Example], pad: int) -> float:
    """Share of examples whose first answer token is the greedy (argmax) token."""
    model.eval()
    hits = 0
    for start in range(0, len(rows), 16):
        chunk = rows[start : start + 16]
        ids, where, targets = collate(chunk, pad)
        hidden = model.model(input_ids=ids).last_hidden_state
        first = [i for i in range(len(targets)) if i == 0 or where[0, i] != where[0, i - 1]]
        pick = torch.tensor(first)
        logits = model.lm_head(hidden[where[0, pick], where[1, pick]])
        hits += int((logits.argmax(-1) == targets[pick]).sum())
    model.train()
    return hits / max(1, len(rows))


def _portable(value: object) -> str:
    """An argument as text, paths inside the repository written relative to it."""
    if isinstance(value, Path):
        try:
            return str(value.resolve().relative_to(REPO))
        except ValueError:
            return str(value)
    return str(value)


def save_checkpoint(path: Path, model: Any, opt: Any, step: int) -> None:
    tmp = path.with_suffix(".tmp")
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step}, tmp)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--init-from", type=Path, default=DEMO_MODEL)
    ap.add_argument("--seed", type=int, default=4242)
    ap.add_argument("--steps", type=int, default=700)
    ap.add_argument("--stop-after", type=int, default=None, help="stop early (schedule unchanged)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=6e-4)
    ap.add_argument("--warmup", type=int, default=40)
    ap.add_argument("--pairs", type=int, default=None, help="pairwise groups (default: fill)")
    ap.add_argument("--validity-share", type=float, default=0.25)
    ap.add_argument("--kinds", default=DEFAULT_KINDS, help="damage-kind weights, a=w,b=w")
    ap.add_argument("--mix", default=DEFAULT_MIX, help="origin shares synthetic/sharegpt/model")
    ap.add_argument(
        "--pairwise-template", type=Path, default=None, help="default: the packaged one"
    )
    ap.add_argument(
        "--validity-template", type=Path, default=None, help="default: the packaged one"
    )
    ap.add_argument("--prompt-tokens", type=int, default=96)
    ap.add_argument("--response-tokens", type=int, default=128)
    ap.add_argument("--model-prompts", type=int, default=384)
    ap.add_argument("--gen-tokens", type=int, default=96)
    ap.add_argument("--gen-batch", type=int, default=16)
    ap.add_argument(
        "--degraded-build",
        default="drop-layers:1",
        help="recipe of the damaged demo build whose replies are 'degraded' cases ('none': off)",
    )
    ap.add_argument(
        "--drop-layers",
        type=int,
        default=0,
        help="start from the init model without its last N decoder layers (a smaller judge)",
    )
    ap.add_argument(
        "--save-dtype",
        choices=["float32", "float16"],
        default="float32",
        help="dtype of the saved weights (float16 halves the file; loaded back as float32)",
    )
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--ckpt-every", type=int, default=50)
    ap.add_argument(
        "--metrics", type=Path, default=None, help="metrics JSON (<out>/training_metrics.json)"
    )
    ap.add_argument(
        "--work",
        type=Path,
        default=None,
        help="the demo model's generated replies are kept here (default: a temp folder)",
    )
    args = ap.parse_args(argv)

    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    rng = random.Random(args.seed)
    kinds = parse_weights(args.kinds)
    mix = parse_weights(args.mix)
    limits = FieldLimits(prompt=args.prompt_tokens, response=args.response_tokens)
    tokenizer = PreTrainedTokenizerFast.from_pretrained(args.init_from)
    pairwise = (
        load_template(args.pairwise_template, "pairwise")
        if args.pairwise_template
        else default_template("pairwise")
    )
    validity = (
        load_template(args.validity_template, "validity")
        if args.validity_template
        else default_template("validity")
    )
    encoder = Encoder(tokenizer, pairwise, validity, limits)
    work = args.work or Path(tempfile.gettempdir()) / "gate-judge-work"

    # 1. intact replies, train side only
    convs, _ = load_sharegpt(warn=False)
    train, _held = split_conversations(usable(convs))
    train = sorted(train, key=lambda c: c.id)
    random.Random(args.seed).shuffle(train)
    n_examples = args.steps * args.batch
    n_validity = int(n_examples * args.validity_share)
    # a pairwise group is two examples (both orders), a tie one
    tie_share = kinds.get("tie", 0.0) / sum(kinds.values())
    n_pairs = (
        args.pairs
        if args.pairs is not None
        else math.ceil((n_examples - n_validity) / (2.0 - tie_share))
    )
    sources: dict[str, list[Source]] = {
        "synthetic": synthetic_sources(4000, args.seed),
        "sharegpt": sharegpt_sources(train[args.model_prompts :], 4000, 1500),
    }
    model = LlamaForCausalLM.from_pretrained(args.init_from, dtype=torch.float32)
    if args.drop_layers:
        drop_last_layers(model, args.drop_layers)
    model_prompts = sharegpt_sources(train[: args.model_prompts], args.model_prompts, 1500)
    t_gen = time.perf_counter()
    prompts = [s.prompt for s in model_prompts]
    replies = cached_replies(work / "model_replies.jsonl", model, tokenizer, prompts, args)
    degraded: list[str | None] = [None] * len(prompts)
    if args.degraded_build != "none":
        broken = LlamaForCausalLM.from_pretrained(args.init_from, dtype=torch.float32)
        apply_recipe(broken, parse_recipe(args.degraded_build))
        name = args.degraded_build.replace(":", "_")
        degraded = list(
            cached_replies(work / f"replies_{name}.jsonl", broken, tokenizer, prompts, args)
        )
        del broken
    sources["model"] = [
        Source(p, r, "model", degraded=d)
        for p, r, d in zip(prompts, replies, degraded, strict=True)
        if r
    ]
    print(
        "sources: "
        + " ".join(f"{k}={len(v)}" for k, v in sources.items())
        + f" (generation {time.perf_counter() - t_gen:.0f}s)",
        flush=True,
    )

    # 2.-3. cases, rendered and tokenized
    groups: list[list[Example]] = []
    val_groups: list[list[Example]] = []
    counts: dict[str, int] = {}
    total_share = sum(mix.values())
    for origin, share in sorted(mix.items()):
        n_p = round(n_pairs * share / total_share)
        n_v = round(n_validity * share / total_share)
        pair_groups, valid_cases = draw_cases(sources[origin], n_p, n_v, rng, kinds)
        for g in pair_groups:
            counts[g[0].kind] = counts.get(g[0].kind, 0) + len(g)
            groups.append([encoder.pair(c) for c in g])
        for c in valid_cases:
            counts[f"validity:{c.label}"] = counts.get(f"validity:{c.label}", 0) + 1
            groups.append([encoder.valid(c)])
    # a small monitor set drawn apart (same sources, other draws): a check that it learns
    monitor_rng = random.Random(args.seed + 1)
    for origin in sorted(mix):
        pg, vc = draw_cases(sources[origin], 40, 20, monitor_rng, kinds)
        val_groups.extend([[encoder.pair(c) for c in g] for g in pg])
        val_groups.extend([[encoder.valid(c)] for c in vc])
    monitor = [ex for g in val_groups for ex in g]
    batches = batches_of(groups, args.batch, random.Random(args.seed + 2))
    n_tokens = sum(len(q) + len(a) for b in batches for q, a in b)
    print(
        f"data: {sum(len(g) for g in groups)} examples in {len(batches)} batches, "
        f"{n_tokens} tokens ({n_tokens / max(1, len(batches)):.0f}/batch); kinds {counts} "
        f"({time.perf_counter() - t0:.0f}s)",
        flush=True,
    )
    if len(batches) < args.steps:
        print(f"note: {len(batches)} batches for {args.steps} steps; batches repeat", flush=True)

    # 4. training
    decay = [p for _, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for _, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
        lr=args.lr,
        betas=(0.9, 0.95),
    )
    args.out.mkdir(parents=True, exist_ok=True)
    ckpt = args.out / "checkpoint.pt"
    start = 0
    if ckpt.is_file():
        state = torch.load(ckpt, weights_only=True)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = int(state["step"])
        print(f"resumed at step {start}", flush=True)
    pad = int(tokenizer.pad_token_id)
    model.train()
    last = args.steps if args.stop_after is None else min(args.steps, args.stop_after)
    t_train = time.perf_counter()
    cpu_train = time.process_time()
    seen = 0
    history: list[dict[str, float]] = []
    loss_value = float("nan")
    for step in range(start, last):
        lr = lr_at(step, args.steps, args.lr, args.warmup)
        for g in opt.param_groups:
            g["lr"] = lr
        rows = batches[step % len(batches)]
        loss, _ = answer_loss(model, rows, pad)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        loss_value = float(loss.detach())
        seen += sum(len(q) + len(a) for q, a in rows)
        if step % 25 == 0 or step == last - 1:
            el = time.perf_counter() - t_train
            print(
                f"step {step} loss {loss_value:.3f} lr {lr:.2e} tok/s {seen / el:.0f} "
                f"elapsed {el:.0f}s cpu {time.process_time() - cpu_train:.0f}s",
                flush=True,
            )
        if args.eval_every and (step + 1) % args.eval_every == 0:
            acc = first_token_accuracy(model, monitor, pad)
            history.append({"step": step + 1, "loss": loss_value, "monitor_accuracy": acc})
            print(f"eval step {step + 1} monitor_first_token_accuracy {acc:.3f}", flush=True)
        if args.ckpt_every and (step + 1) % args.ckpt_every == 0 and step + 1 < last:
            save_checkpoint(ckpt, model, opt, step + 1)
    train_s = time.perf_counter() - t_train
    train_cpu_s = time.process_time() - cpu_train

    final_accuracy = first_token_accuracy(model, monitor, pad)

    # 5. save
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        do_sample=False,
        max_new_tokens=8,
    )
    if args.save_dtype == "float16":
        model.to(torch.float16)
    model.save_pretrained(args.out, safe_serialization=True)
    tokenizer.save_pretrained(args.out)
    portable_tokenizer_config(args.out)
    judge_config = {
        "field_limits": {"prompt": limits.prompt, "response": limits.response},
        "templates": {"pairwise": pairwise.version, "validity": validity.version},
        "max_output_tokens": 8,
        "trained_steps": last,
        "seed": args.seed,
    }
    (args.out / JUDGE_CONFIG).write_text(json.dumps(judge_config, indent=2) + "\n", "utf-8")
    if ckpt.is_file() and last == args.steps:
        ckpt.unlink()
    metrics: dict[str, Any] = {
        "args": {k: _portable(v) for k, v in vars(args).items() if k not in ("work", "metrics")},
        "parameters": sum(p.numel() for p in model.parameters()),
        "examples": sum(len(g) for g in groups),
        "kinds": counts,
        "train_tokens_per_epoch": n_tokens,
        "steps_run_by_this_process": last - start,
        "train_seconds": train_s,
        "train_cpu_seconds": train_cpu_s,
        "total_cpu_seconds": time.process_time(),
        "total_seconds": time.perf_counter() - t0,
        "final_loss": loss_value,
        "monitor": history,
        "monitor_first_token_accuracy": final_accuracy,
        "torch": torch.__version__,
    }
    text = json.dumps(metrics, indent=2)
    print(text, flush=True)
    (args.metrics or args.out / "training_metrics.json").write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())

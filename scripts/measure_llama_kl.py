"""gate's KL beside llama.cpp's own instrument (``llama-perplexity --kl-divergence``), same positions.

For each ``gguf-*`` build of the model (F16, Q8_0, Q4_K_M, Q2_K by default,
made by the recipes' own code, :func:`gate.engines.llama_cpp.make.make_gguf`):

* **llama.cpp's instrument.** gate's fidelity prompt texts, joined by blank
  lines, are one text file. ``llama-perplexity -m F16.gguf -f TEXT -c N
  --chunks C --kl-divergence-base base.kld`` writes the F16 file's logits, as
  llama.cpp runs it, for the second half of each ``N``-token chunk; then
  ``llama-perplexity -m Q.gguf --kl-divergence-base base.kld --kl-divergence``
  gives its mean KLD (± its error), percentiles and "same top p" per build.
  llama-perplexity (``tools/perplexity/perplexity.cpp``) cuts the tokens into
  ``C`` chunks of ``N``; chunk ``c`` is decoded from an empty cache, its first
  token replaced by BOS when the vocabulary adds one, and the positions it
  scores are ``N/2 .. N-2`` (the logits there predict tokens ``N/2+1 .. N-1``):
  ``N - 1 - N/2`` per chunk.
* **gate, on exactly those positions.** The tokens are read back from
  ``base.kld`` (its header stores them), checked against gate's tokenizer's
  encoding of the same text (and, with ``--served``, llama-server's ``/tokenize``). Each chunk is one score
  request: context = its tokens ``0 .. N/2`` (BOS first when llama.cpp puts
  one there), continuation = tokens ``N/2+1 .. N-1``. The baseline (the
  model's weights in PyTorch, in process) is scored on them and its reference
  is written as a version-3 reference pack, per position exactly as the
  fidelity recorder writes it (:mod:`gate.tiers.fidelity.recording`): top-k,
  tail log-mass, ``m`` tail tokens drawn with seed ``[tail_seed, chunk]``.
  The pack's "output" of a chunk is the baseline's arg-max at each position
  (the pack's invariant); the continuation fed to every model is the text.
  Each build is then run by llama.cpp on the same chunks: llama-perplexity
  itself computes its full log-prob rows (``--kl-divergence-base`` with the
  build's file, the same batched decode as its KLD run, rows coded in uint16
  as it codes its base), and gate scores those rows against the pack; the
  quantized builds are also loaded dequantized in process (transformers' GGUF
  loader, as without ``--engine``). gate's estimator
  (:func:`gate.metrics.fidelity.score_positions`, the tier's aggregation
  :func:`gate.tiers.fidelity.measurements`) gives ``fidelity.kl_mean`` and
  ``fidelity.cga``; the exact KL against the baseline's full rows is given
  beside it. ``--served`` also scores each build through llama-server (gate's
  served scoring, :mod:`gate.engines.llama_cpp.server`; ``--scoring-api``),
  whose KL is an interval (its rows are exact in the ``--served-logprobs``
  tokens it returns).

What each figure is:

* llama.cpp's mean KLD is ``KL(F16 in llama.cpp || Q in llama.cpp)``, pooled
  over positions; gate's ``fidelity.kl_mean`` is ``KL(baseline in PyTorch ||
  Q in llama.cpp)``, the mean of per-chunk means (every chunk has the same
  number of positions, so it is the pooled mean too). The two bases differ,
  by the F16 rounding of the weights and llama.cpp's kernels: the F16 row
  measures that (gate's KL of the F16 file run by llama.cpp), and
  ``base vs base`` is the exact KL between the two bases' full rows
  (PyTorch's rows vs the logits llama-perplexity stored, uint16-coded).
* "same top p" is the share of positions where the build's arg-max is the
  base's arg-max; gate's CGA is the same share against its own base's arg-max.
* gate's KL is the pack's estimate (top-k exact + sampled tail); with full
  rows on both sides the exact KL is computed too, so the estimator is
  checked on every row.

**Repacking is on**, as llama.cpp runs by default (its extra CPU buffer types:
the repacked Q4_0/Q4_K GEMMs of the x86-64-v3 build scripts/setup_llama_cpp.sh
makes); ``--no-repack`` sets ``LLAMA_ARG_REPACK=0`` for llama-perplexity and the
llama-server gate starts. Either way the quantized dot products quantize the
activations to 8-bit blocks.

Wall times are measured in this one run (gate: recording the pack, scoring
each build; llama.cpp: the base logits, each KLD run); sizes are the pack
file and the ``.kld`` logits file. Run (about 12 minutes on two busy CPU cores)::

    python scripts/measure_llama_kl.py --json out/llama_kl.json
    python scripts/measure_llama_kl.py --show out/llama_kl.json    # the tables again
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import argparse
import dataclasses
import json
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gate.measurement import Measurement
from gate.metrics import fidelity as fm
from gate.models.backends.base import Backend, ScoreRequest
from gate.store.reference import (
    LOGPROB_DTYPES,
    PackEntry,
    PackLayout,
    PackOrigin,
    PackPrompt,
    ReferencePack,
    load_pack,
    write_pack,
)
from gate.tiers import fidelity as tier

DEFAULT_BUILDS = ("f16", "q8_0", "q4_k_m", "q2_k")
#: The issue's agreement targets: |gate / llama.cpp - 1| per build.
TARGETS = {"q8_0": 0.25, "q4_k_m": 0.10, "q2_k": 0.10}


# -- llama-perplexity ------------------------------------------------------------------


@dataclass(frozen=True)
class KldFile:
    """The header of llama-perplexity's ``--kl-divergence-base`` file and where its rows start."""

    n_ctx: int
    n_vocab: int
    n_chunk: int
    tokens: np.ndarray
    rows_offset: int

    @property
    def first(self) -> int:
        """The first scored position of a chunk (``n_ctx / 2``)."""
        return self.n_ctx // 2

    @property
    def per_chunk(self) -> int:
        """Positions scored per chunk: ``n_ctx - 1 - n_ctx / 2``."""
        return self.n_ctx - 1 - self.first

    def chunk(self, c: int) -> np.ndarray:
        return self.tokens[c * self.n_ctx : (c + 1) * self.n_ctx]


def _pack_reference(pack: Any, j: int) -> fm.BaselineReference:
    """Prompt ``j`` of the baseline's reference pack: its tokens, top-k and tail samples."""
    ids, lps, tail = pack.topk(j)
    sample_ids, sample_lps = pack.samples(j)
    return fm.BaselineReference(
        pack.output_ids(j), ids, lps, tail, sample_ids=sample_ids, sample_logprobs=sample_lps
    )


def read_kld(path: Path) -> KldFile:
    """``_logits_``, ``n_ctx`` (u32), ``n_vocab``, ``n_chunk`` (i32), ``n_ctx * n_chunk`` tokens (i32),
    then per chunk ``per_chunk`` rows of ``nv = 2 * ceil(n_vocab / 2) + 4`` uint16."""
    with path.open("rb") as f:
        if f.read(8) != b"_logits_":
            raise SystemExit(f"{path} is not a llama-perplexity logits file")
        n_ctx = int(np.frombuffer(f.read(4), "<u4")[0])
        n_vocab, n_chunk = (int(v) for v in np.frombuffer(f.read(8), "<i4"))
        tokens = np.frombuffer(f.read(4 * n_ctx * n_chunk), "<i4").astype(np.int64)
        return KldFile(n_ctx, n_vocab, n_chunk, tokens, f.tell())


def kld_base_rows(kld: KldFile, path: Path) -> Iterator[np.ndarray]:
    """Per chunk, the base log-probs ``[per_chunk, n_vocab]`` llama-perplexity stored: each row
    is ``scale``, ``min`` (two float32) and ``n_vocab`` uint16 codes, ``log p = scale * code + min``."""
    nv = 2 * ((kld.n_vocab + 1) // 2) + 4
    data = np.memmap(path, dtype="<u2", mode="r", offset=kld.rows_offset)
    rows = np.asarray(data[: kld.n_chunk * kld.per_chunk * nv]).reshape(-1, nv)
    for c in range(kld.n_chunk):
        part = rows[c * kld.per_chunk : (c + 1) * kld.per_chunk]
        head = np.ascontiguousarray(part[:, :4]).view("<f4")
        codes = part[:, 4 : 4 + kld.n_vocab].astype(np.float64)
        yield codes * head[:, :1].astype(np.float64) + head[:, 1:2].astype(np.float64)


_NUMBER = r"([-+0-9.eE]+)"


def parse_kld_output(text: str) -> dict[str, float]:
    """The summary llama-perplexity prints after ``--kl-divergence``."""
    wanted = {
        "kld_mean": rf"Mean\s+KLD:\s+{_NUMBER}\s+±\s+{_NUMBER}",
        "kld_median": rf"Median\s+KLD:\s+{_NUMBER}",
        "kld_p99": rf"99\.0%\s+KLD:\s+{_NUMBER}",
        "kld_max": rf"Maximum\s+KLD:\s+{_NUMBER}",
        "same_top_p": rf"Same top p:\s+{_NUMBER}\s+±\s+{_NUMBER}",
        "ppl_q": rf"Mean\s+PPL\(Q\)\s*:\s+{_NUMBER}",
        "ppl_base": rf"Mean\s+PPL\(base\)\s*:\s+{_NUMBER}",
    }
    out: dict[str, float] = {}
    for key, pattern in wanted.items():
        found = re.search(pattern, text)
        if found is None:
            raise SystemExit(
                f"llama-perplexity printed no {key!r}; its output ends:\n{text[-2000:]}"
            )
        out[key] = float(found.group(1))
        if found.lastindex == 2:
            out[f"{key}_err"] = float(found.group(2))
    out["same_top_p"] /= 100.0
    out["same_top_p_err"] /= 100.0
    return out


def run_tool(argv: Sequence[str]) -> tuple[str, float]:
    """Run a llama.cpp tool; its output and wall seconds (exit on failure)."""
    t0 = time.perf_counter()
    done = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - t0
    text = done.stdout + done.stderr
    if done.returncode != 0:
        raise SystemExit(f"{argv[0]} exited {done.returncode}:\n{text[-3000:]}")
    return text, seconds


# -- gate's side -----------------------------------------------------------------------


def chunk_requests(kld: KldFile, bos: int | None) -> list[ScoreRequest]:
    """One request per chunk: the positions llama-perplexity scores (module doc)."""
    out = []
    for c in range(kld.n_chunk):
        ids = [int(t) for t in kld.chunk(c)]
        if bos is not None:
            ids[0] = bos
        out.append(ScoreRequest(ids[: kld.first + 1], ids[kld.first + 1 :]))
    return out


def record_chunks(
    base: Backend,
    requests: Sequence[ScoreRequest],
    settings: tier.FidelitySettings,
    path: Path,
    keep_rows: bool,
) -> tuple[ReferencePack, dict[int, np.ndarray]]:
    """The baseline's reference pack on the chunks (per position as the recorder writes it)."""
    entries: list[PackEntry] = []
    kept: dict[int, np.ndarray] = {}
    vocab = 0
    for j, rows in sorted(
        tier.score_rows(base, requests, batch_size=settings.batch_size, top_k=1),
        key=lambda item: item[0],
    ):
        vocab = int(rows.shape[-1])
        top_ids, top_lps = fm.topk_of_rows(rows, settings.top_k)
        tail = fm.tail_logmass(rows, top_ids)
        rng = np.random.default_rng([settings.tail_seed, j])
        sample_ids = np.sort(fm.draw_tail_samples(rows, top_ids, settings.tail_samples, rng), -1)
        sample_lps = np.take_along_axis(rows, sample_ids, axis=-1)
        n = int(rows.shape[0])
        meta = PackPrompt(
            id=f"chunk-{j}",
            category="text",
            length="long",
            n_prompt=len(requests[j].context),
            n_output=n,
            n_generated=n,
        )
        entries.append(
            PackEntry(
                meta,
                np.asarray(requests[j].context, dtype=np.int64),
                top_ids[:, 0].astype(np.int64),
                top_ids,
                top_lps,
                np.asarray(tail),
                sample_ids,
                sample_lps,
            )
        )
        if keep_rows:
            kept[j] = rows
    write_pack(
        path,
        entries,
        PackLayout(
            k=settings.top_k,
            max_new_tokens=max(len(r.continuation) for r in requests),
            logprob_dtype=settings.logprob_dtype,
            m=settings.tail_samples,
            sample_seed=settings.tail_seed,
        ),
        PackOrigin(
            tokenizer_sha256=base.provenance().tokenizer_identity(),
            prompt_set_sha256=None,
            model={"source": base.name},
            vocab_size=vocab,
        ),
    )
    return load_pack(path), kept


def score_build(
    cand: Backend,
    pack: ReferencePack,
    requests: Sequence[ScoreRequest],
    settings: tier.FidelitySettings,
    base_rows: dict[int, np.ndarray],
) -> dict[str, Any]:
    """gate's figures of one build on the chunks: the tier's estimator (an interval for a served
    build), CGA against the base's arg-max, and the exact KL where the build's rows are full."""
    served = not tier.uses_tail_samples(cand)
    dtype = LOGPROB_DTYPES[pack.logprob_dtype]
    scores: list[tier.PromptScores] = []
    exact: list[float] = []
    t0 = time.perf_counter()
    for j, rows, answer in tier.scored_rows(
        cand, requests, batch_size=settings.batch_size, top_k=1
    ):
        positions = fm.score_positions(
            _pack_reference(pack, j),
            rows,
            served=(
                fm.ServedRows(answer.returned, answer.unreturned_bound)
                if served and answer.returned is not None
                else None
            ),
            cga_k=tier.CGA_K,
            logprob_dtype=dtype,
        )
        scores.append(tier.PromptScores(j, pack.prompts[j], positions, served))
        if not served and j in base_rows:
            exact.extend(fm.exact_kl(base_rows[j], rows).tolist())
    seconds = time.perf_counter() - t0
    scores.sort(key=lambda s: s.index)
    ms: dict[str, Measurement] = {
        m.name: m
        for m in tier.measurements(scores, k=pack.k, exact=False, m=pack.m, interval=served)
    }
    mean = ms["fidelity.kl_mean"]
    out: dict[str, Any] = {
        "kl_mean": mean.value,
        "kl_se": mean.details.get("standard_error"),
        "kl_interval": mean.details.get("interval"),
        "kl_interval_exact_positions": mean.details.get("interval_exact_positions"),
        "kl_p99": ms["fidelity.kl_p99"].value,
        "cga": ms["fidelity.cga"].value,
        "positions": int(sum(s.positions.length for s in scores)),
        "score_s": seconds,
    }
    if exact:
        out["kl_exact"] = float(np.mean(exact))
    return out


def score_rows_of(
    rows_by_chunk: Iterator[np.ndarray],
    pack: ReferencePack,
    base_rows: dict[int, np.ndarray],
) -> dict[str, Any]:
    """gate's figures of one build from full rows computed elsewhere (llama-perplexity's dump of
    the build's log-probs on the same chunks): the tier's estimator and CGA, and the exact KL."""
    dtype = LOGPROB_DTYPES[pack.logprob_dtype]
    scores: list[tier.PromptScores] = []
    exact: list[float] = []
    t0 = time.perf_counter()
    for j, rows in enumerate(rows_by_chunk):
        vocab = pack.vocab_size or rows.shape[-1]
        full = np.full((rows.shape[0], vocab), -np.inf, dtype=np.float32)
        full[:, : rows.shape[-1]] = rows
        positions = fm.score_positions(
            _pack_reference(pack, j),
            full,
            cga_k=tier.CGA_K,
            logprob_dtype=dtype,
        )
        scores.append(tier.PromptScores(j, pack.prompts[j], positions))
        if j in base_rows:
            exact.extend(fm.exact_kl(base_rows[j][:, : rows.shape[-1]], rows).tolist())
    seconds = time.perf_counter() - t0
    ms = {m.name: m for m in tier.measurements(scores, k=pack.k, exact=False, m=pack.m)}
    out: dict[str, Any] = {
        "kl_mean": ms["fidelity.kl_mean"].value,
        "kl_se": ms["fidelity.kl_mean"].details.get("standard_error"),
        "kl_interval": None,
        "kl_p99": ms["fidelity.kl_p99"].value,
        "cga": ms["fidelity.cga"].value,
        "positions": int(sum(s.positions.length for s in scores)),
        "score_s": seconds,
    }
    if exact:
        out["kl_exact"] = float(np.mean(exact))
    return out


def base_vs_base(
    kld: KldFile, path: Path, base_rows: dict[int, np.ndarray]
) -> dict[str, float] | None:
    """Exact KL(PyTorch baseline || F16 in llama.cpp) and arg-max agreement on the full rows."""
    if not base_rows:
        return None
    kls, same = [], []
    for c, llama_rows in enumerate(kld_base_rows(kld, path)):
        ours = base_rows[c][:, : kld.n_vocab].astype(np.float64)
        kls.append(fm.exact_kl(ours, llama_rows))
        same.append(ours.argmax(-1) == llama_rows.argmax(-1))
    return {"kl_mean": float(np.concatenate(kls).mean()), "same_top": float(np.mean(same))}


def server_tokens(backend: Any, text: str) -> list[int]:
    """llama-server's ``/tokenize`` of ``text`` (no BOS), from the served backend's server."""
    from gate.engines.llama_cpp.server import tokenize_payload, tokenized

    url = backend.settings.root_url.rstrip("/") + "/tokenize"
    body = json.dumps(tokenize_payload(text)).encode()
    request = urllib.request.Request(url, body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as answer:
        return [i for i, _ in tokenized(json.loads(answer.read()))]


def check_tokens(label: str, ours: Sequence[int], kld: KldFile, bos: int | None) -> None:
    """The chunks' tokens must be the start of ``ours`` (after llama.cpp's BOS, if any)."""
    want = kld.tokens[1:] if bos is not None else kld.tokens
    got = np.asarray(ours[: want.size], dtype=np.int64)
    if got.size < want.size or not np.array_equal(got, want):
        at = int(np.argmax(got[: want.size] != want[: got.size])) if got.size else 0
        raise SystemExit(f"{label}'s tokens differ from llama-perplexity's at token {at}")


# -- the run ---------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2", help="baseline model (default smollm2)")
    ap.add_argument("--builds", default=",".join(DEFAULT_BUILDS), help="gguf-* types")
    ap.add_argument("--ctx", type=int, default=512, help="llama-perplexity's -c (chunk length)")
    ap.add_argument("--chunks", type=int, default=4, help="chunks scored (N/2 - 1 positions each)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--served-logprobs", type=int, default=128, help="top-K asked of llama-server")
    ap.add_argument("--served", action="store_true", help="also score through llama-server")
    ap.add_argument("--scoring-api", default="auto", help="llama-server scoring: forced, positions")
    ap.add_argument("--top-k", type=int, default=tier.FidelitySettings.top_k)
    ap.add_argument("--tail-samples", type=int, default=tier.FidelitySettings.tail_samples)
    ap.add_argument("--no-dequantized", action="store_true", help="skip the in-process builds")
    ap.add_argument(
        "--no-repack",
        action="store_true",
        help="turn off llama.cpp's extra CPU buffer types (repacked GEMMs; module doc)",
    )
    ap.add_argument("--workdir", type=Path, default=None, help="keep the files here")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    ap.add_argument("--show", type=Path, default=None, help="print the tables of a --json file")
    args = ap.parse_args(argv)
    if args.show is not None:
        print_tables(json.loads(args.show.read_text()))
        return 0
    if args.workdir is None:
        with tempfile.TemporaryDirectory(prefix="gate-llama-kl-") as tmp:
            figures = run(args, Path(tmp))
    else:
        args.workdir.mkdir(parents=True, exist_ok=True)
        figures = run(args, args.workdir)
    print_tables(figures)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    import torch

    from gate.data.prompt_set import load_prompt_set
    from gate.engines.llama_cpp.install import require
    from gate.engines.llama_cpp.make import make_gguf
    from gate.engines.llama_cpp.served import engine_for
    from gate.engines.opening import open_engine
    from gate.models.backends.loading import load_backend
    from gate.models.model_spec import ModelSpec
    from gate.models.recipes import parse_recipe

    torch.set_num_threads(args.threads)
    if args.no_repack:  # read by llama-perplexity and by the llama-server gate starts
        os.environ["LLAMA_ARG_REPACK"] = "0"
    llama = require("this benchmark")
    perplexity = llama.root / "bin" / "llama-perplexity"
    spec = ModelSpec.parse(args.model, device="cpu")
    builds = [b.strip().lower() for b in args.builds.split(",") if b.strip()]
    if "f16" not in builds:
        builds.insert(0, "f16")
    settings = tier.FidelitySettings(top_k=args.top_k, tail_samples=args.tail_samples)

    print(f"making {', '.join(builds)} (cached after the first run) ...", file=sys.stderr)
    made = {b: make_gguf(spec, parse_recipe(f"gguf-{b}"), llama=llama) for b in builds}

    text_path = work / "prompts.txt"
    text = "\n\n".join(p.text for p in load_prompt_set())
    text_path.write_text(text, encoding="utf-8")
    base_kld = work / "base.kld"
    common_rows = ["-c", str(args.ctx), "--chunks", str(args.chunks), "-t", str(args.threads)]
    common = [*common_rows, "--kl-divergence-base", str(base_kld)]
    print("llama-perplexity: the F16 file's logits ...", file=sys.stderr)
    _, llama_base_s = run_tool(
        [str(perplexity), "-m", str(made["f16"].path), "-f", str(text_path), *common]
    )
    kld = read_kld(base_kld)
    llama_rows: dict[str, Any] = {}
    for b in builds:
        print(f"llama-perplexity --kl-divergence: {b} ...", file=sys.stderr)
        output, seconds = run_tool(
            [str(perplexity), "-m", str(made[b].path), *common, "--kl-divergence"]
        )
        llama_rows[b] = {**parse_kld_output(output), "seconds": seconds}

    print("gate: the baseline's reference on the same chunks ...", file=sys.stderr)
    t0 = time.perf_counter()
    base = load_backend(spec)
    load_s = time.perf_counter() - t0
    ours = base.encode_text(text)
    bos = None if int(kld.tokens[0]) == int(ours[0]) else int(kld.tokens[0])
    check_tokens("gate's tokenizer", ours, kld, bos)
    requests = chunk_requests(kld, bos)
    pack_path = work / "chunks.pack"
    t0 = time.perf_counter()
    pack, base_rows = record_chunks(base, requests, settings, pack_path, keep_rows=True)
    record_s = time.perf_counter() - t0
    del base
    bvb = base_vs_base(kld, base_kld, base_rows)

    gate_served: dict[str, Any] = {}
    gate_llama_server: dict[str, Any] = {}
    for b in builds:
        # the build run by llama.cpp: its full log-prob rows on the same chunks, as
        # llama-perplexity computes them (uint16-coded like the base's), scored by gate
        print(f"gate: {b} as llama.cpp runs it (llama-perplexity's rows) ...", file=sys.stderr)
        rows_path = work / f"{b}.kld"
        _, dump_s = run_tool(
            [
                str(perplexity),
                "-m",
                str(made[b].path),
                "-f",
                str(text_path),
                *common_rows,
                "--kl-divergence-base",
                str(rows_path),
            ]
        )
        dumped = read_kld(rows_path)
        if not np.array_equal(dumped.tokens, kld.tokens):
            raise SystemExit(f"{rows_path} holds other tokens than {base_kld}")
        figures = score_rows_of(kld_base_rows(dumped, rows_path), pack, base_rows)
        gate_served[b] = {**figures, "llama_rows_s": dump_s, "runner": "llama-perplexity"}
        rows_path.unlink()
    if args.served:
        for b in builds:
            print(f"gate: {b} run by llama-server ...", file=sys.stderr)
            # --engine llama.cpp's server command (gate.engines.llama_cpp.served), more log-probs
            engine = dataclasses.replace(
                engine_for(llama, made[b]),
                served_logprobs=args.served_logprobs,
                scoring_api=args.scoring_api,
            )
            t0 = time.perf_counter()
            with open_engine(spec, engine, log_path=work / f"server-{b}.log") as served:
                start_s = time.perf_counter() - t0
                if b == "f16":
                    check_tokens("llama-server's /tokenize", server_tokens(served, text), kld, bos)
                gate_llama_server[b] = {
                    **score_build(served, pack, requests, settings, {}),
                    "server_start_s": start_s,
                }
    gate_dequantized: dict[str, Any] = {}
    if not args.no_dequantized:
        for b in builds:
            if b == "f16":
                continue
            print(f"gate: {b} dequantized in process ...", file=sys.stderr)
            cand = load_backend(spec, f"gguf-{b}")
            gate_dequantized[b] = score_build(cand, pack, requests, settings, base_rows)
            del cand

    return {
        "model": args.model,
        "llama_cpp": llama.build,
        "ctx": kld.n_ctx,
        "chunks": kld.n_chunk,
        "positions": kld.n_chunk * kld.per_chunk,
        "bos": bos,
        "k": pack.k,
        "m": pack.m,
        "served_logprobs": args.served_logprobs,
        "scoring_api": args.scoring_api,
        "threads": args.threads,
        "repack": not args.no_repack,
        "tensor_types": {b: made[b].written.counts for b in builds},
        "pack_bytes": pack_path.stat().st_size,
        "kld_bytes": base_kld.stat().st_size,
        "gate_base_load_s": load_s,
        "gate_record_s": record_s,
        "llama_base_s": llama_base_s,
        "base_vs_base": bvb,
        "llama": llama_rows,
        "gate_served": gate_served,
        "gate_dequantized": gate_dequantized,
        "gate_llama_server": gate_llama_server,
    }


# -- the tables ------------------------------------------------------------------------


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b else "-"


def print_tables(f: dict[str, Any]) -> None:
    """The figures as markdown tables (also from a ``--json`` file: ``--show``)."""
    print(
        f"{f['model']}, llama.cpp {f['llama_cpp']}: {f['chunks']} chunks of {f['ctx']} tokens, "
        f"{f['positions']} positions (the second half of each chunk); gate's pack k = {f['k']}, "
        f"m = {f['m']}; repacking {'on' if f.get('repack') else 'off'}\n"
    )
    print(
        "| build | llama-perplexity: mean KLD ± err | same top p | gate on the build as llama.cpp "
        "runs it: fidelity.kl_mean ± SE (exact) | CGA | gate / llama.cpp KL | target | gate on "
        "the file dequantized in PyTorch: kl_mean (exact) | llama.cpp / dequantized (gate's KL) |"
    )
    print("|" + " --- |" * 9)
    for b, lr in f["llama"].items():
        g = f["gate_served"][b]
        d = f["gate_dequantized"].get(b)
        ratio = g["kl_mean"] / lr["kld_mean"] if lr["kld_mean"] else float("nan")
        target = TARGETS.get(b)
        verdict = "-" if target is None else ("met" if abs(ratio - 1) <= target else "not met")
        goal = "" if target is None else f" (±{100 * target:.0f} %)"
        deq = "-" if d is None else f"{d['kl_mean']:.4f} ({d['kl_exact']:.4f})"
        kern = "-" if d is None else _ratio(g["kl_mean"], d["kl_mean"])
        se = g.get("kl_se") or 0.0
        print(
            f"| {b.upper()} | {lr['kld_mean']:.4f} ± {lr['kld_mean_err']:.4f} "
            f"| {100 * lr['same_top_p']:.1f} % | {g['kl_mean']:.4f} ± {se:.4f} "
            f"({g.get('kl_exact', float('nan')):.4f}) | {100 * g['cga']:.1f} % "
            f"| {ratio:.2f} | {verdict}{goal} | {deq} | {kern} |"
        )
    bvb = f["base_vs_base"]
    if bvb:
        print(
            f"\nbase vs base (exact, full rows): KL(PyTorch baseline || F16 in llama.cpp) = "
            f"{bvb['kl_mean']:.4f}, same arg-max {100 * bvb['same_top']:.1f} %"
        )
    builds = list(f["llama"])
    g_build = {b: f["gate_served"][b]["score_s"] for b in builds}
    gate_total = f["gate_record_s"] + sum(g_build.values())
    llama_total = f["llama_base_s"] + sum(f["llama"][b]["seconds"] for b in builds)
    print("\n| wall time, bytes | gate | llama-perplexity | gate / llama.cpp |")
    print("| --- | --- | --- | --- |")
    print(
        f"| the base's reference (pack / logits file) | {f['gate_record_s']:.1f} s "
        f"| {f['llama_base_s']:.1f} s | {_ratio(f['gate_record_s'], f['llama_base_s'])} |"
    )
    for b in builds:
        ls = f["llama"][b]["seconds"]
        print(
            f"| {b.upper()}: KL from the reference, given the build's rows | {g_build[b]:.1f} s "
            f"| {ls:.1f} s (its run included) | {_ratio(g_build[b], ls)} |"
        )
    print(
        f"| all of the above | {gate_total:.1f} s | {llama_total:.1f} s "
        f"| {_ratio(gate_total, llama_total)} |"
    )
    print(
        f"| bytes on disk: pack vs `.kld` | {f['pack_bytes'] / 1e6:.2f} MB "
        f"| {f['kld_bytes'] / 1e6:.1f} MB | 1 / {f['kld_bytes'] / f['pack_bytes']:.0f} |"
    )
    dump = {b: f["gate_served"][b].get("llama_rows_s") for b in builds}
    if all(v is not None for v in dump.values()):
        print(
            "\nllama.cpp's run of each build (its rows dumped by llama-perplexity, for gate): "
            + ", ".join(f"{b.upper()} {v:.1f} s" for b, v in dump.items())
        )
    for b, g in f.get("gate_llama_server", {}).items():
        low, high = g["kl_interval"] or [g["kl_mean"], g["kl_mean"]]
        print(
            f"llama-server ({b.upper()}): kl_mean {g['kl_mean']:.4f} in [{low:.4f}, {high}], "
            f"CGA {g['cga']:.3f}, {g['score_s']:.1f} s"
        )


if __name__ == "__main__":
    sys.exit(main())

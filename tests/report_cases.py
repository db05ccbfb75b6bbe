"""Results documents for the report tests, built through the real pipeline.

Per-item data is synthetic but goes through the gate's own aggregation code
(:func:`gate.metrics.fidelity.score_positions` and the fidelity tier's
``measurements``, :func:`gate.metrics.accuracy.pair_measurements`, the latency
tier's ``to_measurements``), then :func:`gate.gating.compare.compare_many` with the
shipped thresholds, :func:`gate.gating.verdict.decide` and
:func:`gate.report.results_json.build_results` — exactly what a run does.

* the *blocked* candidate loses CGA (worst in ``category:code``), has a heavy
  KL tail, flips 20 % of multiple-choice answers (mostly low-margin ones) and
  is ~7 % slower (latency warnings);
* the *approved* candidate is the baseline itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from gate.gating.compare import compare_many
from gate.gating.thresholds import load_thresholds, packaged_thresholds_path
from gate.gating.verdict import GateOutcome, decide
from gate.hw.fingerprint import Fingerprint
from gate.measurement import Measurement
from gate.metrics import fidelity as fm
from gate.metrics.accuracy import QuestionPair, pair_measurements
from gate.metrics.latency import RunLatency
from gate.provenance import ModelProvenance
from gate.report.results import Results
from gate.report.results_json import build_results
from gate.store.reference import PackPrompt
from gate.tiers.fidelity import PromptScores
from gate.tiers.fidelity import measurements as fidelity_measurements
from gate.tiers.latency import LatencyResult, LatencySettings, SweepResult, to_measurements

VOCAB = 48
CATEGORIES = ("chat", "code", "math")


@dataclass(frozen=True)
class Case:
    """A finished run: its outcome and its results."""

    outcome: GateOutcome
    results: Results

    @property
    def doc(self) -> dict[str, Any]:
        """The results JSON document of the run."""
        return self.results.to_document()


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def fidelity(noise: dict[str, float], *, prompts: int = 36, seed: int = 0) -> list[Measurement]:
    """Fidelity measurements of a candidate whose logits are the baseline's plus noise."""
    rng = np.random.default_rng(seed)
    scores = []
    for i in range(prompts):
        category = CATEGORIES[i % len(CATEGORIES)]
        length = "short" if i % 2 else "long"
        steps = 6 if length == "short" else 14
        base = _log_softmax(rng.normal(0.0, 3.0, size=(steps, VOCAB)))
        jitter = rng.normal(0.0, noise[category], size=base.shape)
        cand = _log_softmax(base + jitter) if noise[category] > 0 else base
        targets = base.argmax(axis=-1)
        order = np.argsort(-base, axis=-1)[:, :5]
        top = np.take_along_axis(base, order, axis=-1)
        tail = fm.tail_logmass(base, order)
        positions = fm.score_positions(
            fm.BaselineReference(targets, order, top, tail, full_logprobs=base), cand
        )
        meta = PackPrompt(f"p{i:03d}", category, length, 8, steps)
        scores.append(PromptScores(i, meta, positions))
    return fidelity_measurements(scores, k=5, exact=True)


def accuracy(flip_rate: float, *, questions: int = 300, seed: int = 1) -> list[Measurement]:
    """Flip measurements: low-margin questions flip three times as often as the rest."""
    rng = np.random.default_rng(seed)
    pairs = []
    for i in range(questions):
        margin = float(rng.uniform(0.0, 1.0) ** 2)
        p_flip = flip_rate * (3.0 if margin < 0.1 else 0.6)
        base_ok = bool(rng.random() < 0.75)
        flip = bool(rng.random() < p_flip)
        cand_ok = base_ok != flip
        pairs.append(
            QuestionPair(
                id=f"q{i:04d}",
                subject=("law", "medicine", "arithmetic")[i % 3],
                base_correct=base_ok,
                cand_correct=cand_ok,
                base_correct_norm=base_ok,
                cand_correct_norm=cand_ok,
                flip=flip,
                any_flip=flip,
                kl=float(rng.exponential(0.02 + flip_rate)),
                base_margin=margin,
                cand_margin=max(0.0, margin - flip_rate * float(rng.random())),
            )
        )
    return pair_measurements(pairs)


FINGERPRINT = Fingerprint(
    device="cpu",
    gpu_name=None,
    driver=None,
    cuda=None,
    torch="2.13.0+cpu",
    cpu_model="Test CPU @ 2.0GHz",
    cpu_cores=2,
    linear_classes=("Linear",),
)


def latency(slowdown: float, *, runs: int = 20, seed: int = 2) -> list[Measurement]:
    """Latency measurements of ``runs`` timed requests, ``slowdown`` times the baseline's."""
    rng = np.random.default_rng(seed)
    settings = LatencySettings(new_tokens=16, batch_sizes=(1, 4, 8), runs=runs, warmup=1)
    timed = []
    for _ in range(runs):
        ttft = slowdown * 0.020 * float(rng.lognormal(0.0, 0.03))
        itls = tuple(slowdown * 0.005 * float(x) for x in rng.lognormal(0.0, 0.03, 15))
        e2e = ttft + sum(itls)
        timed.append(RunLatency(1, 16, ttft, itls, (e2e - ttft) / 15, e2e))
    sweep = SweepResult(
        tokens_per_s={
            b: tuple(float(x) * b**0.7 * 200 / slowdown for x in rng.lognormal(0.0, 0.03, 5))
            for b in settings.batch_sizes
        },
        oom_batch=None,
    )
    result = LatencyResult(
        runs=tuple(timed),
        sweep=sweep,
        memory=(),
        parameter_bytes=1_000_000,
        fingerprint=FINGERPRINT,
        settings=settings,
    )
    return to_measurements(result)


def suite(*, noise: dict[str, float], flip_rate: float, slowdown: float) -> list[Measurement]:
    """Every tier's measurements of one build."""
    return fidelity(noise) + accuracy(flip_rate) + latency(slowdown)


BASELINE_NOISE = {c: 0.0 for c in CATEGORIES}


def make_case(candidate: list[Measurement], *, refs: tuple[str, ...] = ("fp16",)) -> Case:
    """Compare ``candidate`` with the baseline build under each ref; build the results."""
    base = suite(noise=BASELINE_NOISE, flip_rate=0.0, slowdown=1.0)
    verdicts = compare_many(
        candidate, {ref: base for ref in refs}, load_thresholds(packaged_thresholds_path())
    )
    outcome = decide(verdicts)
    results = build_results(
        outcome,
        baselines={
            ref: {"ref": ref, "model_slug": "demo", "number": n + 1, "label": ref}
            for n, ref in enumerate(refs)
        },
        candidate=ModelProvenance.from_document(
            {"model": "demo", "recipe": "quanto-int2", "slug": "demo"}
        ),
        environment={"python": "3.11", "packages": {"torch": "2.13.0+cpu"}},
    )
    return Case(outcome, results)


def blocked(refs: tuple[str, ...] = ("fp16",)) -> Case:
    """A candidate past the critical bounds in fidelity and flips, with latency warnings."""
    noise = {"chat": 0.15, "code": 1.5, "math": 0.5}
    return make_case(suite(noise=noise, flip_rate=0.08, slowdown=1.07), refs=refs)


def approved() -> Case:
    """The baseline build compared with itself."""
    return make_case(suite(noise=BASELINE_NOISE, flip_rate=0.0, slowdown=1.0))


def outside_details(markdown: str) -> list[str]:
    """The lines of a markdown report outside every ``<details>`` block (nested ones
    too): what a pull-request comment shows before anything is unfolded."""
    depth, shown = 0, []
    for line in markdown.splitlines():
        depth += line.count("<details>")
        if depth == 0:
            shown.append(line)
        depth -= line.count("</details>")
    return shown

"""GuideLLM, the load generator of the load tier: one sweep against one served build.

GuideLLM (PyPI ``guidellm``, pinned at :data:`GUIDELLM_VERSION`) lives in its own
environment, installed once and cached by version by ``bash
scripts/setup_tool_env.sh guidellm`` (``$GATE_TOOL_CACHE``, default
``~/.cache/gate-tools/guidellm-<version>``); ``gate`` runs its command line and
reads its results file, nothing else.

One benchmark is one GuideLLM scenario (:func:`scenario`, the file ``guidellm
run --scenario`` takes): the OpenAI HTTP backend on ``/v1/completions``
against the server, the ``constant`` (or ``poisson``) profile at the offered
rates, each rate for ``max_duration`` seconds, synthetic prompts of
``prompt_tokens`` tokens asking for ``output_tokens`` tokens (GuideLLM's
``synthetic_text`` data, made with the model's own tokenizer, seeded), the
per-request SLO for GuideLLM's own goodput (``ttft_ms``, ``tpot_ms``), and the
results as JSON. :func:`run_batch` runs a list of them in order in ONE
GuideLLM process (:mod:`gate.loadgen.guidellm_batch`, run by the tool env's
Python through GuideLLM's own entry point), so GuideLLM's start-up is paid
once. :func:`read_results` turns each results file (GuideLLM's report,
``metadata.version`` 2) into one :class:`~gate.metrics.load.RatePoint` per rate.

Failures are one line each: GuideLLM not installed -> :class:`ConfigError`
(exit 4, with the install command); GuideLLM exiting non-zero, timing out or
writing no results -> :class:`ModelLoadError` (exit 3, with its last error line).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gate import progress
from gate.errors import ConfigError, DataError, ModelLoadError
from gate.metrics.load import Latencies, RatePoint, Slo

#: The GuideLLM release the load tier speaks to (its CLI and results schema).
GUIDELLM_VERSION = "0.8.1"
#: The report schema version of that release's results file.
REPORT_VERSION = 2
#: Install command printed when GuideLLM is missing.
INSTALL_HINT = "install it with: bash scripts/setup_tool_env.sh guidellm"


def default_executable(environ: Mapping[str, str] | None = None) -> Path:
    """Where ``scripts/setup_tool_env.sh guidellm`` installs GuideLLM's command."""
    env = os.environ if environ is None else environ
    cache = env.get("GATE_TOOL_CACHE") or str(Path.home() / ".cache" / "gate-tools")
    return Path(cache) / f"guidellm-{GUIDELLM_VERSION}" / "bin" / "guidellm"


def find_executable(configured: str = "", environ: Mapping[str, str] | None = None) -> Path:
    """The ``guidellm`` command: ``configured``, else ``$GATE_GUIDELLM``, else the cached one."""
    env = os.environ if environ is None else environ
    text = configured or env.get("GATE_GUIDELLM", "")
    path = Path(text).expanduser() if text else default_executable(env)
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise ConfigError(f"GuideLLM {GUIDELLM_VERSION} was not found at {path}", INSTALL_HINT)
    return path


@dataclass(frozen=True)
class Workload:
    """What one sweep sends: the same for both builds."""

    rates: tuple[float, ...]
    duration_s: float
    prompt_tokens: int
    output_tokens: int
    profile: str = "constant"
    seed: int = 0


def _target(base_url: str) -> str:
    """GuideLLM's target: the server root (it adds ``/v1/completions`` itself)."""
    url = base_url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


def scenario(
    *,
    base_url: str,
    model: str,
    tokenizer: str,
    workload: Workload,
    slo: Slo,
    results: Path,
) -> dict[str, Any]:
    """The GuideLLM scenario (its ``--scenario`` JSON) of one sweep."""
    return {
        "spec": {
            "backend": {
                "kind": "openai_http",
                "target": _target(base_url),
                "model": model,
                "request_format": "/v1/completions",
            },
            "profile": {"kind": workload.profile, "rate": list(workload.rates)},
            "constraints": [{"kind": "max_duration", "seconds": workload.duration_s}],
            "tokenizer": {"kind": "huggingface_auto", "model": tokenizer},
            "data": [
                {
                    "kind": "synthetic_text",
                    "prompt_tokens": workload.prompt_tokens,
                    "output_tokens": workload.output_tokens,
                }
            ],
            "seed": {"kind": "static", "value": workload.seed},
            "outputs": [{"kind": "json", "path": str(results)}],
            "metrics": {
                "kind": "generative",
                "slo": {"ttft_ms": slo.ttft_p95_ms, "tpot_ms": slo.itl_p95_ms},
            },
        }
    }


def _last_error(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in reversed(lines):
        if "Error" in line or "error" in line:
            return line[:300]
    return lines[-1][:300] if lines else "no output"


#: The script :func:`run_batch` runs with GuideLLM's interpreter.
BATCH_SCRIPT = Path(__file__).with_name("guidellm_batch.py")


@dataclass(frozen=True)
class Benchmark:
    """One scenario of a batch: the server at ``base_url`` at ``rates``; files ``name.*``."""

    name: str
    base_url: str
    model: str
    rates: tuple[float, ...]


def interpreter(executable: Path) -> Path:
    """The Python of GuideLLM's environment: its command's ``#!`` line, else ``python``
    beside it (one-line :class:`ConfigError` when neither exists)."""
    try:
        first = executable.read_text(errors="replace").split("\n", 1)[0]
    except OSError:
        first = ""
    candidates = [Path(first[2:].strip().split(" ")[0])] if first.startswith("#!") else []
    candidates.append(executable.with_name("python"))
    for path in candidates:
        if path.name.startswith("python") and path.is_file() and os.access(path, os.X_OK):
            return path
    raise ConfigError(f"no Python interpreter found for GuideLLM at {executable}", INSTALL_HINT)


def batch_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """GuideLLM's environment: one worker process, ``forkserver`` workers, offline.

    One worker: the load is a few requests/s and each worker costs seconds to
    start on a small machine; ``forkserver``: the workers are forked from a
    process that has GuideLLM imported (:mod:`gate.loadgen.guidellm_batch`).
    Values already set in ``environ`` win.
    """
    env = dict(os.environ if environ is None else environ)
    env.setdefault("GUIDELLM__MAX_WORKER_PROCESSES", "1")
    env.setdefault("GUIDELLM__MP_CONTEXT_TYPE", "forkserver")
    env["HF_HUB_OFFLINE"] = "1"
    return env


def run_batch(
    executable: Path,
    benchmarks: Sequence[Benchmark],
    *,
    tokenizer: str,
    workload: Workload,
    slo: Slo,
    workdir: Path,
    timeout_s: float,
) -> list[tuple[list[RatePoint], float]]:
    """Run ``benchmarks`` in order in one GuideLLM process; per benchmark its points by
    offered rate and its wall seconds.

    ``workload.rates`` is ignored (each benchmark names its own). Files in
    ``workdir``: ``NAME.scenario.json`` and ``NAME.json`` per benchmark, and the
    batch's ``batch.json`` (the manifest), ``batch.log`` and ``batch.out``.
    ``timeout_s`` bounds each benchmark (the batch gets ``len x timeout_s``).
    """
    workdir.mkdir(parents=True, exist_ok=True)
    manifest = []
    for bench in benchmarks:
        results = workdir / f"{bench.name}.json"
        results.unlink(missing_ok=True)
        spec = scenario(
            base_url=bench.base_url,
            model=bench.model,
            tokenizer=tokenizer,
            workload=dataclasses.replace(workload, rates=bench.rates),
            slo=slo,
            results=results,
        )
        scenario_file = workdir / f"{bench.name}.scenario.json"
        scenario_file.write_text(json.dumps(spec, indent=1))
        manifest.append({"name": bench.name, "scenario": str(scenario_file)})
    listing = workdir / "batch.json"
    listing.write_text(json.dumps(manifest, indent=1))
    # -I: isolated, so the script's own directory (which holds this module, named
    # like GuideLLM's package) is not on the path
    argv = [str(interpreter(executable)), "-I", str(BATCH_SCRIPT), str(listing)]
    log, out = workdir / "batch.log", workdir / "batch.out"
    with log.open("w") as err, out.open("w") as lines:
        returncode = _run_watched(
            subprocess.Popen(argv, stdout=lines, stderr=err, env=batch_env(), cwd=workdir),
            out,
            len(benchmarks),
            timeout_s * max(1, len(benchmarks)),
        )
    if returncode is None:
        raise ModelLoadError(
            f"GuideLLM did not finish {len(benchmarks)} benchmarks within"
            f" {len(benchmarks)} x {timeout_s:g} s (log: {log})",
            "raise [tiers.load] sweep_timeout_s or shorten the sweep",
        )
    walls = _walls(out.read_text())
    missing = [b.name for b in benchmarks if b.name not in walls]
    if returncode != 0 or missing:
        where = f" at {missing[0]}" if missing else ""
        raise ModelLoadError(
            f"GuideLLM failed{where} (exit {returncode}): {_last_error(log.read_text())}",
            f"its log: {log}",
        )
    return [(read_results(workdir / f"{b.name}.json"), walls[b.name]) for b in benchmarks]


#: Seconds between two looks at the batch's progress lines while it runs.
POLL_S = 1.0


def _run_watched(
    process: subprocess.Popen[bytes], out: Path, count: int, timeout_s: float
) -> int | None:
    """Wait for the batch ``process``, showing its finished benchmarks (the progress lines
    it writes to ``out``) as done/total; its exit code, or ``None`` past ``timeout_s``
    (the process killed). Any exception here (an interrupt) kills the process too."""
    deadline = time.monotonic() + timeout_s
    try:
        with progress.task("load: GuideLLM benchmarks", total=count) as step:
            seen = 0
            while True:
                try:
                    code = process.wait(timeout=POLL_S)
                except subprocess.TimeoutExpired:
                    code = None
                finished = len(_walls(out.read_text()))
                if finished > seen:
                    step(finished - seen)
                    seen = finished
                if code is not None:
                    return code
                if time.monotonic() > deadline:
                    process.kill()
                    process.wait()
                    return None
    except BaseException:
        if process.poll() is None:
            process.kill()
            process.wait()
        raise


def _walls(text: str) -> dict[str, float]:
    """The batch script's progress lines (``{"name": ..., "wall_s": ...}``) by name."""
    found: dict[str, float] = {}
    for line in text.splitlines():
        try:
            row = json.loads(line)
            found[str(row["name"])] = float(row["wall_s"])
        except (ValueError, TypeError, KeyError):
            continue  # GuideLLM's own output
    return found


def _stat(metrics: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    entry = metrics[key]
    found: Mapping[str, Any] = entry.get("successful", entry)
    return found


#: A stream was read in one burst when its mean inter-token latency is below this (ms;
#: 1,000 tokens/s in one stream) and all its tokens after the first arrived within
#: :data:`BURST_SHARE` of the request's latency: GuideLLM's client was not scheduled while
#: the tokens arrived, so its first token's time holds the whole decode and its ITL the
#: client's own reading (gate.metrics.load, "Latencies observed request by request").
#: Seen here: 0.02-0.13 ms with the first token at 96-99 % of the request's latency, beside
#: the same server's 3-6 ms.
BURST_ITL_MS = 1.0
#: The largest share of a burst-read request's latency its tokens after the first span.
BURST_SHARE = 0.1

_INFINITE = Latencies(math.inf, math.inf, math.inf)


@dataclass(frozen=True)
class _Observed:
    """A benchmark's latencies from its per-request records, burst-read requests left out."""

    ttft_ms: Latencies
    itl_ms: Latencies
    e2e_s: Latencies
    unobserved: int


def read_in_one_burst(request: Mapping[str, Any]) -> bool:
    """Whether a request's token stream was read in one burst: mean ITL under
    :data:`BURST_ITL_MS` and the span ``(n - 1) ITL`` of its later tokens under
    :data:`BURST_SHARE` of its latency (a fast server streams at under 1 ms a token too,
    but then its tokens take most of the request's time, not a sliver at its end)."""
    itl = request.get("inter_token_latency_ms")
    if itl is None or float(itl) >= BURST_ITL_MS:
        return False
    span_ms = float(itl) * (float(request["output_tokens"]) - 1.0)
    return span_ms < BURST_SHARE * 1000.0 * float(request["request_latency"])


def _overlaps(start: float | None, end: float | None, window: tuple[float, float]) -> bool:
    """GuideLLM's window test (``get_within_range``, not closed): an event ``[start, end]``
    counts when it overlaps the measured window; no end: it does not; no start: it is the
    instant ``end``."""
    if end is None:
        return False
    first = start if start is not None else end
    return end >= window[0] and first <= window[1]


def _first_token(request: Mapping[str, Any]) -> float | None:
    value = request["info"]["timings"].get("first_token_iteration")
    return None if value is None else float(value)


def observed_latencies(benchmark: Mapping[str, Any]) -> _Observed:
    """TTFT/ITL/end-to-end percentiles of the benchmark's successful requests as GuideLLM
    takes them, requests read in one burst left out of TTFT and ITL (they stay in the
    end-to-end latency and every count).

    GuideLLM keeps the record of every completed request but measures over its window
    ``[measure_start_time, measure_end_time]``: the end-to-end latency and the counts over
    the requests whose ``[start, end]`` overlaps it, TTFT over those whose ``[start, first
    token]`` does, ITL (weighted by each request's ``n - 1`` later tokens) over those whose
    ``[first token, end]`` does. The same selections here reproduce its figures exactly
    where no request was read in one burst (tests/test_load_tier.py). A file whose records
    do not account for its successful count (``sample_size`` set, which gate's scenarios
    never do) is a ValueError; a malformed one a KeyError/TypeError."""
    completed = int(benchmark["metrics"]["request_totals"]["successful"])
    timing = benchmark["scheduler_metrics"]
    window = (float(timing["measure_start_time"]), float(timing["measure_end_time"]))
    records = list(benchmark["requests"]["successful"])
    requests = [
        r for r in records if _overlaps(r["request_start_time"], r["request_end_time"], window)
    ]
    if len(requests) != completed:
        raise ValueError(
            f"{len(requests)} request records in the measured window for {completed}"
            " successful requests (sampled)"
        )
    if completed == 0:  # nothing finished at this rate: no latency is acceptable
        return _Observed(_INFINITE, _INFINITE, _INFINITE, 0)
    bursts = [r for r in requests if read_in_one_burst(r)]
    kept = [r for r in records if not read_in_one_burst(r)]
    ttft = [
        (float(r["time_to_first_token_ms"]), 1.0)
        for r in kept
        if _overlaps(r["request_start_time"], _first_token(r), window)
    ]
    itl = [
        (float(r["inter_token_latency_ms"]), float(r["output_tokens"]) - 1.0)
        for r in kept
        if r.get("inter_token_latency_ms") is not None
        and _overlaps(_first_token(r), r["request_end_time"], window)
    ]
    e2e = Latencies.of([(float(r["request_latency"]), 1.0) for r in requests])
    if len(bursts) == completed:  # every request read in one burst (RatePoint.timed)
        return _Observed(_INFINITE, _INFINITE, e2e, completed)
    return _Observed(Latencies.of(ttft), Latencies.of(itl), e2e, len(bursts))


def _optional(metrics: Mapping[str, Any], key: str) -> float | None:
    value = metrics.get(key)
    if value is None:
        return None
    if isinstance(value, Mapping):
        value = _stat(metrics, key).get("mean")
    return None if value is None else float(value)


def point_from(benchmark: Mapping[str, Any]) -> RatePoint:
    """One GuideLLM benchmark (one rate) of a results file as a :class:`RatePoint`: rates and
    counts from GuideLLM's metrics, latencies from its per-request records
    (:func:`observed_latencies`)."""
    rate = benchmark["config"]["strategy"]["rate"]
    metrics = benchmark["metrics"]
    totals = metrics["request_totals"]
    completed = int(totals["successful"])
    seen = observed_latencies(benchmark)
    return RatePoint(
        offered_rate=float(rate),
        achieved_rate=float(_stat(metrics, "requests_per_second")["mean"]),
        ttft_ms=seen.ttft_ms,
        itl_ms=seen.itl_ms,
        e2e_s=seen.e2e_s,
        unobserved=seen.unobserved,
        output_tokens_per_s=float(_stat(metrics, "output_tokens_per_second")["mean"]),
        completed=completed,
        incomplete=int(totals.get("incomplete", 0)),
        errored=int(totals.get("errored", 0)),
        conforming_rate=_optional(metrics, "request_goodput"),
        attainment=_optional(metrics, "slo_attainment"),
    )


def read_results(path: Path) -> list[RatePoint]:
    """A GuideLLM results file -> its points, by offered rate (DataError when malformed)."""
    try:
        report = json.loads(path.read_text())
        version = report["metadata"]["version"]
        if version != REPORT_VERSION:
            raise DataError(
                f"{path}: GuideLLM report version {version!r}, expected {REPORT_VERSION}",
                f"use GuideLLM {GUIDELLM_VERSION} ({INSTALL_HINT})",
            )
        points = [point_from(b) for b in report["benchmarks"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DataError(
            f"{path}: not a GuideLLM {GUIDELLM_VERSION} results file ({type(exc).__name__}: {exc})",
            INSTALL_HINT,
        ) from None
    if not points:
        raise DataError(f"{path}: GuideLLM measured no rate", "check its log beside the file")
    return sorted(points, key=lambda p: p.offered_rate)


def version_of(executable: Path) -> str:
    """The installed GuideLLM's version (``guidellm --version``)."""
    done = subprocess.run(
        [str(executable), "--version"], capture_output=True, text=True, timeout=120, check=False
    )
    return done.stdout.strip().rsplit(" ", 1)[-1] if done.returncode == 0 else "unknown"


__all__ = [
    "BATCH_SCRIPT",
    "BURST_ITL_MS",
    "BURST_SHARE",
    "GUIDELLM_VERSION",
    "INSTALL_HINT",
    "Benchmark",
    "Workload",
    "batch_env",
    "default_executable",
    "find_executable",
    "interpreter",
    "observed_latencies",
    "point_from",
    "read_in_one_burst",
    "read_results",
    "run_batch",
    "scenario",
    "version_of",
]

"""Several GuideLLM benchmarks in one GuideLLM process: run by GuideLLM's own interpreter.

``gate`` never imports this module: :func:`gate.loadgen.guidellm.run_batch`
runs it as a script with the Python of GuideLLM's cached tool environment,
``python guidellm_batch.py MANIFEST``. MANIFEST is a JSON list of
``{"name": ..., "scenario": ...}``; each scenario (GuideLLM's own ``--scenario``
file, :func:`gate.loadgen.guidellm.scenario`) is run in order through
GuideLLM's Python entry point, the one its ``guidellm run`` command calls,
and writes its results file. After each, one JSON line ``{"name": ...,
"wall_s": ...}`` goes to stdout.

Why: on a small machine ``guidellm run`` spends tens of seconds starting
(importing GuideLLM, loading the tokenizer) before its first request; one
process pays that once for the whole plan. GuideLLM's worker processes are
started with ``forkserver`` (set by the caller, ``GUIDELLM__MP_CONTEXT_TYPE``),
whose server is forked from this module with GuideLLM imported, so each rate's
workers start without importing it again. The imports stay at module level
for that reason.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

import guidellm.entrypoints as entry
from guidellm.schemas.benchmark import BenchmarkScenario
from guidellm.utils.typing import BLANK


def run_manifest(manifest: Path) -> None:
    """Run every scenario of ``manifest`` in order, one JSON line each on stdout."""
    for job in json.loads(manifest.read_text()):
        started = time.perf_counter()
        args = BenchmarkScenario.create(
            spec={}, benchmarks=BLANK, metadata={"labels": {}}, scenario=job["scenario"]
        )
        asyncio.run(entry.benchmark_generative_text(args=args, progress=False, console=None))
        wall = time.perf_counter() - started
        print(json.dumps({"name": job["name"], "wall_s": wall}), flush=True)


if __name__ == "__main__":
    run_manifest(Path(sys.argv[1]))

#!/usr/bin/env bash
# Benchmarks (pytest-benchmark): fidelity scoring vs raw forward and vs the
# per-token loop, pack bytes per token, backend and latency-tier overheads.
# Ratios are measured within one run; figures go to out/benchmarks.json.
set -euo pipefail
cd "$(dirname "$0")/.."
VPY=$(bash scripts/setup.sh dev | tail -n 1)
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false MPLBACKEND=Agg
mkdir -p out
"$VPY" -m pytest tests/benchmarks/bench_*.py -q -s --benchmark-only \
  --benchmark-json=out/benchmarks.json "$@"

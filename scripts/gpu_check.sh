#!/usr/bin/env bash
# The GPU check: the tests marked `gpu` and the scoring benchmark, on this machine.
#
#   bash scripts/gpu_check.sh              # tests + benchmark (demo and SmolLM2, CPU and GPU)
#   bash scripts/gpu_check.sh --tests      # the gpu tests only
#   bash scripts/gpu_check.sh --bench      # the benchmark only
#
# Without CUDA the gpu tests skip, each with the reason, and the benchmark measures the
# CPU only. Writes out/gpu-check/: pytest's JUnit XML (gpu-tests.xml), the benchmark's
# JSON (bench_scoring.json) and its log; exits with pytest's status (else the
# benchmark's). docs/gpu.md says how to read the figures.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PY:-.venv/bin/python}"
OUT="${GATE_GPU_CHECK_OUT:-out/gpu-check}"
MODE="${1:-all}"
mkdir -p "$OUT"
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1

"$PY" - <<'PY'
import torch
if torch.cuda.is_available():
    names = ", ".join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
    print(f"gpu_check: torch {torch.__version__}, CUDA {torch.version.cuda}: {names}")
else:
    print(f"gpu_check: torch {torch.__version__} sees no CUDA GPU: the gpu tests skip")
PY

status=0
if [ "$MODE" = all ] || [ "$MODE" = --tests ]; then
  "$PY" -m pytest tests/test_gpu.py -m gpu -q -rs -p no:randomly --benchmark-disable \
    --junitxml "$OUT/gpu-tests.xml" || status=$?
fi
if [ "$MODE" = all ] || [ "$MODE" = --bench ]; then
  "$PY" scripts/bench_scoring.py --out "$OUT/bench_scoring.json" 2>&1 | tee "$OUT/bench_scoring.log" \
    || { [ "$status" = 0 ] && status=1; }
fi
exit "$status"

#!/usr/bin/env bash
# The project's own checks on a fresh machine: set up (dev extras), lint,
# type-check, lint the workflows, then the test suite (CPU only). Extra
# arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
VPY=$(bash scripts/setup.sh dev | tail -n 1)
BIN=$(dirname "$VPY")
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false MPLBACKEND=Agg

echo "== ruff"
"$BIN/ruff" check gate tests scripts
"$BIN/ruff" format --check gate tests scripts
echo "== mypy"
"$BIN/mypy" gate
echo "== actionlint"
"$BIN/actionlint" .github/workflows/*.yml
echo "== pytest"
"$VPY" -m pytest tests -q -p no:randomly --benchmark-disable "$@"

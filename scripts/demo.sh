#!/usr/bin/env bash
# The main job on the embedded demo: set up, then gate a panel of compressed
# builds of the committed demo model against its committed baseline.
# Extra arguments go to `gate demo` (see `gate demo --help`).
set -euo pipefail
cd "$(dirname "$0")/.."
VPY=$(bash scripts/setup.sh | tail -n 1)
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
unset PYTHONDONTWRITEBYTECODE  # imports of torch and transformers from bytecode caches (scripts/test.sh)
exec "$VPY" -m gate.cli demo "$@"

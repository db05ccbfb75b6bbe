#!/usr/bin/env bash
# The project's own checks on a fresh machine: set up (dev extras), lint,
# type-check, lint the workflows, then the test suite (CPU only). Extra
# arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
VPY=$(bash scripts/setup.sh dev | tail -n 1)
export PATH="$(dirname "$VPY"):$PATH"
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false MPLBACKEND=Agg

# Headless Chromium renders the HTML report in one test (Debian's package).
if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
  SUDO=$([ "$(id -u)" = 0 ] || echo sudo)
  echo "== installing chromium (HTML report rendering test)"
  { $SUDO apt-get update -qq && $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } \
    || echo "chromium could not be installed: the browser test will be skipped"
fi

echo "== ruff"
"$VPY" -m ruff check gate suites tests scripts examples
"$VPY" -m ruff format --check gate suites tests scripts examples
echo "== mypy"
"$VPY" -m mypy gate
echo "== actionlint"
actionlint .github/workflows/*.yml
echo "== pytest"
"$VPY" -m pytest tests -q -p no:randomly --benchmark-disable --durations=30 "$@"

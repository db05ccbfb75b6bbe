#!/usr/bin/env bash
# Installs gate the way a team does (non-editable, into a fresh venv outside the
# repository) under one Python, then uses it from an empty git repository:
# `gate --version`, `gate init --model demo` (a second one must exit 4 and change
# nothing), `gate run --config gate.toml --dry-run`, the package compiled by that
# Python; with torch available also a real fidelity run of the demo model.
#
#   bash scripts/check_install.sh python3.12              # from PyPI: torch and every dependency
#   bash scripts/check_install.sh python3.12 --no-torch   # every dependency but torch (and
#                                                         # accelerate, which needs it)
#   GATE_INSTALL_ARGS="--extra-index-url https://download.pytorch.org/whl/cpu" bash ...
#
# The distribution supports CPython 3.10-3.13 (pyproject's requires-python); CI
# runs this for each of them (.github/workflows/ci.yml, job "install"). Exit 0
# when every check held; the first failure is named on stderr.
set -euo pipefail
PYTHON=${1:?usage: bash scripts/check_install.sh PYTHON [--no-torch]}
MODE=${2:-full}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gate-install.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
export PIP_DISABLE_PIP_VERSION_CHECK=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
say() { printf '[check_install] %s\n' "$*" >&2; }
fail() { say "FAILED: $*"; exit 1; }
read -ra PIP_EXTRA <<< "${GATE_INSTALL_ARGS:-}"

say "$("$PYTHON" -c 'import sys; print("Python", sys.version.split()[0])'), mode $MODE"
"$PYTHON" -m venv "$WORK/venv"
VPY="$WORK/venv/bin/python"
"$VPY" -m pip install -q --upgrade pip setuptools wheel
say "building the wheel from $ROOT"
"$VPY" -m pip wheel -q --no-deps -w "$WORK/dist" "$ROOT" 2>/dev/null
WHEEL=$(ls "$WORK"/dist/llm_compression_gate-*.whl)
if [ "$MODE" = --no-torch ]; then
  "$VPY" -m pip install -q --no-deps "$WHEEL"
  # the dependencies as the wheel's metadata names them, less torch and accelerate
  mapfile -t DEPS < <("$VPY" -c '
from importlib import metadata
for req in metadata.requires("llm-compression-gate") or []:
    name = req.split(";")[0]
    if "extra ==" in req or name.split(">")[0].split("=")[0].strip() in ("torch", "accelerate"):
        continue
    print(req)')
  "$VPY" -m pip install -q "${PIP_EXTRA[@]}" "${DEPS[@]}"
else
  "$VPY" -m pip install -q "${PIP_EXTRA[@]}" "$WHEEL"
fi
GATE="$WORK/venv/bin/gate"
cd "$WORK"  # away from the clone: its gate/ would shadow the installed one
where=$("$VPY" -c 'import gate; print(gate.__file__)')
case "$where" in "$WORK"/*) ;; *) fail "gate imports from $where, not from the new venv" ;; esac
"$GATE" --version
"$VPY" -m compileall -q "$(dirname "$where")" >/dev/null || fail "compileall of the installed package"

mkdir "$WORK/repo" && cd "$WORK/repo" && git init -q
"$GATE" init --model demo >/dev/null || fail "gate init --model demo"
before=$(find . -path ./.git -prune -o -type f -print0 | sort -z | xargs -0 sha256sum)
status=0
"$GATE" init --model demo 2>/dev/null || status=$?
[ "$status" -eq 4 ] || fail "a second gate init exited $status, not 4"
after=$(find . -path ./.git -prune -o -type f -print0 | sort -z | xargs -0 sha256sum)
[ "$before" = "$after" ] || fail "a second gate init changed files"
"$GATE" run --config gate.toml --dry-run >/dev/null || fail "gate run --config gate.toml --dry-run"
if [ "$MODE" != --no-torch ]; then
  status=0
  "$GATE" run --config gate.toml --tiers fidelity --json out/results.json || status=$?
  [ "$status" -eq 0 ] || fail "the control candidate's fidelity run exited $status, not 0"
fi
say "OK: $("$VPY" -c 'import platform; print(platform.python_version())') ($MODE)"

#!/usr/bin/env bash
# Prints the path of uv at the version the project pins, installing it first
# into its own cached environment ($GATE_TOOL_CACHE, default
# ~/.cache/gate-tools/uv-VERSION) when it is not there yet. scripts/lock.sh
# resolves the lock with it and scripts/setup.sh installs the lock with it.
set -euo pipefail

UV_VERSION=0.13.9
TOOLS=${GATE_TOOL_CACHE:-$HOME/.cache/gate-tools}
UV_VENV="$TOOLS/uv-$UV_VERSION"

if [ ! -x "$UV_VENV/bin/uv" ]; then
  printf '[uv] installing uv %s into %s\n' "$UV_VERSION" "$UV_VENV" >&2
  rm -rf "$UV_VENV"
  python3 -m venv "$UV_VENV"
  PIP_DISABLE_PIP_VERSION_CHECK=1 "$UV_VENV/bin/python" -m pip install -q "uv==$UV_VERSION" >&2
fi
echo "$UV_VENV/bin/uv"

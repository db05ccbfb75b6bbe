#!/usr/bin/env bash
# The project's own checks on a fresh machine: set up from the lock, lint,
# type-check, lint the workflows, then the test suite (CPU only).
#
#   bash scripts/test.sh             # the full run (engine tests included), from requirements/lock.txt
#   bash scripts/test.sh --quick     # pull requests: -m "not engine and not slow"
#   GATE_TEST_WORKERS=1 bash scripts/test.sh   # one pytest process instead of one per core
#   bash scripts/test.sh --latest    # the upgrade canary: the newest releases instead of the lock
#   bash scripts/test.sh --latest --quick   # the canary on the quick run
#
# --latest resolves the newest release of every dependency (torch stays at
# requirements/constraints.txt), installs it into .venv-latest, runs the same
# checks and writes out/canary/report.md: which versions differ from the lock
# and what passed or failed (junit in out/canary/junit.xml). The lock itself
# is never changed by it: updating it is `bash scripts/lock.sh
# --upgrade-package NAME`, a reviewed change. Other arguments go to pytest.
#
# pytest runs one worker per core (pytest-xdist, --dist loadgroup): the tests
# that use the real serving engine share the session's servers and run on one
# worker; every other test file runs whole on one worker (tests/conftest.py). The
# groups go out longest first, in the order tests/xdist_groups.py sorts them
# (--no-loadscope-reorder: xdist would otherwise sort them by their number of tests).
set -euo pipefail
cd "$(dirname "$0")/.."

QUICK=0
LATEST=0
PYTEST_ARGS=()
for arg in "$@"; do
  case "$arg" in
    --quick) QUICK=1 ;;
    --latest) LATEST=1 ;;
    *) PYTEST_ARGS+=("$arg") ;;
  esac
done

CANARY=out/canary
if [ "$LATEST" = 1 ]; then
  mkdir -p "$CANARY"
  rm -f "$CANARY/lock.txt" "$CANARY/torch.txt"
  GATE_LOCK_DIR="$CANARY" bash scripts/lock.sh --upgrade
  export GATE_LOCK_DIR="$CANARY" GATE_VENV=.venv-latest
  PYTEST_ARGS+=(--junitxml "$CANARY/junit.xml")
fi
VPY=$(bash scripts/setup.sh | tail -n 1)
export PATH="$(dirname "$VPY"):$PATH"
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false MPLBACKEND=Agg
# Bytecode caches are written even where the environment turns them off
# (PYTHONDONTWRITEBYTECODE): the suite starts hundreds of interpreters that import
# torch and transformers, and pytest's workers rewrite every test module. Compiled
# from source in each process, loading the demo model took 15 s instead of 7 s and
# collecting the suite 27 s instead of 10 s.
unset PYTHONDONTWRITEBYTECODE
[ "$QUICK" = 1 ] && PYTEST_ARGS+=(-m "not engine and not slow")

# Debian packages the run uses when they can be had: headless Chromium renders the
# HTML report in one test; ccache, which torch puts in front of the compiler when it
# is on PATH, lets a fresh checkout reuse the native kernels' objects that an earlier
# one compiled from the same sources, headers and compiler (about a minute).
WANTED=()
command -v ccache >/dev/null 2>&1 || WANTED+=(ccache)
[ "$QUICK" = 1 ] || command -v chromium >/dev/null 2>&1 || WANTED+=(chromium)
if [ "${#WANTED[@]}" -gt 0 ] && command -v apt-get >/dev/null 2>&1; then
  SUDO=$([ "$(id -u)" = 0 ] || echo sudo)
  echo "== installing ${WANTED[*]} (Debian packages)"
  { $SUDO apt-get update -qq && $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${WANTED[@]}" >/dev/null; } \
    || echo "${WANTED[*]} could not be installed: the browser test is skipped without chromium, the native kernels compile without ccache"
fi
# ccache's objects live beside the other caches; paths under the checkout are
# hashed relative to it, so that another clone of the same sources hits.
export CCACHE_DIR="${XDG_CACHE_HOME:-$HOME/.cache}/gate-ccache" CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1

status=0
step() {  # step NAME COMMAND...: run one check; the canary goes on after a failure
  local name=$1 started=$SECONDS
  echo "== $name"
  shift
  if [ "$LATEST" = 1 ]; then
    "$@" 2>&1 | tee -a "$CANARY/checks.log" || { status=1; echo "$name: FAILED" >>"$CANARY/failed.txt"; }
  else
    "$@"
  fi
  echo "== $name: $((SECONDS - started)) s (${SECONDS} s since the start)"
}
[ "$LATEST" = 1 ] && rm -f "$CANARY/checks.log" "$CANARY/failed.txt"
echo "== set-up: ${SECONDS} s"
# The native kernels the tests load build beside the linters (scripts/build_extensions.py:
# about a minute in a fresh venv, 20 s of imports when ccache has the objects). Not
# beside the tests: a compiler on both cores slows the interpreter starts that
# tests/test_signals.py times.
EXTENSIONS_LOG=$(mktemp)
"$VPY" scripts/build_extensions.py >"$EXTENSIONS_LOG" 2>&1 &
EXTENSIONS_PID=$!
# GuideLLM, the load tier's load generator, in its own cached environment (the
# tests marked goodput use it; installed once per version, reused afterwards).
GUIDELLM_LOG=$(mktemp)
GUIDELLM_PID=
if [ "$QUICK" = 0 ]; then
  bash scripts/setup_tool_env.sh guidellm >"$GUIDELLM_LOG" 2>&1 &
  GUIDELLM_PID=$!
fi
# llama.cpp (the engine of the gguf-* recipes and of served .gguf files), built once
# per version into the engine cache (scripts/setup_llama_cpp.sh; about 5 min on 2 cores
# the first time, reused afterwards); the tests marked engine that need it find it there.
LLAMA_CPP_LOG=$(mktemp)
LLAMA_CPP_PID=
if [ "$QUICK" = 0 ]; then
  PYTHON="$VPY" bash scripts/setup_engine.sh llama.cpp >"$LLAMA_CPP_LOG" 2>&1 &
  LLAMA_CPP_PID=$!
fi
step ruff "$VPY" -m ruff check gate suites tests scripts examples
step ruff-format "$VPY" -m ruff format --check gate suites tests scripts examples
# mypy's incremental cache lives on disk beside the engine caches, one per mypy release:
# a fresh checkout re-checks only what changed (mypy compares the sources' hashes).
MYPY_VERSION=$("$VPY" -c "import mypy.version; print(mypy.version.__version__)")
export MYPY_CACHE_DIR="${XDG_CACHE_HOME:-$HOME/.cache}/gate-mypy/$MYPY_VERSION"
step mypy "$VPY" -m mypy gate
step actionlint actionlint .github/workflows/*.yml
if ! wait "$EXTENSIONS_PID"; then
  echo "scripts/build_extensions.py failed (the tests that need it will build it or fail):"
  cat "$EXTENSIONS_LOG"
fi
rm -f "$EXTENSIONS_LOG"
if [ -n "$GUIDELLM_PID" ] && ! wait "$GUIDELLM_PID"; then
  echo "scripts/setup_tool_env.sh guidellm failed (the goodput tests will try it again or fail):"
  cat "$GUIDELLM_LOG"
fi
rm -f "$GUIDELLM_LOG"
if [ -n "$LLAMA_CPP_PID" ] && ! wait "$LLAMA_CPP_PID"; then
  echo "bash scripts/setup_engine.sh llama.cpp failed (the llama.cpp tests will try it again or fail):"
  cat "$LLAMA_CPP_LOG"
fi
rm -f "$LLAMA_CPP_LOG"
WORKERS=${GATE_TEST_WORKERS:-$(nproc)}
XDIST=()
[ "$WORKERS" -gt 1 ] && XDIST=(-n "$WORKERS" --dist loadgroup --no-loadscope-reorder)
step pytest "$VPY" -m pytest tests -q -p no:randomly --benchmark-disable --durations=30 \
  "${XDIST[@]}" "${PYTEST_ARGS[@]}"

if [ "$LATEST" = 1 ]; then
  "$VPY" scripts/canary_report.py requirements/lock.txt "$CANARY/lock.txt" \
    --junit "$CANARY/junit.xml" --failed "$CANARY/failed.txt" >"$CANARY/report.md"
  cat "$CANARY/report.md"
  exit "$status"
fi

#!/usr/bin/env bash
# Installs one compression tool into its own virtual environment, apart from
# gate's: the tools pin versions of transformers that gate does not run
# (kvpress 0.5.5 needs transformers<5.3, llm-compressor 0.14 needs
# transformers<=5.17 and compressed-tensors==0.19.0), so each gets a venv of its
# own, cached by tool and version (GuideLLM 0.8.1, the load tier's load
# generator, pins transformers 5.24 and its own HTTP stack):
#
#   ${GATE_TOOL_CACHE:-$HOME/.cache/gate-tools}/NAME-VERSION
#
#   bash scripts/setup_tool_env.sh llmcompressor   # GPTQ / AWQ / SparseGPT checkpoints
#   bash scripts/setup_tool_env.sh kvpress         # reference KV-cache presses
#   bash scripts/setup_tool_env.sh guidellm        # the load generator of the load tier
#
# (GPTQModel 7.7 is not offered: it requires torch>=2.14.1 and builds its
# kernels from source; llm-compressor makes the same GPTQ/AWQ checkpoints.)
#
# torch is installed first, at gate's version (GATE_TORCH_VERSION, default
# 2.13.0), so the tool does not pull in another (CUDA) build. Every other
# package is pinned by requirements/tool-NAME.txt (pip constraints of a
# verified install). A stamp naming that lock's hash is written last: an
# interrupted install, or one made from another lock, is redone from scratch
# on the next call; a finished one is reused as is. Prints the venv's python
# on its last line.
set -euo pipefail
cd "$(dirname "$0")/.."

NAME=${1:-}
PYTHON=${PYTHON:-python3}
TORCH_VERSION=${GATE_TORCH_VERSION:-2.13.0}
CACHE=${GATE_TOOL_CACHE:-$HOME/.cache/gate-tools}
export PIP_DISABLE_PIP_VERSION_CHECK=1
log() { printf '[tool-env] %s\n' "$*" >&2; }
# pip, quieted: its notes about absent local index folders are noise here
pip_install() { "$VPY" -m pip install -q "$@" 2> >(grep -v 'is ignored: it is neither a file nor a directory' >&2); }

# NAME -> version and the pip requirements installed after torch.
case "$NAME" in
  llmcompressor)
    VERSION=0.14.0.1
    REQUIREMENTS=("llmcompressor==$VERSION" "compressed-tensors==0.19.0")
    CHECK="import llmcompressor, compressed_tensors, transformers; print('llmcompressor', llmcompressor.__version__, 'transformers', transformers.__version__)"
    ;;
  kvpress)
    VERSION=0.5.5
    REQUIREMENTS=("kvpress==$VERSION")
    CHECK="import kvpress, transformers; print('kvpress', '$VERSION', 'transformers', transformers.__version__)"
    ;;
  guidellm)
    VERSION=0.8.1
    REQUIREMENTS=("guidellm==$VERSION")
    CHECK="import importlib.metadata as m, guidellm.__main__; print('guidellm', m.version('guidellm'), 'transformers', m.version('transformers'))"
    ;;
  *)
    echo "usage: bash scripts/setup_tool_env.sh {llmcompressor|kvpress|guidellm}" >&2
    exit 4
    ;;
esac

VENV="$CACHE/$NAME-$VERSION"
STAMP="$VENV/.gate-tool-ready"
TOOL_LOCK="requirements/tool-$NAME.txt"
CONSTRAINTS=()
WANT="$NAME $VERSION unlocked"
if [ -f "$TOOL_LOCK" ]; then
  CONSTRAINTS=(-c "$TOOL_LOCK")
  WANT="$NAME $VERSION lock $(sha256sum "$TOOL_LOCK" | cut -c1-16)"
fi
# One install at a time per environment (two pytest workers, or a test beside a setup,
# may ask at once): the second waits here, then finds the stamp the first wrote.
mkdir -p "$CACHE"
exec 9>"$VENV.install-lock"
flock 9
if [ -f "$STAMP" ] && [ -x "$VENV/bin/python" ] && [ "$(head -n 1 "$STAMP")" = "$WANT" ]; then
  log "$NAME $VERSION already installed in $VENV ($WANT)"
  echo "$VENV/bin/python"
  exit 0
fi

log "installing $NAME $VERSION into $VENV"
rm -rf "$VENV"
mkdir -p "$CACHE"
"$PYTHON" -m venv "$VENV"
VPY="$VENV/bin/python"
pip_install --upgrade pip >&2
log "torch $TORCH_VERSION first (so the tool keeps this build)"
pip_install "torch==$TORCH_VERSION" >&2
log "pip install ${REQUIREMENTS[*]}"
pip_install "${CONSTRAINTS[@]}" "${REQUIREMENTS[@]}" "torch==$TORCH_VERSION" >&2
"$VPY" -c "$CHECK" >&2
"$VPY" -m pip freeze > "$VENV/requirements.lock"
printf '%s\n%s\n' "$WANT" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" > "$STAMP"
log "ready: $NAME $VERSION"
echo "$VPY"

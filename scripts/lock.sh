#!/usr/bin/env bash
# Writes the lock of gate's whole dependency set (every extra), the file that
# scripts/setup.sh installs and nothing else:
#
#   requirements/lock.txt    every package but torch's own subtree, exact
#                            version and sha256 of every file of it
#   requirements/torch.txt   torch, by version only: the same version is a CPU
#                            build on one machine and a CUDA build on another,
#                            with other files and hashes, and its CUDA
#                            libraries (nvidia-*, cuda-*, triton) follow from it
#
# The lock is resolved by uv (`uv pip compile`: reads pyproject.toml, hashes
# every file of each pinned release, and keeps the existing pins unless told to
# upgrade) for CPython 3.11 on x86_64 Linux, the Python and platform of CI and
# the self-hosted runners. Updating it is a reviewed change:
#
#   bash scripts/lock.sh                          # re-resolve, keeping every pin that still fits
#   bash scripts/lock.sh --upgrade-package transformers   # move one package
#   bash scripts/lock.sh --upgrade                # newest of everything (what the canary tries)
#   GATE_LOCK_DIR=out/canary bash scripts/lock.sh --upgrade   # write elsewhere (the canary)
#
# The pins of torch and of the input constraints live in requirements/constraints.txt.
# Extra arguments go to `uv pip compile`.
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=${GATE_LOCK_DIR:-requirements}
CONSTRAINTS=${GATE_LOCK_CONSTRAINTS:-requirements/constraints.txt}
export PIP_DISABLE_PIP_VERSION_CHECK=1
log() { printf '[lock] %s\n' "$*" >&2; }

UV=$(bash scripts/uv.sh | tail -n 1)

mkdir -p "$OUT"
compile() {  # compile OUTPUT [uv args...]
  local output=$1
  shift
  # --output-file with an existing lock keeps its pins (uv's rule) unless --upgrade*.
  if [ "$output" != "$OUT/lock.txt" ] && [ -f requirements/lock.txt ] && [ ! -f "$output" ]; then
    cp requirements/lock.txt "$output"
  fi
  "$UV" pip compile pyproject.toml --quiet --extra quant --extra data --extra gpu --extra dev \
    --python-version 3.11 --python-platform x86_64-manylinux_2_28 \
    --constraint "$CONSTRAINTS" --no-header --annotation-style line "$@" --output-file "$output"
}

# 1. The full resolution, to learn torch's version and its subtree.
FULL="$OUT/.resolved.txt"
compile "$FULL" "$@"
TORCH=$(grep -E '^torch==' "$FULL" | cut -d' ' -f1)
[ -n "$TORCH" ] || { log "torch is not in the resolution of pyproject.toml: nothing to lock it to"; exit 1; }
# torch's platform subtree: its CUDA libraries and compiler, nothing shared with others.
mapfile -t SUBTREE < <(grep -E '^(torch|triton|nvidia-[a-z0-9-]+|cuda-[a-z0-9-]+)==' "$FULL" \
  | grep -v '^nvidia-ml-py==' | cut -d= -f1)
NO_EMIT=()
for name in "${SUBTREE[@]}"; do NO_EMIT+=(--no-emit-package "$name"); done

# 2. The hashed lock, the same resolution (pins kept from step 1) without that subtree.
cp "$FULL" "$OUT/lock.txt.new"
compile "$OUT/lock.txt.new" --generate-hashes "${NO_EMIT[@]}" "$@"
rm -f "$FULL"
{
  echo "# gate's dependency lock: CPython 3.11, x86_64 Linux. Written by scripts/lock.sh; do not edit."
  echo "# Installed by scripts/setup.sh with --require-hashes --no-deps, after $TORCH (requirements/torch.txt)."
  echo "# Left out (they follow from torch's build on each machine): ${SUBTREE[*]}"
  cat "$OUT/lock.txt.new"
} >"$OUT/lock.txt.tmp"
rm -f "$OUT/lock.txt.new"
mv "$OUT/lock.txt.tmp" "$OUT/lock.txt"
printf '# torch by version only (CPU or CUDA build per machine). Written by scripts/lock.sh.\n%s\n' "$TORCH" >"$OUT/torch.txt"
log "wrote $OUT/lock.txt ($(grep -cE '^[a-zA-Z0-9]' "$OUT/lock.txt") packages) and $OUT/torch.txt ($TORCH)"

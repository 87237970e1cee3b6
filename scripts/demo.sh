#!/usr/bin/env bash
# The demo command (README.md): installs missing Debian packages when root, builds strata,
# synthesizes the `demo` MoE model into the cache folder (once), shows it, then answers one prompt
# with PROF=1 twice: every expert in RAM, then a quarter of them (the rest stream from SSD), so the
# tiers and the PROF report are visible in the first minute. `scripts/demo.sh MODEL.gguf` uses your
# model instead.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)"
STRATA=build/tools/strata
MODEL="${1:-}"
if [[ -z $MODEL ]]; then
  MODEL="${CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/strata}/demo.gguf"
  [[ -f $MODEL ]] || $STRATA synth --preset demo --out "$MODEL"
fi
$STRATA inspect "$MODEL"

# Routed expert bytes -> a generous RAM_GB (all of them, +10%) and a small one (a quarter).
EXPERT_BYTES=$($STRATA inspect --json "$MODEL" | grep -o '"expert_bytes": *[0-9]*' | tail -n1 |
  grep -o '[0-9]*$')
BIG=$(awk -v b="$EXPERT_BYTES" 'BEGIN { printf "%.3f", b * 1.1 / 2^30 }')
SMALL=$(awk -v b="$EXPERT_BYTES" 'BEGIN { printf "%.3f", b * 0.25 / 2^30 }')
PROMPT="Tell me about mixture-of-experts models."
echo
echo "== strata chat, RAM_GB=$BIG: every expert in RAM =="
PROF=1 $STRATA chat -m "$MODEL" -p "$PROMPT" -n 24 --temp 0 --ram-gb "$BIG"
echo
echo "== strata chat, RAM_GB=$SMALL: a quarter of the experts in RAM, the rest read from SSD =="
PROF=1 $STRATA chat -m "$MODEL" -p "$PROMPT" -n 24 --temp 0 --ram-gb "$SMALL"
echo
echo "(A synthetic model's text is meaningless: it has random weights. Point strata at a real"
echo " GGUF: scripts/demo.sh path/to/model.gguf, or build/tools/strata chat -m path/to/model.gguf)"

#!/usr/bin/env bash
# The demo command (README.md): installs missing Debian packages when root, builds strata,
# synthesizes the `demo` MoE model into the cache folder (once) and shows it.
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

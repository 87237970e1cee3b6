#!/usr/bin/env bash
# Builds the libFuzzer target for the GGUF parser with clang and runs it.
#   scripts/fuzz.sh [SECONDS]   (default 300)
# Seeds: tests/data/gguf_bad/*.bin. Crashes are written as crash-* in fuzz-corpus/; copy each into
# tests/data/gguf_bad/ as a .bin file once fixed, so it stays a unit test.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_TO_RUN="${1:-300}"
command -v clang++ >/dev/null || { echo "fuzz.sh needs clang (apt-get install clang)" >&2; exit 1; }
cmake -S . -B build-fuzz -G Ninja -DSTRATA_FUZZ=ON -DSTRATA_CUDA=OFF -DSTRATA_BENCH=OFF \
      -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ >/dev/null
cmake --build build-fuzz --target fuzz_gguf
mkdir -p fuzz-corpus
cp -n tests/data/gguf_bad/*.bin fuzz-corpus/ 2>/dev/null || true
cd fuzz-corpus
../build-fuzz/tests/fuzz_gguf -max_total_time="$SECONDS_TO_RUN" -max_len=4096 -timeout=10 \
  -rss_limit_mb=2048 -print_final_stats=1 .

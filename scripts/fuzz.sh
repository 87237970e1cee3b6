#!/usr/bin/env bash
# Builds a libFuzzer target with clang (ASan + UBSan) and runs it.
#   scripts/fuzz.sh [SECONDS]          the GGUF parser (fuzz_gguf), default 300 s
#   scripts/fuzz.sh meta [SECONDS]     a model load's metadata (fuzz_model_meta: config, summary,
#                                      vocabulary, tokenizer, chat template)
#   scripts/fuzz.sh text [SECONDS]     any text through every fixture vocabulary (fuzz_tokenize:
#                                      no throw, ids in range, UTF-8 round trips)
#   scripts/fuzz.sh schema [SECONDS]   structured output's JSON Schema compiler and matcher
#                                      (fuzz_json_schema: no dead end, accepted text is JSON);
#                                      seeds tests/data/schema_seeds/*.bin
#   scripts/fuzz.sh tools [SECONDS]    function calling's parsers and matchers and serve's
#                                      Anthropic requests (fuzz_tool_calls: no exception but
#                                      strata::Error, calls' arguments JSON objects, complete
#                                      calls parse back); seeds tests/data/tool_seeds/*.bin
# Warnings are not errors there (clang does not know some of GCC's warning pragmas).
# Seeds: tests/data/gguf_bad/*.bin (gguf); the fixtures' metadata without tensors and that of the
# synthetic presets of the architectures the fixtures lack (qwen2moe, granitemoe, deepseek, dbrx,
# phimoe, arctic, grok, minimax-m2, dots1, bailingmoe2, ernie4_5-moe, hunyuan-moe), written by
# fuzz_meta_seeds, and
# tests/data/meta_bad/*.bin (meta). Findings are written as crash-* / oom-* /
# timeout-* in fuzz-corpus[-meta]/; once fixed, copy each into tests/data/gguf_bad/ or
# tests/data/meta_bad/ as a .bin file, so it stays a unit test (test_gguf, test_model_meta).
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET=gguf
if [[ "${1:-}" == meta || "${1:-}" == gguf || "${1:-}" == text || "${1:-}" == schema ||
      "${1:-}" == tools ]]; then
  TARGET="$1"
  shift
fi
SECONDS_TO_RUN="${1:-300}"
[[ "$SECONDS_TO_RUN" =~ ^[0-9]+$ ]] || {
  echo "fuzz.sh: '$SECONDS_TO_RUN' is neither gguf/meta/text/schema/tools nor a number of seconds" >&2; exit 2; }
command -v clang++ >/dev/null || { echo "fuzz.sh needs clang (apt-get install clang)" >&2; exit 1; }
cmake -S . -B build-fuzz -G Ninja -DSTRATA_FUZZ=ON -DSTRATA_CUDA=OFF -DSTRATA_BENCH=OFF -DSTRATA_WERROR=OFF \
      -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ >/dev/null
# run TARGET CORPUS MAX_LEN [SEED_DIR]: builds the target, seeds its corpus, runs it there.
run() {
  cmake --build build-fuzz --target "$1"
  mkdir -p "$2"
  if [[ -n "${4:-}" ]]; then cp -n "$4"/*.bin "$2"/ 2>/dev/null || true; fi
  cd "$2"
  exec ../build-fuzz/tests/"$1" -max_total_time="$SECONDS_TO_RUN" -max_len="$3" -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 .
}
case "$TARGET" in
  gguf) run fuzz_gguf fuzz-corpus 4096 tests/data/gguf_bad ;;
  schema) run fuzz_json_schema fuzz-corpus-schema 1024 tests/data/schema_seeds ;;
  tools) run fuzz_tool_calls fuzz-corpus-tools 2048 tests/data/tool_seeds ;;
  text) run fuzz_tokenize fuzz-corpus-text 2048 ;;
esac
cmake --build build-fuzz --target fuzz_model_meta fuzz_meta_seeds
mkdir -p fuzz-corpus-meta
FIXTURES="${STRATA_FIXTURES_DIR:-../shared/fixtures}"
shopt -s nullglob
seeds=("$FIXTURES"/*/*-Q4_0.gguf synth:tiny-qwen2moe synth:tiny-granitemoe synth:tiny-deepseek
       synth:tiny-dbrx synth:tiny-phimoe synth:tiny-arctic synth:tiny-grok
       synth:tiny-grok2 synth:tiny-minimax-m2 synth:tiny-dots1 synth:tiny-bailingmoe2
       synth:tiny-ernie4_5-moe synth:tiny-hunyuan-moe)
build-fuzz/tests/fuzz_meta_seeds fuzz-corpus-meta "${seeds[@]}" >/dev/null
cp -n tests/data/meta_bad/*.bin fuzz-corpus-meta/ 2>/dev/null || true
cd fuzz-corpus-meta
# The seeds are whole vocabularies (tens of KB): -max_len must let the fuzzer keep them.
exec ../build-fuzz/tests/fuzz_model_meta -max_total_time="$SECONDS_TO_RUN" -max_len=262144 \
  -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 .

#!/usr/bin/env bash
# Regenerates tests/data/peer/<preset>/: llama.cpp's logits for synthetic models (F32 and Q4_0) of
# the architectures ../shared/fixtures has no model of (qwen2moe, granitemoe, deepseek, dbrx,
# phimoe, arctic, grok, minimax-m2, dots1, bailingmoe2, ernie4_5-moe, hunyuan-moe; llama with
# Llama 3.1's rope_freqs), which
# tests/test_synth_peer.cpp checks strata against. phimoe's F32 model also gets a
# reference at n_ctx 128 (F32.ctx128.logits.bin): within LongRoPE's original context (256), where
# llama.cpp uses the short factor set instead of the long one. tiny-phimoe's references are made one
# llama_decode per position (SEQUENTIAL=1, decode's path): in llama.cpp's batched pass its batched F32
# router rounds differently from the single-token one, which flips one activation rounding at
# position 0 of layer 2 of the Q4_0 model and, through attention, every later row (0/40 rows within
# 1e-4 of strata; sequentially 37/40, the rest single-row flips).
#
#   LLAMA_DIR=/path/to/llama.cpp scripts/peer/synth_refs.sh [build-dir] [PRESET ...]
#
# PRESETs default to tiny-qwen2moe, tiny-granitemoe, tiny-deepseek, tiny-dbrx, tiny-phimoe,
# tiny-llama3-moe, tiny-arctic and tiny-grok.
# tiny-grok2 (Grok-2's layout) needs a llama.cpp whose grok graph has Grok-2's parts:
# scripts/peer/grok2_peer.md says how its references were made. tiny-minimax-m2, tiny-dots1,
# tiny-bailingmoe2, tiny-ernie4_5-moe and tiny-hunyuan-moe need a newer llama.cpp than c392e50
# (minimax-m2 came in late 2025); their references were made with llama.cpp 3018a11e7
# (2026-07-29), unpatched.
# LLAMA_DIR is a llama.cpp checkout built on the CPU with static libraries:
#   cmake -S $LLAMA_DIR -B $LLAMA_DIR/build -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF \
#         -DLLAMA_CURL=OFF && cmake --build $LLAMA_DIR/build --target llama
# The committed references were made with llama.cpp c392e50 (2025-02-22) on an AMD Zen 5 CPU.
# LLAMA_COMMIT names the commit where LLAMA_DIR is not a git checkout. (c392e50 aborts on models
# with more experts than a batch has tokens unless its repacked MUL_MAT_ID work size is fixed, as
# upstream PR 14292 did; these 16-expert models run without the fix.)
# Needs python3 (ref.json) and a strata build (default build/).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD="${1:-build}"
shift || true
PRESETS=("$@")
[[ ${#PRESETS[@]} -gt 0 ]] ||
  PRESETS=(tiny-qwen2moe tiny-granitemoe tiny-deepseek tiny-dbrx tiny-phimoe tiny-llama3-moe
    tiny-arctic tiny-grok)
STRATA="$BUILD/tools/strata"
: "${LLAMA_DIR:?set LLAMA_DIR to a llama.cpp checkout built with static libraries}"
[[ -x "$STRATA" ]] || { echo "synth_refs: no $STRATA (build first)" >&2; exit 1; }
L="$LLAMA_DIR/build"
[[ -f "$L/src/libllama.a" ]] || { echo "synth_refs: no $L/src/libllama.a" >&2; exit 1; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

g++ -O2 -std=c++17 scripts/peer/llama_logits.cpp -I"$LLAMA_DIR/include" -I"$LLAMA_DIR/ggml/include" \
  "$L/src/libllama.a" "$L/ggml/src/libggml.a" "$L/ggml/src/libggml-cpu.a" \
  "$L/ggml/src/libggml-base.a" -fopenmp -lpthread -o "$TMP/llama_logits"

# The test reads the text and the ids from ref.json.
TEXT="GNU GENERAL PUBLIC LICENSE Version 3, 29 June 2007. Everyone is permitted to copy and distribute verbatim copies of this license document, but changing it is not allowed."
N_POS=40
N_GEN=16
COMMIT="${LLAMA_COMMIT:-$(git -C "$LLAMA_DIR" rev-parse --short HEAD 2>/dev/null || echo unknown)}"

for preset in "${PRESETS[@]}"; do
  OUT="tests/data/peer/$preset"
  mkdir -p "$OUT"
  SEQ=0
  [[ $preset == tiny-phimoe ]] && SEQ=1
  export SEQUENTIAL=$SEQ
  for v in F32 Q4_0; do
    "$STRATA" synth --preset "$preset" --type "$v" --out "$TMP/$preset-$v.gguf" >/dev/null
    "$TMP/llama_logits" "$TMP/$preset-$v.gguf" "$TEXT" "$N_POS" "$N_GEN" \
      "$OUT/$v.logits.bin" >"$TMP/$v.txt" 2>"$TMP/$v.log" ||
      { cat "$TMP/$v.log" >&2; exit 1; }
  done
  rm -f "$TMP/short.txt"
  if [[ $preset == tiny-phimoe ]]; then
    "$TMP/llama_logits" "$TMP/$preset-F32.gguf" "$TEXT" "$N_POS" "$N_GEN" \
      "$OUT/F32.ctx128.logits.bin" 128 >"$TMP/short.txt" 2>"$TMP/short.log" ||
      { cat "$TMP/short.log" >&2; exit 1; }
  fi
  python3 - "$TMP" "$OUT" "$TEXT" "$N_POS" "$COMMIT" "$preset" \
    "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)" "$SEQ" <<'PY'
import json, sys
tmp, out, text, n_pos, commit, preset, cpu, seq = sys.argv[1:9]
def fnv1a64(path):
    h = 0xcbf29ce484222325
    with open(path, 'rb') as f:
        for b in f.read():
            h = ((h ^ b) * 0x100000001b3) & 0xffffffffffffffff
    return '%016x' % h
ref = {'peer': 'llama.cpp ' + commit + ' (CPU, 2 threads, n_ctx = n_batch = 512, F32 KV cache, '
               'no flash attention)',
       'cpu': cpu, 'model': f'strata synth --preset {preset} --type VARIANT (seed 1)',
       'text': text, 'n_pos': int(n_pos), 'variants': {},
       'positions': 'one llama_decode each' if seq == '1' else 'one batch'}
for v in ('F32', 'Q4_0'):
    lines = dict(l.split(' ', 1) for l in open(f'{tmp}/{v}.txt').read().splitlines())
    ref['ids'] = [int(x) for x in lines['ids'].split()]
    ref['variants'][v] = {'gguf_fnv1a64': fnv1a64(f'{tmp}/{preset}-{v}.gguf'),
                          'greedy_ids': [int(x) for x in lines['gen'].split()]}
import os
if os.path.exists(f'{tmp}/short.txt'):
    lines = dict(l.split(' ', 1) for l in open(f'{tmp}/short.txt').read().splitlines())
    ref['F32_ctx128'] = {'n_ctx': 128, 'greedy_ids': [int(x) for x in lines['gen'].split()]}
json.dump(ref, open(f'{out}/ref.json', 'w'), indent=1)
PY
  echo "synth_refs: wrote $OUT (llama.cpp $COMMIT)"
done

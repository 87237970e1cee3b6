#!/usr/bin/env bash
# Side by side with llama.cpp: decode and prefill of the same GGUF files with the same threads,
# alternating the two engines so a shared host's load falls on both (bench/RESULTS.md).
#
#   LLAMA_BENCH=/path/to/llama-bench bench/vs_llama.sh [build-dir]
#
# Env: MODELS (default: the qwen3-30b-a3b synthetic, Q4_0 and Q4_K, in the cache dir),
# THREAD_COUNTS ("2"; several: "2 1"; not THREADS, which is strata's own knob), ROUNDS (1),
# N_DECODE (128: strata's decode tokens; llama-bench runs tg32 twice), PREFILL (1: also strata's
# ~520-token prompt and llama-bench pp512).
# Each round prints strata's decode tok/s with its PROF roofline share (against a 2 GiB read
# probe taken as that run starts, PROF_PROBE, printed too; machine.json is left alone) and the
# median shares per window of 8 tokens against passes of that probe taken around each window
# (PROF_PROBE_EVERY=8: the roofline's and the expert GEMVs'),
# llama-bench's tg32 (mean ± sd) and the ratio; then the prefill pair. llama-bench is not part of
# strata: build it from llama.cpp (CPU only, GGML_NATIVE=ON) outside this repository.
set -euo pipefail
# Placement from the default plan every run: no learned usage profile read or written (USAGE_AUTO).
export USAGE_AUTO=0
BUILD=${1:-build}
STRATA="$BUILD/tools/strata"
: "${LLAMA_BENCH:?set LLAMA_BENCH to a llama-bench binary}"
[[ -x "$STRATA" ]] || { echo "vs_llama: no $STRATA (build first)" >&2; exit 1; }
[[ -x "$LLAMA_BENCH" ]] || { echo "vs_llama: $LLAMA_BENCH is not executable" >&2; exit 1; }
CACHE=${CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/strata}
MODELS=${MODELS:-"$CACHE/qwen3-30b-a3b.gguf $CACHE/qwen3-30b-a3b-q4k.gguf"}
THREAD_COUNTS=${THREAD_COUNTS:-2}
ROUNDS=${ROUNDS:-1}
N_DECODE=${N_DECODE:-128}
PREFILL=${PREFILL:-1}
for m in $MODELS; do
  [[ -f "$m" ]] || { echo "vs_llama: no model $m (strata synth --preset qwen3-30b-a3b ...)" >&2; exit 1; }
done
PROMPT=""
for _ in $(seq 1 9); do
  PROMPT+="The quick brown fox jumps over the lazy dog while the engineers measure how many bytes "
  PROMPT+="per second the expert matrices stream from memory on a shared machine. "
done

strata_decode() {  # model threads -> "tok/s roofline% probe-GB/s window-roofline% window-experts%"
  local out
  out=$(VRAM_GB=0 PROF=1 PROF_PROBE=2048 PROF_PROBE_EVERY=8 "$STRATA" run -m "$1" -p "Hello" \
        -n "$N_DECODE" --temp 0 -t "$2" --ram-gb 24 --ignore-eos 2>&1 >/dev/null) || true
  local tps pct probe wpct wexp
  tps=$(sed -n 's/^run: .*decode [0-9]* tokens in [0-9.]* s (\([0-9.]*\) tok\/s).*/\1/p' <<<"$out")
  pct=$(sed -n 's/^prof: roofline: .*decode at \([0-9]*\)% of it.*/\1/p' <<<"$out")
  probe=$(sed -n 's/^prof: roofline: .*RAM read probed \([0-9.]*\) GB\/s.*/\1/p' <<<"$out")
  wpct=$(sed -n 's/^prof: in-run probe: .*decode at \([0-9]*\)% of the roofline.*/\1/p' <<<"$out")
  wexp=$(sed -n 's/^prof: in-run probe: .*experts streamed at \([0-9]*\)% of the probe.*/\1/p' <<<"$out")
  echo "${tps:-?} ${pct:-?} ${probe:-?} ${wpct:-?} ${wexp:-?}"
}
strata_prefill() {  # model threads -> "tokens tok/s" ("? ?" when the run failed)
  local out r
  out=$(VRAM_GB=0 "$STRATA" run -m "$1" -p "$PROMPT" -n 1 --temp 0 -t "$2" --ram-gb 24 \
        --no-display-prompt 2>&1 >/dev/null) || true
  r=$(sed -n 's/^run: prefill \([0-9]*\) tokens in [0-9.]* s (\([0-9.]*\) tok\/s).*/\1 \2/p' <<<"$out")
  echo "${r:-? ?}"
}
ratio() {  # strata-tok/s "llama-mean ± sd" -> strata / llama
  awk -v a="$1" -v b="${2%%±*}" 'BEGIN{if (a + 0 > 0 && b + 0 > 0) printf "%.2f", a / b; else print "?"}'
}
llama() {  # model threads test-args -> "mean ± sd" ("?" when llama-bench failed)
  local r
  r=$({ "$LLAMA_BENCH" -m "$1" -t "$2" $3 -r 2 2>/dev/null || true; } |
      awk -F'|' '/ (tg|pp)[0-9]+ /{gsub(/ /,"",$8); print $8}')
  echo "${r:-?}"
}

echo "vs_llama: $(date -u +%FT%TZ), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cpus"
for r in $(seq 1 "$ROUNDS"); do
  for m in $MODELS; do
    for t in $THREAD_COUNTS; do
      read -r s_tps s_pct probe w_pct w_exp < <(strata_decode "$m" "$t")
      l_tg=$(llama "$m" "$t" "-p 0 -n 32")
      echo "round $r $(basename "$m") t=$t: probe ${probe:-?} GB/s | strata decode $s_tps tok/s (${s_pct}% of roofline; per window ${w_pct}%, experts ${w_exp}% of the probe) | llama tg32 $l_tg | $(ratio "$s_tps" "$l_tg")x"
      if [[ "$PREFILL" == 1 ]]; then
        read -r s_n s_pp < <(strata_prefill "$m" "$t")
        l_pp=$(llama "$m" "$t" "-p 512 -n 0")
        echo "round $r $(basename "$m") t=$t: strata prefill $s_n tokens $s_pp tok/s | llama pp512 $l_pp | $(ratio "$s_pp" "$l_pp")x"
      fi
    done
  done
done

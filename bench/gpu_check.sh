#!/usr/bin/env bash
# GPU check for a lent CUDA machine (one H200, 16 cores): configure STRATA_CUDA=ON in build-gpu,
# build, print nvidia-smi, run the `gpu`-labelled tests (a skipped test is a failure here: the GPU
# must be visible; they include CPU-vs-GPU bit identity of the grouped kernel on the fixtures —
# gpt-oss's MXFP4 + SwiGLU-OAI + biases too — and of CUDA_DENSE), `strata probe` (H2D and device
# copy bandwidth), the GPU benchmarks (bench/bench_gpu_*: the grouped kernel's GB/s against the
# device copy bandwidth), then decode tok/s on the `demo` synth model with VRAM_GB = 0, half, all,
# and CUDA_DENSE=1 at VRAM_GB 0 and all, whose replay logit dumps must be byte-identical (cmp).
# Run from the repo root:
#   bench/gpu_check.sh [RESULTS_DIR]   # under 8 minutes; exit status != 0 on any failure
# Logs go to build-gpu/gpu_check/; RESULTS_DIR (default: $OUT when set, as the device runner
# does) gets results.md — the numbers to paste into bench/RESULTS.md — and a copy of the logs.
set -uo pipefail
# Placement from the default plan every run: no learned usage profile read or written (USAGE_AUTO).
export USAGE_AUTO=0

readonly BUDGET_S=470  # under 8 minutes, everything included
readonly BUILD_DIR="${BUILD_DIR:-build-gpu}"  # override only to test the script elsewhere
readonly LOG_DIR="$BUILD_DIR/gpu_check"
readonly JOBS="${JOBS:-16}"
readonly RESULTS_DIR="${1:-${OUT:-}}"
START=$(date +%s)
FAILURES=()

left() { echo $((BUDGET_S - ($(date +%s) - START))); }
section() { printf '\n==== %s (%ss left)\n' "$1" "$(left)"; }
failed() {
  FAILURES+=("$1")
  echo "gpu_check: FAILED: $1" >&2
}
# Runs a command with at most min(limit, time left) seconds; output to a log file and the console.
run_logged() {
  local name=$1 limit=$2
  shift 2
  local t
  t=$(left)
  ((t < limit)) && limit=$t
  if ((limit <= 5)); then
    failed "$name: no time left"
    return 1
  fi
  timeout --kill-after=10 "$limit" "$@" >"$LOG_DIR/$name.log" 2>&1
  local rc=$?
  ((rc == 124 || rc == 137)) && echo "gpu_check: $name timed out after ${limit}s" >>"$LOG_DIR/$name.log"
  tail -n 40 "$LOG_DIR/$name.log"
  return $rc
}
# results.md: the machine, the verdicts and every table the run produced, for bench/RESULTS.md.
write_results() {
  local r="$LOG_DIR/results.md"
  {
    echo "# gpu_check results ($(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null))"
    echo
    echo '```'
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,power.limit --format=csv \
      2>/dev/null || echo "no nvidia-smi"
    echo "cores: $(nproc); load: $(uptime)"
    cat "$LOG_DIR/summary.txt" 2>/dev/null
    echo '```'
    echo
    echo "## gpu tests"
    echo '```'
    grep -E '^ *[0-9]+/[0-9]+ Test|tests passed|tests failed' "$LOG_DIR/ctest_gpu.log" 2>/dev/null
    echo '```'
    echo
    echo "## strata probe (copy bandwidths)"
    echo '```'
    grep -i -E 'gpu|h2d|d2h|device|ram|ssd' "$LOG_DIR/probe.log" 2>/dev/null | head -n 20
    echo '```'
    for b in "$LOG_DIR"/bench_gpu_*.log; do
      [[ -f $b ]] || continue
      echo
      echo "## $(basename "$b" .log) (grouped kernel GB/s vs the device copy bandwidth)"
      echo
      cat "$b"
    done
    if [[ -f "$LOG_DIR/demo_decode.md" ]]; then
      echo
      echo "## decode on the demo synth model (strata run, 64 tokens, greedy)"
      echo
      cat "$LOG_DIR/demo_decode.md"
      echo
      grep -h '^demo:' "$LOG_DIR/demo_verdicts.txt" 2>/dev/null
    fi
  } >"$r"
}

finish() {
  section "summary"
  local elapsed=$(($(date +%s) - START))
  {
    echo "gpu_check: elapsed ${elapsed}s"
    if ((${#FAILURES[@]} == 0)); then
      echo "gpu_check: PASS"
    else
      printf 'gpu_check: FAIL: %s\n' "${FAILURES[@]}"
    fi
  } | tee "$LOG_DIR/summary.txt"
  write_results
  if [[ -n "$RESULTS_DIR" ]]; then
    mkdir -p "$RESULTS_DIR/gpu_check" &&
      cp "$LOG_DIR"/*.log "$LOG_DIR"/*.json "$LOG_DIR/summary.txt" "$LOG_DIR/results.md" \
        "$RESULTS_DIR/gpu_check/" 2>/dev/null
    cp "$LOG_DIR/results.md" "$RESULTS_DIR/results.md" 2>/dev/null
    echo "gpu_check: results in $RESULTS_DIR/results.md"
  fi
  ((${#FAILURES[@]} == 0))
  exit $?
}

if [[ ! -f CMakeLists.txt || ! -d cuda ]]; then
  echo "gpu_check: run from the strata repo root" >&2
  exit 2
fi
mkdir -p "$LOG_DIR"
export PATH="/usr/local/cuda/bin:$PATH"

section "machine"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi 2>&1 | tee "$LOG_DIR/nvidia-smi.log"
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,power.limit --format=csv \
    2>&1 | tee -a "$LOG_DIR/nvidia-smi.log"
else
  failed "nvidia-smi not found"
fi
nvcc --version 2>&1 | tail -n 2 || failed "nvcc not found"
echo "cores: $(nproc)"

section "configure ($BUILD_DIR, STRATA_CUDA=ON)"
GENERATOR=()
command -v ninja >/dev/null && GENERATOR=(-G Ninja)
# FIXTURES_DIR=/path/to/shared/fixtures points the fixture tests at the llama.cpp fixtures when
# they are not at the default ../shared/fixtures (those tests skip, with a warning below, if absent).
FIXTURE_ARG=()
[[ -n "${FIXTURES_DIR:-}" ]] && FIXTURE_ARG=(-DSTRATA_FIXTURES_DIR="$FIXTURES_DIR")
if ! run_logged configure 120 cmake -S . -B "$BUILD_DIR" "${GENERATOR[@]}" -DSTRATA_CUDA=ON \
  -DCMAKE_BUILD_TYPE=Release "${FIXTURE_ARG[@]}"; then
  failed "configure"
  finish
fi

section "build (-j$JOBS)"
# The gpu-labelled test executables first (test name = target name), so an unrelated broken
# target does not hide the GPU results; then everything else.
# A test named <target>_device or <target>_host runs a filter of <target>.
mapfile -t GPU_TESTS < <(ctest --test-dir "$BUILD_DIR" -N -L gpu 2>/dev/null |
  sed -n 's/^ *Test *#[0-9]*: *\([A-Za-z0-9_]*\).*/\1/p' | sed 's/_device$//; s/_host$//' |
  sort -u)
echo "gpu tests: ${GPU_TESTS[*]:-(none)}"
((${#GPU_TESTS[@]} == 0)) && failed "no gpu-labelled tests were configured"
if ((${#GPU_TESTS[@]} > 0)); then
  run_logged build_gpu_tests 300 cmake --build "$BUILD_DIR" -j "$JOBS" --target "${GPU_TESTS[@]}" \
    bench_gpu_grouped || failed "build of gpu tests"
fi
run_logged build_all 300 cmake --build "$BUILD_DIR" -j "$JOBS" || failed "build (all targets)"

section "gpu tests (ctest -L gpu)"
if ((${#GPU_TESTS[@]} > 0)); then
  # -V keeps each test's output so skips can be seen. A skip for want of a device is a failure
  # here (the GPU must be usable); other skips (e.g. fixtures not found) are listed as warnings.
  run_logged ctest_gpu 240 ctest --test-dir "$BUILD_DIR" -L gpu -V --output-on-failure \
    --timeout 200 || failed "ctest -L gpu"
  if grep -q 'no CUDA device' "$LOG_DIR/ctest_gpu.log"; then
    grep -m 3 'no CUDA device' "$LOG_DIR/ctest_gpu.log"
    failed "gpu tests were skipped (no usable CUDA device)"
  fi
  if grep -q '\[  SKIPPED \]' "$LOG_DIR/ctest_gpu.log"; then
    echo "gpu_check: warning: skipped tests:"
    grep -B 2 '\[  SKIPPED \]' "$LOG_DIR/ctest_gpu.log" | grep -v '^--$' | head -n 20
  fi
fi

section "strata probe (RAM, SSD, and each GPU's H2D / device-copy bandwidth)"
if [[ -x "$BUILD_DIR/tools/strata" ]]; then
  run_logged probe 120 "$BUILD_DIR/tools/strata" probe --ssd-mib 256 --ram-mib 512 \
    -o "$LOG_DIR/machine.json" || failed "strata probe"
fi

section "gpu benchmarks"
# Each bench/bench_gpu_* program (plain mains that print Markdown) runs once while time is left:
# bench_gpu_grouped = grouped expert kernel GB/s vs device-to-device copy (about 10-30 s).
shopt -s nullglob
BENCHES=("$BUILD_DIR"/bench/bench_gpu_*)
((${#BENCHES[@]} == 0)) && failed "no bench/bench_gpu_* programs were built"
for b in "${BENCHES[@]}"; do
  [[ -x "$b" ]] || continue
  name=$(basename "$b")
  run_logged "$name" 120 "$b" || failed "$name"
done

section "decode on the demo synth model: VRAM_GB = 0 / half / all, CUDA_DENSE = 0 / 1"
# One model, three placements: every expert in RAM (VRAM_GB=0), about half of the expert bytes in
# VRAM, every expert in VRAM. Decode tok/s from `strata run` (greedy, 64 tokens, PROF JSON), and
# the logits of two replayed token streams (one token per pass: the decode shape), which must be
# byte-identical across the three (invariant 1).
STRATA="$BUILD_DIR/tools/strata"
DEMO="$BUILD_DIR/gpu_check_demo.gguf"
json_num() {  # json_num KEY FILE: the first number after "KEY": in FILE
  grep -o "\"$1\": *[-0-9.eE+]*" "$2" 2>/dev/null | head -n 1 | sed 's/.*: *//'
}
if [[ -x "$STRATA" ]] && run_logged synth_demo 120 "$STRATA" synth --preset demo --out "$DEMO" \
  --threads "$JOBS" --force; then
  STREAMS="$LOG_DIR/demo_streams.txt"
  awk 'BEGIN { srand(7); for (s = 0; s < 2; ++s) { line = ""; for (i = 0; i < 24; ++i)
       line = line (i ? " " : "") int(rand() * 8000); print line } }' >"$STREAMS"
  TOTAL_BYTES=""
  DEMO_MD="$LOG_DIR/demo_decode.md"
  printf '| VRAM_GB | CUDA_DENSE | experts in VRAM | decode tok/s | GPU lane ms/token | CPU lane ms/token | straggler |\n|---|---|---|---|---|---|---|\n' >"$DEMO_MD"
  VERDICTS="$LOG_DIR/demo_verdicts.txt"
  : >"$VERDICTS"
  # tag = VRAM_GB setting, with _dense: CUDA_DENSE=1 (attention projections, any dense FFNs and
  # shared experts, and the head on GPU 0).
  for tag in 0 half all 0_dense all_dense; do
    DENSE=0
    [[ $tag == *_dense ]] && DENSE=1
    case ${tag%_dense} in
      0) VGB=0 ;;
      half) VGB=$(awk -v b="$TOTAL_BYTES" 'BEGIN { printf "%.6f", b / 2 / 1073741824 }') ;;
      all) VGB=$(awk -v b="$TOTAL_BYTES" 'BEGIN { printf "%.6f", b * 1.05 / 1073741824 + 0.01 }')
        VGB_ALL=$VGB ;;
    esac
    run_logged "demo_replay_$tag" 120 "$STRATA" replay -m "$DEMO" --tokens "$STREAMS" --ubatch 1 \
      --dump-logits "$LOG_DIR/demo_dump_$tag" --prof-json "$LOG_DIR/demo_replay_$tag.json" \
      -t "$JOBS" --vram-gb "$VGB" --cuda-dense "$DENSE" || failed "demo replay VRAM_GB=$tag"
    if [[ $tag == 0 ]]; then
      # Every routed expert's bytes (all in RAM here): what half and all are measured against.
      B_RAM=$(json_num bytes_ram "$LOG_DIR/demo_replay_0.json")
      B_SSD=$(json_num bytes_ssd "$LOG_DIR/demo_replay_0.json")
      TOTAL_BYTES=$((${B_RAM:-0} + ${B_SSD:-0}))
      echo "demo: routed expert bytes $TOTAL_BYTES"
    fi
    run_logged "demo_run_$tag" 120 "$STRATA" run -m "$DEMO" -p "The quick brown fox" -n 64 \
      --temp 0 --ignore-eos --no-display-prompt -t "$JOBS" --vram-gb "$VGB" --cuda-dense "$DENSE" \
      --prof-json "$LOG_DIR/demo_run_$tag.json" || failed "demo run VRAM_GB=$tag"
    J="$LOG_DIR/demo_run_$tag.json"
    TOKS=$(awk -v t="$(json_num decode_tok_s "$J")" 'BEGIN { printf "%.2f", t + 0 }')
    printf '| %s (%s GiB) | %s | %s | %s | %s | %s | %s |\n' "${tag%_dense}" "$VGB" "$DENSE" \
      "$(json_num experts_vram "$J")" \
      "$TOKS" "$(json_num gpu_ms_per_token "$J")" "$(json_num cpu_ms_per_token "$J")" \
      "$(grep -o '"straggler": *"[A-Za-z]*"' "$J" | head -n 1 | sed 's/.*: *//; s/"//g')" >>"$DEMO_MD"
  done
  cat "$DEMO_MD"
  for tag in half all 0_dense all_dense; do
    same=1
    for s in 0 1; do
      if ! cmp "$LOG_DIR/demo_dump_0/stream$s.logits.bin" "$LOG_DIR/demo_dump_$tag/stream$s.logits.bin"; then
        failed "demo logits differ: VRAM_GB=0 vs $tag, stream $s"
        same=0
      fi
    done
    if ((same)); then
      echo "demo: logits byte-identical: VRAM_GB=0 vs $tag" | tee -a "$VERDICTS"
    else
      echo "demo: logits DIFFER: VRAM_GB=0 vs $tag" | tee -a "$VERDICTS"
    fi
  done
  echo "demo: replay logit dumps compared byte for byte (VRAM_GB 0 vs half vs all, CUDA_DENSE 0 vs 1)"
  # Prefill: one 512-token stream in chunks of 256 with every expert in VRAM, CUDA_DENSE 0 vs 2
  # (2 = the projections as cuBLASLt GEMMs; not bit-identical, so only the rate is compared).
  LONG="$LOG_DIR/demo_long.txt"
  awk 'BEGIN { srand(11); line = ""; for (i = 0; i < 512; ++i)
       line = line (i ? " " : "") int(rand() * 8000); print line }' >"$LONG"
  for d in 0 2; do
    run_logged "demo_prefill_dense$d" 120 "$STRATA" replay -m "$DEMO" --tokens "$LONG" --ubatch 256 \
      --prof-json "$LOG_DIR/demo_prefill_dense$d.json" -t "$JOBS" --vram-gb "$VGB_ALL" \
      --cuda-dense "$d" || failed "demo prefill CUDA_DENSE=$d"
    echo "demo: prefill (512 tokens, ubatch 256, VRAM_GB all) CUDA_DENSE=$d: $(json_num prefill_tok_s "$LOG_DIR/demo_prefill_dense$d.json") tok/s" |
      tee -a "$VERDICTS"
  done
  cp "$DEMO_MD" "$LOG_DIR/demo_decode.log"
else
  failed "demo synth model"
fi
rm -f "$DEMO"

finish

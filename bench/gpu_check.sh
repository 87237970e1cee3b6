#!/usr/bin/env bash
# GPU check for a lent CUDA machine (one H200, 16 cores): configure STRATA_CUDA=ON in build-gpu,
# build, print nvidia-smi, run the `gpu`-labelled tests (a skipped test is a failure here: the GPU
# must be visible), then the GPU benchmarks (bench/bench_gpu_*). Run from the repo root:
#   bench/gpu_check.sh            # whole run stays under 8 minutes; exit status != 0 on any failure
# Logs go to build-gpu/gpu_check/ and, when $OUT is set (the device runner), are copied there.
set -uo pipefail

readonly BUDGET_S=470  # under 8 minutes, everything included
readonly BUILD_DIR="${BUILD_DIR:-build-gpu}"  # override only to test the script elsewhere
readonly LOG_DIR="$BUILD_DIR/gpu_check"
readonly JOBS="${JOBS:-16}"
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
  if [[ -n "${OUT:-}" && -d "${OUT:-}" ]]; then
    mkdir -p "$OUT/gpu_check" && cp "$LOG_DIR"/*.log "$LOG_DIR/summary.txt" "$OUT/gpu_check/" 2>/dev/null
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
mapfile -t GPU_TESTS < <(ctest --test-dir "$BUILD_DIR" -N -L gpu 2>/dev/null |
  sed -n 's/^ *Test *#[0-9]*: *\([A-Za-z0-9_]*\).*/\1/p')
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

finish

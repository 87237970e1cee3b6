#!/usr/bin/env bash
# The test command (README.md; .ci/run calls it): installs missing Debian packages when root,
# builds strata (Release; the CUDA tier too when nvcc is found), runs every ctest test, then
# rebuilds with AddressSanitizer + UndefinedBehaviorSanitizer and runs the `unit` tests again.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
JOBS=$(nproc)

echo "== build (Release) =="
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j "$JOBS"
echo "== ctest (all labels; gpu tests skip without a device) =="
ctest --test-dir build --output-on-failure -j "$JOBS"

echo "== build (ASan + UBSan) =="
# -O1 -g1: line tables for the sanitizer's stack traces at a fraction of -O2 -g's compile time.
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTRATA_SANITIZE=ON \
      -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1" \
      -DSTRATA_CUDA=OFF -DSTRATA_BENCH=OFF
cmake --build build-asan -j "$JOBS" --target strata_unit_tests  # the unit tests and strata only
echo "== ctest -L unit under ASan + UBSan =="
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan -L unit --output-on-failure -j "$JOBS"

# Knobs are read in one place only.
if grep -rn --include='*.cpp' --include='*.h' --include='*.cu' -E '\bgetenv\s*\(' \
     engine tools tiers io placement kernels cuda | grep -v 'knobs\.cpp'; then
  echo "error: getenv() outside engine/knobs.cpp" >&2
  exit 1
fi
echo "== all tests passed =="

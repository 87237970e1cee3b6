// Glue between gemv.cpp and the per-ISA kernel files (gemv_ref.cpp, gemv_avx2.cpp,
// gemv_avx512.cpp): each file exports one table lookup, and builds its GemvFn/GemmFn from a
// per-row dot with the loops below. Exercised by tests/test_gemv.cpp.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/gemv.h"

namespace strata::kernels::detail {

// {nullptr, nullptr} when that file has no kernel for the type (gemv_kernels falls back).
GemvKernels gemv_kernels_ref(GgmlType type);
GemvKernels gemv_kernels_avx2(GgmlType type);
GemvKernels gemv_kernels_avx512(GgmlType type);
// AVX-512 + VBMI + GFNI kernels (gemv_avx512_vbmi.cpp): gemv_kernels_avx512 prefers them when the
// CPU has both; gemv_kernels_avx512_base is its table without them (what AVX-512 CPUs lacking
// VBMI/GFNI get; tests/test_gemv.cpp checks it on every AVX-512 machine).
GemvKernels gemv_kernels_avx512_vbmi(GgmlType type);
GemvKernels gemv_kernels_avx512_base(GgmlType type);

// The hint set_gemv_tail left for this call (nullptr if none), cleared: a kernel takes it for its
// last group's next-group prefetch.
const void* take_gemv_tail();

// Internal linkage on purpose: every ISA file instantiates these with its own -m flags, and the
// linker must never merge an AVX-512 copy into the generic code (or the reverse).
namespace {

// Software prefetch of streamed weight bytes. Decode GEMV reads each weight once, and the
// hardware prefetchers alone left the quantized kernels at 30-55% of the read bandwidth on the
// machine in bench/RESULTS.md (their per-byte work shrinks how far ahead the out-of-order window
// reaches). Measured there: a row-after-row kernel does best with one L1 prefetch 2 KiB ahead
// (512 B and 4 KiB were worse); the multi-row kernels (16 rows per pass) with one L2 prefetch
// 4 KiB ahead along each row slot's path (an extra L1 prefetch 768 B ahead, which helped at 4
// rows per pass, cost 3-6 points at 16; L2 distances of 2-18 KiB were within the noise).
// Prefetches never fault, so running past the end of the matrix is harmless.
constexpr size_t kPrefetchBytes = 2048;
constexpr size_t kPrefetchFar = 4096;

// Cache levels for prefetch_lines (__builtin_prefetch locality: 3 = prefetcht0, 2 = prefetcht1,
// 0 = prefetchnta).
constexpr int kToL1 = 3;
constexpr int kToL2 = 2;
// prefetchnta: into L1 with a non-temporal hint. The AVX-512 Q4_0 interleaved GEMV streams its
// weights with it: per-token paired A/B on the 30B synthetic (Zen 5, bench/RESULTS.md session 12)
// 2.1% faster per token (median of 13 runs; plausibly fewer evictions of read-once lines into the
// L2 and the victim L3, not verified). The Q4_K kernel with it was 1-7% slower: it keeps kToL1.
constexpr int kToL1Nta = 0;

// One prefetch per cache line of the kBytes at p.
template <size_t kBytes, int kLevel>
inline void prefetch_lines(const void* p) {
  for (size_t off = 0; off < kBytes; off += 64)
    __builtin_prefetch(static_cast<const char*>(p) + off, 0, kLevel);
}

// For a kernel that reads one row after the other from p onwards.
template <size_t kBytes>
inline void prefetch_ahead(const void* p) {
  prefetch_lines<kBytes, kToL1>(static_cast<const char*>(p) + kPrefetchBytes);
}

// One output element: the dot of one weight row with one activation row, in the canonical order.
using RowDotFn = float (*)(const void* w_row, const void* x_row, int64_t n_cols);

template <RowDotFn Dot>
void gemv_rows(const void* w, size_t row_stride, const void* xq, float* y, int64_t row_begin,
               int64_t row_end, int64_t n_cols) {
  const auto* base = static_cast<const uint8_t*>(w);
  for (int64_t r = row_begin; r < row_end; ++r)
    y[r] = Dot(base + static_cast<size_t>(r) * row_stride, xq, n_cols);
}

// Rows outer, tokens inner: a weight row is fetched from memory once and then served from L1/L2
// for every token. Each element is the same Dot call GEMV makes, so GEMM == GEMV bit for bit.
template <RowDotFn Dot>
void gemm_rows(const void* w, size_t row_stride, const void* xq, size_t xq_stride, float* y,
               size_t y_stride, int64_t n_tokens, int64_t row_begin, int64_t row_end,
               int64_t n_cols) {
  const auto* base = static_cast<const uint8_t*>(w);
  const auto* xbase = static_cast<const uint8_t*>(xq);
  for (int64_t r = row_begin; r < row_end; ++r) {
    const uint8_t* w_row = base + static_cast<size_t>(r) * row_stride;
    for (int64_t t = 0; t < n_tokens; ++t)
      y[static_cast<size_t>(t) * y_stride + static_cast<size_t>(r)] =
          Dot(w_row, xbase + static_cast<size_t>(t) * xq_stride, n_cols);
  }
}

template <RowDotFn Dot>
constexpr GemvKernels row_kernels() {
  return GemvKernels{&gemv_rows<Dot>, &gemm_rows<Dot>};
}

}  // namespace
}  // namespace strata::kernels::detail

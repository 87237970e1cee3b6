// Glue between interleave.cpp (layouts, dispatch, scalar twins) and the per-ISA kernels of the
// interleaved layouts (gemv_interleaved_avx2.cpp, gemv_interleaved_avx512.cpp). Exercised by
// tests/test_interleave.cpp.
#pragma once

#include <cstddef>
#include <cstdint>

#include "io/check.h"
#include "kernels/gemv.h"
#include "kernels/interleave.h"

namespace strata::kernels::detail {

// {nullptr, nullptr} when the file has no kernel for the layout.
GemvKernels interleaved_kernels_ref(WeightLayout layout);
GemvKernels interleaved_kernels_avx2(WeightLayout layout);
GemvKernels interleaved_kernels_avx512(WeightLayout layout);
GemvKernels interleaved_kernels_avx512_gfni(WeightLayout layout);  // needs GFNI too

// Per activation block, computed once per call for all the groups it serves: -8 * sum(x) (the
// unsigned codes' offset, exact) and fp16(d_x).
struct XPrep {
  int32_t neg;
  float dx;
};
// This thread's scratch for n_blocks x n_tokens XPrep (grows on first use, then never allocates).
XPrep* prep_buffer(int64_t n_blocks, int64_t n_tokens);

// One L1 prefetch per line this far ahead along a group's code stream. Measured with bench_layout
// on Qwen3-30B-A3B expert shapes (bench/RESULTS.md "CPU speed, session 4"): L1 2 KiB 94-98% of
// the read probe; L1 1 KiB 88-89%, L1 4 KiB 78-80%, L2 2 KiB 86-88%.
constexpr size_t kInterleavePrefetch = 2048;
// And (AVX-512 Q4_0) an L2 prefetch per line this far ahead: the same bench_layout in one window
// (session 5, bench/RESULTS.md) gave 84-91% of the probe with it vs 83-85% without (interleaved
// / file layout 1.07 vs 1.05, the file layout's kernel unchanged as the control); 4 and 6 KiB
// ahead measured in between.
constexpr size_t kInterleavePrefetchL2 = 8192;
// The AVX-512 Q4_0 GEMV's two-group pass reads two streams at once, so each is prefetched half as
// far: L1 1 KiB and L2 4 KiB ahead (session 7, bench/RESULTS.md: 1 KiB / 2-4 KiB best of 1 KiB-2
// KiB x 0-8 KiB in a one-buffer harness, 88-90% of the read loop vs 78-80% for one group per pass).
constexpr size_t kInterleavePairPrefetch = 1024;
constexpr size_t kInterleavePairPrefetchL2 = 4096;

namespace {

// fn(scales, codes, first_row) for every 16-row group of [row_begin, row_end) of a kQ4_0x16
// matrix whose GGUF rows are row_stride bytes (the group is 16 * row_stride bytes).
template <typename Fn>
inline void for_groups(const void* w, size_t row_stride, int64_t nb, int64_t row_begin,
                       int64_t row_end, Fn&& fn) {
  STRATA_ASSERT(row_begin % 16 == 0 && row_end % 16 == 0,
                "interleaved rows [{}, {}) are not whole groups of 16", row_begin, row_end);
  const auto* base = static_cast<const uint8_t*>(w);
  for (int64_t r = row_begin; r < row_end; r += 16) {
    const uint8_t* sc = base + static_cast<size_t>(r) * row_stride;
    fn(sc, sc + nb * 32, r);
  }
}

}  // namespace
}  // namespace strata::kernels::detail

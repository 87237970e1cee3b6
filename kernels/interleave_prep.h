// The Q4_0 interleaved kernels' per-call activation preparation (and the kQ4_0x16 GEMV loop around
// it), shared by the AVX2, AVX-VNNI and AVX-512
// files (needs AVX2; each file compiles it with its own flags). Tested by
// tests/test_interleave.cpp.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "kernels/interleave_internal.h"
#include "kernels/quant.h"

namespace strata::kernels::detail {
namespace {

// -8 * sum(x) and fp16(d_x) per block of one Q8_0 activation row: sum(x) = sum(x + 128) - 32 * 128,
// the unsigned sum by vpsadbw.
inline void prep_x(const BlockQ8_0* x, int64_t nb, XPrep* out) {
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  for (int64_t b = 0; b < nb; ++b) {
    const __m256i v =
        _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].qs)), flip);
    const __m256i s = _mm256_sad_epu8(v, _mm256_setzero_si256());
    const __m128i h = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    const int64_t sum = _mm_cvtsi128_si64(h) + _mm_extract_epi64(h, 1) - 32 * 128;
    out[b].neg = static_cast<int32_t>(-8 * sum);
    out[b].dx = _cvtsh_ss(x[b].d);
  }
}

// A kQ4_0x16 (kIQ4_NLx16, kMXFP4x16) GEMV: the activation prepared once per call, then
// group(g, r, x, prep, nb, y + r, next) for each 16-row group g at row r of [row_begin, row_end);
// next is the range's following group (for an L2 prefetch), nullptr for the last.
template <typename Group>
inline void gemv_q4_0x16_groups(const void* w, size_t row_stride, const void* xq, float* y,
                                int64_t row_begin, int64_t row_end, int64_t n_cols, Group&& group) {
  const int64_t nb = n_cols / kQK;
  const auto* x = static_cast<const BlockQ8_0*>(xq);
  XPrep* prep = prep_buffer(nb, 1);
  prep_x(x, nb, prep);
  const size_t group_bytes = 16 * row_stride;
  for_groups(w, row_stride, row_begin, row_end, [&](const uint8_t* g, int64_t r) {
    group(g, r, x, prep, nb, y + r, r + 16 < row_end ? g + group_bytes : nullptr);
  });
}

}  // namespace
}  // namespace strata::kernels::detail

// The Q4_0 (IQ4_NL, MXFP4, Q8_0) interleaved kernels' per-call activation preparation, the 256-bit
// kernels' view of the 4-bit layouts (ymm::) and the kQ4_0x16 GEMV loop around them, shared by the
// AVX2, AVX-VNNI and AVX-512 files (needs AVX2; each file compiles it with its own flags). Tested
// by tests/test_interleave.cpp.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "kernels/gemv_internal.h"
#include "kernels/interleave_internal.h"
#include "kernels/quant.h"
#include "kernels/quant_internal.h"

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

// The 16-row layouts of 32-element blocks with 4-bit codes, as the 256-bit kernels read them: how
// far apart a group's chunks of two blocks are, where block b has its codes and scales, the 8
// scales of half h (rows 8h..8h+7) as floats, the table the nibbles index (none: Q4_0's nibble -
// 8) and the bias that makes the values unsigned for vpmaddubsw (0: signed table values).
namespace ymm {

struct Q4_0 {  // kQ4_0x16
  static constexpr size_t kChunk = kQ4_0x16Chunk;
  static constexpr const int8_t* kTable = nullptr;
  static constexpr int kBias = 8;
  static size_t codes(int64_t b) { return q4_0x16_code_offset(b); }
  static size_t scales(int64_t b) { return q4_0x16_scale_offset(b); }
  static __m256 dw(const uint8_t* p, int h) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * h)));
  }
};
struct IQ4_NL : Q4_0 {  // kIQ4_NLx16: kQ4_0x16's bytes
  static constexpr const int8_t* kTable = kIq4nlValues;
  static constexpr int kBias = 0;  // -127..113: + 128 would overflow vpmaddubsw's int16 pairs
};
template <bool kOdd>
struct MXFP4 {  // kMXFP4x16, a group whose first chunk is odd (kOdd) or even
  static constexpr size_t kChunk = kMXFP4x16Chunk;
  static constexpr const int8_t* kTable = kMxfp4Values;
  static constexpr int kBias = 12;  // -12..12
  static size_t codes(int64_t b) { return mxfp4x16_code_offset(b, kOdd); }
  static size_t scales(int64_t b) { return mxfp4x16_scale_offset(b, kOdd); }
  // 2^(e-128) from the exponent bits (e < 2: the subnormals 2^-128, 2^-127).
  static __m256 dw(const uint8_t* p, int h) {
    const __m256i e =
        _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 8 * h)));
    const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
    const __m256i tiny = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
    const __m256i is_tiny = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
    return _mm256_castsi256_ps(_mm256_blendv_epi8(normal, tiny, is_tiny));
  }
};

}  // namespace ymm

// fn(Fmt{}) with the ymm:: format of the group at row r of a kQ4_0x16, kIQ4_NLx16 or kMXFP4x16
// matrix of nb blocks per row (kMXFP4x16: by the group's parity).
template <WeightLayout kLayout, typename Fn>
inline void with_ymm_format(int64_t r, int64_t nb, Fn&& fn) {
  if constexpr (kLayout == WeightLayout::kMXFP4x16) {
    if (mxfp4x16_group_odd(r, nb))
      fn(ymm::MXFP4<true>{});
    else
      fn(ymm::MXFP4<false>{});
  } else if constexpr (kLayout == WeightLayout::kIQ4_NLx16) {
    fn(ymm::IQ4_NL{});
  } else {
    static_assert(kLayout == WeightLayout::kQ4_0x16);
    fn(ymm::Q4_0{});
  }
}

// A kQ4_0x16 (kIQ4_NLx16, kMXFP4x16) GEMV: the activation prepared once per call, then
// group(g, r, x, prep, nb, y + r, next) for each 16-row group g at row r of [row_begin, row_end);
// next is the range's following group (for an L2 prefetch); for the last, the set_gemv_tail hint
// (nullptr if none).
template <typename Group>
inline void gemv_q4_0x16_groups(const void* w, size_t row_stride, const void* xq, float* y,
                                int64_t row_begin, int64_t row_end, int64_t n_cols, Group&& group) {
  const int64_t nb = n_cols / kQK;
  const auto* x = static_cast<const BlockQ8_0*>(xq);
  XPrep* prep = prep_buffer(nb, 1);
  prep_x(x, nb, prep);
  const size_t group_bytes = 16 * row_stride;
  for_groups(w, row_stride, row_begin, row_end, [&](const uint8_t* g, int64_t r) {
    group(g, r, x, prep, nb, y + r,
          r + 16 < row_end ? g + group_bytes : static_cast<const uint8_t*>(take_gemv_tail()));
  });
}

}  // namespace
}  // namespace strata::kernels::detail

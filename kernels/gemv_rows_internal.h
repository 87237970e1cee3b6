// Multi-row 256-bit GEMV/GEMM for the 32-element formats with Q8_0 activations (Q4_0, Q5_0,
// MXFP4, and Q8_0 and IQ4_NL with VNNI), included by gemv_avx2.cpp (kVnni = false: maddubs) and
// gemv_avx512.cpp (kVnni = true: 256-bit vpdpbusd). Each chunk of 8 activation blocks is prepared
// once for up to 16 weight rows; codes are used unsigned (code + offset) and the offset comes back
// as -offset * sum(x) per block. The integers are exact, the float steps are the canonical ones of
// gemv.cpp. Exercised by tests/test_gemv.cpp; measured by bench/bench_gemv.cpp.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/gemv.h"
#include "kernels/gemv_internal.h"
#include "kernels/quant.h"
#include "kernels/quant_internal.h"

namespace strata::kernels::detail {
// Internal linkage: each including file compiles this with its own -m flags.
namespace {
namespace rows {

inline float fp16(uint16_t h) {
  return _cvtsh_ss(h);
}

// ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7))
inline float fold8(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

inline __m256i load16x2(const void* lo, const void* hi) {
  return _mm256_set_m128i(_mm_loadu_si128(static_cast<const __m128i*>(hi)),
                          _mm_loadu_si128(static_cast<const __m128i*>(lo)));
}

// v[p] holds block 2p in int32 lanes 0-3 and block 2p+1 in lanes 4-7; returns the 8 block sums.
inline __m256i block_sums_4x2(const __m256i v[4]) {
  const __m256i t0 = _mm256_hadd_epi32(v[0], v[1]);  // [b0 b0 b2 b2 | b1 b1 b3 b3]
  const __m256i t1 = _mm256_hadd_epi32(v[2], v[3]);  // [b4 b4 b6 b6 | b5 b5 b7 b7]
  const __m256i u = _mm256_hadd_epi32(t0, t1);       // [b0 b2 b4 b6 | b1 b3 b5 b7]
  return _mm256_permutevar8x32_epi32(u, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// Per-format traits: the unsigned codes of blocks (k, k+1) as two registers, lo = elements 0-15
// of both blocks [k | k+1] and hi = elements 16-31; kOffset = code - signed value.
template <typename Block>
struct Format;

template <>
struct Format<BlockQ4_0> {
  static constexpr int kOffset = 8;
  static float scale(const BlockQ4_0& b) { return fp16(b.d); }
  static int value(const BlockQ4_0& b, int j) { return q4_0_value(b, j); }
  template <bool kVnni>
  static void codes(const BlockQ4_0* w, __m256i* lo, __m256i* hi) {
    const __m256i q = load16x2(w[0].qs, w[1].qs), m4 = _mm256_set1_epi8(0x0F);
    *lo = _mm256_and_si256(q, m4);
    *hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
  }
};

template <>
struct Format<BlockMXFP4> {
  static constexpr int kOffset = 12;
  static float scale(const BlockMXFP4& b) { return e8m0_to_f32_half(b.e); }
  static int value(const BlockMXFP4& b, int j) { return mxfp4_value(b, j); }
  template <bool kVnni>
  static void codes(const BlockMXFP4* w, __m256i* lo, __m256i* hi) {
    // kMxfp4Values + 12, so every code is a small unsigned byte
    const __m256i table =
        _mm256_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0, 12, 13, 14, 15,
                         16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0);
    const __m256i q = load16x2(w[0].qs, w[1].qs), m4 = _mm256_set1_epi8(0x0F);
    *lo = _mm256_shuffle_epi8(table, _mm256_and_si256(q, m4));
    *hi = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(q, 4), m4));
  }
};

template <>
struct Format<BlockQ5_0> {
  static constexpr int kOffset = 16;
  static float scale(const BlockQ5_0& b) { return fp16(b.d); }
  static int value(const BlockQ5_0& b, int j) { return q5_0_value(b, j); }
  template <bool kVnni>
  static void codes(const BlockQ5_0* w, __m256i* lo, __m256i* hi) {
    const __m256i q = load16x2(w[0].qs, w[1].qs), m4 = _mm256_set1_epi8(0x0F);
    __m256i l = _mm256_and_si256(q, m4);
    __m256i h = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
    uint32_t qh0, qh1;
    std::memcpy(&qh0, w[0].qh, 4);
    std::memcpy(&qh1, w[1].qh, 4);
    // Bit j of qh is element j's 5th bit: the low 16 bits go with lo, the high 16 with hi.
    const uint32_t bits_lo = (qh0 & 0xFFFF) | (qh1 << 16);
    const uint32_t bits_hi = (qh0 >> 16) | (qh1 & 0xFFFF0000u);
    const __m256i sixteen = _mm256_set1_epi8(16);
    if constexpr (kVnni) {
      l = _mm256_mask_add_epi8(l, _cvtu32_mask32(bits_lo), l, sixteen);
      h = _mm256_mask_add_epi8(h, _cvtu32_mask32(bits_hi), h, sixteen);
    } else {
      // Byte j of each 128-bit lane tests bit j of that lane's 16 bits.
      const __m256i spread =
          _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303);
      const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ULL));
      auto expand = [&](uint32_t bits) {
        const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)), spread);
        return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit), sixteen);
      };
      l = _mm256_or_si256(l, expand(bits_lo));
      h = _mm256_or_si256(h, expand(bits_hi));
    }
    *lo = l;
    *hi = h;
  }
};

// IQ4_NL weights as table value + 128 (1..241): only with vpdpbusd, as Q8_0's below.
template <>
struct Format<BlockIQ4_NL> {
  static constexpr int kOffset = 128;
  static float scale(const BlockIQ4_NL& b) { return fp16(b.d); }
  static int value(const BlockIQ4_NL& b, int j) { return iq4_nl_value(b, j); }
  template <bool kVnni>
  static void codes(const BlockIQ4_NL* w, __m256i* lo, __m256i* hi) {
    static_assert(kVnni, "IQ4_NL values + 128 overflow maddubs");
    const __m256i table = _mm256_xor_si256(_mm256_broadcastsi128_si256(_mm_loadu_si128(
                                               reinterpret_cast<const __m128i*>(kIq4nlValues))),
                                           _mm256_set1_epi8(static_cast<char>(0x80)));
    const __m256i q = load16x2(w[0].qs, w[1].qs), m4 = _mm256_set1_epi8(0x0F);
    *lo = _mm256_shuffle_epi8(table, _mm256_and_si256(q, m4));
    *hi = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(q, 4), m4));
  }
};

// Q8_0 weights as codes + 128 (0..255): only with vpdpbusd, whose int32 sums cannot saturate
// (maddubs' int16 pair sums could).
template <>
struct Format<BlockQ8_0> {
  static constexpr int kOffset = 128;
  static float scale(const BlockQ8_0& b) { return fp16(b.d); }
  static int value(const BlockQ8_0& b, int j) { return b.qs[j]; }
  template <bool kVnni>
  static void codes(const BlockQ8_0* w, __m256i* lo, __m256i* hi) {
    static_assert(kVnni, "Q8_0 codes + 128 overflow maddubs");
    const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
    *lo = _mm256_xor_si256(load16x2(w[0].qs, w[1].qs), flip);
    *hi = _mm256_xor_si256(load16x2(w[0].qs + 16, w[1].qs + 16), flip);
  }
};

// fp16(d) of 8 consecutive blocks whose first field is the scale, or the MXFP4 scales
// 2^(e-128) built from the exponent bits (e < 2 gives the subnormals 2^-128, 2^-127).
template <typename Block>
inline __m256 scales8(const Block* b) {
  if constexpr (requires { b->d; }) {
    __m128i h = _mm_cvtsi32_si128(b[0].d);
    h = _mm_insert_epi16(h, b[1].d, 1);
    h = _mm_insert_epi16(h, b[2].d, 2);
    h = _mm_insert_epi16(h, b[3].d, 3);
    h = _mm_insert_epi16(h, b[4].d, 4);
    h = _mm_insert_epi16(h, b[5].d, 5);
    h = _mm_insert_epi16(h, b[6].d, 6);
    h = _mm_insert_epi16(h, b[7].d, 7);
    return _mm256_cvtph_ps(h);
  } else {
    static_assert(std::is_same_v<Block, BlockMXFP4>);
    const __m256i e =
        _mm256_setr_epi32(b[0].e, b[1].e, b[2].e, b[3].e, b[4].e, b[5].e, b[6].e, b[7].e);
    const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
    const __m256i tiny = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
    const __m256i is_tiny = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
    return _mm256_castsi256_ps(_mm256_blendv_epi8(normal, tiny, is_tiny));
  }
}

// u8 x s8 dot of (a_lo, a_hi) with (b_lo, b_hi) as 8 int32 partials (4 per 128-bit lane).
template <bool kVnni>
inline __m256i dot_pair(__m256i a_lo, __m256i a_hi, __m256i b_lo, __m256i b_hi) {
  if constexpr (kVnni) {
    return _mm256_dpbusd_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), a_lo, b_lo), a_hi, b_hi);
  } else {
    // |a| <= 31 and |b| <= 127: each int16 sum stays below 2 * 2 * 31 * 127 < 32768.
    return _mm256_madd_epi16(
        _mm256_add_epi16(_mm256_maddubs_epi16(a_lo, b_lo), _mm256_maddubs_epi16(a_hi, b_hi)),
        _mm256_set1_epi16(1));
  }
}

// 8 activation blocks, prepared once per chunk: lo[p]/hi[p] = elements 0-15 / 16-31 of blocks 2p
// and 2p+1; neg = -kOffset * sum(x) per block; d = fp16(d_x) per block.
struct XChunk {
  __m256i lo[4], hi[4];
  __m256i neg;
  __m256 d;
};

template <int kOffset, bool kVnni>
inline XChunk prep_x(const BlockQ8_0* x) {
  const __m256i ones8 = _mm256_set1_epi8(1);
  XChunk c;
  __m256i sums[4];
  for (int p = 0; p < 4; ++p) {
    c.lo[p] = load16x2(x[2 * p].qs, x[2 * p + 1].qs);
    c.hi[p] = load16x2(x[2 * p].qs + 16, x[2 * p + 1].qs + 16);
    sums[p] = dot_pair<kVnni>(ones8, ones8, c.lo[p], c.hi[p]);
  }
  c.neg = _mm256_mullo_epi32(block_sums_4x2(sums), _mm256_set1_epi32(-kOffset));
  c.d = scales8(x);
  return c;
}

// out[r] = W_{row r} . x for r < R; rows are row_stride bytes apart, nb blocks each.
template <typename Block, bool kVnni, int R>
void dot_rows(const uint8_t* w, size_t row_stride, const BlockQ8_0* x, int64_t nb, float* out) {
  using F = Format<Block>;
  const size_t row_bytes = static_cast<size_t>(nb) * sizeof(Block);
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  int64_t b = 0;
  for (; b + 8 <= nb; b += 8) {
    const XChunk c = prep_x<F::kOffset, kVnni>(x + b);
    for (int r = 0; r < R; ++r) {
      const auto* wb = reinterpret_cast<const Block*>(w + r * row_stride) + b;
      // Row slot r reads rows r, r+R, r+2R, ...: one L2 prefetch along that path (an L1
      // prefetch 768 B ahead as well cost 3-6 points of the read probe at 16 rows).
      const size_t off = static_cast<size_t>(b) * sizeof(Block);
      auto ahead = [&](size_t bytes) {
        const size_t at = off + bytes;
        return at < row_bytes ? w + r * row_stride + at
                              : w + (r + R) * row_stride + (at - row_bytes);
      };
      prefetch_lines<8 * sizeof(Block), kToL2>(ahead(kPrefetchFar));

      __m256i v[4];
      for (int p = 0; p < 4; ++p) {
        __m256i lo, hi;
        F::template codes<kVnni>(wb + 2 * p, &lo, &hi);
        v[p] = dot_pair<kVnni>(lo, hi, c.lo[p], c.hi[p]);
      }
      const __m256i isum = _mm256_add_epi32(block_sums_4x2(v), c.neg);
      const __m256 d = _mm256_mul_ps(scales8(wb), c.d);
      acc[r] = _mm256_add_ps(acc[r], _mm256_mul_ps(_mm256_cvtepi32_ps(isum), d));
    }
  }
  for (int r = 0; r < R; ++r) {
    if (b < nb) {
      const auto* wr = reinterpret_cast<const Block*>(w + r * row_stride);
      float t[8] = {};  // +0 in the lanes past the row: an identity for the accumulators
      for (int k = 0; b + k < nb; ++k) {
        int32_t isum = 0;
        for (int j = 0; j < kQK; ++j) isum += F::value(wr[b + k], j) * x[b + k].qs[j];
        t[k] = static_cast<float>(isum) * (F::scale(wr[b + k]) * fp16(x[b + k].d));
      }
      acc[r] = _mm256_add_ps(acc[r], _mm256_loadu_ps(t));
    }
    out[r] = fold8(acc[r]);
  }
}

// Rows per pass of gemv/gemm: 16 share each prepared activation chunk (measured on Qwen3-30B-A3B
// expert shapes in bench/RESULTS.md: L2-resident Q4_0 with maddubs 19.0 GB/s at 4 rows, 21.5-22
// at 16; streamed from DRAM 72-73% of the read probe at 4 rows, 82-85% at 16 rows with the L2
// prefetch alone). Then 4, then 1.
constexpr int64_t kRowsPass = 16;

template <typename Block, bool kVnni>
void gemv(const void* w, size_t row_stride, const void* xq, float* y, int64_t row_begin,
          int64_t row_end, int64_t n_cols) {
  const auto* base = static_cast<const uint8_t*>(w);
  const auto* x = static_cast<const BlockQ8_0*>(xq);
  int64_t r = row_begin;
  for (; r + kRowsPass <= row_end; r += kRowsPass)
    dot_rows<Block, kVnni, kRowsPass>(base + r * row_stride, row_stride, x, n_cols / kQK, y + r);
  for (; r + 4 <= row_end; r += 4)
    dot_rows<Block, kVnni, 4>(base + r * row_stride, row_stride, x, n_cols / kQK, y + r);
  for (; r < row_end; ++r)
    dot_rows<Block, kVnni, 1>(base + r * row_stride, row_stride, x, n_cols / kQK, y + r);
}

// Rows outer (kRowsPass at a time), tokens inner: the rows stay in L1/L2 for every token.
template <typename Block, bool kVnni>
void gemm(const void* w, size_t row_stride, const void* xq, size_t xq_stride, float* y,
          size_t y_stride, int64_t n_tokens, int64_t row_begin, int64_t row_end, int64_t n_cols) {
  const auto* xbase = static_cast<const uint8_t*>(xq);
  for (int64_t r0 = row_begin; r0 < row_end; r0 += kRowsPass) {
    const int64_t r1 = std::min(r0 + kRowsPass, row_end);
    for (int64_t t = 0; t < n_tokens; ++t)
      gemv<Block, kVnni>(w, row_stride, xbase + t * xq_stride, y + t * y_stride, r0, r1, n_cols);
  }
}

template <typename Block, bool kVnni>
constexpr GemvKernels kernels() {
  return GemvKernels{&gemv<Block, kVnni>, &gemm<Block, kVnni>};
}

}  // namespace rows
}  // namespace
}  // namespace strata::kernels::detail

// AVX2 + FMA + F16C GEMV/GEMM kernels (compiled with -mavx2 -mfma -mf16c, run only when CPUID
// says so); Q4_0, Q5_0 and MXFP4 come from gemv_rows_internal.h. Integer block sums are exact in
// any order; the float steps follow the canonical order of gemv.cpp, so every result equals
// gemv_ref.cpp bit for bit. Tested by tests/test_gemv.cpp; measured by bench/bench_gemv.cpp.
#include <immintrin.h>

#include <array>
#include <cstring>
#include <type_traits>

#include "kernels/gemv_internal.h"
#include "kernels/gemv_rows_internal.h"
#include "kernels/quant.h"
#include "kernels/quant_internal.h"

namespace strata::kernels::detail {
namespace {

// ---- canonical-order helpers ----

using rows::fold8;  // ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7))
using rows::fp16;

struct Lanes8 {
  float lane[8] = {};
  void add(int64_t b, float r) { lane[b % 8] = lane[b % 8] + r; }
  float fold() const { return fold8(_mm256_loadu_ps(lane)); }
};

// ---- integer helpers (exact) ----

inline int32_t hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
  return _mm_cvtsi128_si32(s);
}

// Lane k of the result = sum of the 8 int32 lanes of v[k].
inline __m256i hsum_8x8(const __m256i v[8]) {
  const __m256i h01 = _mm256_hadd_epi32(v[0], v[1]);
  const __m256i h23 = _mm256_hadd_epi32(v[2], v[3]);
  const __m256i h45 = _mm256_hadd_epi32(v[4], v[5]);
  const __m256i h67 = _mm256_hadd_epi32(v[6], v[7]);
  const __m256i q0 = _mm256_hadd_epi32(h01, h23);  // [v0..v3 low halves | v0..v3 high halves]
  const __m256i q1 = _mm256_hadd_epi32(h45, h67);
  return _mm256_add_epi32(_mm256_permute2x128_si256(q0, q1, 0x20),
                          _mm256_permute2x128_si256(q0, q1, 0x31));
}

// 8 int32 partial sums of a[j] * b[j] over 32 signed bytes (|a| <= 128 as unsigned, b != -128).
inline __m256i dot_i8(__m256i a, __m256i b) {
  const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a));
  return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

// ---- Q8_0, IQ4_NL x Q8_0 (Q4_0, Q5_0 and MXFP4 use gemv_rows_internal.h) ----
// Signed weight values: codes + 128 would overflow maddubs here, so the signs move onto the
// activations instead (dot_i8; Q8_0 activations are never -128).

inline __m256i codes(const BlockQ8_0& b) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs));
}

// The table values of 16 packed IQ4 code bytes in element order: the low nibbles (elements 0-15)
// in the low 128-bit lane, the high nibbles (16-31) in the high one.
inline __m256i iq4_values(const uint8_t* qs) {
  const __m256i table =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4nlValues)));
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  return _mm256_shuffle_epi8(
      table, _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(0x0F)));
}

inline __m256i codes(const BlockIQ4_NL& b) {
  return iq4_values(b.qs);
}

template <typename Block>
float dot_signed_q8_0(const void* w_row, const void* x_row, int64_t n_cols) {
  const auto* w = static_cast<const Block*>(w_row);
  const auto* x = static_cast<const BlockQ8_0*>(x_row);
  const int64_t nb = n_cols / kQK;
  __m256 acc = _mm256_setzero_ps();
  int64_t b = 0;
  for (; b + 8 <= nb; b += 8) {
    prefetch_ahead<8 * sizeof(Block)>(w + b);
    __m256i sums[8];
    for (int k = 0; k < 8; ++k) sums[k] = dot_i8(codes(w[b + k]), codes(x[b + k]));
    const __m256 d = _mm256_mul_ps(rows::scales8(w + b), rows::scales8(x + b));
    acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_cvtepi32_ps(hsum_8x8(sums)), d));
  }
  if (b < nb) {
    float r[8] = {};  // +0 in the lanes past the row: an identity for the accumulators
    for (int k = 0; b + k < nb; ++k) {
      const int32_t isum = hsum_i32(dot_i8(codes(w[b + k]), codes(x[b + k])));
      r[k] = static_cast<float>(isum) * (fp16(w[b + k].d) * fp16(x[b + k].d));
    }
    acc = _mm256_add_ps(acc, _mm256_loadu_ps(r));
  }
  return fold8(acc);
}

// ---- K-quants x Q8_K ----

// Shuffle masks: word s of a 16-bit vector repeated in all 16 words (both 128-bit lanes).
constexpr std::array<std::array<uint8_t, 32>, 8> word_splat() {
  std::array<std::array<uint8_t, 32>, 8> a{};
  for (int s = 0; s < 8; ++s)
    for (int i = 0; i < 32; ++i) a[s][i] = static_cast<uint8_t>(2 * s + i % 2);
  return a;
}
alignas(32) constexpr auto kWordSplat = word_splat();

inline __m256i load32(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}

// Q4_K's 12 scale bytes as 8 scales (low 64 bits) and 8 mins (high 64 bits).
inline __m128i q4_k_scales_mins(const uint8_t* s) {
  uint32_t u[3];
  std::memcpy(u, s, sizeof(u));
  const uint32_t sc_lo = u[0] & 0x3F3F3F3F;
  const uint32_t mn_lo = u[1] & 0x3F3F3F3F;
  const uint32_t sc_hi = (u[2] & 0x0F0F0F0F) | (((u[0] >> 6) & 0x03030303) << 4);
  const uint32_t mn_hi = ((u[2] >> 4) & 0x0F0F0F0F) | (((u[1] >> 6) & 0x03030303) << 4);
  return _mm_setr_epi32(static_cast<int>(sc_lo), static_cast<int>(sc_hi), static_cast<int>(mn_lo),
                        static_cast<int>(mn_hi));
}

// Q4_K, Q5_K (Block = BlockQ5_K: the 5th bits from qh, bit 2c / 2c + 1 of qh[l] for the low /
// high nibbles of qs[32c + l], as 16s; codes up to 31 keep vpmaddubsw's pair sums far from int16).
template <typename Block>
float dot_k_min(const void* w_row, const void* x_row, int64_t n_cols) {
  constexpr bool kQ5 = std::is_same_v<Block, BlockQ5_K>;
  const auto* w = static_cast<const Block*>(w_row);
  const auto* x = static_cast<const BlockQ8_K*>(x_row);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i m16 = _mm256_set1_epi8(0x10);
  Lanes8 acc;
  for (int64_t b = 0; b < n_cols / kQK_K; ++b) {
    prefetch_ahead<sizeof(Block)>(w + b);
    const __m128i scm = q4_k_scales_mins(w[b].scales);
    const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(scm));  // 8 words, twice
    // mins as words [m0,m0,m1,m1,...,m7,m7] against the 16 group sums of the activations
    const __m256i mn16 = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(
        scm, _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15)));
    const int32_t summ = hsum_i32(_mm256_madd_epi16(load32(x[b].bsums), mn16));
    __m256i isum = _mm256_setzero_si256();
    __m256i qh = _mm256_setzero_si256();
    if constexpr (kQ5) qh = load32(w[b].qh);
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      const __m256i q = load32(w[b].qs + 32 * c);
      __m256i lo = _mm256_and_si256(q, m4);
      __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
      if constexpr (kQ5) {
        // Bit 2c (low nibbles) / 2c + 1 (high) of qh[l] moved to bit 4: the 16 of a 5-bit code.
        // Within 16-bit lanes, so bits of the neighbouring byte land outside bit 4 (masked off).
        const auto to_bit4 = [&](int bit) {
          return _mm256_and_si256(
              bit <= 4 ? _mm256_slli_epi16(qh, 4 - bit) : _mm256_srli_epi16(qh, bit - 4), m16);
        };
        lo = _mm256_or_si256(lo, to_bit4(2 * c));
        hi = _mm256_or_si256(hi, to_bit4(2 * c + 1));
      }
      const __m256i p0 = _mm256_maddubs_epi16(lo, load32(x[b].qs + 64 * c));
      const __m256i p1 = _mm256_maddubs_epi16(hi, load32(x[b].qs + 64 * c + 32));
      const __m256i s0 = _mm256_shuffle_epi8(sc16, load32(kWordSplat[2 * c].data()));
      const __m256i s1 = _mm256_shuffle_epi8(sc16, load32(kWordSplat[2 * c + 1].data()));
      isum = _mm256_add_epi32(
          isum, _mm256_add_epi32(_mm256_madd_epi16(p0, s0), _mm256_madd_epi16(p1, s1)));
    }
    const int32_t sumi = hsum_i32(isum);
    const float dd = fp16(w[b].d) * x[b].d;
    const float dm = fp16(w[b].dmin) * x[b].d;
    acc.add(b, dd * static_cast<float>(sumi) - dm * static_cast<float>(summ));
  }
  return acc.fold();
}

// Byte masks: [sc[2p] x8, sc[2p+1] x8] out of the 16 Q6_K group scales.
constexpr std::array<std::array<uint8_t, 16>, 8> pair_splat() {
  std::array<std::array<uint8_t, 16>, 8> a{};
  for (int p = 0; p < 8; ++p)
    for (int i = 0; i < 16; ++i) a[p][i] = static_cast<uint8_t>(2 * p + i / 8);
  return a;
}
alignas(16) constexpr auto kPairSplat = pair_splat();

// The unsigned codes of a super-block's elements 128h + 32k + l, k = 0..3, l = 0..31.
struct Codes4 {
  __m256i v[4];
};

// Sum over a super-block's 8 steps of 32 elements of codes(w, h).v[k] x the activations, each
// int16 pair sum weighted by its group's scale (scl: the 16 group scales as bytes, signed or not).
template <bool kSignedScales, typename Block, typename Codes>
inline __m256i group_scaled_sum(const Block& w, const BlockQ8_K& x, __m128i scl, Codes& codes) {
  __m256i isum = _mm256_setzero_si256();
  for (int h = 0; h < 2; ++h) {
    const Codes4 q = codes(w, h);
    for (int k = 0; k < 4; ++k) {
      const __m256i p = _mm256_maddubs_epi16(q.v[k], load32(x.qs + 128 * h + 32 * k));
      const __m128i pair = _mm_shuffle_epi8(
          scl, _mm_load_si128(reinterpret_cast<const __m128i*>(kPairSplat[4 * h + k].data())));
      const __m256i sc = kSignedScales ? _mm256_cvtepi8_epi16(pair) : _mm256_cvtepu8_epi16(pair);
      isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p, sc));
    }
  }
  return isum;
}

// Q3_K, Q6_K: per half h of the super-block, codes(h) gives the 4 vectors of unsigned codes of
// elements 128h + 32k + l (k = 0..3, l = 0..31); the codes' offset (Q6_K 32, Q3_K 4) comes off as
// offset * sum_g sc_g * bsums_g; the signed group scales pair up per 32 elements (kPairSplat).
template <typename Block, int kOffset, typename Scales, typename Codes>
float dot_k_sym(const void* w_row, const void* x_row, int64_t n_cols, Scales scales, Codes codes) {
  const auto* w = static_cast<const Block*>(w_row);
  const auto* x = static_cast<const BlockQ8_K*>(x_row);
  Lanes8 acc;
  for (int64_t b = 0; b < n_cols / kQK_K; ++b) {
    prefetch_ahead<sizeof(Block)>(w + b);
    const __m128i scl = scales(w[b]);
    const int32_t offset =
        hsum_i32(_mm256_madd_epi16(load32(x[b].bsums), _mm256_cvtepi8_epi16(scl)));
    const int32_t sumi =
        hsum_i32(group_scaled_sum</*kSignedScales=*/true>(w[b], x[b], scl, codes)) -
        kOffset * offset;
    const float d = fp16(w[b].d) * x[b].d;
    acc.add(b, d * static_cast<float>(sumi));
  }
  return acc.fold();
}

// Q6_K: the 6-bit codes (0..63) from ql's nibbles and qh's bit pairs.
float dot_q6_k(const void* w_row, const void* x_row, int64_t n_cols) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i m30 = _mm256_set1_epi8(0x30);
  return dot_k_sym<BlockQ6_K, 32>(
      w_row, x_row, n_cols,
      [](const BlockQ6_K& b) {
        return _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales));
      },
      [&](const BlockQ6_K& b, int h) {
        const __m256i ql0 = load32(b.ql + 64 * h);
        const __m256i ql1 = load32(b.ql + 64 * h + 32);
        const __m256i qh = load32(b.qh + 32 * h);
        return Codes4{{
            _mm256_or_si256(_mm256_and_si256(ql0, m4),
                            _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30)),
            _mm256_or_si256(_mm256_and_si256(ql1, m4),
                            _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                            _mm256_and_si256(qh, m30)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                            _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30)),
        }};
      });
}

// Q3_K: the 3-bit codes (0..7): qs[32h + l] bits 2k..2k+1, plus 4 where hmask[l] bit 4h + k is
// set; the scales unpacked to bytes (q3_k_scales).
float dot_q3_k(const void* w_row, const void* x_row, int64_t n_cols) {
  const __m256i m3 = _mm256_set1_epi8(3);
  const __m256i m4 = _mm256_set1_epi8(4);
  return dot_k_sym<BlockQ3_K, 4>(
      w_row, x_row, n_cols,
      [](const BlockQ3_K& b) {  // in words: byte stores then a vector load stall forwarding
        uint32_t u[4];
        q3_k_scale_words(b.scales, u);
        return _mm_sub_epi8(_mm_setr_epi32(static_cast<int>(u[0]), static_cast<int>(u[1]),
                                           static_cast<int>(u[2]), static_cast<int>(u[3])),
                            _mm_set1_epi8(32));
      },
      [&](const BlockQ3_K& b, int h) {
        const __m256i q = load32(b.qs + 32 * h);
        // hmask bits 4h..4h+3 down to bits 0..3 (higher bits leak in above them, unused), then
        // bit k to bit 2: the 4 of a code whose third bit is set.
        const __m256i hm = h == 0 ? load32(b.hmask) : _mm256_srli_epi16(load32(b.hmask), 4);
        return Codes4{{
            _mm256_or_si256(_mm256_and_si256(q, m3),
                            _mm256_and_si256(_mm256_slli_epi16(hm, 2), m4)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 2), m3),
                            _mm256_and_si256(_mm256_slli_epi16(hm, 1), m4)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m3),
                            _mm256_and_si256(hm, m4)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 6), m3),
                            _mm256_and_si256(_mm256_srli_epi16(hm, 1), m4)),
        }};
      });
}

// Q2_K: per half h the 2-bit codes of elements 128h + 32k + l at bits 2k of qs[32h + l]; the
// 4-bit scales pair up per 32 elements as in dot_k_sym, the 4-bit mins weight the bsums.
float dot_q2_k(const void* w_row, const void* x_row, int64_t n_cols) {
  const auto* w = static_cast<const BlockQ2_K*>(w_row);
  const auto* x = static_cast<const BlockQ8_K*>(x_row);
  const __m256i m3 = _mm256_set1_epi8(3);
  const __m128i m15 = _mm_set1_epi8(0x0F);
  auto codes = [&](const BlockQ2_K& wb, int h) {
    const __m256i q = load32(wb.qs + 32 * h);
    return Codes4{{_mm256_and_si256(q, m3), _mm256_and_si256(_mm256_srli_epi16(q, 2), m3),
                   _mm256_and_si256(_mm256_srli_epi16(q, 4), m3),
                   _mm256_and_si256(_mm256_srli_epi16(q, 6), m3)}};
  };
  Lanes8 acc;
  for (int64_t b = 0; b < n_cols / kQK_K; ++b) {
    prefetch_ahead<sizeof(BlockQ2_K)>(w + b);
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].scales));
    const __m128i scl = _mm_and_si128(raw, m15);
    const __m128i mns = _mm_and_si128(_mm_srli_epi16(raw, 4), m15);
    const int32_t summ = hsum_i32(_mm256_madd_epi16(load32(x[b].bsums), _mm256_cvtepu8_epi16(mns)));
    const int32_t sumi =
        hsum_i32(group_scaled_sum</*kSignedScales=*/false>(w[b], x[b], scl, codes));
    const float dd = fp16(w[b].d) * x[b].d;
    const float dm = fp16(w[b].dmin) * x[b].d;
    acc.add(b, dd * static_cast<float>(sumi) - dm * static_cast<float>(summ));
  }
  return acc.fold();
}

// ---- IQ4_XS x Q8_K ----

// Two sub-blocks (64 elements) a step: the 32 code bytes of sub-blocks 2p and 2p + 1 give their
// low and high nibbles' values, rearranged by lane into each sub-block's values in element order;
// signs moved onto the activations (Q8_K activations are never -128), each int16 pair sum (at
// most 2 x 127 x 127, exact) weighted by its sub-block's signed scale by vpmaddwd.
float dot_iq4_xs(const void* w_row, const void* x_row, int64_t n_cols) {
  const auto* w = static_cast<const BlockIQ4_XS*>(w_row);
  const auto* x = static_cast<const BlockQ8_K*>(x_row);
  const __m256i table =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4nlValues)));
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  Lanes8 acc;
  for (int64_t b = 0; b < n_cols / kQK_K; ++b) {
    prefetch_ahead<sizeof(BlockIQ4_XS)>(w + b);
    alignas(16) int16_t sc[8];
    uint32_t sl;
    std::memcpy(&sl, w[b].scales_l, sizeof(sl));
    const uint32_t sh = w[b].scales_h;
    for (int s = 0; s < 8; ++s)
      sc[s] = static_cast<int16_t>((((sl >> (4 * s)) & 0xF) | (((sh >> (2 * s)) & 3) << 4)) - 32);
    const __m256i sc16 =
        _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(sc)));
    const int8_t* xq = x[b].qs;
    __m256i isum = _mm256_setzero_si256();
    for (int p = 0; p < 4; ++p) {
      const __m256i q = load32(w[b].qs + 32 * p);
      const __m256i vlo = _mm256_shuffle_epi8(table, _mm256_and_si256(q, m4));
      const __m256i vhi = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(q, 4), m4));
      // Sub-block 2p's values in element order, then 2p + 1's.
      const __m256i va = _mm256_permute2x128_si256(vlo, vhi, 0x20);
      const __m256i vb = _mm256_permute2x128_si256(vlo, vhi, 0x31);
      const __m256i pa =
          _mm256_maddubs_epi16(_mm256_sign_epi8(va, va), _mm256_sign_epi8(load32(xq + 64 * p), va));
      const __m256i pb = _mm256_maddubs_epi16(_mm256_sign_epi8(vb, vb),
                                              _mm256_sign_epi8(load32(xq + 64 * p + 32), vb));
      const __m256i sa = _mm256_shuffle_epi8(sc16, load32(kWordSplat[2 * p].data()));
      const __m256i sb = _mm256_shuffle_epi8(sc16, load32(kWordSplat[2 * p + 1].data()));
      isum = _mm256_add_epi32(
          isum, _mm256_add_epi32(_mm256_madd_epi16(pa, sa), _mm256_madd_epi16(pb, sb)));
    }
    const float d = fp16(w[b].d) * x[b].d;
    acc.add(b, d * static_cast<float>(hsum_i32(isum)));
  }
  return acc.fold();
}

// ---- Q4_1, Q5_1 x Q8_0: r_b = (float)isum * (d_w * d_x) + m_w * (d_x * (float)xsum) ----

// Eight blocks per step, block b8 + k in lane k, so the lanes are the canonical acc[b % 8]; the
// blocks after the last whole eight go lane by lane. Codes unsigned (element j of the block in
// byte j: Q4_1's nibbles, Q5_1's fifth bits from qh as 16s).
template <typename Block>
float dot_q_1(const void* w_row, const void* x_row, int64_t n_cols) {
  constexpr bool kQ5 = std::is_same_v<Block, BlockQ5_1>;
  const auto* w = static_cast<const Block*>(w_row);
  const auto* x = static_cast<const BlockQ8_0*>(x_row);
  const int64_t nb = n_cols / kQK;
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i ones8 = _mm256_set1_epi8(1);
  const __m256i ones16 = _mm256_set1_epi16(1);
  const __m256i byte_of_bit = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2,
                                               2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i bit_of_byte = _mm256_set1_epi64x(0x8040201008040201);
  const __m256i m16 = _mm256_set1_epi8(0x10);
  auto block_sums = [&](const Block& wb, const BlockQ8_0& xb, __m256i* is, __m256i* xs) {
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(wb.qs));
    __m256i codes = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), m4);
    if constexpr (kQ5) {
      uint32_t qh;
      std::memcpy(&qh, wb.qh, sizeof(qh));
      const __m256i bits = _mm256_and_si256(
          _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(qh)), byte_of_bit), bit_of_byte);
      codes = _mm256_or_si256(codes, _mm256_and_si256(_mm256_cmpeq_epi8(bits, bit_of_byte), m16));
    }
    const __m256i xv = load32(xb.qs);
    *is = _mm256_madd_epi16(_mm256_maddubs_epi16(codes, xv), ones16);
    *xs = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, xv), ones16);
  };
  __m256 acc = _mm256_setzero_ps();
  int64_t b = 0;
  for (; b + 8 <= nb; b += 8) {
    __m256i is[8], xs[8];
    alignas(32) float dw[8], mw[8], dx[8];
    for (int k = 0; k < 8; ++k) {
      block_sums(w[b + k], x[b + k], &is[k], &xs[k]);
      dw[k] = fp16(w[b + k].d);
      mw[k] = fp16(w[b + k].m);
      dx[k] = fp16(x[b + k].d);
    }
    const __m256 vdx = _mm256_load_ps(dx);
    const __m256 r = _mm256_add_ps(
        _mm256_mul_ps(_mm256_cvtepi32_ps(hsum_8x8(is)), _mm256_mul_ps(_mm256_load_ps(dw), vdx)),
        _mm256_mul_ps(_mm256_load_ps(mw), _mm256_mul_ps(vdx, _mm256_cvtepi32_ps(hsum_8x8(xs)))));
    acc = _mm256_add_ps(acc, r);
  }
  alignas(32) float lane[8];
  _mm256_store_ps(lane, acc);
  for (int k = 0; b + k < nb; ++k) {
    __m256i is, xs;
    block_sums(w[b + k], x[b + k], &is, &xs);
    const float dx = fp16(x[b + k].d);
    lane[k] = lane[k] + (static_cast<float>(hsum_i32(is)) * (fp16(w[b + k].d) * dx) +
                         fp16(w[b + k].m) * (dx * static_cast<float>(hsum_i32(xs))));
  }
  return fold8(_mm256_load_ps(lane));
}

// ---- F32 / F16 / BF16 ----

inline __m256 load8(const float* p) {
  return _mm256_loadu_ps(p);
}
inline __m256 load8_f16(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline __m256 load8_bf16(const uint16_t* p) {
  const __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
}

template <GgmlType T>
inline __m256 load8_as_f32(const void* p, int64_t i) {
  if constexpr (T == GgmlType::F32) return load8(static_cast<const float*>(p) + i);
  if constexpr (T == GgmlType::F16) return load8_f16(static_cast<const uint16_t*>(p) + i);
  if constexpr (T == GgmlType::BF16) return load8_bf16(static_cast<const uint16_t*>(p) + i);
}

// One 32-element block: lanes l get (w[l]x[l] + w[l+16]x[l+16]) + (w[l+8]x[l+8] + w[l+24]x[l+24]).
template <GgmlType T>
inline __m256 block_lanes(const void* w, const void* x, int64_t i) {
  __m256 a = _mm256_mul_ps(load8_as_f32<T>(w, i), load8_as_f32<T>(x, i));
  a = _mm256_fmadd_ps(load8_as_f32<T>(w, i + 16), load8_as_f32<T>(x, i + 16), a);
  __m256 c = _mm256_mul_ps(load8_as_f32<T>(w, i + 8), load8_as_f32<T>(x, i + 8));
  c = _mm256_fmadd_ps(load8_as_f32<T>(w, i + 24), load8_as_f32<T>(x, i + 24), c);
  return _mm256_add_ps(a, c);
}

// The last block of a row whose n_cols is not a multiple of 32 (from element i), zero-padded.
template <GgmlType T>
inline __m256 padded_block_lanes(const void* w_row, const void* x_row, int64_t i, int64_t n_cols) {
  using Elem = std::conditional_t<T == GgmlType::F32, float, uint16_t>;
  Elem w[32] = {}, x[32] = {};
  std::memcpy(w, static_cast<const Elem*>(w_row) + i, (n_cols - i) * sizeof(Elem));
  std::memcpy(x, static_cast<const Elem*>(x_row) + i, (n_cols - i) * sizeof(Elem));
  return block_lanes<T>(w, x, 0);
}

template <GgmlType T>
float dot_float(const void* w_row, const void* x_row, int64_t n_cols) {
  using Elem = std::conditional_t<T == GgmlType::F32, float, uint16_t>;
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n_cols; i += 32) {
    prefetch_ahead<32 * sizeof(Elem)>(static_cast<const Elem*>(w_row) + i);
    acc = _mm256_add_ps(acc, block_lanes<T>(w_row, x_row, i));
  }
  if (i < n_cols) acc = _mm256_add_ps(acc, padded_block_lanes<T>(w_row, x_row, i, n_cols));
  return fold8(acc);
}

// The float-weight GEMM: tokens in tiles of 4, whose activation rows stay in L1 while the weight
// rows stream past once per tile (gemm_rows re-read every token's row for every weight row: a
// 506-token prefill of the 30B read its routers' F32 rows' activations 24 GB a pass), 2 weight
// rows at a time. Each (row, token) adds its blocks' block_lanes in block order, the zero-padded
// last block too, as dot_float does: the same bits as the GEMV.
template <GgmlType T>
void gemm_float(const void* w, size_t row_stride, const void* xq, size_t xq_stride, float* y,
                size_t y_stride, int64_t n_tokens, int64_t row_begin, int64_t row_end,
                int64_t n_cols) {
  using Elem = std::conditional_t<T == GgmlType::F32, float, uint16_t>;
  constexpr int kTile = 4;
  const auto* base = static_cast<const uint8_t*>(w);
  const auto* xbase = static_cast<const uint8_t*>(xq);
  const int64_t n_full = n_cols / 32 * 32;
  const auto out = [&](int64_t t, int64_t r) -> float& {
    return y[static_cast<size_t>(t) * y_stride + static_cast<size_t>(r)];
  };
  int64_t t0 = 0;
  for (; t0 + kTile <= n_tokens; t0 += kTile) {
    const uint8_t* xs[kTile];
    for (int k = 0; k < kTile; ++k) xs[k] = xbase + static_cast<size_t>(t0 + k) * xq_stride;
    int64_t r = row_begin;
    for (; r + 2 <= row_end; r += 2) {
      const uint8_t* wr[2] = {base + static_cast<size_t>(r) * row_stride,
                              base + static_cast<size_t>(r + 1) * row_stride};
      __m256 acc[2][kTile];
      for (auto& a : acc)
        for (auto& v : a) v = _mm256_setzero_ps();
      for (int64_t i = 0; i < n_full; i += 32) {
        for (int j = 0; j < 2; ++j) {
          prefetch_ahead<32 * sizeof(Elem)>(reinterpret_cast<const Elem*>(wr[j]) + i);
          for (int k = 0; k < kTile; ++k)
            acc[j][k] = _mm256_add_ps(acc[j][k], block_lanes<T>(wr[j], xs[k], i));
        }
      }
      if (n_full < n_cols)
        for (int j = 0; j < 2; ++j)
          for (int k = 0; k < kTile; ++k)
            acc[j][k] =
                _mm256_add_ps(acc[j][k], padded_block_lanes<T>(wr[j], xs[k], n_full, n_cols));
      for (int j = 0; j < 2; ++j)
        for (int k = 0; k < kTile; ++k) out(t0 + k, r + j) = fold8(acc[j][k]);
    }
    for (; r < row_end; ++r)
      for (int k = 0; k < kTile; ++k)
        out(t0 + k, r) = dot_float<T>(base + static_cast<size_t>(r) * row_stride, xs[k], n_cols);
  }
  for (; t0 < n_tokens; ++t0)
    for (int64_t r = row_begin; r < row_end; ++r)
      out(t0, r) = dot_float<T>(base + static_cast<size_t>(r) * row_stride,
                                xbase + static_cast<size_t>(t0) * xq_stride, n_cols);
}

template <GgmlType T>
constexpr GemvKernels float_kernels() {
  return GemvKernels{&gemv_rows<&dot_float<T>>, &gemm_float<T>};
}

}  // namespace

GemvKernels gemv_kernels_avx2(GgmlType type) {
  switch (type) {
    case GgmlType::F32:
      return float_kernels<GgmlType::F32>();
    case GgmlType::F16:
      return float_kernels<GgmlType::F16>();
    case GgmlType::BF16:
      return float_kernels<GgmlType::BF16>();
    case GgmlType::Q4_0:
      return rows::kernels<BlockQ4_0, /*kVnni=*/false>();
    case GgmlType::Q5_0:
      return rows::kernels<BlockQ5_0, /*kVnni=*/false>();
    case GgmlType::Q8_0:
      return row_kernels<&dot_signed_q8_0<BlockQ8_0>>();
    case GgmlType::MXFP4:
      return rows::kernels<BlockMXFP4, /*kVnni=*/false>();
    case GgmlType::Q4_K:
      return row_kernels<&dot_k_min<BlockQ4_K>>();
    case GgmlType::Q5_K:
      return row_kernels<&dot_k_min<BlockQ5_K>>();
    case GgmlType::Q4_1:
      return row_kernels<&dot_q_1<BlockQ4_1>>();
    case GgmlType::Q5_1:
      return row_kernels<&dot_q_1<BlockQ5_1>>();
    case GgmlType::Q2_K:
      return row_kernels<&dot_q2_k>();
    case GgmlType::Q3_K:
      return row_kernels<&dot_q3_k>();
    case GgmlType::Q6_K:
      return row_kernels<&dot_q6_k>();
    case GgmlType::IQ4_NL:
      return row_kernels<&dot_signed_q8_0<BlockIQ4_NL>>();
    case GgmlType::IQ4_XS:
      return row_kernels<&dot_iq4_xs>();
    default:
      return GemvKernels{nullptr, nullptr};
  }
}

}  // namespace strata::kernels::detail

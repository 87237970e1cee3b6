// AVX-512 (F/BW/VL/DQ + VNNI) GEMV/GEMM kernels: the 32-element formats use 256-bit vpdpbusd
// over 16 rows at once (gemv_rows_internal.h), Q4_K (with a 4-token GEMM), Q6_K and BF16 use
// 512-bit integer / load work; the
// float accumulators stay 8 lanes wide, so results equal gemv_ref.cpp bit for bit (canonical
// order in gemv.cpp).
// Tested by tests/test_gemv.cpp; measured by bench/bench_gemv.cpp.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/gemv_internal.h"
#include "kernels/gemv_rows_internal.h"
#include "kernels/quant.h"
#include "kernels/quant_internal.h"

// GCC 12 reports the _mm512_undefined_*() pass-through operands inside its own insert / extract /
// broadcast intrinsics as uninitialized (GCC bug 105593); nothing in this file reads them.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

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

inline __m128i load16(const void* p) {
  return _mm_loadu_si128(static_cast<const __m128i*>(p));
}
inline __m256i load32(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}
inline __m512i load64(const void* p) {
  return _mm512_loadu_si512(p);
}

// ---- integer helpers (exact) ----

inline int32_t hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
  return _mm_cvtsi128_si32(s);
}

inline int32_t hsum_i32(__m512i v) {
  return hsum_i32(_mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1)));
}

// ---- K-quants x Q8_K ----

// Word-permute indices over the 16 Q6_K group scales: table q = [4q x8, 4q+1 x8, 4q+2 x8,
// 4q+3 x8], the scales of the 4 groups in one 64-element register.
template <int kGroup>
constexpr std::array<std::array<uint16_t, 32>, 4> splat_index() {
  std::array<std::array<uint16_t, 32>, 4> a{};
  for (int t = 0; t < 4; ++t)
    for (int i = 0; i < 32; ++i) a[t][i] = static_cast<uint16_t>(t * (32 / kGroup) + i / kGroup);
  return a;
}
alignas(64) constexpr auto kQuadIndex = splat_index<8>();

inline __m512i index_vec(const std::array<uint16_t, 32>& a) {
  return _mm512_load_si512(a.data());
}

float dot_q6_k(const void* w_row, const void* x_row, int64_t n_cols) {
  const auto* w = static_cast<const BlockQ6_K*>(w_row);
  const auto* x = static_cast<const BlockQ8_K*>(x_row);
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i m30 = _mm512_set1_epi8(0x30);
  // Per-half shifts of the 2 high bits: [<<4 | <<2] for codes 0-63, [>>0 | >>2] for 64-127.
  const __m512i shl = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
  const __m512i shr = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
  const __m512i idx[4] = {index_vec(kQuadIndex[0]), index_vec(kQuadIndex[1]),
                          index_vec(kQuadIndex[2]), index_vec(kQuadIndex[3])};
  Lanes8 acc;
  for (int64_t b = 0; b < n_cols / kQK_K; ++b) {
    prefetch_ahead<sizeof(BlockQ6_K)>(w + b);
    const __m128i scl = load16(w[b].scales);
    const __m256i sc16 = _mm256_cvtepi8_epi16(scl);
    // Codes are used unsigned (0..63); the -32 offset is 32 * sum_g sc_g * bsums_g.
    const int32_t offset = hsum_i32(_mm256_madd_epi16(load32(x[b].bsums), sc16));
    const __m512i sc = _mm512_castsi256_si512(sc16);
    __m512i isum = _mm512_setzero_si512();
    for (int h = 0; h < 2; ++h) {
      const __m512i ql = load64(w[b].ql + 64 * h);
      const __m512i qh = _mm512_broadcast_i64x4(load32(w[b].qh + 32 * h));
      const __m512i a = _mm512_or_si512(_mm512_and_si512(ql, m4),
                                        _mm512_and_si512(_mm512_sllv_epi16(qh, shl), m30));
      const __m512i c = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4),
                                        _mm512_and_si512(_mm512_srlv_epi16(qh, shr), m30));
      const __m512i pa = _mm512_maddubs_epi16(a, load64(x[b].qs + 128 * h));
      const __m512i pc = _mm512_maddubs_epi16(c, load64(x[b].qs + 128 * h + 64));
      isum = _mm512_dpwssd_epi32(isum, pa, _mm512_permutexvar_epi16(idx[2 * h], sc));
      isum = _mm512_dpwssd_epi32(isum, pc, _mm512_permutexvar_epi16(idx[2 * h + 1], sc));
    }
    const int32_t sumi = hsum_i32(isum) - 32 * offset;
    const float d = fp16(w[b].d) * x[b].d;
    acc.add(b, d * static_cast<float>(sumi));
  }
  return acc.fold();
}

// ---- F32 / F16 / BF16: one 32-element block = two 16-lane registers ----

template <GgmlType T>
inline __m512 load16_as_f32(const void* p, int64_t i, __mmask16 m) {
  if constexpr (T == GgmlType::F32) {
    return _mm512_maskz_loadu_ps(m, static_cast<const float*>(p) + i);
  } else {
    const __m256i h = _mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(p) + i);
    if constexpr (T == GgmlType::F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}

// Lanes 0-7 of t: a = w[l]x[l] then fma with w[l+16]x[l+16]; lanes 8-15: c, the same for l+8 and
// l+24. The block's lane values are a + c.
template <GgmlType T>
inline __m256 block_lanes(const void* w, const void* x, int64_t i, __mmask16 m0, __mmask16 m1) {
  __m512 t = _mm512_mul_ps(load16_as_f32<T>(w, i, m0), load16_as_f32<T>(x, i, m0));
  t = _mm512_fmadd_ps(load16_as_f32<T>(w, i + 16, m1), load16_as_f32<T>(x, i + 16, m1), t);
  return _mm256_add_ps(_mm512_castps512_ps256(t), _mm512_extractf32x8_ps(t, 1));
}

template <GgmlType T>
float dot_float(const void* w_row, const void* x_row, int64_t n_cols) {
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n_cols; i += 32) {
    prefetch_ahead<32 * (T == GgmlType::F32 ? 4 : 2)>(static_cast<const char*>(w_row) +
                                                      i * (T == GgmlType::F32 ? 4 : 2));
    acc = _mm256_add_ps(acc, block_lanes<T>(w_row, x_row, i, 0xFFFF, 0xFFFF));
  }
  if (i < n_cols) {  // the zero-padded last block, through masked loads
    const int64_t left = n_cols - i;
    const auto m0 = static_cast<__mmask16>(left >= 16 ? 0xFFFF : (1u << left) - 1);
    const auto m1 = static_cast<__mmask16>(left <= 16 ? 0 : (1u << (left - 16)) - 1);
    acc = _mm256_add_ps(acc, block_lanes<T>(w_row, x_row, i, m0, m1));
  }
  return fold8(acc);
}

// ---- Q4_K x Q8_K: 512-bit, 4 tokens per pass (GEMM) ----
// The activation row is prepared once per call (per token): each super-block's 256 int8 values
// are permuted into the order of the weight nibbles (register c = [lo | hi nibbles] of 64 qs
// bytes = sub-blocks [2c' | 2c'+2] and [2c'+1 | 2c'+3]), and per group of 8 super-blocks the
// pair sums of bsums (for the mins) and the 8 scales d_x. Per weight super-block: two 64-byte
// loads give 4 code registers, four vpdpbusd give 4-element sums (|sum| <= 4 * 15 * 128, exact in
// int16), two vpackssdw + two vpdpwssd apply the 6-bit sub-block scales; a transposing add tree
// turns 8 super-blocks' 16-lane sums into one 8-lane vector whose lane k is sumi of block 8g+k,
// and the mins' sums come out in the same lanes. The float steps (dd, dm, r_b, acc[b % 8]) are
// then the canonical ones of gemv.cpp on 8 blocks at once, so results equal gemv_ref.cpp bit for
// bit. The scale bytes of 8 super-blocks are decoded together with in-lane byte shuffles.

// Prepared activations of one token: nb blocks of 4 x 64 bytes, then per group of 8 blocks
// 2 x 64 bytes of bsum pair sums (lane k of the first = block 8g+k's 8 sums as words, of the
// second block 8g+4+k) and 8 floats d_x (0 past the row).
struct Q4kX {
  const __m512i* q;   // [nb][4]
  const __m512i* bs;  // [n_groups][2]
  const __m256* d;    // [n_groups]
};

inline size_t q4k_prep_bytes(int64_t nb) {
  const int64_t ng = (nb + 7) / 8;
  return static_cast<size_t>(nb) * 256 + static_cast<size_t>(ng) * (128 + 64);
}

// p: 64-byte aligned, q4k_prep_bytes(nb) bytes.
inline Q4kX q4k_prep(const BlockQ8_K* x, int64_t nb, uint8_t* p) {
  const int64_t ng = (nb + 7) / 8;
  auto* q = reinterpret_cast<__m512i*>(p);
  auto* bs = q + 4 * nb;
  auto* d = reinterpret_cast<__m256*>(bs + 2 * ng);
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < nb; ++b) {
    const int8_t* s = x[b].qs;
    for (int c = 0; c < 2; ++c) {
      q[4 * b + 2 * c] = _mm512_inserti64x4(_mm512_castsi256_si512(load32(s + 128 * c)),
                                            load32(s + 128 * c + 64), 1);
      q[4 * b + 2 * c + 1] = _mm512_inserti64x4(_mm512_castsi256_si512(load32(s + 128 * c + 32)),
                                                load32(s + 128 * c + 96), 1);
    }
  }
  for (int64_t g = 0; g < ng; ++g) {
    alignas(64) int16_t sums[64] = {};
    alignas(32) float ds[8] = {};
    for (int k = 0; k < 8 && 8 * g + k < nb; ++k) {
      const BlockQ8_K& xb = x[8 * g + k];
      const __m256i pair = _mm256_madd_epi16(load32(xb.bsums), ones);  // 8 x int32, |v| < 2^13
      _mm_store_si128(reinterpret_cast<__m128i*>(sums + 8 * (k % 4) + 32 * (k / 4)),
                      _mm256_cvtepi32_epi16(pair));
      ds[k] = xb.d;
    }
    bs[2 * g] = _mm512_load_si512(sums);
    bs[2 * g + 1] = _mm512_load_si512(sums + 32);
    d[g] = _mm256_load_ps(ds);
  }
  return Q4kX{q, bs, d};
}

// In-lane byte shuffles that decode a 16-byte Q4_K header [d, dmin, scales[12]] (one per
// 128-bit lane) into [sc0..sc7, m0..m7] (see q4_k_scale_min in quant_internal.h).
constexpr std::array<uint8_t, 64> q4k_lane_table(const std::array<int, 16>& t) {
  std::array<uint8_t, 64> a{};
  for (int i = 0; i < 64; ++i) a[i] = static_cast<uint8_t>(t[i % 16] < 0 ? 0x80 : t[i % 16]);
  return a;
}
// low 6 bits (j < 4) / low or high nibble (j >= 4) sources, and the sources of the top 2 bits
alignas(64) constexpr auto kQ4kLow = q4k_lane_table({4, 5, 6, 7, 12, 13, 14, 15, 8, 9, 10, 11, 12,
                                                     13, 14, 15});
alignas(64) constexpr auto kQ4kTop = q4k_lane_table({-1, -1, -1, -1, 4, 5, 6, 7, -1, -1, -1, -1, 8,
                                                     9, 10, 11});
alignas(64) constexpr auto kQ4kMask = q4k_lane_table({63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63,
                                                      63, 15, 15, 15, 15});
// the 8 mins of a lane as words
alignas(64) constexpr auto kQ4kMinWords = q4k_lane_table({8, -1, 9, -1, 10, -1, 11, -1, 12, -1, 13,
                                                          -1, 14, -1, 15, -1});
// Scale words for the packed sums: lane L word p = sc[2 * (L / 2) + p / 4] (+ 4 for the second).
constexpr std::array<uint8_t, 64> q4k_scale_table(int first) {
  std::array<uint8_t, 64> a{};
  for (int i = 0; i < 64; ++i) {
    const int lane = i / 16, p = (i % 16) / 2;
    a[i] = static_cast<uint8_t>(i % 2 ? 0x80 : first + 2 * (lane / 2) + p / 4);
  }
  return a;
}
alignas(64) constexpr auto kQ4kSc0 = q4k_scale_table(0);
alignas(64) constexpr auto kQ4kSc1 = q4k_scale_table(4);
// word 8k (d) / 8k + 1 (dmin) of the two header registers, k < 8
constexpr std::array<uint16_t, 32> q4k_word_table(int off) {
  std::array<uint16_t, 32> a{};
  for (int i = 0; i < 32; ++i) a[i] = static_cast<uint16_t>(8 * (i % 8) + off);
  return a;
}
alignas(64) constexpr auto kQ4kD = q4k_word_table(0);
alignas(64) constexpr auto kQ4kDmin = q4k_word_table(1);
// 128-bit lane L of a register in all four lanes
alignas(64) constexpr auto kQ4kLaneBcast = [] {
  std::array<std::array<int32_t, 16>, 4> a{};
  for (int l = 0; l < 4; ++l)
    for (int i = 0; i < 16; ++i) a[l][i] = 4 * l + i % 4;
  return a;
}();
alignas(64) constexpr std::array<int32_t, 16> kQ4kMinLanes = {0, 4, 8, 12, 1, 5, 9, 13,
                                                              0, 0, 0, 0,  0, 0, 0, 0};

inline __m512i table64(const std::array<uint8_t, 64>& a) {
  return _mm512_load_si512(a.data());
}

// One (row, group of up to 8 super-blocks) header decode.
struct Q4kHead {
  __m512i sm[2];   // lane k of sm[h]: [sc0..sc7, m0..m7] of block 4h + k
  __m512i mw[2];   // lane k of mw[h]: the 8 mins of block 4h + k as words
  __m256 dw, dmw;  // fp32(d), fp32(dmin) of the 8 blocks (0 past the row)
};

inline Q4kHead q4k_head(const BlockQ4_K* w, int nbg) {
  __m128i h[8];
  for (int k = 0; k < 8; ++k)
    h[k] = k < nbg ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(&w[k])) : _mm_setzero_si128();
  Q4kHead out;
  __m512i raw[2];
  for (int i = 0; i < 2; ++i) {
    __m512i v = _mm512_castsi128_si512(h[4 * i]);
    v = _mm512_inserti32x4(v, h[4 * i + 1], 1);
    v = _mm512_inserti32x4(v, h[4 * i + 2], 2);
    raw[i] = _mm512_inserti32x4(v, h[4 * i + 3], 3);
    const __m512i lo = _mm512_shuffle_epi8(raw[i], table64(kQ4kLow));
    const __m512i lo_n =
        _mm512_mask_blend_epi8(0xF000F000F000F000ull, lo, _mm512_srli_epi16(lo, 4));
    const __m512i top = _mm512_shuffle_epi8(raw[i], table64(kQ4kTop));
    out.sm[i] =
        _mm512_or_si512(_mm512_and_si512(lo_n, table64(kQ4kMask)),
                        _mm512_and_si512(_mm512_srli_epi16(top, 2), _mm512_set1_epi8(0x30)));
    out.mw[i] = _mm512_shuffle_epi8(out.sm[i], table64(kQ4kMinWords));
  }
  const __m512i iw_d = _mm512_load_si512(kQ4kD.data());
  const __m512i iw_m = _mm512_load_si512(kQ4kDmin.data());
  out.dw = _mm256_cvtph_ps(_mm512_castsi512_si128(_mm512_permutex2var_epi16(raw[0], iw_d, raw[1])));
  out.dmw =
      _mm256_cvtph_ps(_mm512_castsi512_si128(_mm512_permutex2var_epi16(raw[0], iw_m, raw[1])));
  return out;
}

// The tree's steps: pairs of vectors, then quads, then the 8 sums.
inline __m512i sum_pairs32(__m512i a, __m512i b) {
  return _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
}
inline __m512i sum_pairs64(__m512i a, __m512i b) {
  return _mm512_add_epi32(_mm512_unpacklo_epi64(a, b), _mm512_unpackhi_epi64(a, b));
}
inline __m256i sum_quads(__m512i a, __m512i b) {
  // [a0+a2, a1+a3, b0+b2, b1+b3] (128-bit lanes), then [a02, b02 | a13, b13], then the halves
  const __m512i e = _mm512_add_epi32(_mm512_shuffle_i32x4(a, b, _MM_SHUFFLE(1, 0, 1, 0)),
                                     _mm512_shuffle_i32x4(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512i f = _mm512_shuffle_i32x4(e, e, _MM_SHUFFLE(3, 1, 2, 0));
  return _mm256_add_epi32(_mm512_castsi512_si256(f), _mm512_extracti64x4_epi64(f, 1));
}

// One row x T tokens: *outs[t] = W_row . x_t.
template <int T>
void q4k_row(const BlockQ4_K* w, const Q4kX* xs, int64_t nb, float* const* outs) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i isc0 = table64(kQ4kSc0), isc1 = table64(kQ4kSc1);
  const __m512i ilanes = _mm512_load_si512(kQ4kMinLanes.data());
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t g = 0; 8 * g < nb; ++g) {
    const int nbg = static_cast<int>(std::min<int64_t>(8, nb - 8 * g));
    const BlockQ4_K* wb = w + 8 * g;
    const Q4kHead hd = q4k_head(wb, nbg);
    // The add tree over the group's 8 blocks: pairs, quads, then (below) the 8 sums.
    __m512i quad[2][T];
    for (int hq = 0; hq < 2; ++hq) {
      __m512i pair[2][T];
      for (int hp = 0; hp < 2; ++hp) {
        __m512i v[2][T];
        for (int e = 0; e < 2; ++e) {
          const int k = 4 * hq + 2 * hp + e;
          if (k >= nbg) {
            for (int t = 0; t < T; ++t) v[e][t] = _mm512_setzero_si512();
            continue;
          }
          prefetch_ahead<sizeof(BlockQ4_K)>(wb + k);
          const __m512i q0 = load64(wb[k].qs), q1 = load64(wb[k].qs + 64);
          const __m512i c0 = _mm512_and_si512(q0, m4);
          const __m512i c1 = _mm512_and_si512(_mm512_srli_epi16(q0, 4), m4);
          const __m512i c2 = _mm512_and_si512(q1, m4);
          const __m512i c3 = _mm512_and_si512(_mm512_srli_epi16(q1, 4), m4);
          const __m512i smb = _mm512_permutexvar_epi32(
              _mm512_load_si512(kQ4kLaneBcast[k % 4].data()), hd.sm[k / 4]);
          const __m512i s0 = _mm512_shuffle_epi8(smb, isc0);
          const __m512i s1 = _mm512_shuffle_epi8(smb, isc1);
          for (int t = 0; t < T; ++t) {
            const __m512i* xq = xs[t].q + 4 * (8 * g + k);
            const __m512i z = _mm512_setzero_si512();
            const __m512i p0 = _mm512_packs_epi32(_mm512_dpbusd_epi32(z, c0, xq[0]),
                                                  _mm512_dpbusd_epi32(z, c1, xq[1]));
            const __m512i p1 = _mm512_packs_epi32(_mm512_dpbusd_epi32(z, c2, xq[2]),
                                                  _mm512_dpbusd_epi32(z, c3, xq[3]));
            v[e][t] = _mm512_dpwssd_epi32(_mm512_madd_epi16(p0, s0), p1, s1);
          }
        }
        for (int t = 0; t < T; ++t) pair[hp][t] = sum_pairs32(v[0][t], v[1][t]);
      }
      for (int t = 0; t < T; ++t) quad[hq][t] = sum_pairs64(pair[0][t], pair[1][t]);
    }
    for (int t = 0; t < T; ++t) {
      const __m256i sumi = sum_quads(quad[0][t], quad[1][t]);
      const __m512i ma = _mm512_madd_epi16(hd.mw[0], xs[t].bs[2 * g]);
      const __m512i mb = _mm512_madd_epi16(hd.mw[1], xs[t].bs[2 * g + 1]);
      const __m512i u = sum_pairs32(ma, mb);  // lane k: [A0+A2, B0+B2, A1+A3, B1+B3]
      const __m512i s = _mm512_add_epi32(u, _mm512_shuffle_epi32(u, _MM_PERM_BADC));
      const __m256i summ = _mm512_castsi512_si256(_mm512_permutexvar_epi32(ilanes, s));
      const __m256 xd = xs[t].d[g];
      const __m256 dd = _mm256_mul_ps(hd.dw, xd);
      const __m256 dm = _mm256_mul_ps(hd.dmw, xd);
      const __m256 rb = _mm256_sub_ps(_mm256_mul_ps(dd, _mm256_cvtepi32_ps(sumi)),
                                      _mm256_mul_ps(dm, _mm256_cvtepi32_ps(summ)));
      acc[t] = _mm256_add_ps(acc[t], rb);
    }
  }
  for (int t = 0; t < T; ++t) *outs[t] = fold8(acc[t]);
}

// Per-thread scratch for the prepared activations (grows once, never shrinks).
inline uint8_t* q4k_scratch(size_t bytes) {
  struct alignas(64) Line {
    uint8_t b[64];
  };
  thread_local std::vector<Line> buf;
  const size_t n = (bytes + 63) / 64;
  if (buf.size() < n) buf.resize(n);
  return reinterpret_cast<uint8_t*>(buf.data());
}

// One row at a time, each super-block prefetched to L1 2 KiB ahead (the row kernels' scheme).
// Measured on the machine in bench/RESULTS.md (768 x 2048 and 4096 x 4096 streamed, 1 thread,
// on-CPU): 16 rows per pass with L2 prefetches 4 KiB along each row slot's path (what the Q4_0
// kernels use) 11.3-12.9 GB/s, 4 rows 12.0, 2 rows 13.8-14.1, 1 row with an L2 prefetch 2 KiB
// ahead 13.5-14.1, 1 row with the L1 prefetch 14.2-14.4 (AVX2 one-row dot: 12.2-13.5). In the
// GEMM, 16 rows per pass and 1 were within the noise (72-79 GMAC/s L2-resident at 4 tokens).
template <int T>
void q4k_range(const uint8_t* base, size_t row_stride, const Q4kX* xs, int64_t nb, float* const* ys,
               int64_t row_begin, int64_t row_end) {
  float* outs[T];
  for (int64_t r = row_begin; r < row_end; ++r) {
    for (int t = 0; t < T; ++t) outs[t] = ys[t] + r;
    q4k_row<T>(reinterpret_cast<const BlockQ4_K*>(base + r * row_stride), xs, nb, outs);
  }
}

void gemv_q4_k(const void* w, size_t row_stride, const void* xq, float* y, int64_t row_begin,
               int64_t row_end, int64_t n_cols) {
  const int64_t nb = n_cols / kQK_K;
  const Q4kX x = q4k_prep(static_cast<const BlockQ8_K*>(xq), nb, q4k_scratch(q4k_prep_bytes(nb)));
  q4k_range<1>(static_cast<const uint8_t*>(w), row_stride, &x, nb, &y, row_begin, row_end);
}

// Every token's activations prepared once per call; then rows outer (16 at a time), tokens inner
// in passes of 4 (then 2, then 1): each weight super-block is unpacked once per pass.
void gemm_q4_k(const void* w, size_t row_stride, const void* xq, size_t xq_stride, float* y,
               size_t y_stride, int64_t n_tokens, int64_t row_begin, int64_t row_end,
               int64_t n_cols) {
  const int64_t nb = n_cols / kQK_K;
  const size_t per = (q4k_prep_bytes(nb) + 63) & ~size_t{63};
  constexpr int64_t kMaxBatch = 64;  // tokens prepared at a time (scratch stays L2-sized)
  constexpr int64_t kRowChunk = 16;  // rows kept in L1/L2 while every token passes over them
  uint8_t* scratch = q4k_scratch(per * static_cast<size_t>(std::min(n_tokens, kMaxBatch)));
  const auto* xb = static_cast<const uint8_t*>(xq);
  const auto* base = static_cast<const uint8_t*>(w);
  Q4kX xs[kMaxBatch];
  for (int64_t t0 = 0; t0 < n_tokens; t0 += kMaxBatch) {
    const int64_t nt = std::min(kMaxBatch, n_tokens - t0);
    for (int64_t t = 0; t < nt; ++t)
      xs[t] = q4k_prep(reinterpret_cast<const BlockQ8_K*>(xb + (t0 + t) * xq_stride), nb,
                       scratch + t * per);
    for (int64_t r0 = row_begin; r0 < row_end; r0 += kRowChunk) {
      const int64_t r1 = std::min(r0 + kRowChunk, row_end);
      int64_t t = 0;
      for (; t + 4 <= nt; t += 4) {
        float* ys[4];
        for (int i = 0; i < 4; ++i) ys[i] = y + (t0 + t + i) * y_stride;
        q4k_range<4>(base, row_stride, xs + t, nb, ys, r0, r1);
      }
      for (; t + 2 <= nt; t += 2) {
        float* ys[2] = {y + (t0 + t) * y_stride, y + (t0 + t + 1) * y_stride};
        q4k_range<2>(base, row_stride, xs + t, nb, ys, r0, r1);
      }
      for (; t < nt; ++t) {
        float* ys[1] = {y + (t0 + t) * y_stride};
        q4k_range<1>(base, row_stride, xs + t, nb, ys, r0, r1);
      }
    }
  }
}

}  // namespace

// Types without an entry here use the AVX2 kernels (bit-identical): on the machine measured in
// bench/RESULTS.md the 512-bit versions of F16 and F32 were not faster than AVX2.
GemvKernels gemv_kernels_avx512(GgmlType type) {
  static const bool vbmi = cpu_has(CpuFeature::kAvx512vbmi) && cpu_has(CpuFeature::kGfni);
  if (vbmi) {
    const GemvKernels k = gemv_kernels_avx512_vbmi(type);
    if (k.gemv != nullptr) return k;
  }
  return gemv_kernels_avx512_base(type);
}

GemvKernels gemv_kernels_avx512_base(GgmlType type) {
  switch (type) {
    case GgmlType::BF16:
      return row_kernels<&dot_float<GgmlType::BF16>>();
    case GgmlType::Q4_0:
      return rows::kernels<BlockQ4_0, /*kVnni=*/true>();
    case GgmlType::Q5_0:
      return rows::kernels<BlockQ5_0, /*kVnni=*/true>();
    case GgmlType::Q8_0:
      return rows::kernels<BlockQ8_0, /*kVnni=*/true>();
    case GgmlType::MXFP4:
      return rows::kernels<BlockMXFP4, /*kVnni=*/true>();
    case GgmlType::IQ4_NL:
      return rows::kernels<BlockIQ4_NL, /*kVnni=*/true>();
    case GgmlType::Q4_K:
      return GemvKernels{&gemv_q4_k, &gemm_q4_k};
    case GgmlType::Q6_K:
      return row_kernels<&dot_q6_k>();
    default:
      return GemvKernels{nullptr, nullptr};
  }
}

}  // namespace strata::kernels::detail

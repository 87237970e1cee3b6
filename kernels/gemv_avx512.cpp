// AVX-512 (F/BW/VL/DQ + VNNI) GEMV/GEMM kernels. The integer work is 512 bits wide (two 32-element
// blocks per register, vpdpbusd / vpdpwssd); the float accumulators stay 8 lanes wide, so the
// results equal gemv_ref.cpp bit for bit (canonical order in gemv.cpp).
// Tested by tests/test_gemv.cpp; measured by bench/bench_gemv.cpp.
#include <immintrin.h>

#include <array>
#include <cstring>
#include <type_traits>

#include "kernels/gemv_internal.h"
#include "kernels/quant.h"
#include "kernels/quant_internal.h"

// GCC 12 reports the _mm512_undefined_*() pass-through operands inside its own insert / extract /
// broadcast intrinsics as uninitialized (GCC bug 105593); nothing in this file reads them.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace strata::kernels::detail {
namespace {

// ---- canonical-order helpers ----

// ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7))
inline float fold8(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

struct Lanes8 {
  float lane[8] = {};
  void add(int64_t b, float r) { lane[b % 8] = lane[b % 8] + r; }
  float fold() const { return fold8(_mm256_loadu_ps(lane)); }
};

inline float fp16(uint16_t h) {
  return _cvtsh_ss(h);
}

inline __m128i load16(const void* p) {
  return _mm_loadu_si128(static_cast<const __m128i*>(p));
}
inline __m256i load32(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}
inline __m512i load64(const void* p) {
  return _mm512_loadu_si512(p);
}

// Two 32-byte rows side by side: [p0[0..32) | p1[0..32)].
inline __m512i load32x2(const void* p0, const void* p1) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(load32(p0)), load32(p1), 1);
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

// z[p] holds block 2p in int32 lanes 0-7 and block 2p+1 in lanes 8-15; returns the 8 block sums.
inline __m256i block_sums_4x2(const __m512i z[4]) {
  const __m512i t0 =
      _mm512_add_epi32(_mm512_unpacklo_epi32(z[0], z[1]), _mm512_unpackhi_epi32(z[0], z[1]));
  const __m512i t1 =
      _mm512_add_epi32(_mm512_unpacklo_epi32(z[2], z[3]), _mm512_unpackhi_epi32(z[2], z[3]));
  // 128-bit lane L of u: [sum of z0's lane L, z1's, z2's, z3's]
  const __m512i u = _mm512_add_epi32(_mm512_unpacklo_epi64(t0, t1), _mm512_unpackhi_epi64(t0, t1));
  // lanes 0 and 2 of s: [B0 B2 B4 B6] and [B1 B3 B5 B7]
  const __m512i s = _mm512_add_epi32(u, _mm512_shuffle_i64x2(u, u, _MM_SHUFFLE(2, 3, 0, 1)));
  const __m512i order = _mm512_setr_epi32(0, 8, 1, 9, 2, 10, 3, 11, 0, 0, 0, 0, 0, 0, 0, 0);
  return _mm512_castsi512_si256(_mm512_permutexvar_epi32(order, s));
}

// ---- two blocks of 32 codes per register ----

// Nibbles of two 16-byte code arrays: [lo(q0) hi(q0) | lo(q1) hi(q1)], element j of block k in
// byte 32k + j, values 0..15.
inline __m512i nibbles2(const uint8_t* q0, const uint8_t* q1) {
  const __m512i t =
      _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_broadcastsi128_si256(load16(q0))),
                         _mm256_broadcastsi128_si256(load16(q1)), 1);
  // Shift the 2nd and 4th 128-bit lanes right by 4: those bytes become the high nibbles.
  return _mm512_and_si512(_mm512_mask_srli_epi16(t, 0xFF00FF00u, t, 4), _mm512_set1_epi8(0x0F));
}

// Integer dot of blocks (k, k+1) with their activations: int32 lanes 0-7 sum to block k, 8-15 to
// block k+1. Each overload uses the cheapest exact vpdpbusd form for its codes.
inline __m512i dot2(const BlockQ4_0* w, const BlockQ8_0* x) {
  const __m512i xq = load32x2(x[0].qs, x[1].qs);
  const __m512i c = nibbles2(w[0].qs, w[1].qs);  // code + 8
  const __m512i z = _mm512_setzero_si512();
  return _mm512_sub_epi32(_mm512_dpbusd_epi32(z, c, xq),
                          _mm512_dpbusd_epi32(z, _mm512_set1_epi8(8), xq));
}

inline __m512i dot2(const BlockQ5_0* w, const BlockQ8_0* x) {
  const __m512i xq = load32x2(x[0].qs, x[1].qs);
  uint32_t h0, h1;
  std::memcpy(&h0, w[0].qh, 4);
  std::memcpy(&h1, w[1].qh, 4);
  const __mmask64 high = _cvtu64_mask64(h0 | (static_cast<uint64_t>(h1) << 32));
  const __m512i n = nibbles2(w[0].qs, w[1].qs);
  const __m512i c = _mm512_mask_add_epi8(n, high, n, _mm512_set1_epi8(16));  // code + 16
  const __m512i z = _mm512_setzero_si512();
  return _mm512_sub_epi32(_mm512_dpbusd_epi32(z, c, xq),
                          _mm512_dpbusd_epi32(z, _mm512_set1_epi8(16), xq));
}

inline __m512i dot2(const BlockQ8_0* w, const BlockQ8_0* x) {
  const __m512i xq = load32x2(x[0].qs, x[1].qs);
  const __m512i wq = load32x2(w[0].qs, w[1].qs);
  // |w| as unsigned (-128 -> 128) against x with w's sign (x is never -128).
  const __m512i xs = _mm512_mask_sub_epi8(xq, _mm512_movepi8_mask(wq), _mm512_setzero_si512(), xq);
  return _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_abs_epi8(wq), xs);
}

inline __m512i dot2(const BlockMXFP4* w, const BlockQ8_0* x) {
  const __m512i xq = load32x2(x[0].qs, x[1].qs);
  const __m512i n = nibbles2(w[0].qs, w[1].qs);
  const __m512i magnitude =
      _mm512_broadcast_i32x4(_mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, 1, 2, 3, 4, 6, 8, 12));
  const __mmask64 negative = _mm512_test_epi8_mask(n, _mm512_set1_epi8(8));
  const __m512i xs = _mm512_mask_sub_epi8(xq, negative, _mm512_setzero_si512(), xq);
  return _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_shuffle_epi8(magnitude, n), xs);
}

inline int32_t dot1(const BlockQ4_0& w, const BlockQ8_0& x) {
  int32_t s = 0;
  for (int j = 0; j < kQK; ++j) s += q4_0_value(w, j) * x.qs[j];
  return s;
}
inline int32_t dot1(const BlockQ5_0& w, const BlockQ8_0& x) {
  int32_t s = 0;
  for (int j = 0; j < kQK; ++j) s += q5_0_value(w, j) * x.qs[j];
  return s;
}
inline int32_t dot1(const BlockQ8_0& w, const BlockQ8_0& x) {
  const __m256i p = _mm256_maddubs_epi16(_mm256_abs_epi8(load32(w.qs)),
                                         _mm256_sign_epi8(load32(x.qs), load32(w.qs)));
  return hsum_i32(_mm256_madd_epi16(p, _mm256_set1_epi16(1)));
}
inline int32_t dot1(const BlockMXFP4& w, const BlockQ8_0& x) {
  int32_t s = 0;
  for (int j = 0; j < kQK; ++j) s += mxfp4_value(w, j) * x.qs[j];
  return s;
}

inline float scale(const BlockQ4_0& b) {
  return fp16(b.d);
}
inline float scale(const BlockQ5_0& b) {
  return fp16(b.d);
}
inline float scale(const BlockQ8_0& b) {
  return fp16(b.d);
}
inline float scale(const BlockMXFP4& b) {
  return e8m0_to_f32_half(b.e);
}

// Word-permute indices: word k (k < 8) picks block k's first word out of two loaded registers
// (words 0-63 of the 8 blocks, or words 64-127).
template <int kWords>
constexpr std::array<uint16_t, 32> scale_word_index() {
  std::array<uint16_t, 32> a{};
  for (int k = 0; k < 8; ++k) a[k] = static_cast<uint16_t>(k * kWords % 64);
  return a;
}
template <int kWords>
alignas(64) constexpr std::array<uint16_t, 32> kScaleWordIndex = scale_word_index<kWords>();

// The fp16 scales (first field) of 8 consecutive blocks of kWords 16-bit words each, gathered
// with word permutes from full-register loads that never leave the 8 blocks.
template <int kWords>
inline __m256 fp16_scales8(const void* blocks) {
  static_assert(8 * kWords >= 64 && (7 * kWords < 64 || 8 * kWords >= 128));
  const auto* p = static_cast<const uint16_t*>(blocks);
  const __m512i idx = _mm512_load_si512(kScaleWordIndex<kWords>.data());
  __m512i g = _mm512_permutex2var_epi16(load64(p), idx, load64(p + 32));
  if constexpr (7 * kWords >= 64) {
    constexpr __mmask32 kFromHigh = [] {
      __mmask32 m = 0;
      for (int k = 0; k < 8; ++k)
        if (k * kWords >= 64) m |= 1u << k;
      return m;
    }();
    g = _mm512_mask_blend_epi16(kFromHigh, g,
                                _mm512_permutex2var_epi16(load64(p + 64), idx, load64(p + 96)));
  }
  return _mm256_cvtph_ps(_mm512_castsi512_si128(g));
}

template <typename Block>
inline __m256 scales8(const Block* b) {
  if constexpr (std::is_same_v<Block, BlockQ4_0>) {
    return fp16_scales8<sizeof(BlockQ4_0) / 2>(b);
  } else if constexpr (std::is_same_v<Block, BlockQ8_0>) {
    return fp16_scales8<sizeof(BlockQ8_0) / 2>(b);
  } else {
    return _mm256_setr_ps(scale(b[0]), scale(b[1]), scale(b[2]), scale(b[3]), scale(b[4]),
                          scale(b[5]), scale(b[6]), scale(b[7]));
  }
}

template <typename Block>
float dot_q8_0_acts(const void* w_row, const void* x_row, int64_t n_cols) {
  const auto* w = static_cast<const Block*>(w_row);
  const auto* x = static_cast<const BlockQ8_0*>(x_row);
  const int64_t nb = n_cols / kQK;
  __m256 acc = _mm256_setzero_ps();
  int64_t b = 0;
  for (; b + 8 <= nb; b += 8) {
    const __m512i z[4] = {dot2(w + b, x + b), dot2(w + b + 2, x + b + 2),
                          dot2(w + b + 4, x + b + 4), dot2(w + b + 6, x + b + 6)};
    const __m256 d = _mm256_mul_ps(scales8(w + b), scales8(x + b));
    acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_cvtepi32_ps(block_sums_4x2(z)), d));
  }
  if (b < nb) {
    float r[8] = {};  // +0 in the lanes past the row: an identity for the accumulators
    for (int k = 0; b + k < nb; ++k)
      r[k] = static_cast<float>(dot1(w[b + k], x[b + k])) * (scale(w[b + k]) * fp16(x[b + k].d));
    acc = _mm256_add_ps(acc, _mm256_loadu_ps(r));
  }
  return fold8(acc);
}

// ---- Q4_0 x Q8_0, several rows at once ----
// Decode is memory-bound only if the per-block work is small, so Q4_0 (the common case) gets a
// kernel that gathers 4 blocks' codes per register with word permutes and prepares each chunk of
// 8 activation blocks once for up to 4 weight rows. Same integers, same float steps as above.

// Word-permute index tables (32 words each), built at compile time:
//   kQ4Codes{A,B}: the 8 code words of Q4_0 blocks 0-3 (from words 0-63 of the chunk) and 4-7
//                  (from words 32-95); 128-bit lane k of the result is block k's 16 code bytes.
//   kQ4Scales:     word k = block k's fp16 scale (words 9k).
//   kQ8Half{1,5}:  8 words per block of 4 Q8_0 blocks, starting at word 17k + 1 (+4): one half
//                  (16 elements) of each block's codes, picked from two registers loaded at the
//                  word offsets prep_x uses.
//   kQ8Scales:     words 0-3 and 4-7 = 17 * (i % 4): the scales of 4 Q8_0 blocks.
using WordIndex = std::array<uint16_t, 32>;
template <typename F>
constexpr WordIndex word_index(F f) {
  WordIndex a{};
  for (int i = 0; i < 32; ++i) a[i] = static_cast<uint16_t>(f(i));
  return a;
}
alignas(64) constexpr WordIndex kQ4CodesA = word_index([](int i) {
  return 9 * (i / 8) + 1 + i % 8;
});
alignas(64) constexpr WordIndex kQ4CodesB = word_index([](int i) {
  return 9 * (4 + i / 8) + 1 + i % 8 - 32;
});
alignas(64) constexpr WordIndex kQ4Scales = word_index([](int i) { return i < 8 ? 9 * i : 0; });
alignas(64) constexpr WordIndex kQ8Half1 = word_index([](int i) {
  return 17 * (i / 8) + 1 + i % 8;
});
alignas(64) constexpr WordIndex kQ8Half5 = word_index([](int i) {
  return 17 * (i / 8) + 5 + i % 8;
});
alignas(64) constexpr WordIndex kQ8Scales = word_index([](int i) { return 17 * (i % 4); });

inline __m512i load_index(const WordIndex& a) {
  return _mm512_load_si512(a.data());
}

// 8 activation blocks prepared for Q4_0: element halves of blocks 0-3 (a) and 4-7 (b), 4 blocks
// per register (128-bit lane k = block k), -8 * (block sums) spread the same way, and the scales.
struct Q4x8Chunk {
  __m512i lo_a, hi_a, lo_b, hi_b;  // elements 0-15 / 16-31
  __m512i neg8_a, neg8_b;          // -8 * sum(x) per block, as 4 int32 partials per lane
  __m256 d;                        // fp16(d_x) of blocks 0-7
};

inline Q4x8Chunk prep_x(const BlockQ8_0* x) {
  const auto* p = reinterpret_cast<const uint8_t*>(x);  // 8 blocks = 136 words = 272 bytes
  const __m512i i1 = load_index(kQ8Half1), i5 = load_index(kQ8Half5);
  const __m512i w0 = load64(p), w32 = load64(p + 64);           // words 0-63
  const __m512i w8 = load64(p + 16), w40 = load64(p + 80);      // words 8-71
  const __m512i w68 = load64(p + 136), w100 = load64(p + 200);  // words 68-131
  const __m512i w72 = load64(p + 144), w104 = load64(p + 208);  // words 72-135
  Q4x8Chunk c;
  c.lo_a = _mm512_permutex2var_epi16(w0, i1, w32);
  c.hi_a = _mm512_permutex2var_epi16(w8, i1, w40);
  c.lo_b = _mm512_permutex2var_epi16(w68, i1, w100);
  c.hi_b = _mm512_permutex2var_epi16(w72, i5, w104);
  const __m512i is = load_index(kQ8Scales);
  const __m512i sc = _mm512_mask_blend_epi16(0xF0, _mm512_permutex2var_epi16(w0, is, w32),
                                             _mm512_permutex2var_epi16(w68, is, w100));
  c.d = _mm256_cvtph_ps(_mm512_castsi512_si128(sc));
  const __m512i eight = _mm512_set1_epi8(8), zero = _mm512_setzero_si512();
  c.neg8_a = _mm512_sub_epi32(
      zero, _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, eight, c.lo_a), eight, c.hi_a));
  c.neg8_b = _mm512_sub_epi32(
      zero, _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, eight, c.lo_b), eight, c.hi_b));
  return c;
}

// a and b hold blocks 0-3 and 4-7, 128-bit lane k = 4 int32 partials of block k (of 4k+...).
inline __m256i block_sums_2x4(__m512i a, __m512i b) {
  const __m512i t = _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
  const __m512i u = _mm512_add_epi32(t, _mm512_shuffle_epi32(t, _MM_PERM_BADC));
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 0, 0, 0, 0, 0, 0, 0, 0);
  return _mm512_castsi512_si256(_mm512_permutexvar_epi32(order, u));
}

// out[r] = W_{row r} . x for r < R; rows are row_stride bytes apart.
template <int R>
void q4_0_rows(const uint8_t* w, size_t row_stride, const BlockQ8_0* x, int64_t nb, float* out) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i ia = load_index(kQ4CodesA), ib = load_index(kQ4CodesB);
  const __m512i id = load_index(kQ4Scales);
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  int64_t b = 0;
  for (; b + 8 <= nb; b += 8) {
    const Q4x8Chunk c = prep_x(x + b);
    for (int r = 0; r < R; ++r) {
      const uint8_t* p = w + r * row_stride + b * sizeof(BlockQ4_0);  // 8 blocks = 72 words
      const __m512i z0 = load64(p), z1 = load64(p + 64);
      const __m512i z2 = _mm512_maskz_loadu_epi16(0xFF, p + 128);  // words 64-71 only
      const __m512i qa = _mm512_permutex2var_epi16(z0, ia, z1);
      const __m512i qb = _mm512_permutex2var_epi16(z1, ib, z2);
      const __m256 dw =
          _mm256_cvtph_ps(_mm512_castsi512_si128(_mm512_permutex2var_epi16(z0, id, z1)));
      __m512i sa = _mm512_dpbusd_epi32(c.neg8_a, _mm512_and_si512(qa, m4), c.lo_a);
      sa = _mm512_dpbusd_epi32(sa, _mm512_and_si512(_mm512_srli_epi16(qa, 4), m4), c.hi_a);
      __m512i sb = _mm512_dpbusd_epi32(c.neg8_b, _mm512_and_si512(qb, m4), c.lo_b);
      sb = _mm512_dpbusd_epi32(sb, _mm512_and_si512(_mm512_srli_epi16(qb, 4), m4), c.hi_b);
      const __m256 rb =
          _mm256_mul_ps(_mm256_cvtepi32_ps(block_sums_2x4(sa, sb)), _mm256_mul_ps(dw, c.d));
      acc[r] = _mm256_add_ps(acc[r], rb);
    }
  }
  for (int r = 0; r < R; ++r) {
    if (b < nb) {
      const auto* wr = reinterpret_cast<const BlockQ4_0*>(w + r * row_stride);
      float t[8] = {};  // +0 in the lanes past the row: an identity for the accumulators
      for (int k = 0; b + k < nb; ++k)
        t[k] =
            static_cast<float>(dot1(wr[b + k], x[b + k])) * (scale(wr[b + k]) * fp16(x[b + k].d));
      acc[r] = _mm256_add_ps(acc[r], _mm256_loadu_ps(t));
    }
    out[r] = fold8(acc[r]);
  }
}

void gemv_q4_0(const void* w, size_t row_stride, const void* xq, float* y, int64_t row_begin,
               int64_t row_end, int64_t n_cols) {
  const auto* base = static_cast<const uint8_t*>(w);
  const auto* x = static_cast<const BlockQ8_0*>(xq);
  int64_t r = row_begin;
  for (; r + 4 <= row_end; r += 4)
    q4_0_rows<4>(base + r * row_stride, row_stride, x, n_cols / kQK, y + r);
  for (; r < row_end; ++r) q4_0_rows<1>(base + r * row_stride, row_stride, x, n_cols / kQK, y + r);
}

void gemm_q4_0(const void* w, size_t row_stride, const void* xq, size_t xq_stride, float* y,
               size_t y_stride, int64_t n_tokens, int64_t row_begin, int64_t row_end,
               int64_t n_cols) {
  const auto* base = static_cast<const uint8_t*>(w);
  const auto* xbase = static_cast<const uint8_t*>(xq);
  for (int64_t r = row_begin; r < row_end; r += 4) {
    for (int64_t t = 0; t < n_tokens; ++t) {
      const auto* x = reinterpret_cast<const BlockQ8_0*>(xbase + t * xq_stride);
      float* out = y + t * y_stride + r;
      if (r + 4 <= row_end)
        q4_0_rows<4>(base + r * row_stride, row_stride, x, n_cols / kQK, out);
      else
        for (int64_t i = r; i < row_end; ++i)
          q4_0_rows<1>(base + i * row_stride, row_stride, x, n_cols / kQK, out + (i - r));
    }
  }
}

// ---- K-quants x Q8_K ----

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

// Word-permute indices over 16 scales: table t repeats scale t*kGroup/16 + i/kGroup for word i,
// i.e. [2c x16, 2c+1 x16] for Q4_K pairs (kGroup 16) and [4q x8, .., 4q+3 x8] for Q6_K quads.
template <int kGroup>
constexpr std::array<std::array<uint16_t, 32>, 4> splat_index() {
  std::array<std::array<uint16_t, 32>, 4> a{};
  for (int t = 0; t < 4; ++t)
    for (int i = 0; i < 32; ++i) a[t][i] = static_cast<uint16_t>(t * (32 / kGroup) + i / kGroup);
  return a;
}
alignas(64) constexpr auto kPairIndex = splat_index<16>();
alignas(64) constexpr auto kQuadIndex = splat_index<8>();

inline __m512i index_vec(const std::array<uint16_t, 32>& a) {
  return _mm512_load_si512(a.data());
}

float dot_q4_k(const void* w_row, const void* x_row, int64_t n_cols) {
  const auto* w = static_cast<const BlockQ4_K*>(w_row);
  const auto* x = static_cast<const BlockQ8_K*>(x_row);
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i idx[4] = {index_vec(kPairIndex[0]), index_vec(kPairIndex[1]),
                          index_vec(kPairIndex[2]), index_vec(kPairIndex[3])};
  Lanes8 acc;
  for (int64_t b = 0; b < n_cols / kQK_K; ++b) {
    const __m128i scm = q4_k_scales_mins(w[b].scales);
    const __m512i sc16 = _mm512_castsi128_si512(_mm_cvtepu8_epi16(scm));  // words 0-7
    const __m256i mn16 = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(
        scm, _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15)));
    const int32_t summ = hsum_i32(_mm256_madd_epi16(load32(x[b].bsums), mn16));
    __m512i isum = _mm512_setzero_si512();
    for (int c = 0; c < 4; ++c) {
      const __m256i q = load32(w[b].qs + 32 * c);
      __m512i codes = _mm512_inserti64x4(_mm512_castsi256_si512(q), q, 1);
      codes = _mm512_and_si512(_mm512_mask_srli_epi16(codes, 0xFFFF0000u, codes, 4), m4);
      const __m512i p = _mm512_maddubs_epi16(codes, load64(x[b].qs + 64 * c));
      isum = _mm512_dpwssd_epi32(isum, p, _mm512_permutexvar_epi16(idx[c], sc16));
    }
    const int32_t sumi = hsum_i32(isum);
    const float dd = fp16(w[b].d) * x[b].d;
    const float dm = fp16(w[b].dmin) * x[b].d;
    acc.add(b, dd * static_cast<float>(sumi) - dm * static_cast<float>(summ));
  }
  return acc.fold();
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
  for (; i + 32 <= n_cols; i += 32)
    acc = _mm256_add_ps(acc, block_lanes<T>(w_row, x_row, i, 0xFFFF, 0xFFFF));
  if (i < n_cols) {  // the zero-padded last block, through masked loads
    const int64_t left = n_cols - i;
    const auto m0 = static_cast<__mmask16>(left >= 16 ? 0xFFFF : (1u << left) - 1);
    const auto m1 = static_cast<__mmask16>(left <= 16 ? 0 : (1u << (left - 16)) - 1);
    acc = _mm256_add_ps(acc, block_lanes<T>(w_row, x_row, i, m0, m1));
  }
  return fold8(acc);
}

}  // namespace

GemvKernels gemv_kernels_avx512(GgmlType type) {
  switch (type) {
    case GgmlType::F32:
      return row_kernels<&dot_float<GgmlType::F32>>();
    case GgmlType::F16:
      return row_kernels<&dot_float<GgmlType::F16>>();
    case GgmlType::BF16:
      return row_kernels<&dot_float<GgmlType::BF16>>();
    case GgmlType::Q4_0:
      return GemvKernels{&gemv_q4_0, &gemm_q4_0};
    case GgmlType::Q5_0:
      return row_kernels<&dot_q8_0_acts<BlockQ5_0>>();
    case GgmlType::Q8_0:
      return row_kernels<&dot_q8_0_acts<BlockQ8_0>>();
    case GgmlType::MXFP4:
      return row_kernels<&dot_q8_0_acts<BlockMXFP4>>();
    case GgmlType::Q4_K:
      return row_kernels<&dot_q4_k>();
    case GgmlType::Q6_K:
      return row_kernels<&dot_q6_k>();
    default:
      return GemvKernels{nullptr, nullptr};
  }
}

}  // namespace strata::kernels::detail

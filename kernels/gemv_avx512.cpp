// AVX-512 (F/BW/VL/DQ + VNNI) GEMV/GEMM kernels: the 32-element formats use 256-bit vpdpbusd
// over 16 rows at once (gemv_rows_internal.h), Q6_K and BF16 use 512-bit integer / load work; the
// float accumulators stay 8 lanes wide, so results equal gemv_ref.cpp bit for bit (canonical
// order in gemv.cpp).
// Tested by tests/test_gemv.cpp; measured by bench/bench_gemv.cpp.
#include <immintrin.h>

#include <array>
#include <cstring>
#include <type_traits>

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

}  // namespace

// Types without an entry here use the AVX2 kernels (bit-identical): on the machine measured in
// bench/RESULTS.md the 512-bit versions of Q4_K, F16 and F32 were not faster than AVX2.
GemvKernels gemv_kernels_avx512(GgmlType type) {
  static const bool vbmi = __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("gfni");
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
    case GgmlType::Q6_K:
      return row_kernels<&dot_q6_k>();
    default:
      return GemvKernels{nullptr, nullptr};
  }
}

}  // namespace strata::kernels::detail

// 256-bit helpers shared by the kQ2_Kx16 / kQ4_Kx16 / kQ5_Kx16 kernels of
// gemv_interleaved_avx2.cpp (vpmaddubsw) and gemv_interleaved_avxvnni.cpp (vpdpbusd): the
// canonical float step of the layouts with mins and the Q4_K / Q5_K mins' integer sum. Include
// only from those two files.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace strata::kernels::detail {
namespace {

// Bytes j and j + 1 of every dword, zero-extended into its two int16 halves.
template <int j>
inline __m256i pair_bytes(__m256i v) {
  constexpr char z = -128;
  return _mm256_shuffle_epi8(
      v, _mm256_setr_epi8(j, z, j + 1, z, 4 + j, z, 5 + j, z, 8 + j, z, 9 + j, z, 12 + j, z, 13 + j,
                          z, j, z, j + 1, z, 4 + j, z, 5 + j, z, 8 + j, z, 9 + j, z, 12 + j, z,
                          13 + j, z));
}

// The canonical float step of the layouts with mins (kQ2_Kx16, kQ4_Kx16) for rows 8h..8h+7:
// (d_w * d_x) * (float)sumi - (dmin_w * d_x) * (float)summ, the rows' fp16 d at blk, dmin at
// blk + 32.
inline __m256 min_step(const uint8_t* blk, int h, float d_x, __m256i sumi, __m256i summ) {
  const __m256 dx = _mm256_set1_ps(d_x);
  const __m256 dd = _mm256_mul_ps(
      _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 16 * h))), dx);
  const __m256 dm = _mm256_mul_ps(
      _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 32 + 16 * h))), dx);
  return _mm256_sub_ps(_mm256_mul_ps(dd, _mm256_cvtepi32_ps(sumi)),
                       _mm256_mul_ps(dm, _mm256_cvtepi32_ps(summ)));
}

// The activation's 16-element bsums summed in pairs (sub-block s's sum in word s), in both
// 128-bit halves.
inline __m256i bsum_pairs(const int16_t* bsums) {
  return _mm256_broadcastsi128_si256(
      _mm_hadd_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bsums)),
                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(bsums + 8))));
}

// Q4_K / Q5_K mins of 8 rows: sum over sub-blocks s of min_s x (bsums[2s] + bsums[2s + 1]), per
// lane, from the rows' scale dwords S1 (bytes 4-7) and S2 (8-11) as q4_k_scale_min unpacks them,
// two sub-blocks per vpmaddwd (the pair sums bp, at most 2 x 16 x 128 = 4096 in magnitude, are
// int16).
inline __m256i q4_k_mins(__m256i s1, __m256i s2, __m256i bp) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i mn_lo = _mm256_and_si256(s1, _mm256_set1_epi8(0x3F));  // mins 0-3
  const __m256i mn_hi = _mm256_or_si256(
      _mm256_and_si256(_mm256_srli_epi32(s2, 4), m4),
      _mm256_and_si256(_mm256_srli_epi32(s1, 2), _mm256_set1_epi8(0x30)));  // mins 4-7
  return _mm256_add_epi32(
      _mm256_add_epi32(_mm256_madd_epi16(pair_bytes<0>(mn_lo), _mm256_shuffle_epi32(bp, 0x00)),
                       _mm256_madd_epi16(pair_bytes<2>(mn_lo), _mm256_shuffle_epi32(bp, 0x55))),
      _mm256_add_epi32(_mm256_madd_epi16(pair_bytes<0>(mn_hi), _mm256_shuffle_epi32(bp, 0xAA)),
                       _mm256_madd_epi16(pair_bytes<2>(mn_hi), _mm256_shuffle_epi32(bp, 0xFF))));
}

}  // namespace
}  // namespace strata::kernels::detail

// AVX2 twins of the activation quantizers in quant.cpp (quant_q8_0_activation, quant_q8_k): the
// same float operations per element (one multiply, round half to even), the same scale arithmetic
// in scalar code, so the bytes equal the scalar twins' (tests/test_quant.cpp, random rows at
// awkward sizes, ties and zero blocks). A decode step quantizes a few rows of 2-4K floats per layer
// on one thread; the scalar Q8_0 loop (a libm nearbyint call per element) took ~7 us per 2048.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/quant.h"
#include "kernels/quant_internal.h"

namespace strata::kernels::detail {
namespace {

// The sign bit of every lane (a function, not a namespace-scope constant: no AVX in static
// initialisation, which runs on every CPU).
inline __m256 sign_bit() {
  return _mm256_set1_ps(-0.0f);
}

// max over lanes of acc (lanes hold no NaN: see lane_absmax).
float hmax(__m256 acc) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

// Lane-wise running max of |v| into acc, as the scalar std::max(amax, |x|): max_ps(a, b) returns b
// unless a > b, so a NaN candidate never enters (and the lanes' order does not matter).
inline __m256 lane_absmax(__m256 acc, __m256 v) {
  return _mm256_max_ps(_mm256_andnot_ps(sign_bit(), v), acc);
}

// round-half-to-even(v * s) as int32 lanes (the values are integers in [-127, 127]).
inline __m256i round_scaled(__m256 v, __m256 s) {
  return _mm256_cvtps_epi32(
      _mm256_round_ps(_mm256_mul_ps(v, s), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

// 32 int32 lanes (in order) into 32 int8 at dst; no lane needs saturation.
inline void pack32(const __m256i* i, int8_t* dst) {
  const __m256i a = _mm256_packs_epi32(i[0], i[1]);  // per 128-bit half: 4 of i0, 4 of i1
  const __m256i b = _mm256_packs_epi32(i[2], i[3]);
  const __m256i bytes = _mm256_packs_epi16(a, b);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), _mm256_permutevar8x32_epi32(bytes, order));
}

int32_t hsum(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

}  // namespace

void quant_q8_0_activation_avx2(const float* x, BlockQ8_0* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    __m256 v[4];
    __m256 acc = _mm256_setzero_ps();
    for (int k = 0; k < 4; ++k) {
      v[k] = _mm256_loadu_ps(x + 8 * k);
      acc = lane_absmax(acc, v[k]);
    }
    const float amax = hmax(acc);
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    y[i].d = f32_to_fp16(d);
    const __m256 s = _mm256_set1_ps(id);
    __m256i q[4];
    for (int k = 0; k < 4; ++k) q[k] = round_scaled(v[k], s);
    pack32(q, y[i].qs);
  }
}

void quant_q8_k_avx2(const float* x, BlockQ8_K* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK_K) {
    __m256 acc = _mm256_setzero_ps();
    for (int k = 0; k < kQK_K / 8; ++k) acc = lane_absmax(acc, _mm256_loadu_ps(x + 8 * k));
    const float amax = hmax(acc);
    if (amax == 0.0f) {  // signed_absmax is 0: every element is zero (or NaN)
      y[i].d = 0.0f;
      std::memset(y[i].qs, 0, sizeof(y[i].qs));
      std::memset(y[i].bsums, 0, sizeof(y[i].bsums));
      continue;
    }
    // signed_absmax: the first element of largest magnitude, sign kept.
    float max = 0.0f;
    const __m256 target = _mm256_set1_ps(amax);
    for (int k = 0; k < kQK_K / 8; ++k) {
      const __m256 a = _mm256_andnot_ps(sign_bit(), _mm256_loadu_ps(x + 8 * k));
      const int hit = _mm256_movemask_ps(_mm256_cmp_ps(a, target, _CMP_EQ_OQ));
      if (hit != 0) {
        max = x[8 * k + __builtin_ctz(static_cast<unsigned>(hit))];
        break;
      }
    }
    const float iscale = -127.f / max;
    const __m256 s = _mm256_set1_ps(iscale);
    for (int g = 0; g < kQK_K / 32; ++g) {
      __m256i q[4];
      for (int k = 0; k < 4; ++k) q[k] = round_scaled(_mm256_loadu_ps(x + 32 * g + 8 * k), s);
      pack32(q, y[i].qs + 32 * g);
      y[i].bsums[2 * g] = static_cast<int16_t>(hsum(_mm256_add_epi32(q[0], q[1])));
      y[i].bsums[2 * g + 1] = static_cast<int16_t>(hsum(_mm256_add_epi32(q[2], q[3])));
    }
    y[i].d = 1 / iscale;
  }
}

}  // namespace strata::kernels::detail

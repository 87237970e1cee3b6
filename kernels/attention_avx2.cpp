// attention_row with AVX2 (compiled with -mavx2 -mfma, -ffp-contract=off: only the order's own
// fused multiply-adds): the same float operations as attention_row_portable (order in
// attention_core.h), 8 lanes at a time. Scores of 4 keys share each load of q; the weighted sum
// keeps 64 output floats in registers across all keys. Tested by tests/test_ops.cpp.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/attention_core.h"
#include "kernels/portable_math.h"

namespace strata::kernels {
namespace {

// ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7))
inline float fold8(__m256 v) {
  alignas(32) float a[8];
  _mm256_store_ps(a, v);
  return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

// KV elements i..i+7 of a row as floats: F32 as they are, F16 widened exactly (F16C), Q8_0 codes
// times their block's scale (exact; i % 8 == 0, so the 8 share a block).
inline __m256 load8(const float* row, uint32_t i) {
  return _mm256_loadu_ps(row + i);
}
inline __m256 load8(const uint16_t* row, uint32_t i) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + i)));
}
inline __m256 load8(const std::byte* row, uint32_t i) {
  const std::byte* b = q8_block(row, i);
  uint16_t d;
  std::memcpy(&d, b, sizeof(d));
  const __m256i q =
      _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 2 + i % kQ8Block)));
  return _mm256_mul_ps(_mm256_cvtepi32_ps(q), _mm256_set1_ps(_cvtsh_ss(d)));
}

// Lanes past n of the last partial group: the scalar steps on lane i % 8.
template <typename T>
inline __m256 dot_tail(__m256 acc, const float* a, const T* b, uint32_t i, uint32_t n) {
  if (i == n) return acc;
  alignas(32) float t[8];
  _mm256_store_ps(t, acc);
  for (; i < n; ++i) t[i % 8] = std::fma(a[i], widen_at(b, i), t[i % 8]);
  return _mm256_load_ps(t);
}

// portable_expf on 8 lanes, operation for operation.
inline __m256 exp8(__m256 x) {
  const __m256 kf = _mm256_sub_ps(
      _mm256_add_ps(_mm256_mul_ps(x, _mm256_set1_ps(0x1.715476p+0f)), _mm256_set1_ps(0x1.8p23f)),
      _mm256_set1_ps(0x1.8p23f));
  const __m256 r = _mm256_sub_ps(_mm256_sub_ps(x, _mm256_mul_ps(kf, _mm256_set1_ps(0x1.62e4p-1f))),
                                 _mm256_mul_ps(kf, _mm256_set1_ps(0x1.7f7d1cp-20f)));
  __m256 p = _mm256_set1_ps(0x1.a01a02p-13f);
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(0x1.6c16c2p-10f));
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(0x1.111112p-7f));
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(0x1.555556p-5f));
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(0x1.555556p-3f));
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(0.5f));
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 er = _mm256_add_ps(one, _mm256_add_ps(r, _mm256_mul_ps(_mm256_mul_ps(r, r), p)));
  // k in [-151, 129] where it matters; clamp so every shift below is defined.
  const __m256i k = _mm256_max_epi32(
      _mm256_min_epi32(_mm256_cvttps_epi32(kf), _mm256_set1_epi32(129)), _mm256_set1_epi32(-151));
  auto pow2 = [](__m256i e) { return _mm256_castsi256_ps(_mm256_slli_epi32(e, 23)); };
  const __m256 normal = _mm256_mul_ps(er, pow2(_mm256_add_epi32(k, _mm256_set1_epi32(127))));
  const __m256 big = _mm256_mul_ps(_mm256_mul_ps(er, pow2(_mm256_set1_epi32(254))), pow2(k));
  const __m256 small =
      _mm256_mul_ps(_mm256_mul_ps(er, pow2(_mm256_add_epi32(k, _mm256_set1_epi32(227)))),
                    pow2(_mm256_set1_epi32(27)));
  const __m256i is_big = _mm256_cmpgt_epi32(k, _mm256_set1_epi32(127));
  const __m256i is_small = _mm256_cmpgt_epi32(_mm256_set1_epi32(-126), k);
  __m256 y = _mm256_blendv_ps(normal, big, _mm256_castsi256_ps(is_big));
  y = _mm256_blendv_ps(y, small, _mm256_castsi256_ps(is_small));
  y = _mm256_blendv_ps(y, _mm256_setzero_ps(),
                       _mm256_cmp_ps(x, _mm256_set1_ps(-104.0f), _CMP_LT_OQ));
  y = _mm256_blendv_ps(y, _mm256_castsi256_ps(_mm256_set1_epi32(0x7F800000)),
                       _mm256_cmp_ps(x, _mm256_set1_ps(89.0f), _CMP_GT_OQ));
  return _mm256_blendv_ps(y, _mm256_add_ps(x, x), _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

}  // namespace

void expf_avx2(const float* x, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, exp8(_mm256_loadu_ps(x + i)));
  for (; i < n; ++i) out[i] = portable_expf(x[i]);
}

void swiglu_row_avx2(const float* gate, const float* up, float* out, int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    // portable_swiglu: (g / (1 + e^-g)) * u, each step rounded on its own (IEEE div, add, mul).
    const __m256 e = exp8(_mm256_xor_ps(g, sign));
    const __m256 s = _mm256_div_ps(g, _mm256_add_ps(one, e));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(s, _mm256_loadu_ps(up + i)));
  }
  for (; i < n; ++i) out[i] = portable_swiglu(gate[i], up[i]);
}

void softmax_scores_avx2(float* sc, uint32_t n, bool has_sink, float sink) {
  uint32_t j;
  // Max (exact in any order), exp, and the 8 double lane sums (lane j % 8).
  const uint32_t n8 = n & ~7u;
  __m256 mv = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  for (j = 0; j < n8; j += 8) mv = _mm256_max_ps(_mm256_loadu_ps(sc + j), mv);
  alignas(32) float ml[8];
  _mm256_store_ps(ml, mv);
  float m = -std::numeric_limits<float>::infinity();
  for (int l = 0; l < 8; ++l) m = std::max(m, ml[l]);
  for (j = n8; j < n; ++j) m = std::max(m, sc[j]);
  if (has_sink) m = std::max(m, sink);
  const __m256 mb = _mm256_set1_ps(m);
  __m256d b_lo = _mm256_setzero_pd(), b_hi = _mm256_setzero_pd();
  for (j = 0; j < n8; j += 8) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(sc + j), mb));
    _mm256_storeu_ps(sc + j, e);
    b_lo = _mm256_add_pd(b_lo, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
    b_hi = _mm256_add_pd(b_hi, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
  }
  alignas(32) double b[8];
  _mm256_store_pd(b, b_lo);
  _mm256_store_pd(b + 4, b_hi);
  for (j = n8; j < n; ++j) {
    sc[j] = portable_expf(sc[j] - m);
    b[j % 8] = b[j % 8] + static_cast<double>(sc[j]);
  }
  double sum = ((b[0] + b[1]) + (b[2] + b[3])) + ((b[4] + b[5]) + (b[6] + b[7]));
  if (has_sink) sum = sum + static_cast<double>(portable_expf(sink - m));
  const float inv = static_cast<float>(1.0 / sum);
  const __m256 invv = _mm256_set1_ps(inv);
  for (j = 0; j < n8; j += 8)
    _mm256_storeu_ps(sc + j, _mm256_mul_ps(_mm256_loadu_ps(sc + j), invv));
  for (j = n8; j < n; ++j) sc[j] = sc[j] * inv;
}

namespace {

template <typename T>
void row_avx2(const AttentionRow& a, float* sc, float* out) {
  const T* K = row_keys<T>(a);
  const T* V = row_values<T>(a);
  const uint32_t n = a.n_kv, dk = a.head_dim_k, dv = a.head_dim_v;
  const uint32_t dk8 = dk & ~7u;
  // Scores, 4 keys at a time (each key's lanes and fold are exactly dot8's).
  uint32_t j = 0;
  for (; j + 4 <= n; j += 4) {
    const T* k0 = K + j * a.k_stride;
    const T* k1 = k0 + a.k_stride;
    const T* k2 = k1 + a.k_stride;
    const T* k3 = k2 + a.k_stride;
    prefetch_keys_ahead<T>(a, j);
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    for (uint32_t i = 0; i < dk8; i += 8) {
      const __m256 q = _mm256_loadu_ps(a.q + i);
      s0 = _mm256_fmadd_ps(q, load8(k0, i), s0);
      s1 = _mm256_fmadd_ps(q, load8(k1, i), s1);
      s2 = _mm256_fmadd_ps(q, load8(k2, i), s2);
      s3 = _mm256_fmadd_ps(q, load8(k3, i), s3);
    }
    sc[j] = fold8(dot_tail(s0, a.q, k0, dk8, dk)) * a.scale;
    sc[j + 1] = fold8(dot_tail(s1, a.q, k1, dk8, dk)) * a.scale;
    sc[j + 2] = fold8(dot_tail(s2, a.q, k2, dk8, dk)) * a.scale;
    sc[j + 3] = fold8(dot_tail(s3, a.q, k3, dk8, dk)) * a.scale;
  }
  for (; j < n; ++j) {
    const T* kj = K + j * a.k_stride;
    __m256 s = _mm256_setzero_ps();
    for (uint32_t i = 0; i < dk8; i += 8)
      s = _mm256_fmadd_ps(_mm256_loadu_ps(a.q + i), load8(kj, i), s);
    sc[j] = fold8(dot_tail(s, a.q, kj, dk8, dk)) * a.scale;
  }
  softmax_scores_avx2(sc, n, a.has_sink, a.sink);
  // Weighted sum of V: 64 outputs in registers across all keys, then 8, then the scalar rest.
  uint32_t d = 0;
  for (; d + 64 <= dv; d += 64) {
    __m256 o[8];
    for (int r = 0; r < 8; ++r) o[r] = _mm256_setzero_ps();
    const T* vj = V;
    for (j = 0; j < n; ++j, vj += a.v_stride) {
      prefetch_values_ahead(a, vj, d, j);
      const __m256 p = _mm256_broadcast_ss(sc + j);
      for (int r = 0; r < 8; ++r) o[r] = _mm256_fmadd_ps(p, load8(vj, d + 8 * r), o[r]);
    }
    for (int r = 0; r < 8; ++r) _mm256_storeu_ps(out + d + 8 * r, o[r]);
  }
  for (; d + 8 <= dv; d += 8) {
    __m256 o = _mm256_setzero_ps();
    const T* vj = V;
    for (j = 0; j < n; ++j, vj += a.v_stride)
      o = _mm256_fmadd_ps(_mm256_broadcast_ss(sc + j), load8(vj, d), o);
    _mm256_storeu_ps(out + d, o);
  }
  for (; d < dv; ++d) {
    float o = 0.0f;
    for (j = 0; j < n; ++j) o = std::fma(sc[j], widen_at(V + j * a.v_stride, d), o);
    out[d] = o;
  }
}

}  // namespace

void attention_row_avx2(const AttentionRow& a, float* sc, float* out) {
  if (a.k8 != nullptr)
    row_avx2<std::byte>(a, sc, out);
  else if (a.k16 != nullptr)
    row_avx2<uint16_t>(a, sc, out);
  else
    row_avx2<float>(a, sc, out);
}

}  // namespace strata::kernels

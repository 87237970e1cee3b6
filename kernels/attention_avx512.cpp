// attention_row_pair with AVX-512 (compiled with -mavx512f -mavx512dq, no FMA; -ffp-contract=off):
// two heads of one GQA group, which read the same K and V rows, in one pass. Each 512-bit register
// holds head a's 8 lanes in its low half and head b's in its high half, and every K or V load is
// broadcast to both halves, so each lane does exactly what attention_row_avx2 does for its head
// (the order in attention_core.h) with half the instructions and half the loads. Tested by
// tests/test_ops.cpp (bit for bit against attention_row_avx2 and the portable variant).
#include <immintrin.h>

#include "kernels/attention_core.h"

// GCC 12 reports the _mm512_undefined_*() pass-through operands inside its own broadcast / insert
// intrinsics as uninitialized (GCC bug 105593); nothing in this file reads them.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace strata::kernels {
namespace {

// Head a's fold8 and head b's of one register, each times its scale.
inline void fold_pair(__m512 v, float scale_a, float scale_b, float* sa, float* sb) {
  alignas(64) float t[16];
  _mm512_store_ps(t, v);
  *sa = (((t[0] + t[1]) + (t[2] + t[3])) + ((t[4] + t[5]) + (t[6] + t[7]))) * scale_a;
  *sb = (((t[8] + t[9]) + (t[10] + t[11])) + ((t[12] + t[13]) + (t[14] + t[15]))) * scale_b;
}

// The 8 floats at p in both halves.
inline __m512 both(const float* p) {
  return _mm512_broadcast_f32x8(_mm256_loadu_ps(p));
}

// a in the low half, b in the high half.
inline __m512 halves(__m256 a, __m256 b) {
  return _mm512_insertf32x8(_mm512_castps256_ps512(a), b, 1);
}

}  // namespace

void attention_row_pair_avx512(const AttentionRow& a, const AttentionRow& b, float* sc,
                               float* out_a, float* out_b) {
  const uint32_t n = a.n_kv, dk = a.head_dim_k, dv = a.head_dim_v;
  float* sa = sc;
  float* sb = sc + n;
  // Scores, 4 keys at a time; q of both heads re-paired per 8 lanes from an L1-resident buffer.
  __m512 qq[kAttentionPairMaxDim / 8];
  for (uint32_t i = 0; i < dk; i += 8)
    qq[i / 8] = halves(_mm256_loadu_ps(a.q + i), _mm256_loadu_ps(b.q + i));
  uint32_t j = 0;
  for (; j + 4 <= n; j += 4) {
    const float* k0 = a.k + j * a.k_stride;
    const float* k1 = k0 + a.k_stride;
    const float* k2 = k1 + a.k_stride;
    const float* k3 = k2 + a.k_stride;
    prefetch_keys_ahead(a, j);
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    for (uint32_t i = 0; i < dk; i += 8) {
      const __m512 q = qq[i / 8];
      s0 = _mm512_add_ps(s0, _mm512_mul_ps(q, both(k0 + i)));
      s1 = _mm512_add_ps(s1, _mm512_mul_ps(q, both(k1 + i)));
      s2 = _mm512_add_ps(s2, _mm512_mul_ps(q, both(k2 + i)));
      s3 = _mm512_add_ps(s3, _mm512_mul_ps(q, both(k3 + i)));
    }
    fold_pair(s0, a.scale, b.scale, sa + j, sb + j);
    fold_pair(s1, a.scale, b.scale, sa + j + 1, sb + j + 1);
    fold_pair(s2, a.scale, b.scale, sa + j + 2, sb + j + 2);
    fold_pair(s3, a.scale, b.scale, sa + j + 3, sb + j + 3);
  }
  for (; j < n; ++j) {
    const float* kj = a.k + j * a.k_stride;
    __m512 s = _mm512_setzero_ps();
    for (uint32_t i = 0; i < dk; i += 8)
      s = _mm512_add_ps(s, _mm512_mul_ps(qq[i / 8], both(kj + i)));
    fold_pair(s, a.scale, b.scale, sa + j, sb + j);
  }
  softmax_scores_avx2(sa, n, a.has_sink, a.sink);
  softmax_scores_avx2(sb, n, b.has_sink, b.sink);
  // Weighted sum of V: 64 outputs of each head in registers across all keys, then 8.
  uint32_t d = 0;
  for (; d + 64 <= dv; d += 64) {
    __m512 o[8];
    for (int r = 0; r < 8; ++r) o[r] = _mm512_setzero_ps();
    const float* vj = a.v + d;
    for (j = 0; j < n; ++j, vj += a.v_stride) {
      prefetch_values_ahead(a, vj, j);
      const __m512 p = halves(_mm256_set1_ps(sa[j]), _mm256_set1_ps(sb[j]));
      for (int r = 0; r < 8; ++r) o[r] = _mm512_add_ps(o[r], _mm512_mul_ps(p, both(vj + 8 * r)));
    }
    for (int r = 0; r < 8; ++r) {
      _mm256_storeu_ps(out_a + d + 8 * r, _mm512_castps512_ps256(o[r]));
      _mm256_storeu_ps(out_b + d + 8 * r, _mm512_extractf32x8_ps(o[r], 1));
    }
  }
  for (; d < dv; d += 8) {
    __m512 o = _mm512_setzero_ps();
    const float* vj = a.v + d;
    for (j = 0; j < n; ++j, vj += a.v_stride)
      o = _mm512_add_ps(
          o, _mm512_mul_ps(halves(_mm256_set1_ps(sa[j]), _mm256_set1_ps(sb[j])), both(vj)));
    _mm256_storeu_ps(out_a + d, _mm512_castps512_ps256(o));
    _mm256_storeu_ps(out_b + d, _mm512_extractf32x8_ps(o, 1));
  }
}

}  // namespace strata::kernels

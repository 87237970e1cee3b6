// attention_row with AVX2 (compiled with -mavx2 -mfma, -ffp-contract=off: only the order's own
// fused multiply-adds): the same float operations as attention_row_portable (order in
// attention_core.h), 8 lanes at a time. Scores of 4 keys share each load of q; the weighted sum
// keeps 64 output floats in registers across all keys. Tested by tests/test_ops.cpp.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

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
inline float q8_scale_f16c(const std::byte* block) {
  uint16_t d;
  std::memcpy(&d, block, sizeof(d));
  return _cvtsh_ss(d);
}
// 8 Q8_0 codes at p times their block's scale d (in every lane).
inline __m256 q8_codes8(const std::byte* p, __m256 d) {
  const __m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  return _mm256_mul_ps(_mm256_cvtepi32_ps(q), d);
}
inline __m256 load8(const std::byte* row, uint32_t i) {
  const std::byte* b = q8_block(row, i);
  return q8_codes8(b + 2 + i % kQ8Block, _mm256_set1_ps(q8_scale_f16c(b)));
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

void softmax_scores_avx2(float* sc, uint32_t n, const AttentionRow& row) {
  const bool has_sink = row.has_sink;
  const float sink = row.sink;
  if (row.softcap > 0.0f)
    for (uint32_t i = 0; i < n; ++i) sc[i] = row.softcap * std::tanh(sc[i]);
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
  softmax_scores_avx2(sc, n, a);
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

// ---- attention_rows_group_avx2: the heads of a GQA group, each K and V element widened once ----

// [fold8(a), fold8(b), fold8(c), fold8(d)]: adjacent lanes, then pairs of those, then the two
// halves, each add one of dot8's in its order (the shuffles only move floats).
inline __m128 fold4(__m256 a, __m256 b, __m256 c, __m256 d) {
  const __m256 ab = _mm256_add_ps(_mm256_shuffle_ps(a, b, 0x88), _mm256_shuffle_ps(a, b, 0xDD));
  const __m256 cd = _mm256_add_ps(_mm256_shuffle_ps(c, d, 0x88), _mm256_shuffle_ps(c, d, 0xDD));
  const __m256 q = _mm256_add_ps(_mm256_shuffle_ps(ab, cd, 0x88), _mm256_shuffle_ps(ab, cd, 0xDD));
  return _mm_add_ps(_mm256_castps256_ps128(q), _mm256_extractf128_ps(q, 1));
}

// Scores of HS heads (rows[0 .. HS)) against keys [j0, j1), NK keys a step: each K chunk widened
// once for the HS heads. The next block's K rows (to next_end) are prefetched on the way.
template <int HS, int NK, typename T>
void set_scores(const AttentionRow* rows, float* sc, uint32_t j0, uint32_t j1, uint32_t next_end) {
  const AttentionRow& a = rows[0];
  const T* K = row_keys<T>(a);
  const uint32_t n = a.n_kv, dk = a.head_dim_k;
  const size_t kbytes = row_bytes<T>(dk);
  constexpr int kAcc = (HS * NK + 3) / 4 * 4;
  const float* qs[HS];
  float scale[HS];
  for (int h = 0; h < HS; ++h) {
    qs[h] = rows[h].q;
    scale[h] = rows[h].scale;
  }
  uint32_t jp = j1;  // the next row to prefetch
  uint32_t j = j0;
  for (; j + NK <= j1; j += NK) {
    for (int r = 0; r < NK && jp < next_end; ++r, ++jp)
      prefetch_bytes<3>(K + size_t{jp} * a.k_stride, kbytes);
    const T* kr[NK];
    for (int r = 0; r < NK; ++r) kr[r] = K + size_t{j + r} * a.k_stride;
    __m256 s[kAcc];
    for (int i = 0; i < kAcc; ++i) s[i] = _mm256_setzero_ps();
    const auto step = [&](uint32_t i, const __m256* x) {
      for (int h = 0; h < HS; ++h) {
        const __m256 q = _mm256_loadu_ps(qs[h] + i);
        for (int r = 0; r < NK; ++r) s[h * NK + r] = _mm256_fmadd_ps(q, x[r], s[h * NK + r]);
      }
    };
    if constexpr (sizeof(T) == 1) {
      // Q8_0: each block's scale widened once per key for its 4 chunks.
      for (uint32_t i = 0; i < dk; i += kQ8Block) {
        __m256 d[NK];
        for (int r = 0; r < NK; ++r) d[r] = _mm256_set1_ps(q8_scale_f16c(q8_block(kr[r], i)));
        for (uint32_t c = 0; c < kQ8Block; c += 8) {
          __m256 x[NK];
          for (int r = 0; r < NK; ++r) x[r] = q8_codes8(q8_block(kr[r], i) + 2 + c, d[r]);
          step(i + c, x);
        }
      }
    } else {
      for (uint32_t i = 0; i < dk; i += 8) {
        __m256 x[NK];
        for (int r = 0; r < NK; ++r) x[r] = load8(kr[r], i);
        step(i, x);
      }
    }
    alignas(16) float t[kAcc];
    for (int i = 0; i < kAcc; i += 4)
      _mm_store_ps(t + i, fold4(s[i], s[i + 1], s[i + 2], s[i + 3]));
    for (int h = 0; h < HS; ++h)
      for (int r = 0; r < NK; ++r) sc[size_t(h) * n + j + r] = t[h * NK + r] * scale[h];
  }
  for (; j < j1; ++j) {
    const T* kj = K + size_t{j} * a.k_stride;
    for (int h = 0; h < HS; ++h) {
      __m256 acc = _mm256_setzero_ps();
      for (uint32_t i = 0; i < dk; i += 8)
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(qs[h] + i), load8(kj, i), acc);
      sc[size_t(h) * n + j] = fold8(acc) * scale[h];
    }
  }
}

// outs[h][d .. d + 8W) of HS heads over keys [j0, j1) (a block of at most `block` keys),
// continuing the partial sums in outs (from zero at j0 == 0): each lane one output dimension of
// one head, out = fma(p_j, v_j[d], out) in key order. With prefetch, the same slice of the next
// block's V rows is prefetched on the way, so over a block's passes its successor streams in.
template <int HS, int W, typename T>
void set_values(const AttentionRow& a, const float* sc, float* const* outs, uint32_t d, uint32_t j0,
                uint32_t j1, uint32_t block, bool prefetch) {
  const uint32_t n = a.n_kv;
  __m256 o[HS][W];
  for (int h = 0; h < HS; ++h)
    for (int w = 0; w < W; ++w)
      o[h][w] = j0 == 0 ? _mm256_setzero_ps() : _mm256_loadu_ps(outs[h] + d + 8 * w);
  const T* vj = row_values<T>(a) + size_t{j0} * a.v_stride;
  const size_t ahead = size_t{block} * a.v_stride;
  const size_t slice = row_bytes<T>(8 * W);
  const uint32_t prefetch_end = prefetch ? n : 0;
  for (uint32_t j = j0; j < j1; ++j, vj += a.v_stride) {
    if (j + block < prefetch_end) prefetch_bytes<3>(element_at(vj + ahead, d), slice);
    __m256 v[W];
    if constexpr (sizeof(T) == 1 && 8 * W <= kQ8Block) {
      // Q8_0: the slice lies in one block (d is a multiple of 8 W): its scale widened once.
      const std::byte* b = q8_block(vj, d);
      const __m256 scale = _mm256_set1_ps(q8_scale_f16c(b));
      for (int w = 0; w < W; ++w) v[w] = q8_codes8(b + 2 + (d + 8 * w) % kQ8Block, scale);
    } else {
      for (int w = 0; w < W; ++w) v[w] = load8(vj, d + 8 * w);
    }
    for (int h = 0; h < HS; ++h) {
      const __m256 p = _mm256_broadcast_ss(sc + size_t(h) * n + j);
      for (int w = 0; w < W; ++w) o[h][w] = _mm256_fmadd_ps(p, v[w], o[h][w]);
    }
  }
  for (int h = 0; h < HS; ++h)
    for (int w = 0; w < W; ++w) _mm256_storeu_ps(outs[h] + d + 8 * w, o[h][w]);
}

template <int HS, typename T>
void set_scores_any(const AttentionRow* rows, float* sc, uint32_t j0, uint32_t j1,
                    uint32_t next_end) {
  // 8 accumulators or so: enough chains to hide the multiply-add latency, no spills.
  constexpr int kNk = HS >= 3 ? 2 : 4;
  set_scores<HS, kNk, T>(rows, sc, j0, j1, next_end);
}

template <int HS, typename T>
void set_values_any(const AttentionRow& a, const float* sc, float* const* outs, uint32_t j0,
                    uint32_t j1, uint32_t block, bool prefetch) {
  constexpr int kW = HS >= 3 ? 2 : HS == 2 ? 4 : 8;
  uint32_t d = 0;
  for (; d + 8 * kW <= a.head_dim_v; d += 8 * kW)
    set_values<HS, kW, T>(a, sc, outs, d, j0, j1, block, prefetch);
  for (; d < a.head_dim_v; d += 8) set_values<HS, 1, T>(a, sc, outs, d, j0, j1, block, prefetch);
}

// Calls f(integral_constant<HS>, h) for head sets of at most kSet heads covering [0, n_heads).
template <int kSet, typename F>
void for_head_sets(uint32_t n_heads, F&& f) {
  uint32_t h = 0;
  for (; h + kSet <= n_heads; h += kSet) f(std::integral_constant<int, kSet>{}, h);
  if constexpr (kSet > 1) {
    if (h < n_heads) {
      if (n_heads - h == kSet - 1) return f(std::integral_constant<int, kSet - 1>{}, h);
      return for_head_sets<kSet - 1>(n_heads - h, [&](auto hs, uint32_t g) { f(hs, h + g); });
    }
  }
}

template <typename T>
void group_avx2(const AttentionRow* rows, uint32_t n_heads, float* sc, float* const* outs) {
  const AttentionRow& a = rows[0];
  const uint32_t n = a.n_kv;
  // Key blocks whose rows (about 16 KiB of them) stay in L1 while every head set (scores) or
  // every head set and dimension pass (values) goes over them; the next block streams in behind.
  const uint32_t block = attention_key_block<T>(a.head_dim_k);
  for (uint32_t j0 = 0; j0 < n; j0 += block) {
    const uint32_t j1 = std::min(n, j0 + block), next_end = std::min(n, j1 + block);
    for_head_sets<4>(n_heads, [&](auto hs, uint32_t h) {
      set_scores_any<decltype(hs)::value, T>(rows + h, sc + size_t{h} * n, j0, j1,
                                             h == 0 ? next_end : j1);
    });
  }
  for (uint32_t h = 0; h < n_heads; ++h) softmax_scores_avx2(sc + size_t{h} * n, n, rows[h]);
  for (uint32_t j0 = 0; j0 < n; j0 += block) {
    const uint32_t j1 = std::min(n, j0 + block);
    for_head_sets<4>(n_heads, [&](auto hs, uint32_t h) {
      set_values_any<decltype(hs)::value, T>(a, sc + size_t{h} * n, outs + h, j0, j1, block,
                                             h == 0);
    });
  }
}

}  // namespace

void attention_rows_group_avx2(const AttentionRow* rows, uint32_t n_heads, float* scores,
                               float* const* outs) {
  if (rows[0].k8 != nullptr)
    group_avx2<std::byte>(rows, n_heads, scores, outs);
  else if (rows[0].k16 != nullptr)
    group_avx2<uint16_t>(rows, n_heads, scores, outs);
  else
    group_avx2<float>(rows, n_heads, scores, outs);
}

void attention_row_avx2(const AttentionRow& a, float* sc, float* out) {
  if (a.k8 != nullptr)
    row_avx2<std::byte>(a, sc, out);
  else if (a.k16 != nullptr)
    row_avx2<uint16_t>(a, sc, out);
  else
    row_avx2<float>(a, sc, out);
}

}  // namespace strata::kernels

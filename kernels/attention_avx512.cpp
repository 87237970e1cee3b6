// attention_row_pair with AVX-512 (compiled with -mavx512f -mavx512dq -mfma; -ffp-contract=off):
// two heads of one GQA group, which read the same K and V rows, in one pass. Each 512-bit register
// holds head a's 8 lanes in its low half and head b's in its high half, and every K or V load is
// broadcast to both halves, so each lane does exactly what attention_row_avx2 does for its head
// (the order in attention_core.h) with half the instructions and half the loads. Tested by
// tests/test_ops.cpp (bit for bit against attention_row_avx2 and the portable variant).
// attention_rows_group_avx512: up to 8 heads of a group in one pass (scores as head pairs, the
// weighted sum with one lane per output dimension), each K and V row loaded once for all of them.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/attention_core.h"
#include "kernels/portable_math.h"

// GCC 12 reports the _mm512_undefined_*() pass-through operands inside its own broadcast / insert
// intrinsics as uninitialized (GCC bug 105593); nothing in this file reads them.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace strata::kernels {
namespace {

// portable_expf on 16 lanes, operation for operation (attention_avx2.cpp's exp8, 16 wide).
inline __m512 exp16(__m512 x) {
  const __m512 kf = _mm512_sub_ps(
      _mm512_add_ps(_mm512_mul_ps(x, _mm512_set1_ps(0x1.715476p+0f)), _mm512_set1_ps(0x1.8p23f)),
      _mm512_set1_ps(0x1.8p23f));
  const __m512 r = _mm512_sub_ps(_mm512_sub_ps(x, _mm512_mul_ps(kf, _mm512_set1_ps(0x1.62e4p-1f))),
                                 _mm512_mul_ps(kf, _mm512_set1_ps(0x1.7f7d1cp-20f)));
  __m512 p = _mm512_set1_ps(0x1.a01a02p-13f);
  p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(0x1.6c16c2p-10f));
  p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(0x1.111112p-7f));
  p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(0x1.555556p-5f));
  p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(0x1.555556p-3f));
  p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(0.5f));
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 er = _mm512_add_ps(one, _mm512_add_ps(r, _mm512_mul_ps(_mm512_mul_ps(r, r), p)));
  // k in [-151, 129] where it matters; clamp so every shift below is defined.
  const __m512i k = _mm512_max_epi32(
      _mm512_min_epi32(_mm512_cvttps_epi32(kf), _mm512_set1_epi32(129)), _mm512_set1_epi32(-151));
  auto pow2 = [](__m512i e) { return _mm512_castsi512_ps(_mm512_slli_epi32(e, 23)); };
  const __m512 normal = _mm512_mul_ps(er, pow2(_mm512_add_epi32(k, _mm512_set1_epi32(127))));
  const __m512 big = _mm512_mul_ps(_mm512_mul_ps(er, pow2(_mm512_set1_epi32(254))), pow2(k));
  const __m512 small =
      _mm512_mul_ps(_mm512_mul_ps(er, pow2(_mm512_add_epi32(k, _mm512_set1_epi32(227)))),
                    pow2(_mm512_set1_epi32(27)));
  __m512 y = _mm512_mask_blend_ps(_mm512_cmpgt_epi32_mask(k, _mm512_set1_epi32(127)), normal, big);
  y = _mm512_mask_blend_ps(_mm512_cmpgt_epi32_mask(_mm512_set1_epi32(-126), k), y, small);
  y = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(-104.0f), _CMP_LT_OQ), y,
                           _mm512_setzero_ps());
  y = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(89.0f), _CMP_GT_OQ), y,
                           _mm512_castsi512_ps(_mm512_set1_epi32(0x7F800000)));
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), y, _mm512_add_ps(x, x));
}

}  // namespace

void expf_avx512(const float* x, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, exp16(_mm512_loadu_ps(x + i)));
  for (; i < n; ++i) out[i] = portable_expf(x[i]);
}

// softmax_scores_avx2's operations 16 scores a step: the same max, exps, double lane sums (lane
// j % 8: a step's first 8 scores, then its next 8, in j order) and scaling, so the same bits.
void softmax_scores_avx512(float* sc, uint32_t n, const AttentionRow& row) {
  if (row.softcap > 0.0f)
    for (uint32_t i = 0; i < n; ++i) sc[i] = row.softcap * std::tanh(sc[i]);
  const uint32_t n16 = n & ~15u;
  __m512 mv = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  uint32_t j = 0;
  for (; j < n16; j += 16) mv = _mm512_max_ps(_mm512_loadu_ps(sc + j), mv);
  float m = _mm512_reduce_max_ps(mv);
  for (; j < n; ++j) m = std::max(m, sc[j]);
  if (row.has_sink) m = std::max(m, row.sink);
  const __m512 mb = _mm512_set1_ps(m);
  __m512d b = _mm512_setzero_pd();
  for (j = 0; j < n16; j += 16) {
    const __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(sc + j), mb));
    _mm512_storeu_ps(sc + j, e);
    b = _mm512_add_pd(b, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
    b = _mm512_add_pd(b, _mm512_cvtps_pd(_mm512_extractf32x8_ps(e, 1)));
  }
  alignas(64) double lanes[8];
  _mm512_store_pd(lanes, b);
  for (; j < n; ++j) {
    sc[j] = portable_expf(sc[j] - m);
    lanes[j % 8] = lanes[j % 8] + static_cast<double>(sc[j]);
  }
  double sum = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
               ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
  if (row.has_sink) sum = sum + static_cast<double>(portable_expf(row.sink - m));
  const float inv = static_cast<float>(1.0 / sum);
  const __m512 invv = _mm512_set1_ps(inv);
  for (j = 0; j < n16; j += 16)
    _mm512_storeu_ps(sc + j, _mm512_mul_ps(_mm512_loadu_ps(sc + j), invv));
  for (; j < n; ++j) sc[j] = sc[j] * inv;
}

namespace {

// Head a's fold8 and head b's of one register, each times its scale.
inline void fold_pair(__m512 v, float scale_a, float scale_b, float* sa, float* sb) {
  alignas(64) float t[16];
  _mm512_store_ps(t, v);
  *sa = (((t[0] + t[1]) + (t[2] + t[3])) + ((t[4] + t[5]) + (t[6] + t[7]))) * scale_a;
  *sb = (((t[8] + t[9]) + (t[10] + t[11])) + ((t[12] + t[13]) + (t[14] + t[15]))) * scale_b;
}

// KV elements i..i+7 of a row (F16 ones widened exactly, Q8_0 codes times their block's scale,
// exact) in both halves.
inline __m512 both(const float* row, uint32_t i) {
  return _mm512_broadcast_f32x8(_mm256_loadu_ps(row + i));
}
inline __m512 both(const uint16_t* row, uint32_t i) {
  return _mm512_broadcast_f32x8(
      _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + i))));
}
inline float q8_scale_f16c(const std::byte* block) {
  uint16_t d;
  std::memcpy(&d, block, sizeof(d));
  return _cvtsh_ss(d);
}
inline __m512 both(const std::byte* row, uint32_t i) {
  const std::byte* b = q8_block(row, i);
  const __m256i q =
      _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 2 + i % kQ8Block)));
  return _mm512_broadcast_f32x8(
      _mm256_mul_ps(_mm256_cvtepi32_ps(q), _mm256_set1_ps(q8_scale_f16c(b))));
}
// Codes e .. e + 15 of Q8_0 block b (e is 0 or 16) times its scale.
inline __m512 q8_wide16(const std::byte* b, uint32_t e) {
  const __m512i q =
      _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2 + e)));
  return _mm512_mul_ps(_mm512_cvtepi32_ps(q), _mm512_set1_ps(q8_scale_f16c(b)));
}
// KV elements i..i+15 of a row as floats (i % 16 == 0).
inline __m512 load16(const float* row, uint32_t i) {
  return _mm512_loadu_ps(row + i);
}
inline __m512 load16(const uint16_t* row, uint32_t i) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + i)));
}
inline __m512 load16(const std::byte* row, uint32_t i) {
  return q8_wide16(q8_block(row, i), i % kQ8Block);
}

// a in the low half, b in the high half.
inline __m512 halves(__m256 a, __m256 b) {
  return _mm512_insertf32x8(_mm512_castps256_ps512(a), b, 1);
}

// Four keys' scores of two heads from their pair registers a..d (keys j..j+3; low half head a's
// 8 lanes, high half head b's), each folded exactly as dot8 does, ((l0 + l1) + (l2 + l3)) +
// ((l4 + l5) + (l6 + l7)), then times its head's scale: head a's four in 128-bit chunk 0 of the
// result, head b's in chunk 2. (Adjacent lanes, then pairs of those, then the two quads: the
// shuffles only move floats, and each add is one of dot8's in its order.)
inline __m512 fold4_pairs(__m512 a, __m512 b, __m512 c, __m512 d, __m512 scale) {
  const __m512 ab = _mm512_add_ps(_mm512_shuffle_ps(a, b, 0x88), _mm512_shuffle_ps(a, b, 0xDD));
  const __m512 cd = _mm512_add_ps(_mm512_shuffle_ps(c, d, 0x88), _mm512_shuffle_ps(c, d, 0xDD));
  const __m512 q = _mm512_add_ps(_mm512_shuffle_ps(ab, cd, 0x88), _mm512_shuffle_ps(ab, cd, 0xDD));
  const __m512 f = _mm512_add_ps(q, _mm512_shuffle_f32x4(q, q, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm512_mul_ps(f, scale);
}

// Scores of 2P heads (P pairs) against every key, each K row loaded once for all of them.
template <int P, typename T>
void group_scores(const AttentionRow* rows, float* sc) {
  const AttentionRow& a = rows[0];
  const T* K = row_keys<T>(a);
  const uint32_t n = a.n_kv, dk = a.head_dim_k;
  // q of head pair p, 8 lanes at i: qq[p * (dk / 8) + i / 8] (L1-resident).
  __m512 qq[P * kAttentionPairMaxDim / 8];
  __m512 scale[P];
  const uint32_t nc = dk / 8;
  for (int p = 0; p < P; ++p) {
    for (uint32_t i = 0; i < dk; i += 8)
      qq[p * nc + i / 8] =
          halves(_mm256_loadu_ps(rows[2 * p].q + i), _mm256_loadu_ps(rows[2 * p + 1].q + i));
    scale[p] = halves(_mm256_set1_ps(rows[2 * p].scale), _mm256_set1_ps(rows[2 * p + 1].scale));
  }
  const size_t kbytes = row_bytes<T>(dk);
  const uint32_t ahead = attention_key_block<T>(dk);
  uint32_t j = 0;
  for (; j + 4 <= n; j += 4) {
    const T* k0 = K + j * a.k_stride;
    const T* k1 = k0 + a.k_stride;
    const T* k2 = k1 + a.k_stride;
    const T* k3 = k2 + a.k_stride;
    // The K rows a block on (the V rows stream in with the weighted sum's blocks).
    for (uint32_t r = j + ahead; r < j + ahead + 4 && r < n; ++r)
      prefetch_bytes<3>(K + size_t{r} * a.k_stride, kbytes);
    __m512 s[P][4];
    for (int p = 0; p < P; ++p)
      for (int r = 0; r < 4; ++r) s[p][r] = _mm512_setzero_ps();
    const auto step = [&](uint32_t c, __m512 x0, __m512 x1, __m512 x2, __m512 x3) {
      for (int p = 0; p < P; ++p) {
        const __m512 q = qq[p * nc + c];
        s[p][0] = _mm512_fmadd_ps(q, x0, s[p][0]);
        s[p][1] = _mm512_fmadd_ps(q, x1, s[p][1]);
        s[p][2] = _mm512_fmadd_ps(q, x2, s[p][2]);
        s[p][3] = _mm512_fmadd_ps(q, x3, s[p][3]);
      }
    };
    if constexpr (sizeof(T) == 1) {
      // Q8_0: 16 codes of a key widened at once (times the block's scale, exact), then each 8
      // broadcast to both halves.
      const T* kr[4] = {k0, k1, k2, k3};
      for (uint32_t c = 0; c < nc; c += 2) {
        __m512 lo[4], hi[4];
        for (int r = 0; r < 4; ++r) {
          const __m512 x = q8_wide16(q8_block(kr[r], 8 * c), 8 * c % kQ8Block);
          lo[r] = _mm512_shuffle_f32x4(x, x, 0x44);
          hi[r] = _mm512_shuffle_f32x4(x, x, 0xEE);
        }
        step(c, lo[0], lo[1], lo[2], lo[3]);
        step(c + 1, hi[0], hi[1], hi[2], hi[3]);
      }
    } else {
      for (uint32_t c = 0; c < nc; ++c)
        step(c, both(k0, 8 * c), both(k1, 8 * c), both(k2, 8 * c), both(k3, 8 * c));
    }
    for (int p = 0; p < P; ++p) {
      const __m512 f = fold4_pairs(s[p][0], s[p][1], s[p][2], s[p][3], scale[p]);
      _mm_storeu_ps(sc + size_t(2 * p) * n + j, _mm512_castps512_ps128(f));
      _mm_storeu_ps(sc + size_t(2 * p + 1) * n + j, _mm512_extractf32x4_ps(f, 2));
    }
  }
  for (; j < n; ++j) {
    const T* kj = K + j * a.k_stride;
    for (int p = 0; p < P; ++p) {
      __m512 s = _mm512_setzero_ps();
      for (uint32_t c = 0; c < nc; ++c) s = _mm512_fmadd_ps(qq[p * nc + c], both(kj, 8 * c), s);
      fold_pair(s, rows[2 * p].scale, rows[2 * p + 1].scale, sc + size_t(2 * p) * n + j,
                sc + size_t(2 * p + 1) * n + j);
    }
  }
}

// The weighted sum over keys [j0, j1) (a block of at most `block` keys) for H heads at dims
// d .. d + 16 W, continuing outs' partial sums (from zero when first). The same slice of the next
// block's V rows is prefetched on the way, so over a block's passes its successor streams in.
template <int H, int W, typename T>
void group_values_block(const AttentionRow& a, const float* sc, float* const* outs, uint32_t d,
                        uint32_t j0, uint32_t j1, uint32_t block) {
  const uint32_t n = a.n_kv;
  __m512 o[H][W];
  for (int h = 0; h < H; ++h)
    for (int w = 0; w < W; ++w)
      o[h][w] = j0 == 0 ? _mm512_setzero_ps() : _mm512_loadu_ps(outs[h] + d + 16 * w);
  const T* vj = row_values<T>(a) + size_t{j0} * a.v_stride;
  const size_t ahead = size_t{block} * a.v_stride;
  const size_t slice = row_bytes<T>(16 * W);
  for (uint32_t j = j0; j < j1; ++j, vj += a.v_stride) {
    if (j + block < n) prefetch_bytes<3>(element_at(vj + ahead, d), slice);
    __m512 v[W];
    for (int w = 0; w < W; ++w) v[w] = load16(vj, d + 16 * w);
    for (int h = 0; h < H; ++h) {
      const __m512 p = _mm512_set1_ps(sc[size_t(h) * n + j]);
      for (int w = 0; w < W; ++w) o[h][w] = _mm512_fmadd_ps(p, v[w], o[h][w]);
    }
  }
  for (int h = 0; h < H; ++h)
    for (int w = 0; w < W; ++w) _mm512_storeu_ps(outs[h] + d + 16 * w, o[h][w]);
}

template <int H, typename T>
void group_pass(const AttentionRow* rows, float* sc, float* const* outs) {
  const AttentionRow& a = rows[0];
  group_scores<H / 2, T>(rows, sc);
  for (int h = 0; h < H; ++h) softmax_scores_avx512(sc + size_t(h) * a.n_kv, a.n_kv, rows[h]);
  const uint32_t block = attention_key_block<T>(a.head_dim_k);
  for (uint32_t j0 = 0; j0 < a.n_kv; j0 += block) {
    const uint32_t j1 = std::min(a.n_kv, j0 + block);
    uint32_t d = 0;
    for (; d + 32 <= a.head_dim_v; d += 32)
      group_values_block<H, 2, T>(a, sc, outs, d, j0, j1, block);
    for (; d < a.head_dim_v; d += 16) group_values_block<H, 1, T>(a, sc, outs, d, j0, j1, block);
  }
}

template <typename T>
void group_any(const AttentionRow* rows, uint32_t n_heads, float* scores, float* const* outs) {
  switch (n_heads) {
    case 2:
      return group_pass<2, T>(rows, scores, outs);
    case 4:
      return group_pass<4, T>(rows, scores, outs);
    case 6:
      return group_pass<6, T>(rows, scores, outs);
    case 8:
      return group_pass<8, T>(rows, scores, outs);
    default:
      break;
  }
}

template <typename T>
void pair_pass(const AttentionRow& a, const AttentionRow& b, float* sc, float* out_a,
               float* out_b) {
  const T* V = row_values<T>(a);
  const uint32_t n = a.n_kv, dv = a.head_dim_v;
  float* sa = sc;
  float* sb = sc + n;
  // Scores: the group pass's, one pair.
  const AttentionRow rows[2] = {a, b};
  group_scores<1, T>(rows, sc);
  softmax_scores_avx512(sa, n, a);
  softmax_scores_avx512(sb, n, b);
  // Weighted sum of V: 64 outputs of each head in registers across all keys, then 8.
  uint32_t d = 0;
  for (; d + 64 <= dv; d += 64) {
    __m512 o[8];
    for (int r = 0; r < 8; ++r) o[r] = _mm512_setzero_ps();
    const T* vj = V;
    for (uint32_t j = 0; j < n; ++j, vj += a.v_stride) {
      prefetch_values_ahead(a, vj, d, j);
      const __m512 p = halves(_mm256_set1_ps(sa[j]), _mm256_set1_ps(sb[j]));
      for (int r = 0; r < 8; ++r) o[r] = _mm512_fmadd_ps(p, both(vj, d + 8 * r), o[r]);
    }
    for (int r = 0; r < 8; ++r) {
      _mm256_storeu_ps(out_a + d + 8 * r, _mm512_castps512_ps256(o[r]));
      _mm256_storeu_ps(out_b + d + 8 * r, _mm512_extractf32x8_ps(o[r], 1));
    }
  }
  for (; d < dv; d += 8) {
    __m512 o = _mm512_setzero_ps();
    const T* vj = V;
    for (uint32_t j = 0; j < n; ++j, vj += a.v_stride)
      o = _mm512_fmadd_ps(halves(_mm256_set1_ps(sa[j]), _mm256_set1_ps(sb[j])), both(vj, d), o);
    _mm256_storeu_ps(out_a + d, _mm512_castps512_ps256(o));
    _mm256_storeu_ps(out_b + d, _mm512_extractf32x8_ps(o, 1));
  }
}

}  // namespace

void attention_rows_group_avx512(const AttentionRow* rows, uint32_t n_heads, float* scores,
                                 float* const* outs) {
  if (rows[0].k8 != nullptr)
    group_any<std::byte>(rows, n_heads, scores, outs);
  else if (rows[0].k16 != nullptr)
    group_any<uint16_t>(rows, n_heads, scores, outs);
  else
    group_any<float>(rows, n_heads, scores, outs);
}

void attention_row_pair_avx512(const AttentionRow& a, const AttentionRow& b, float* sc,
                               float* out_a, float* out_b) {
  if (a.k8 != nullptr)
    pair_pass<std::byte>(a, b, sc, out_a, out_b);
  else if (a.k16 != nullptr)
    pair_pass<uint16_t>(a, b, sc, out_a, out_b);
  else
    pair_pass<float>(a, b, sc, out_a, out_b);
}

}  // namespace strata::kernels

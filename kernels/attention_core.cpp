// attention_row: the portable variant (the definition of the order in attention_core.h) and the
// dispatch to the AVX2 one and to the AVX-512 pair. Tested by tests/test_ops.cpp.
#include "kernels/attention_core.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "io/check.h"
#include "kernels/cpu_features.h"
#include "kernels/gemv.h"
#include "kernels/portable_math.h"
#include "kernels/quant.h"

namespace strata::kernels {
namespace {

template <typename T>
float dot8(const float* a, const T* b, uint32_t n) {
  float acc[8] = {};
  for (uint32_t i = 0; i < n; ++i) acc[i % 8] = std::fma(a[i], widen_at(b, i), acc[i % 8]);
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

double fold8(const double* b) {
  return ((b[0] + b[1]) + (b[2] + b[3])) + ((b[4] + b[5]) + (b[6] + b[7]));
}

template <typename T>
void row_portable(const AttentionRow& a, float* sc, float* out) {
  const T* K = row_keys<T>(a);
  const T* V = row_values<T>(a);
  const uint32_t n = a.n_kv;
  float m = -std::numeric_limits<float>::infinity();
  for (uint32_t j = 0; j < n; ++j) {
    sc[j] = dot8(a.q, K + j * a.k_stride, a.head_dim_k) * a.scale;
    if (a.softcap > 0.0f) sc[j] = a.softcap * std::tanh(sc[j]);
    m = std::max(m, sc[j]);
  }
  if (a.has_sink) m = std::max(m, a.sink);
  double b[8] = {};
  for (uint32_t j = 0; j < n; ++j) {
    sc[j] = portable_expf(sc[j] - m);
    b[j % 8] = b[j % 8] + static_cast<double>(sc[j]);
  }
  double sum = fold8(b);
  if (a.has_sink) sum = sum + static_cast<double>(portable_expf(a.sink - m));
  const float inv = static_cast<float>(1.0 / sum);
  for (uint32_t j = 0; j < n; ++j) sc[j] = sc[j] * inv;
  for (uint32_t d = 0; d < a.head_dim_v; ++d) out[d] = 0.0f;
  for (uint32_t j = 0; j < n; ++j) {
    const float p = sc[j];
    const T* vj = V + j * a.v_stride;
    for (uint32_t d = 0; d < a.head_dim_v; ++d) out[d] = std::fma(p, widen_at(vj, d), out[d]);
  }
}

}  // namespace

void attention_row_portable(const AttentionRow& a, float* sc, float* out) {
  if (a.k8 != nullptr)
    row_portable<std::byte>(a, sc, out);
  else if (a.k16 != nullptr)
    row_portable<uint16_t>(a, sc, out);
  else
    row_portable<float>(a, sc, out);
}

bool attention_avx2_supported() {
  static const bool ok = [] {
    return cpu_has(CpuFeature::kAvx2) && cpu_has(CpuFeature::kFma) && cpu_has(CpuFeature::kF16c);
  }();
  return ok && isa_cap() >= Isa::kAvx2;
}

void attention_row(const AttentionRow& a, float* scores, float* out) {
  if (attention_avx2_supported() && a.head_dim_k % 8 == 0 && a.head_dim_v % 8 == 0) {
    // The group pass with one head: key blocks streamed behind the arithmetic (a stream pass
    // 1.2-1.5x faster than attention_row_avx2's, bench/RESULTS.md "Session 30"), same bits.
    attention_rows_group_avx2(&a, 1, scores, &out);
  } else if (attention_avx2_supported()) {
    attention_row_avx2(a, scores, out);
  } else {
    attention_row_portable(a, scores, out);
  }
}

bool attention_avx512_supported() {
  static const bool ok = [] {
    return cpu_has(CpuFeature::kAvx2) && cpu_has(CpuFeature::kAvx512f) &&
           cpu_has(CpuFeature::kAvx512dq);
  }();
  return ok && isa_cap() >= Isa::kAvx512;
}

bool attention_pair_one_pass(uint32_t head_dim_k, uint32_t head_dim_v) {
  return attention_avx512_supported() && head_dim_k % 8 == 0 && head_dim_v % 8 == 0 &&
         head_dim_k <= kAttentionPairMaxDim;
}

namespace {

bool group_avx512(uint32_t n_heads, uint32_t head_dim_k, uint32_t head_dim_v) {
  return n_heads % 2 == 0 && n_heads >= 2 && n_heads <= kAttentionGroupMax &&
         attention_pair_one_pass(head_dim_k, head_dim_v) && head_dim_v % 16 == 0;
}

bool group_avx2(uint32_t n_heads, uint32_t head_dim_k, uint32_t head_dim_v) {
  return n_heads >= 1 && n_heads <= kAttentionGroupMax && attention_avx2_supported() &&
         head_dim_k % 8 == 0 && head_dim_v % 8 == 0;
}

}  // namespace

void attention_row_pair(const AttentionRow& a, const AttentionRow& b, float* scores, float* out_a,
                        float* out_b) {
  STRATA_ASSERT(a.k == b.k && a.v == b.v && a.k16 == b.k16 && a.v16 == b.v16 && a.k8 == b.k8 &&
                    a.v8 == b.v8 && a.k_stride == b.k_stride && a.v_stride == b.v_stride &&
                    a.n_kv == b.n_kv && a.head_dim_k == b.head_dim_k &&
                    a.head_dim_v == b.head_dim_v,
                "attention_row_pair: the two heads do not share their K and V rows");
  if (attention_pair_one_pass(a.head_dim_k, a.head_dim_v)) {
    attention_row_pair_avx512(a, b, scores, out_a, out_b);
  } else {
    attention_row(a, scores, out_a);
    attention_row(b, scores, out_b);
  }
}

bool attention_group_one_pass(uint32_t n_heads, uint32_t head_dim_k, uint32_t head_dim_v) {
  return group_avx512(n_heads, head_dim_k, head_dim_v) ||
         (n_heads >= 2 && group_avx2(n_heads, head_dim_k, head_dim_v));
}

void attention_rows_group(const AttentionRow* rows, uint32_t n_heads, float* scores,
                          float* const* outs) {
  const AttentionRow& a = rows[0];
  for (uint32_t h = 1; h < n_heads; ++h) {
    const AttentionRow& b = rows[h];
    STRATA_ASSERT(a.k == b.k && a.v == b.v && a.k16 == b.k16 && a.v16 == b.v16 && a.k8 == b.k8 &&
                      a.v8 == b.v8 && a.k_stride == b.k_stride && a.v_stride == b.v_stride &&
                      a.n_kv == b.n_kv && a.head_dim_k == b.head_dim_k &&
                      a.head_dim_v == b.head_dim_v,
                  "attention_rows_group: the heads do not share their K and V rows");
  }
  if (group_avx512(n_heads, a.head_dim_k, a.head_dim_v)) {
    attention_rows_group_avx512(rows, n_heads, scores, outs);
    return;
  }
  if (group_avx2(n_heads, a.head_dim_k, a.head_dim_v)) {
    attention_rows_group_avx2(rows, n_heads, scores, outs);
    return;
  }
  uint32_t h = 0;
  for (; h + 2 <= n_heads; h += 2)
    attention_row_pair(rows[h], rows[h + 1], scores, outs[h], outs[h + 1]);
  if (h < n_heads) attention_row(rows[h], scores, outs[h]);
}

}  // namespace strata::kernels

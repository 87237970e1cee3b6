// Causal GQA attention (see attention.h). Exercised by tests/test_model_forward.cpp.
#include "engine/attention.h"

#include <algorithm>
#include <cstring>

#include "engine/ops.h"
#include "io/check.h"

namespace strata::engine {
namespace {

// Eight interleaved partial sums (vectorizable, and one fixed order for every caller).
float dot(const float* a, const float* b, uint32_t n) {
  float acc[8] = {};
  uint32_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) acc[l] += a[i + l] * b[i + l];
  for (; i < n; ++i) acc[i % 8] += a[i] * b[i];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

}  // namespace

AttentionScratch::AttentionScratch(int n_threads, uint32_t n_ctx_, uint32_t n_ubatch,
                                   uint32_t max_n_head)
    : n_ctx(n_ctx_), scores(size_t(n_threads) * n_ctx_), cost(size_t(n_ubatch) * max_n_head) {}

void attention(kernels::ThreadPool& pool, const AttentionShape& s, const KvCache& kv, uint32_t il,
               uint32_t pos0, uint32_t n_tokens, const float* q, float* out,
               AttentionScratch& scratch) {
  STRATA_ASSERT(pos0 + n_tokens <= kv.n_ctx(), "pos {} + {} > n_ctx {}", pos0, n_tokens,
                kv.n_ctx());
  STRATA_ASSERT(size_t(n_tokens) * s.n_head <= scratch.cost.size());
  STRATA_ASSERT(scratch.scores.size() >= size_t(pool.size()) * kv.n_ctx());
  const uint32_t group = s.n_head / s.n_head_kv;
  const size_t q_stride = size_t{s.n_head} * s.head_dim_k;
  const size_t out_stride = size_t{s.n_head} * s.head_dim_v;
  const int64_t n_items = int64_t{n_tokens} * s.n_head;  // item = (token, head)
  for (int64_t i = 0; i < n_items; ++i) {
    const uint64_t n_keys = pos0 + uint64_t(i / s.n_head) + 1;
    scratch.cost[i] = s.n_swa > 0 ? std::min<uint64_t>(n_keys, s.n_swa) : n_keys;
  }

  pool.parallel_for(
      n_items, {scratch.cost.data(), size_t(n_items)}, [&](int64_t begin, int64_t end, int thread) {
        float* sc = scratch.scores.data() + size_t(thread) * scratch.n_ctx;
        for (int64_t item = begin; item < end; ++item) {
          const uint32_t t = uint32_t(item / s.n_head);
          const uint32_t h = uint32_t(item % s.n_head);
          const uint32_t g = h / group;
          const uint32_t pos = pos0 + t;
          // Keys [j0, pos]: all of them, or the sliding window.
          const uint32_t j0 = s.n_swa > 0 && pos >= s.n_swa ? pos + 1 - s.n_swa : 0;
          const uint32_t n_kv = pos + 1 - j0;
          const float* qh = q + t * q_stride + size_t{h} * s.head_dim_k;
          for (uint32_t j = 0; j < n_kv; ++j)
            sc[j] = dot(qh, kv.k(il, j0 + j) + size_t{g} * s.head_dim_k, s.head_dim_k);
          if (s.sinks) {
            softmax_with_sink(sc, n_kv, s.scale, s.sinks[h]);
          } else {
            softmax(sc, n_kv, s.scale);
          }
          float* oh = out + t * out_stride + size_t{h} * s.head_dim_v;
          std::memset(oh, 0, sizeof(float) * s.head_dim_v);
          for (uint32_t j = 0; j < n_kv; ++j) {
            const float p = sc[j];
            const float* vj = s.v_in_k ? kv.k(il, j0 + j) + size_t{g} * s.head_dim_k
                                       : kv.v(il, j0 + j) + size_t{g} * s.head_dim_v;
            for (uint32_t d = 0; d < s.head_dim_v; ++d) oh[d] += p * vj[d];
          }
        }
      });
}

}  // namespace strata::engine

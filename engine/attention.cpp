// Causal GQA attention (see attention.h): one kernels::attention_row per (token, head) (or one
// attention_rows_group per several heads of a group, the same bits), whose order
// (kernels/attention_core.h) does not depend on the chunk, the thread or the ISA. Exercised by
// tests/test_model_forward.cpp, tests/test_arch_ops.cpp and tests/test_ops.cpp.
#include "engine/attention.h"

#include <algorithm>
#include <cstring>

#include "io/check.h"
#include "kernels/attention_core.h"

namespace strata::engine {

AttentionScratch::AttentionScratch(int n_threads, uint32_t n_ctx_, uint32_t n_ubatch,
                                   uint32_t max_n_head)
    : n_ctx(n_ctx_),
      scores(size_t(n_threads) * kernels::kAttentionGroupMax * n_ctx_),
      cost(size_t(n_ubatch) * max_n_head) {}

void attention(kernels::ThreadPool& pool, const AttentionShape& s, const KvCache& kv, uint32_t il,
               uint32_t pos0, uint32_t n_tokens, const float* q, float* out,
               AttentionScratch& scratch) {
  STRATA_ASSERT(pos0 + n_tokens <= kv.n_ctx(), "pos {} + {} > n_ctx {}", pos0, n_tokens,
                kv.n_ctx());
  STRATA_ASSERT(kv.n_kv_head(il) == s.n_head_kv && kv.head_dim_k(il) == s.head_dim_k &&
                    (s.v_in_k || kv.head_dim_v(il) == s.head_dim_v),
                "attention: layer {} shape does not match its KV cache", il);
  STRATA_ASSERT(size_t(n_tokens) * s.n_head <= scratch.cost.size());
  STRATA_ASSERT(scratch.scores.size() >=
                size_t(pool.size()) * kernels::kAttentionGroupMax * kv.n_ctx());
  const uint32_t group = s.n_head / s.n_head_kv;
  const size_t q_stride = size_t{s.n_head} * s.head_dim_k;
  const size_t out_stride = size_t{s.n_head} * s.head_dim_v;
  // An item is (token, heads_per_item heads of one group), each K and V row loaded once for all
  // of them (the same bits as one head at a time): the most heads the one-pass kernel takes that
  // still give every thread two items, else a pair, else one head.
  uint32_t heads_per_item = 1;
  for (uint32_t hp = kernels::kAttentionGroupMax; hp >= 2; --hp) {
    if (group % hp != 0 || !kernels::attention_group_one_pass(hp, s.head_dim_k, s.head_dim_v))
      continue;
    heads_per_item = hp;
    if (uint64_t{n_tokens} * (s.n_head / hp) >= 2 * uint64_t(pool.size())) break;
  }
  if (heads_per_item == 1 && group % 2 == 0 &&
      kernels::attention_pair_one_pass(s.head_dim_k, s.head_dim_v))
    heads_per_item = 2;
  const uint32_t n_head_items = s.n_head / heads_per_item;
  const int64_t n_items = int64_t{n_tokens} * n_head_items;
  for (int64_t i = 0; i < n_items; ++i) {
    const uint64_t n_keys = pos0 + uint64_t(i / n_head_items) + 1;
    scratch.cost[i] = s.n_swa > 0 ? std::min<uint64_t>(n_keys, s.n_swa) : n_keys;
  }

  pool.parallel_for(
      n_items, {scratch.cost.data(), size_t(n_items)}, [&](int64_t begin, int64_t end, int thread) {
        float* sc =
            scratch.scores.data() + size_t(thread) * kernels::kAttentionGroupMax * scratch.n_ctx;
        for (int64_t item = begin; item < end; ++item) {
          const uint32_t t = uint32_t(item / n_head_items);
          const uint32_t h = uint32_t(item % n_head_items) * heads_per_item;
          const uint32_t g = h / group;
          const uint32_t pos = pos0 + t;
          // Keys [j0, pos]: all of them, or the sliding window.
          const uint32_t j0 = s.n_swa > 0 && pos >= s.n_swa ? pos + 1 - s.n_swa : 0;
          const uint32_t n_kv = pos + 1 - j0;
          kernels::AttentionRow row;
          row.q = q + t * q_stride + size_t{h} * s.head_dim_k;
          row.k_stride = kv.head_dim_k(il);
          row.v_stride = s.v_in_k ? row.k_stride : kv.head_dim_v(il);
          switch (kv.type()) {
            case KvType::kF32:
              row.k = kv.k(il, g, j0);
              row.v = s.v_in_k ? row.k : kv.v(il, g, j0);
              break;
            case KvType::kF16:
              row.k16 = kv.k16(il, g, j0);
              row.v16 = s.v_in_k ? row.k16 : kv.v16(il, g, j0);
              break;
            case KvType::kQ8_0:  // strides in bytes
              row.k_stride = kv.k_row_bytes(il);
              row.v_stride = s.v_in_k ? row.k_stride : kv.v_row_bytes(il);
              row.k8 = kv.k_bytes(il, g, j0);
              row.v8 = s.v_in_k ? row.k8 : kv.v_bytes(il, g, j0);
              break;
          }
          row.n_kv = n_kv;
          row.head_dim_k = s.head_dim_k;
          row.head_dim_v = s.head_dim_v;
          row.scale = s.scale;
          row.softcap = s.softcap;
          row.has_sink = s.sinks != nullptr;
          row.sink = s.sinks ? s.sinks[h] : 0.0f;
          float* o = out + t * out_stride + size_t{h} * s.head_dim_v;
          if (heads_per_item == 1) {
            kernels::attention_row(row, sc, o);
            continue;
          }
          kernels::AttentionRow rows[kernels::kAttentionGroupMax];
          float* outs[kernels::kAttentionGroupMax];
          for (uint32_t i = 0; i < heads_per_item; ++i) {
            rows[i] = row;
            rows[i].q = row.q + size_t{i} * s.head_dim_k;
            rows[i].sink = s.sinks ? s.sinks[h + i] : 0.0f;
            outs[i] = o + size_t{i} * s.head_dim_v;
          }
          kernels::attention_rows_group(rows, heads_per_item, sc, outs);
        }
      });
}

}  // namespace strata::engine

// Causal GQA attention over the F32 KV cache for a chunk of query rows (prefill) or one (decode),
// with an optional sliding window (gpt-oss), attention sinks (gpt-oss) and V read from the K row
// (MLA's latent cache, where V is the first head_dim_v floats of [c ; k_pe]). Every query row is
// computed the same way whatever the chunk size, so prefill and decode agree to the bit.
// Exercised by tests/test_model_forward.cpp and tests/test_arch_forward.cpp.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/kv_cache.h"
#include "kernels/threadpool.h"

namespace strata::engine {

struct AttentionShape {
  uint32_t n_head = 0;
  uint32_t n_head_kv = 0;
  uint32_t head_dim_k = 0;
  uint32_t head_dim_v = 0;
  float scale = 1.0f;            // applied to q·k before the softmax (1/sqrt(head_dim_k))
  uint32_t n_swa = 0;            // > 0: query at position i sees keys j with i - j < n_swa
  const float* sinks = nullptr;  // [n_head] per-head logit in the softmax denominator, or null
  bool v_in_k = false;           // V of kv head g is the first head_dim_v floats of its K row (MLA)
  float softcap = 0.0f;          // > 0 (grok): each scaled score s becomes softcap · tanh(s)
};

// Scratch planned up front for chunks of up to n_ubatch tokens.
struct AttentionScratch {
  AttentionScratch(int n_threads, uint32_t n_ctx, uint32_t n_ubatch, uint32_t max_n_head);
  uint32_t n_ctx;
  std::vector<float> scores;   // [n_threads, kAttentionGroupMax * n_ctx] (heads per item)
  std::vector<uint64_t> cost;  // [n_ubatch * max_n_head]
};

// out[t] = concat over heads h of softmax(scale · q_h(t) · K_g[j0..pos0+t]) · V_g[j0..pos0+t]
// (each score capped first when softcap > 0),
// g = h / (n_head / n_head_kv), j0 = 0 (or the window start). With sinks the softmax
// denominator also holds exp(sinks[h]). The cache must already hold positions
// [0, pos0 + n_tokens).
//   q:   [n_tokens, n_head * head_dim_k]
//   out: [n_tokens, n_head * head_dim_v]
void attention(kernels::ThreadPool& pool, const AttentionShape& shape, const KvCache& kv,
               uint32_t il, uint32_t pos0, uint32_t n_tokens, const float* q, float* out,
               AttentionScratch& scratch);

}  // namespace strata::engine

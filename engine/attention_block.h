// The attention half of a layer for every architecture: projections (+ biases), q/k RMSNorm (per
// head or over the whole projection), RoPE (partial, YaRN), the KV-cache write, causal attention
// (sliding window, sinks) and the output projection (+ bias) — or DeepSeek's multi-head latent
// attention in the absorbed form (mla.cpp). Owns its scratch, planned at construction, so decode
// allocates nothing. Exercised by tests/test_model_forward.cpp and tests/test_arch_forward.cpp.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/attention.h"
#include "engine/kv_cache.h"
#include "engine/model_config.h"
#include "engine/weights.h"
#include "kernels/threadpool.h"

namespace strata::engine {

class GpuDense;

class AttentionBlock {
 public:
  AttentionBlock(const ModelConfig& cfg, uint32_t n_ubatch, int n_threads, uint32_t n_ctx);

  // Once per chunk: the RoPE cos/sin of positions pos0 .. pos0 + n - 1, shared by every layer.
  void begin_chunk(uint32_t pos0, uint32_t n);

  // out = Attn_il(x) for n tokens at positions pos0 ..; writes their K (and V) into the cache.
  //   x:   [n, n_embd] the attention-normed residual;  out: [n, n_embd]
  void run(kernels::ThreadPool& pool, const LayerWeights& l, uint32_t il, uint32_t n, uint32_t pos0,
           const float* x, KvCache& kv, float* out);

  // CUDA_DENSE: one-token projections go to the GPU where it holds them (null: all on the CPU).
  void set_gpu_dense(GpuDense* dense) { dense_ = dense; }
  // RoPE frequency divisors [n_rot / 2] for every layer (rope_freq_factors(); nullptr: none).
  void set_rope_factors(const float* f) { rope_factors_ = f; }
  // PROF: the attention core's wall time (scores, softmax, values: attention()) is added to
  // (*core_seconds)[0] in chunks of several tokens, [1] in one-token ones (null: not timed).
  void set_core_seconds(std::array<double, 2>* core_seconds) { core_seconds_ = core_seconds; }

 private:
  void gqa(kernels::ThreadPool& pool, const LayerWeights& l, uint32_t il, uint32_t n, uint32_t pos0,
           const float* x, KvCache& kv, float* out);
  void mla(kernels::ThreadPool& pool, const LayerWeights& l, uint32_t il, uint32_t n, uint32_t pos0,
           const float* x, KvCache& kv, float* out);
  // The rest of mla() for files without attn_k_b / attn_v_b (after the shared projections).
  void mla_decompressed(kernels::ThreadPool& pool, const LayerWeights& l, uint32_t il, uint32_t n,
                        uint32_t pos0, KvCache& kv, float* out);
  const float* rope_cs(uint32_t il, uint32_t t) const;
  // attention(), timed into core_seconds_ when set.
  void core(kernels::ThreadPool& pool, const AttentionShape& shape, const KvCache& kv, uint32_t il,
            uint32_t pos0, uint32_t n, const float* q);
  // y[t, h] = W[h] · x[t, h] for every head h of a 3-D weight (MLA's attn_k_b / attn_v_b), all
  // heads in one parallel region (a decode step of a 128-head model would otherwise fork 256
  // times per layer).
  //   x: rows of w.ne[0] floats at x + t * x_tok + h * x_head;  y: likewise, w.ne[1] floats
  void head_matmul(kernels::ThreadPool& pool, const WeightView& w, uint32_t n_head, uint32_t n,
                   const float* x, size_t x_tok, size_t x_head, float* y, size_t y_tok,
                   size_t y_head);

  const ModelConfig& cfg_;
  uint32_t n_ubatch_;
  GpuDense* dense_ = nullptr;
  std::array<double, 2>* core_seconds_ = nullptr;
  AttentionScratch scratch_;
  std::vector<std::byte> xq_;  // [n_ubatch, activation_row_bytes(widest projection input)]
  std::vector<float> cs_;      // [n_ubatch, n_rot] cos/sin (full-attention layers)
  const float* rope_factors_ = nullptr;
  std::vector<float> cs_swa_;  // [n_ubatch, n_rot] (sliding-window layers), when any
  std::vector<float> q_;       // [n_ubatch, n_head * head_dim_k] (MLA: head_dim_k_mla)
  std::vector<float> k_;       // [n_ubatch, n_head_kv * head_dim_k] (MLA: [c ; k_pe])
  std::vector<float> v_;     // [n_ubatch, n_head_kv * head_dim_v] (GQA; decompressed MLA: kv_b out)
  std::vector<float> attn_;  // [n_ubatch, n_head * head_dim_v] (MLA: the latent outputs)
  // MLA only.
  std::vector<float> q_a_;      // [n_ubatch, n_lora_q] the normed query LoRA input
  std::vector<float> q_abs_;    // [n_ubatch, n_head * (n_lora_kv + n_rot)] [W_kb q_nope ; q_pe]
                                // (decompressed MLA: one token's K rows)
  std::vector<float> v_heads_;  // [n_ubatch, n_head * head_dim_v_mla] W_vb · latent outputs
                                // (decompressed MLA: one token's V rows)
  static constexpr uint32_t kHeadRowBlock = 16;  // weight rows per head_matmul work item
  struct HeadItem {
    uint32_t head, row_begin, row_end;
  };
  std::vector<HeadItem> head_items_;  // capacity planned: n_head × row blocks of the widest
};

}  // namespace strata::engine

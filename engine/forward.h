// The forward pass of every supported architecture: embeddings → per layer (RMSNorm, attention
// (AttentionBlock: GQA or MLA), RMSNorm, MoE FFN + shared expert, or a dense FFN) → final norm →
// output head. Forward is the context object: it owns
// the thread pool, the KV cache and all scratch (planned at construction; decode allocates
// nothing). Prefill runs chunks of up to n_ubatch tokens with matrix-matrix kernels; decode runs
// one token. Exercised by tests/test_model_forward.cpp against llama.cpp references.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "engine/attention_block.h"
#include "engine/expert_source.h"
#include "engine/kv_cache.h"
#include "engine/logit_dump.h"
#include "engine/model.h"
#include "engine/moe.h"
#include "engine/shared_expert.h"
#include "kernels/threadpool.h"

namespace strata::placement {
class RouteTraceWriter;
}

namespace strata::engine {

class Profiler;

struct ForwardOptions {
  uint32_t n_ctx = 0;             // KV cache positions; 0 = the model's training context
  uint32_t n_ubatch = 512;        // prefill chunk size (tokens per matrix-matrix pass)
  KvType kv_type = KvType::kF32;  // KV_TYPE
  int n_threads = 1;              // including the calling thread
  // Where routed experts' bytes come from (tiers); null = the model's mapping. Must outlive the
  // Forward.
  ExpertSource* experts = nullptr;
  // PROF: attention and router seconds go to its counters (null or disabled: not timed).
  Profiler* prof = nullptr;
  // ROUTE_TRACE: hears every MoE layer's routing (top-k ids and weights per token); may be null.
  // Must outlive the Forward.
  placement::RouteTraceWriter* route_trace = nullptr;
};

class Forward {
 public:
  Forward(const Model& model, const ForwardOptions& opts);
  Forward(const Forward&) = delete;
  Forward& operator=(const Forward&) = delete;

  // Teacher-forced: runs tokens at positions n_past() .. n_past() + n - 1 in chunks of n_ubatch.
  // all_logits: nullptr, or [n_tokens, n_vocab] to receive the logits of every position.
  // Returns the last position's logits (valid until the next call). Bad token ids or a full
  // context throw Error(kBadValue) before anything runs.
  std::span<const float> prefill(std::span<const int32_t> tokens, float* all_logits = nullptr,
                                 RoutingTrace* trace = nullptr);
  // One token at position n_past(); returns its logits.
  std::span<const float> decode(int32_t token, RoutingTrace* trace = nullptr);
  // Called by prefill after each chunk of a call longer than one chunk: (tokens done, tokens of
  // the call). For progress bars on long prompts; an empty function turns it off.
  using PrefillProgress = std::function<void(size_t done, size_t total)>;
  void set_prefill_progress(PrefillProgress fn) { progress_ = std::move(fn); }

  void reset() { n_past_ = 0; }  // empty the KV cache
  // Keep only the first n positions (later rows are overwritten by the next prefill/decode).
  void truncate(uint32_t n) { n_past_ = n < n_past_ ? n : n_past_; }
  uint32_t n_past() const { return n_past_; }
  uint32_t n_ctx() const { return kv_.n_ctx(); }
  // PROMPT_CACHE (engine/prompt_cache.h): the KV rows, and `restored(n)` after the caller wrote
  // positions 0 .. n - 1 into them (n <= n_ctx): the cache then holds those n positions.
  KvCache& kv() { return kv_; }
  const KvCache& kv() const { return kv_; }
  void restored(uint32_t n);
  // After an exception from prefill/decode (an I/O error of the tiers): the expert source drops
  // its half-done reads and pins (ExpertSource::recover). Positions below n_past() are intact;
  // the caller truncates to what it trusts.
  void recover();
  uint32_t n_ubatch() const { return n_ubatch_; }
  const Model& model() const { return model_; }
  kernels::ThreadPool& pool() { return pool_; }

 private:
  void check_tokens(std::span<const int32_t> tokens) const;
  // One chunk of n tokens at positions pos0..; logits rows for every token into all_logits when
  // given, else the last token's row into last_logits_.
  void run_chunk(const int32_t* tokens, uint32_t n, uint32_t pos0, float* all_logits,
                 RoutingTrace* trace);
  void attention_block(uint32_t il, uint32_t n, uint32_t pos0);
  void ffn_block(uint32_t il, uint32_t n, uint32_t pos0, RoutingTrace* trace);
  // arctic: h += dense_ffn(ffn_norm(h)), its dense residual FFN (timed as the shared experts).
  void dense_residual(uint32_t il, uint32_t n);
  // tmp += layer il's shared expert of x (× sigmoid(gate_logits) where given), timed and its CPU
  // bytes counted for PROF.
  void add_shared(uint32_t il, uint32_t n, const float* gate_logits);
  // tmp = norm(tmp) over n tokens when the norm is present (grok's post-attention / post-MoE
  // RMSNorms), else nothing.
  void post_norm(const WeightView& norm, uint32_t n);
  // h += tmp over n tokens (granitemoe: tmp × residual_scale first).
  void add_residual(uint32_t n);
  void output_head(uint32_t n, float* all_logits);

  const Model& model_;
  const ModelConfig& cfg_;
  const ModelWeights& w_;
  uint32_t n_ubatch_;
  kernels::ThreadPool pool_;
  KvCache kv_;
  uint32_t n_past_ = 0;
  PrefillProgress progress_;
  // The KV cache's page faulting ahead of the rows (forward.cpp): faults positions up to target
  // in, at most `budget` regions on this thread (kFaultAll: all that is missing, on every
  // thread). kv_regions_: every (layer, K/V, head) region's rows; positions [0, faulted_) of all
  // of them are faulted in, and of the next extent regions [0, fault_next_).
  void fault_ahead(uint32_t target, uint32_t budget);
  std::vector<std::span<std::byte>> kv_regions_;
  uint32_t faulted_ = 0;
  size_t fault_next_ = 0;

  // Scratch, [n_ubatch, ...] each.
  std::vector<float> h_;            // [n_ubatch, n_embd] residual stream
  std::vector<float> layer_in_;     // arctic: [n_ubatch, n_embd] the layer's input (the experts')
  std::vector<float> x_;            // [n_ubatch, n_embd] normed input of a block
  std::vector<float> tmp_;          // [n_ubatch, n_embd] block output before the residual add
  std::vector<std::byte> xq_;       // [n_ubatch, activation_row_bytes(widest matmul input)]
  std::vector<float> probs_;        // [n_ubatch, max n_expert]
  std::vector<float> shared_gate_;  // [n_ubatch] shared expert gate logits (qwen2moe)
  std::vector<int32_t> topk_;       // [n_ubatch, max k]
  std::vector<float> weights_;      // [n_ubatch, max k]
  std::vector<float> moe_y_;        // [n_ubatch * max k, n_embd] expert outputs, dispatch order
  std::vector<float> last_logits_;  // [n_vocab]
  AttentionBlock attn_;             // the attention half of every layer, with its own scratch
  Dispatch dispatch_;
  CpuExpertExecutor cpu_experts_;
  SharedExpert shared_;                        // resident shared experts (DeepSeek, GLM-4.5)
  std::unique_ptr<ExpertSource> own_experts_;  // the mapping's, when no source was given
  ExpertSource* experts_;
  Profiler* prof_;
  placement::RouteTraceWriter* route_trace_;
  double unused_seconds_ = 0;  // a ScopedTimer target when there is no profiler
};

}  // namespace strata::engine
